"""KRaft snapshots in Kafka's file format (Kafka's ``org.apache.kafka.snapshot``).

Owns: snapshot ids and file names (``<end offset:020d>-<epoch:010d>.checkpoint``, ``.checkpoint.part``
while written, ``.checkpoint.deleted`` once retired: ``snapshots.py``), the records layout of a
snapshot (a control batch with ``SnapshotHeaderRecord`` and, from kraft.version 1, ``KRaftVersionRecord``
and ``VotersRecord``; the data batches; a control batch with ``SnapshotFooterRecord``:
``records_snapshot.py``), raw files (``raw.py``: Kafka's ``FileRawSnapshotWriter`` -- part file,
fsync, read-only, rename -- and ``FileRawSnapshotReader``, whose slices FetchSnapshot serves), the
set of snapshots of a metadata log directory and its retention (``snapshot_registry.py``: Kafka's ``KafkaMetadataLog`` snapshot half), and the
``bootstrap.checkpoint`` file (``bootstrap.py``: Kafka's ``BootstrapDirectory``).

Synchronous storage beside ``kbroker.log``: it imports only ``kbroker.protocol`` and
``kbroker.metadata`` (the image's records), never ``kbroker.log``, the controller or asyncio. The
metadata log that owns the snapshots (``kbroker.controller.metadata_log``; the Raft log later) tells it
what the log looks like through the small ``MetadataLogView`` protocol.
"""

from kbroker.snapshot.raw import FileRawSnapshotReader, FileRawSnapshotWriter
from kbroker.snapshot.records_snapshot import (
    CorruptSnapshotError,
    SnapshotContents,
    build_snapshot,
    read_snapshot,
    read_snapshot_file,
    write_snapshot_file,
)
from kbroker.snapshot.snapshots import (
    BOOTSTRAP_SNAPSHOT_ID,
    OffsetAndEpoch,
    SnapshotPath,
    filename_from_snapshot_id,
    parse_snapshot_path,
    snapshot_path,
)

__all__ = [
    "BOOTSTRAP_SNAPSHOT_ID",
    "CorruptSnapshotError",
    "FileRawSnapshotReader",
    "FileRawSnapshotWriter",
    "OffsetAndEpoch",
    "SnapshotContents",
    "SnapshotPath",
    "build_snapshot",
    "filename_from_snapshot_id",
    "parse_snapshot_path",
    "read_snapshot",
    "read_snapshot_file",
    "snapshot_path",
    "write_snapshot_file",
]
