"""KafkaMetadataLog: the RaftLog of `__cluster_metadata-0` on disk, over `kbroker.log.UnifiedLog`.

The directory and bytes are Kafka's: `<metadata.log.dir>/__cluster_metadata-0/` holds the segments
(record batches v2, partition leader epoch = Raft epoch, so `kafka-dump-log --cluster-metadata-decoder`
reads them), the `leader-epoch-checkpoint` (the epoch cache behind `end_offset_for_epoch`), the
`quorum-state` file (`FileQuorumStateStore`), and the snapshots as `<offset:020d>-<epoch:010d>.checkpoint`
(written to a `.checkpoint.part` file, fsynced, renamed, as Kafka's `FileRawSnapshotWriter` does).

Raft stamps offsets and epochs before anything reaches the log, so every append is a follower-style
append (`UnifiedLog.append_as_follower`: CRC-checked, offsets continue the log end offset), for the
leader too. The durable end offset is the log's recovery point (what `flush` fsynced).

On open, a log behind its latest snapshot (a follower that crashed while installing one) starts at
the snapshot (Kafka's `truncateToLatestSnapshot`).

Retention (a controller's log: `MetadataLogRetention`, Kafka's `metadata.max.retention.bytes` /
`metadata.max.retention.ms` and `metadata.log.segment.bytes` / `.ms`): as Kafka's `KafkaMetadataLog`, a
new snapshot does not trim the log. `maybe_clean` (Kafka's `maybeClean`: every 60 s, and here also right
after each new snapshot) keeps the segments and older snapshots until they breach the size (log size +
the snapshots' sizes) or the age (a snapshot's `lastContainedLogTimestamp`) limit; then the log start
offset moves up to the next snapshot, the segments wholly below it are deleted, and the older snapshots
with them (`kbroker.snapshot.SnapshotRegistry`, shared with the embedded single node). The latest
snapshot is never deleted and the log start never passes it. Without a `MetadataLogRetention` (a
`process.roles=broker` node's fetcher, tests) the log is trimmed at once behind each new snapshot.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kbroker.clock import wall_clock_ms
from kbroker.log.config import LogConfig
from kbroker.log.unified_log import UnifiedLog
from kbroker.protocol.records import RecordBatch, batch_size_at, iter_whole_batches
from kbroker.protocol.topic import CLUSTER_METADATA_TOPIC_NAME
from kbroker.raft.raft_log import OffsetAndEpoch, epoch_end_offset
from kbroker.snapshot.snapshot_registry import SNAPSHOT_CLEAN_INTERVAL_MS, SnapshotRegistry
from kbroker.snapshot.snapshots import OffsetAndEpoch as SnapshotId

log = logging.getLogger(__name__)

CLUSTER_METADATA_DIR = f"{CLUSTER_METADATA_TOPIC_NAME}-0"
SNAPSHOT_SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = ".checkpoint.part"


def snapshot_filename(snapshot_id: OffsetAndEpoch) -> str:
    """Kafka's Snapshots.filenameFromSnapshotId: 20-digit end offset, '-', 10-digit epoch."""
    return f"{snapshot_id.offset:020d}-{snapshot_id.epoch:010d}{SNAPSHOT_SUFFIX}"


@dataclass(frozen=True, slots=True)
class MetadataLogRetention:
    """Kafka's `MetadataLogConfig` keys a controller's metadata log is kept by (Kafka's defaults)."""

    retention_bytes: int = 100 * 1024 * 1024          # metadata.max.retention.bytes (-1: no size limit)
    retention_ms: int = 7 * 24 * 3600 * 1000          # metadata.max.retention.ms (-1: no time limit)
    segment_bytes: int = 1 << 30                      # metadata.log.segment.bytes
    segment_ms: int = 7 * 24 * 3600 * 1000            # metadata.log.segment.ms
    file_delete_delay_ms: int = 60000                 # Kafka's fixed LOG_DELETE_DELAY_MS_DEFAULT


def metadata_log_config(retention: MetadataLogRetention | None = None) -> LogConfig:
    """Kafka's metadata log: segments by metadata.log.segment.bytes/ms (1 GiB, 7 days), no retention of the
    segments by time or size of their own (they go only behind snapshots)."""
    r = retention or MetadataLogRetention()
    # Below a topic's 1 MiB floor (tests lower metadata.log.segment.min.bytes) via internal.segment.bytes.
    size_key = "segment.bytes" if r.segment_bytes >= 1 << 20 else "internal.segment.bytes"
    return LogConfig.from_props({}, {"retention.ms": "-1", "retention.bytes": "-1", size_key: str(r.segment_bytes),
                                     "segment.ms": str(r.segment_ms),
                                     "file.delete.delay.ms": str(r.file_delete_delay_ms)})


