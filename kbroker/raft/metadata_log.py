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
the snapshot; a log start offset below the latest snapshot moves up to it (Kafka's KafkaMetadataLog
does the same on `apply`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from kbroker.log.config import LogConfig
from kbroker.log.unified_log import UnifiedLog
from kbroker.protocol.records import RecordBatch, batch_size_at, iter_whole_batches
from kbroker.protocol.topic import CLUSTER_METADATA_TOPIC_NAME
from kbroker.raft.raft_log import OffsetAndEpoch, epoch_end_offset

CLUSTER_METADATA_DIR = f"{CLUSTER_METADATA_TOPIC_NAME}-0"
SNAPSHOT_SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = ".checkpoint.part"
_SNAPSHOT_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")


def snapshot_filename(snapshot_id: OffsetAndEpoch) -> str:
    """Kafka's Snapshots.filenameFromSnapshotId: 20-digit end offset, '-', 10-digit epoch."""
    return f"{snapshot_id.offset:020d}-{snapshot_id.epoch:010d}{SNAPSHOT_SUFFIX}"


def metadata_log_config() -> LogConfig:
    """Kafka's metadata log: 1 GiB segments, no retention by time or size (trimmed behind snapshots)."""
    return LogConfig.from_props({}, {"retention.ms": "-1", "retention.bytes": "-1", "segment.bytes": str(1 << 30)})


class KafkaMetadataLog:
    """A RaftLog on disk."""

    def __init__(self, metadata_log_dir: Path, time_ms: Callable[[], int] | None = None) -> None:
        self.directory = Path(metadata_log_dir) / CLUSTER_METADATA_DIR
        self.log = UnifiedLog(self.directory, metadata_log_config(), topic=CLUSTER_METADATA_TOPIC_NAME, partition=0,
                              had_clean_shutdown=False, time_ms=time_ms)
        self.snapshots: dict[OffsetAndEpoch, Path] = {}
        for path in self.directory.iterdir():
            if path.name.endswith(PARTIAL_SUFFIX):
                path.unlink()  # a snapshot whose write never finished
                continue
            m = _SNAPSHOT_NAME.match(path.name)
            if m:
                self.snapshots[OffsetAndEpoch(int(m.group(1)), int(m.group(2)))] = path
        latest = self.latest_snapshot_id()
        if latest is not None and latest.offset > self.log.log_start_offset:
            if self.log.log_end_offset < latest.offset:
                self.log.truncate_fully_and_start_at(latest.offset)
            else:
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
        return max(self.snapshots) if self.snapshots else None

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> bytes | None:
        path = self.snapshots.get(snapshot_id)
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
        path = self.snapshots.get(snapshot_id)
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
        self.snapshots[snapshot_id] = final

    def create_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        if snapshot_id.offset > self.end_offset() or snapshot_id.offset < self.start_offset():
            raise ValueError(f"snapshot {snapshot_id} is outside the log [{self.start_offset()}, {self.end_offset()}]")
        self._write_snapshot(snapshot_id, data)

    def install_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        """A snapshot fetched from the leader replaces the whole log (Kafka's `truncateToLatestSnapshot`):
        the log starts at its end offset and the older snapshots are deleted."""
        self._write_snapshot(snapshot_id, data)
        self.log.truncate_fully_and_start_at(snapshot_id.offset)
        for old in [s for s in self.snapshots if s < snapshot_id]:
            self.snapshots.pop(old).unlink(missing_ok=True)

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> bool:
        if snapshot_id not in self.snapshots or snapshot_id.offset <= self.start_offset():
            return False
        self._trim_to(snapshot_id.offset)
        for old in [s for s in self.snapshots if s.offset < snapshot_id.offset]:
            self.snapshots.pop(old).unlink(missing_ok=True)
        return True

    def close(self) -> None:
        self.log.close()
