"""The records of a snapshot: Kafka's ``RecordsSnapshotWriter`` / ``RecordsSnapshotReader`` layout.

A snapshot file is RecordBatch v2 batches, back to back, offsets counting from 0, every batch's
partition leader epoch the snapshot's epoch::

    control batch   SnapshotHeaderRecord (version 0, lastContainedLogTimestamp)
                    [KRaftVersionRecord, VotersRecord   when kraft.version >= 1 (KIP-853)]
    data batches    the image's metadata records, null key, value framed by MetadataRecordSerde,
                    at most ``max_batch_size`` bytes each (KafkaRaftClient.MAX_BATCH_SIZE_BYTES, 8 MiB)
    control batch   SnapshotFooterRecord (version 0)

A control record's key is (version 0, ControlRecordType) and its value the control message itself
(its first field is its own version). All records of a batch carry the batch's timestamp (``now``).
Writing: ``write_snapshot_file`` writes a ``.checkpoint.part`` file, fsyncs it, makes it read-only
and renames it into place, then fsyncs the directory (Kafka's ``FileRawSnapshotWriter.freeze``), so a
crash leaves either no snapshot or a whole one; a ``.part`` left behind is deleted at the next load.

Reading checks what Kafka's ``RecordsSnapshotReader`` checks: every batch valid (CRC), the first
batch a control batch starting with the header, the last one a control batch holding the footer.
Anything else is a ``CorruptSnapshotError``; nothing here raises another exception type on bad bytes.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kbroker.protocol.compression import CompressionType
from kbroker.protocol.crc import crc32c
from kbroker.protocol.messages import (
    kraft_version_record,
    snapshot_footer_record,
    snapshot_header_record,
    voters_record,
)
from kbroker.protocol.messages.kraft_version_record import KRaftVersionRecord
from kbroker.protocol.messages.snapshot_footer_record import SnapshotFooterRecord
from kbroker.protocol.messages.snapshot_header_record import SnapshotHeaderRecord
from kbroker.protocol.messages.voters_record import VotersRecord
from kbroker.protocol.metadata_records.serde import (
    MetadataParseError,
    encode_metadata_record,
    read_metadata_record,
)
from kbroker.protocol.record_format import ATTRIBUTES_OFFSET, CRC_OFFSET, INT16, UINT32, RecordsError
from kbroker.protocol.records import (
    ControlRecordType,
    RecordBatch,
    SimpleRecord,
    TimestampType,
    batch_size_at,
    build_batch,
    compute_attributes,
    encode_control_key,
    parse_control_record_type,
)
from kbroker.protocol.types import ProtocolError
from kbroker.snapshot.raw import FileRawSnapshotWriter, fsync_dir
from kbroker.snapshot.snapshots import OffsetAndEpoch

# KafkaRaftClient.MAX_BATCH_SIZE_BYTES: the largest batch a snapshot (or the metadata log) holds.
MAX_BATCH_SIZE_BYTES = 8 * 1024 * 1024
# Every record of a batch costs at most this much beyond its value (length, attributes, deltas,
# null key, value length, header count varints): used to cut batches under MAX_BATCH_SIZE_BYTES.
_RECORD_OVERHEAD = 32
_BATCH_OVERHEAD = 61


class CorruptSnapshotError(ValueError):
    """A snapshot file that is not a whole, valid snapshot (Kafka's CorruptRecordException /
    IllegalStateException from RecordsSnapshotReader). A ValueError, so a start on a corrupt snapshot
    stops with one line, as on any other unusable data."""


@dataclass(frozen=True, slots=True)
class SnapshotContents:
    """A snapshot as read back: its header, the KIP-853 control records, and its metadata records."""

    header: SnapshotHeaderRecord
    records: list[object]
    kraft_version: int | None = None
    voters: VotersRecord | None = None
    batches: int = 0
    size_in_bytes: int = 0
    # (base offset, number of records) of each data batch, for tools and tests.
    data_batches: list[tuple[int, int]] = field(default_factory=list)

    @property
    def last_contained_log_timestamp(self) -> int:
        return int(self.header.last_contained_log_timestamp)


def _encode_control(module_encoders: Sequence[object], message: object) -> bytes:
    out = bytearray()
    encoder = module_encoders[0]
    assert callable(encoder)
    encoder(message, out, None)
    return bytes(out)


def _control_batch(entries: Sequence[tuple[ControlRecordType, bytes]], *, base_offset: int, epoch: int,
                   now_ms: int) -> bytearray:
    """A control batch (not transactional, no producer) of ``(type, value)`` records."""
    batch = build_batch([SimpleRecord(value, encode_control_key(ctype), now_ms) for ctype, value in entries],
                        base_offset=base_offset, partition_leader_epoch=epoch, now_ms=now_ms)
    attrs = compute_attributes(CompressionType.NONE, TimestampType.CREATE_TIME, False, True)
    INT16.pack_into(batch, ATTRIBUTES_OFFSET, attrs)
    UINT32.pack_into(batch, CRC_OFFSET, crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))
    return batch


def build_snapshot(
    records: Iterable[object],
    snapshot_id: OffsetAndEpoch,
    *,
    last_contained_log_timestamp: int,
    now_ms: int,
    kraft_version: int = 0,
    voters: VotersRecord | None = None,
    max_batch_size: int = MAX_BATCH_SIZE_BYTES,
    record_values: Iterable[bytes] = (),
) -> bytes:
    """The bytes of a snapshot holding ``records`` (metadata records, framed by MetadataRecordSerde;
    or already framed ``record_values``, written after them).

    With ``kraft_version`` >= 1 the header batch also holds ``KRaftVersionRecord`` and (if given)
    ``VotersRecord``, as Kafka's RecordsSnapshotWriter does for a KIP-853 quorum.
    """
    epoch = snapshot_id.epoch
    header = [(ControlRecordType.SNAPSHOT_HEADER, _encode_control(
        snapshot_header_record.ENCODERS,
        SnapshotHeaderRecord(version=0, last_contained_log_timestamp=last_contained_log_timestamp)))]
    if kraft_version > 0:
        header.append((ControlRecordType.KRAFT_VERSION, _encode_control(
            kraft_version_record.ENCODERS, KRaftVersionRecord(version=0, kraft_version=kraft_version))))
        if voters is not None:
            header.append((ControlRecordType.KRAFT_VOTERS, _encode_control(voters_record.ENCODERS, voters)))
    out = bytearray(_control_batch(header, base_offset=0, epoch=epoch, now_ms=now_ms))
    offset = len(header)

    pending: list[SimpleRecord] = []
    pending_size = _BATCH_OVERHEAD

    def flush() -> None:
        nonlocal offset, pending, pending_size
        if pending:
            out.extend(build_batch(pending, base_offset=offset, partition_leader_epoch=epoch, now_ms=now_ms))
            offset += len(pending)
        pending = []
        pending_size = _BATCH_OVERHEAD

    def values() -> Iterable[bytes]:
        for r in records:
            yield encode_metadata_record(r)
        yield from record_values

    for value in values():
        cost = len(value) + _RECORD_OVERHEAD
        if pending and pending_size + cost > max_batch_size:
            flush()
        pending.append(SimpleRecord(value, None, now_ms))
        pending_size += cost
    flush()
    footer = _encode_control(snapshot_footer_record.ENCODERS, SnapshotFooterRecord(version=0))
    out += _control_batch([(ControlRecordType.SNAPSHOT_FOOTER, footer)], base_offset=offset, epoch=epoch,
                          now_ms=now_ms)
    return bytes(out)


def _decode_control(decoders: Sequence[object], value: bytes | None, what: str) -> object:
    if value is None:
        raise CorruptSnapshotError(f"{what} control record has no value")
    decoder = decoders[0]
    assert callable(decoder)
    try:
        message, _ = decoder(memoryview(value), 0)
    except (ProtocolError, IndexError, ValueError, struct.error, UnicodeDecodeError) as e:
        raise CorruptSnapshotError(f"cannot decode the {what} control record: {e}") from e
    return message


def read_snapshot(data: bytes | bytearray | memoryview) -> SnapshotContents:
    """Parse and check a whole snapshot (header first, footer last, every CRC)."""
    buf = memoryview(data)
    pos = 0
    header: SnapshotHeaderRecord | None = None
    footer_seen = False
    kraft_version: int | None = None
    voters: VotersRecord | None = None
    records: list[object] = []
    data_batches: list[tuple[int, int]] = []
    batches = 0
    try:
        while pos < len(buf):
            if len(buf) - pos < _BATCH_OVERHEAD:
                raise CorruptSnapshotError(f"truncated batch at position {pos}")
            size = batch_size_at(buf, pos)
            if size < _BATCH_OVERHEAD or pos + size > len(buf):
                raise CorruptSnapshotError(f"truncated batch at position {pos}: need {size} bytes")
            batch = RecordBatch(buf[pos: pos + size])
            if batch.magic != 2 or not batch.is_valid():
                raise CorruptSnapshotError(f"batch at position {pos} is not a valid v2 batch (CRC mismatch)")
            if footer_seen:
                raise CorruptSnapshotError(f"batch at position {pos} after the snapshot footer")
            batches += 1
            if batch.is_control:
                for rec in batch.iter_records():
                    ctype = parse_control_record_type(rec.key)
                    if header is None and ctype != ControlRecordType.SNAPSHOT_HEADER:
                        raise CorruptSnapshotError(f"the first record is a {ctype!r} control record, "
                                                   "not the snapshot header")
                    if ctype == ControlRecordType.SNAPSHOT_HEADER:
                        if header is not None:
                            raise CorruptSnapshotError("a second snapshot header")
                        h = _decode_control(snapshot_header_record.DECODERS, rec.value, "SnapshotHeader")
                        assert isinstance(h, SnapshotHeaderRecord)
                        header = h
                    elif ctype == ControlRecordType.SNAPSHOT_FOOTER:
                        _decode_control(snapshot_footer_record.DECODERS, rec.value, "SnapshotFooter")
                        footer_seen = True
                    elif ctype == ControlRecordType.KRAFT_VERSION:
                        kv = _decode_control(kraft_version_record.DECODERS, rec.value, "KRaftVersion")
                        assert isinstance(kv, KRaftVersionRecord)
                        kraft_version = int(kv.kraft_version)
                    elif ctype == ControlRecordType.KRAFT_VOTERS:
                        v = _decode_control(voters_record.DECODERS, rec.value, "KRaftVoters")
                        assert isinstance(v, VotersRecord)
                        voters = v
            else:
                if header is None:
                    raise CorruptSnapshotError("the first batch of the snapshot is not the header control batch")
                count = 0
                for rec in batch.iter_records():
                    if rec.value is None:
                        raise CorruptSnapshotError(f"record at offset {rec.offset} has no value")
                    records.append(read_metadata_record(rec.value).message)
                    count += 1
                data_batches.append((batch.base_offset, count))
            pos += size
    except CorruptSnapshotError:
        raise
    except (RecordsError, MetadataParseError, ProtocolError, struct.error, ValueError) as e:
        raise CorruptSnapshotError(f"cannot read the snapshot: {e}") from e
    if header is None:
        raise CorruptSnapshotError("the snapshot has no header")
    if not footer_seen:
        raise CorruptSnapshotError("the snapshot has no footer (it is incomplete)")
    return SnapshotContents(header, records, kraft_version, voters, batches, len(buf), data_batches)


def read_snapshot_file(path: Path) -> SnapshotContents:
    """Read a snapshot file; ``CorruptSnapshotError`` if it is not a whole snapshot, OSError if unreadable."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        return read_snapshot(data)
    except CorruptSnapshotError as e:
        raise CorruptSnapshotError(f"{path}: {e}") from e


