"""`KafkaMetadataLog`: a broker's local copy of `__cluster_metadata-0`, as a Raft observer keeps it.

Kafka's `kafka.raft.KafkaMetadataLog` in small, for the observer side only: batches fetched from the
quorum leader are appended with their offsets and epochs as the leader assigned them
(`append_as_follower`), the leader epoch cache (leader-epoch-checkpoint) gives the epoch of the last
fetched batch for the next Fetch's `last_fetched_epoch`, a diverging epoch truncates the tail, and a
snapshot replaces the whole log (`<end offset>-<epoch>.checkpoint`, Kafka's snapshot file name, the
bytes exactly as FetchSnapshot delivered them). The format is the one the single node's
`ClusterMetadataLog` writes (kbroker/controller/metadata_log.py): RecordBatch v2, each record's value
a metadata record framed by Kafka's MetadataRecordSerde; control batches (LeaderChange, SnapshotHeader,
SnapshotFooter, KRaftVersion, Voters) are kept in the log and skipped when records are handed on.

Synchronous, no asyncio: the fetcher calls it on the event loop (metadata is small).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kbroker.log.config import LogConfig
from kbroker.log.unified_log import UnifiedLog
from kbroker.metadata.loader import MetadataBatch
from kbroker.protocol.metadata_records.serde import MetadataParseError, decode_metadata_record
from kbroker.protocol.records import RecordBatch, batch_size_at

CLUSTER_METADATA_TOPIC = "__cluster_metadata"
CLUSTER_METADATA_DIR = f"{CLUSTER_METADATA_TOPIC}-0"
SNAPSHOT_SUFFIX = ".checkpoint"
_READ_CHUNK = 4 * 1024 * 1024

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SnapshotId:
    """A snapshot holds every record below `end_offset`; its last record was written in `epoch`."""

    end_offset: int
    epoch: int

    @property
    def file_name(self) -> str:
        return f"{self.end_offset:020d}-{self.epoch:010d}{SNAPSHOT_SUFFIX}"


@dataclass(frozen=True, slots=True)
class ReadBatch:
    """One batch read back from the log: its offsets and, for a data batch, its decoded records."""

    base_offset: int
    next_offset: int
    epoch: int
    is_control: bool
    metadata: MetadataBatch | None


def _metadata_log_config() -> LogConfig:
    return LogConfig.from_props({}, {"retention.ms": "-1", "retention.bytes": "-1", "segment.bytes": str(1 << 30)})


def decode_batch(batch: RecordBatch, size: int) -> MetadataBatch:
    """The metadata records of a data batch. A record kbroker cannot decode is logged and left out, as
    Kafka's loader reports a metadata loading fault and goes on (the rest of the batch still applies)."""
    records: list[object] = []
    for r in batch.iter_records():
        if r.value is None:
            continue
        try:
            records.append(decode_metadata_record(r.value))
        except MetadataParseError as exc:
            log.error("Metadata loading fault: cannot decode the record at offset %d: %s", r.offset, exc)
    return MetadataBatch(batch.base_offset, batch.partition_leader_epoch, batch.max_timestamp, records, size)


def iter_batches(buf: memoryview) -> Iterator[tuple[RecordBatch, int]]:
    """Whole batches in `buf` (a partial batch at the end is left out)."""
    pos = 0
    while pos + 12 <= len(buf):
        size = batch_size_at(buf, pos)
        if size < 12 or pos + size > len(buf):
            return
        yield RecordBatch(buf[pos : pos + size]), size
        pos += size


class KafkaMetadataLog:
    """The observer's `__cluster_metadata-0` under `metadata_log_dir`."""

    def __init__(self, metadata_log_dir: Path) -> None:
        self.directory = Path(metadata_log_dir) / CLUSTER_METADATA_DIR
        self.log = UnifiedLog(self.directory, _metadata_log_config(), topic=CLUSTER_METADATA_TOPIC, partition=0,
                              had_clean_shutdown=False)

    # -- state --------------------------------------------------------------------------------------

    @property
    def end_offset(self) -> int:
        return int(self.log.log_end_offset)

    @property
    def start_offset(self) -> int:
        return int(self.log.log_start_offset)

    def last_fetched_epoch(self) -> int:
        """The epoch of the last batch in the log (or of the snapshot the log starts at; 0 when empty)."""
        epoch = self.log.leader_epoch_cache.latest_epoch
        if epoch >= 0 and self.end_offset > self.start_offset:
            return int(epoch)
        snap = self.latest_snapshot()
        return snap.epoch if snap is not None and snap.end_offset == self.end_offset else 0

    # -- writes -------------------------------------------------------------------------------------

    def append_as_follower(self, records: memoryview) -> int:
        """Append fetched batches (offsets as the leader assigned them); the new end offset."""
        self.log.append_as_follower(records)
        return self.end_offset

    def flush(self) -> None:
        self.log.flush()

    def truncate_to(self, offset: int) -> None:
        """Cut the log back to `offset` (a diverging epoch from the leader)."""
        self.log.truncate_to(max(offset, self.start_offset))

    # -- reads --------------------------------------------------------------------------------------

    def read_batches(self, start: int, end: int) -> Iterator[ReadBatch]:
        """Every batch from `start` (a batch boundary) up to `end` (exclusive: whole batches whose last
        offset is below `end`)."""
        offset = max(start, self.start_offset)
        while offset < min(end, self.end_offset):
            info = self.log.read(offset, _READ_CHUNK, max_offset=None, min_one_message=True)
            if info.region is None or info.region.size == 0:
                return
            buf = memoryview(info.region.read_bytes())
            progressed = False
            for batch, size in iter_batches(buf):
                if batch.next_offset <= offset:
                    continue
                if batch.next_offset > end:
                    return
                progressed = True
                offset = batch.next_offset
                meta = None if batch.is_control else decode_batch(batch, size)
                yield ReadBatch(batch.base_offset, batch.next_offset, batch.partition_leader_epoch,
                                batch.is_control, meta)
            if not progressed:
                return

    # -- snapshots ----------------------------------------------------------------------------------

    def snapshots(self) -> list[SnapshotId]:
        out = []
        for p in self.directory.glob(f"*{SNAPSHOT_SUFFIX}"):
            stem = p.name[: -len(SNAPSHOT_SUFFIX)]
            off, _, ep = stem.partition("-")
            if off.isdigit() and ep.isdigit():
                out.append(SnapshotId(int(off), int(ep)))
        return sorted(out, key=lambda s: (s.end_offset, s.epoch))

    def latest_snapshot(self) -> SnapshotId | None:
        snaps = self.snapshots()
        return snaps[-1] if snaps else None

    def read_snapshot(self, snapshot: SnapshotId) -> bytes:
        return (self.directory / snapshot.file_name).read_bytes()

    def install_snapshot(self, snapshot: SnapshotId, data: bytes) -> None:
        """Write a fetched snapshot durably, then start the log at its end offset (Kafka's
        `truncateToLatestSnapshot`); older snapshots are removed."""
        path = self.directory / snapshot.file_name
        tmp = path.with_name(path.name + ".part")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        for old in self.snapshots():
            if old != snapshot:
                (self.directory / old.file_name).unlink(missing_ok=True)
        self.log.truncate_fully_and_start_at(snapshot.end_offset)
        log.info("Installed metadata snapshot %s; the log now starts at %d", snapshot.file_name, snapshot.end_offset)

    def close(self) -> None:
        self.log.close()