def _sid(snapshot_id: OffsetAndEpoch) -> SnapshotId:
    return SnapshotId(snapshot_id.offset, snapshot_id.epoch)


class _RetentionView:
    """The log as `SnapshotRegistry` retention sees it (Kafka's maybeIncrementLogStartOffset)."""

    def __init__(self, log: UnifiedLog) -> None:
        self.log = log

    @property
    def start_offset(self) -> int:
        return int(self.log.log_start_offset)

    @property
    def size_in_bytes(self) -> int:
        return int(self.log.size_in_bytes)

    def increment_log_start_offset(self, offset: int) -> bool:
        if offset <= self.log.log_start_offset:
            return False
        self.log.update_high_watermark(max(self.log.high_watermark, offset))
        self.log.delete_records_before(offset)
        return True


class KafkaMetadataLog:
    """A RaftLog on disk."""

    def __init__(self, metadata_log_dir: Path, time_ms: Callable[[], int] | None = None,
                 retention: MetadataLogRetention | None = None) -> None:
        self.directory = Path(metadata_log_dir) / CLUSTER_METADATA_DIR
        self.retention = retention
        self.time_ms: Callable[[], int] = time_ms or wall_clock_ms
        self.log = UnifiedLog(self.directory, metadata_log_config(retention), topic=CLUSTER_METADATA_TOPIC_NAME,
                              partition=0, had_clean_shutdown=False, time_ms=time_ms)
        self.snapshots = SnapshotRegistry(self.directory, self.time_ms, file_delete_delay_ms=(
            retention.file_delete_delay_ms if retention is not None else 0))
        self._view = _RetentionView(self.log)
        self._last_clean_ms = self.time_ms()
        latest = self.latest_snapshot_id()
        if latest is not None and self.log.log_end_offset < latest.offset:
            self.log.truncate_fully_and_start_at(latest.offset)  # Kafka's truncateToLatestSnapshot
        # Partial (.part) and retired (.deleted) files, and snapshots below the log start, go.
        self.snapshots.recover(int(self.log.log_start_offset))
        latest = self.latest_snapshot_id()
        if retention is None and latest is not None and latest.offset > self.log.log_start_offset:
            self._trim_to(latest.offset)

    def _trim_to(self, offset: int) -> None:
        self.log.update_high_watermark(max(self.log.high_watermark, offset))
        self.log.delete_records_before(offset)

    # --- RaftLog ---------------------------------------------------------------------------------
    def end_offset(self) -> int:
        return int(self.log.log_end_offset)

    def start_offset(self) -> int:
        return int(self.log.log_start_offset)

    def last_fetched_epoch(self) -> int:
        if self.end_offset() > self.start_offset():
            epoch = self.log.leader_epoch_cache.latest_epoch
            if epoch >= 0:
                return int(epoch)
        snap = self.latest_snapshot_id()
        return snap.epoch if snap is not None else 0

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        entries: list[tuple[int, int]] = []
        snap = self.latest_snapshot_id()
        start = self.start_offset()
        if snap is not None and snap.offset == start:
            entries.append((snap.epoch, start))
        for e, s in self.log.leader_epoch_cache.entries():
            if s >= start and (not entries or e > entries[-1][0]):
                entries.append((e, s))
            elif s < start and not entries:
                entries.append((e, start))
        return epoch_end_offset(entries, epoch, self.end_offset(), start)

    def append(self, data: bytes) -> None:
        self.log.append_as_follower(memoryview(bytearray(data)))

    def truncate_to(self, offset: int) -> None:
        """Cut at a batch boundary: a batch holding `offset` goes whole (Raft's batches are atomic)."""
        if self.start_offset() <= offset < self.end_offset():
            chunk = self.read(offset, 1)
            if len(chunk) >= 8:
                offset = min(offset, RecordBatch(memoryview(chunk)[: batch_size_at(chunk, 0)]).base_offset)
        self.log.truncate_to(offset)

    def read(self, start_offset: int, max_bytes: int) -> bytes:
        if start_offset >= self.end_offset():
            return b""
        info = self.log.read(start_offset, max_bytes, min_one_message=True)
        if info.region is None:
            return b""
        data = info.region.read_bytes()
        # Whole batches only: a size-bounded read may end inside one.
        return data[:sum(len(b.buf) for b in iter_whole_batches(data))]

    def flush(self) -> None:
        self.log.flush()

    def flushed_end_offset(self) -> int:
        return int(self.log.recovery_point)

    # --- snapshots ---------------------------------------------------------------------------------
    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        latest = self.snapshots.latest_snapshot_id()
        return None if latest is None else OffsetAndEpoch(latest.offset, latest.epoch)

    def snapshot_ids(self) -> list[OffsetAndEpoch]:
        return [OffsetAndEpoch(s.offset, s.epoch) for s in self.snapshots.snapshot_ids]

    def _path(self, snapshot_id: OffsetAndEpoch) -> Path | None:
        sid = _sid(snapshot_id)
        return self.snapshots.path(sid) if sid in self.snapshots.snapshot_ids else None

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> bytes | None:
        path = self._path(snapshot_id)
        if path is None:
            return None
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None

    def read_snapshot_slice(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int
                            ) -> tuple[int, bytes] | None:
        """One chunk of a snapshot file, read at `position` (FetchSnapshot serves the file in chunks,
        never the whole of it at once)."""
        path = self._path(snapshot_id)
        if path is None:
            return None
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if 0 <= position <= size:
                    f.seek(position)
                    return size, f.read(max_bytes)
                return size, b""
        except FileNotFoundError:
            return None

    def _write_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        final = self.directory / snapshot_filename(snapshot_id)
        part = final.with_name(final.name[: -len(SNAPSHOT_SUFFIX)] + PARTIAL_SUFFIX)
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(part, final)
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        self.snapshots.on_frozen(_sid(snapshot_id))

    def create_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        if snapshot_id.offset > self.end_offset() or snapshot_id.offset < self.start_offset():
            raise ValueError(f"snapshot {snapshot_id} is outside the log [{self.start_offset()}, {self.end_offset()}]")
        self._write_snapshot(snapshot_id, data)

    def install_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        """A snapshot fetched from the leader replaces the whole log (Kafka's `truncateToLatestSnapshot`):
        the log starts at its end offset and the older snapshots are deleted."""
        self._write_snapshot(snapshot_id, data)
        self.log.truncate_fully_and_start_at(snapshot_id.offset)
        self.snapshots.forget_before(_sid(snapshot_id))

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> bool:
        """A new snapshot exists. Without retention keys, the log is trimmed to it at once. With them
        (a controller), Kafka's retention decides what goes (`maybe_clean`), checked now."""
        if self.retention is not None:
            return self.maybe_clean(force=True)
        sid = _sid(snapshot_id)
        if sid not in self.snapshots.snapshot_ids or snapshot_id.offset <= self.start_offset():
            return False
        return self.snapshots.delete_before_snapshot(sid, self._view, "Deleting snapshot {snapshot}: the log "
                                                     f"now starts at {snapshot_id.offset}")

    def maybe_clean(self, force: bool = False) -> bool:
        """Kafka's `KafkaMetadataLog.maybeClean` (`metadata.max.retention.bytes` / `.ms`), at most every
        60 s unless `force`; also unlinks retired segment and snapshot files whose delay has passed."""
        if self.retention is None:
            return False
        now = self.time_ms()
        if not force and now - self._last_clean_ms < SNAPSHOT_CLEAN_INTERVAL_MS:
            self.snapshots.delete_pending(now)
            self.log.delete_pending_files(now)
            return False
        self._last_clean_ms = now
        try:
            cleaned = self.snapshots.maybe_clean(self._view, retention_bytes=self.retention.retention_bytes,
                                                 retention_ms=self.retention.retention_ms)
            self.log.delete_pending_files(now)
        except OSError as e:
            # Housekeeping: the next pass tries again.
            log.error("Error while cleaning the metadata log %s behind its snapshots: %s", self.directory, e)
            return False
        if cleaned:
            log.info("Metadata log retention: %s now starts at %d, snapshots %s", self.directory,
                     self.start_offset(), [f"{s.offset}-{s.epoch}" for s in self.snapshots.snapshot_ids])
        return cleaned

    def close(self) -> None:
        self.snapshots.delete_pending(0, force=True)
        self.log.close()