def read_snapshot_header_file(path: Path) -> SnapshotContents:
    """Only the header batch of a snapshot file (header, kraft.version, voters; no records): what
    retention and the voter set need, without parsing the image (Kafka's
    ``Snapshots.lastContainedLogTimestamp`` reads just as far)."""
    with open(path, "rb") as f:
        head = f.read(_BATCH_OVERHEAD)
        if len(head) < 12:
            raise CorruptSnapshotError(f"{path}: truncated header batch")
        try:
            size = batch_size_at(head, 0)
        except RecordsError as e:
            raise CorruptSnapshotError(f"{path}: {e}") from e
        if size < _BATCH_OVERHEAD or size > MAX_BATCH_SIZE_BYTES:
            raise CorruptSnapshotError(f"{path}: invalid header batch size {size}")
        data = head + f.read(size - len(head))
    try:
        batch = RecordBatch(memoryview(data))
        if len(data) < size or not batch.is_control or not batch.is_valid():
            raise CorruptSnapshotError("the first batch is not a valid control batch")
        # A snapshot of just this batch and a footer, parsed by the one reader.
        footer = _control_batch([(ControlRecordType.SNAPSHOT_FOOTER, _encode_control(
            snapshot_footer_record.ENCODERS, SnapshotFooterRecord(version=0)))],
            base_offset=batch.next_offset, epoch=batch.partition_leader_epoch, now_ms=batch.max_timestamp)
        return read_snapshot(data + bytes(footer))
    except CorruptSnapshotError as e:
        raise CorruptSnapshotError(f"{path}: {e}") from e


def write_file_atomically(target: Path, data: bytes, temp: Path, *, read_only: bool) -> None:
    """Write ``temp``, fsync it, (make it read-only,) rename it to ``target``, fsync the directory."""
    try:
        with open(temp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if read_only:
            os.chmod(temp, 0o400)  # Java's File.setReadOnly on a file created 0644 by root: r--------
        os.replace(temp, target)
        fsync_dir(target.parent)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


def write_snapshot_file(log_dir: Path, snapshot_id: OffsetAndEpoch, data: bytes) -> Path:
    """Freeze a snapshot into ``log_dir`` (Kafka's FileRawSnapshotWriter: part file, fsync, read-only,
    atomic rename); the path of the ``.checkpoint`` file."""
    with FileRawSnapshotWriter(Path(log_dir), snapshot_id) as writer:
        writer.append(data)
        return writer.freeze()
