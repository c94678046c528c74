"""`__cluster_metadata-0` on one node: Kafka's metadata log, as a `UnifiedLog` of metadata record batches.

Format (what `kafka-dump-log --cluster-metadata-decoder` reads): RecordBatch v2, each record with a
null key and as value one metadata record framed by Kafka's `MetadataRecordSerde` (frame version,
record type, record version, body). The batch's partition leader epoch is the quorum epoch; a
single-node quorum is in epoch 1 (the epoch Kafka's lone voter elects itself in). One batch per
controller operation, so an operation's records become durable together, as Kafka's atomic
`ControllerResult`s do.

The directory lives under `metadata.log.dir` (default: the first of `log.dirs`) and is not one of the
`LogManager`'s partitions: Kafka's LogManager skips it too. No time or size retention of its own:
the log is trimmed only behind snapshots (`kbroker.snapshot`), as Kafka's `KafkaMetadataLog` does.

Snapshots (the "snapshots" section below the class): `<end offset>-<epoch>.checkpoint` files in the
same directory, written by `create_snapshot` (the `SnapshotGenerator` decides when), listed by a
`SnapshotRegistry` recovered at open; `maybe_clean` applies `metadata.max.retention.bytes/ms`
(moving the log start offset to a newer snapshot and deleting the segments below it) at most every
60 s, as KafkaRaftClient's cleaner. `latest_snapshot` and `read_all(start)` let a start-up load the
newest snapshot and replay only the log after it.

Synchronous, no asyncio: appends and `flush` (fsync) run where the controller calls them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from kbroker.controller.result import MetadataRecord
from kbroker.log.config import LogConfig
from kbroker.log.errors import KafkaStorageError
from kbroker.log.unified_log import UnifiedLog
from kbroker.metadata.image import MetadataImage, MetadataProvenance
from kbroker.metadata.image_writer import image_records
from kbroker.metadata.loader import MetadataBatch
from kbroker.protocol.messages.voters_record import VotersRecord
from kbroker.protocol.metadata_records.serde import decode_metadata_record, encode_metadata_record
from kbroker.protocol.records import SimpleRecord, build_batch, iter_whole_batches
from kbroker.snapshot import OffsetAndEpoch, SnapshotContents, build_snapshot
from kbroker.snapshot.snapshot_registry import SNAPSHOT_CLEAN_INTERVAL_MS, SnapshotRegistry

CLUSTER_METADATA_TOPIC = "__cluster_metadata"
CLUSTER_METADATA_DIR = f"{CLUSTER_METADATA_TOPIC}-0"
# The epoch a single voter elects itself in (Kafka's KafkaRaftClient starts at epoch 0 and the first
# election bumps it to 1).
SINGLE_NODE_QUORUM_EPOCH = 1

_READ_CHUNK = 4 * 1024 * 1024

log = logging.getLogger(__name__)


def _halt(reason: str) -> None:
    """Kafka's fatal fault handler on a metadata log fault: log and exit 1 without shutdown hooks
    (the next start replays the log, cutting a torn tail)."""
    log.critical("%s", reason)
    logging.shutdown()
    os._exit(1)


@dataclass(frozen=True, slots=True)
class MetadataLogConfig:
    """Kafka's `MetadataLogConfig`: the `metadata.log.*` / `metadata.max.retention.*` keys (defaults as Kafka's)."""

    segment_bytes: int = 1 << 30                          # metadata.log.segment.bytes
    segment_ms: int = 7 * 24 * 3600 * 1000                # metadata.log.segment.ms
    retention_max_bytes: int = 100 * 1024 * 1024          # metadata.max.retention.bytes
    retention_ms: int = 7 * 24 * 3600 * 1000              # metadata.max.retention.ms
    max_bytes_between_snapshots: int = 20 * 1024 * 1024   # metadata.log.max.record.bytes.between.snapshots
    max_snapshot_interval_ms: int = 3600 * 1000           # metadata.log.max.snapshot.interval.ms
    file_delete_delay_ms: int = 60000                     # ServerLogConfigs.LOG_DELETE_DELAY_MS_DEFAULT


def _metadata_log_config(config: MetadataLogConfig) -> LogConfig:
    # Kafka's KafkaMetadataLog: segments by metadata.log.segment.bytes/ms, no time or size retention
    # of the segments themselves (they go only behind snapshots).
    # Below a topic's 1 MiB floor (tests lower metadata.log.segment.min.bytes) via internal.segment.bytes.
    size_key = "segment.bytes" if config.segment_bytes >= 1 << 20 else "internal.segment.bytes"
    return LogConfig.from_props({}, {"retention.ms": "-1", "retention.bytes": "-1",
                                     size_key: str(config.segment_bytes),
                                     "segment.ms": str(config.segment_ms),
                                     "file.delete.delay.ms": str(config.file_delete_delay_ms)})


class ClusterMetadataLog:
    """Append batches of metadata records; replay them from the start."""

    def __init__(self, metadata_log_dir: Path, time_ms: Callable[[], int],
                 on_fatal: Callable[[str], None] | None = None, config: MetadataLogConfig | None = None) -> None:
        self.directory = Path(metadata_log_dir) / CLUSTER_METADATA_DIR
        self.time_ms = time_ms
        self.on_fatal = on_fatal or _halt
        self.config = config or MetadataLogConfig()
        # Recovery from offset 0 on every start: the metadata log is small, and a torn tail after a
        # crash must be cut before the first replay.
        self.log = UnifiedLog(self.directory, _metadata_log_config(self.config), topic=CLUSTER_METADATA_TOPIC,
                              partition=0, had_clean_shutdown=False, time_ms=time_ms)
        self.snapshots = SnapshotRegistry(self.directory, time_ms, file_delete_delay_ms=self.config.file_delete_delay_ms)
        self.snapshots.recover(int(self.log.log_start_offset))
        self._truncate_to_latest_snapshot()
        # KIP-853: the kraft.version and voter set of a dynamic quorum live in the snapshots' header
        # batches (first in the 0-0 checkpoint `kafka-storage format --standalone` writes); every new
        # snapshot carries them forward, so retention never drops the only copy.
        self.kraft_version, self.voters = self._latest_voters()
        self.log.update_high_watermark(self.log.log_end_offset)
        self._last_clean_ms = time_ms()

    @property
    def end_offset(self) -> int:
        return int(self.log.log_end_offset)

    def append(self, records: Sequence[MetadataRecord]) -> MetadataBatch:
        """Append one batch and fsync it: the batch as committed (its base offset, epoch, time).

        A failed write leaves nothing behind (the log layer cuts the file back) and raises
        `KafkaStorageError`. A batch written but not made durable (the fsync failed) is not committed:
        it is cut off again, so the log holds exactly what the image has applied and a restart replays
        nothing the client was told failed. If it cannot be cut off, the metadata log no longer matches
        the image: `on_fatal` (by default: log and exit 1, as Kafka halts on a metadata log fault).
        """
        now = self.time_ms()
        batch = build_batch([SimpleRecord(encode_metadata_record(r), None, now) for r in records], now_ms=now)
        committed_end = self.end_offset
        info = self.log.append_as_leader(memoryview(bytearray(batch)), SINGLE_NODE_QUORUM_EPOCH, now_ms=now)
        try:
            self.log.flush()
        except (KafkaStorageError, OSError) as e:
            try:
                self.log.offline = False  # the cut-off below is the repair
                self.log.truncate_to(committed_end)
            except (KafkaStorageError, OSError, ValueError) as cut:
                self.on_fatal(f"The metadata log {self.directory} holds a batch that was not made durable "
                              f"({e}) and cannot be cut back to offset {committed_end} ({cut})")
            log.error("Metadata batch at offset %d was not made durable (%s); cut back to %d", committed_end, e,
                      committed_end)
            raise KafkaStorageError(f"cannot make the metadata log {self.directory} durable: {e}") from e
        self.log.update_high_watermark(self.log.log_end_offset)
        return MetadataBatch(int(info.first_offset), SINGLE_NODE_QUORUM_EPOCH, now, list(records), len(batch))

    def read_all(self, start_offset: int | None = None) -> Iterator[MetadataBatch]:
        """Every data batch from `start_offset` (default: the log start), records decoded, in log order."""
        offset = max(int(self.log.log_start_offset), start_offset or 0)
        end = self.end_offset
        while offset < end:
            info = self.log.read(offset, _READ_CHUNK, max_offset=end, min_one_message=True)
            if info.region is None or info.region.size == 0:
                return
            next_offset = offset
            for batch in iter_whole_batches(info.region.read_bytes()):
                next_offset = batch.next_offset
                if batch.is_control:
                    continue
                records = [decode_metadata_record(r.value) for r in batch.iter_records() if r.value is not None]
                yield MetadataBatch(batch.base_offset, batch.partition_leader_epoch, batch.max_timestamp, records,
                                    len(batch.buf))
            if next_offset <= offset:
                return
            offset = next_offset

    def close(self) -> None:
        self.snapshots.delete_pending(0, force=True)
        self.log.close()

    # -- snapshots (kbroker.snapshot) ----------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        return int(self.log.log_start_offset)

    @property
    def size_in_bytes(self) -> int:
        return int(self.log.size_in_bytes)

    def increment_log_start_offset(self, offset: int) -> bool:
        """Kafka's `maybeIncrementLogStartOffset` + `deleteOldSegments` (`MetadataLogView`)."""
        if offset <= self.log.log_start_offset or offset > self.log.high_watermark:
            return False
        self.log.delete_records_before(offset)
        return True

    def _truncate_to_latest_snapshot(self) -> None:
        # Kafka's truncateToLatestSnapshot: a snapshot past the log end (a follower that crashed after
        # fetching it) makes the log start over at the snapshot's end offset.
        latest = self.snapshots.latest_snapshot_id()
        if latest is not None and latest.offset > self.log.log_end_offset:
            log.info("Truncating %s fully to start at the latest snapshot %s", self.directory, latest)
            self.log.truncate_fully_and_start_at(latest.offset)

    def _latest_voters(self) -> tuple[int, VotersRecord | None]:
        for snapshot_id in reversed(self.snapshots.snapshot_ids):
            contents = self.snapshots.read_header(snapshot_id)
            if contents.kraft_version is not None:
                return contents.kraft_version, contents.voters
        return 0, None

    def latest_snapshot(self) -> tuple[OffsetAndEpoch, SnapshotContents] | None:
        """The newest snapshot with records in it (the KIP-853 bootstrap snapshot 0-0 holds none)."""
        latest = self.snapshots.latest_snapshot_id()
        if latest is None or latest.offset == 0:
            return None
        return latest, self.snapshots.read(latest)

    def create_snapshot(self, image: MetadataImage, reason: str = "") -> Path | None:
        """Write a snapshot of `image` (which must reflect a committed prefix of this log): its id is the
        image's last offset + 1 and epoch. None if that snapshot exists or is below the log start."""
        p = image.provenance
        snapshot_id = OffsetAndEpoch(p.last_contained_offset + 1, p.last_contained_epoch)
        if snapshot_id.offset < self.log.log_start_offset:
            log.info("Cannot create a snapshot with an id (%s) less than the log start offset (%d)",
                     snapshot_id, self.log.log_start_offset)
            return None
        if snapshot_id.offset > self.log.high_watermark:
            raise ValueError(f"Cannot create a snapshot with an id ({snapshot_id}) greater than the "
                             f"high-watermark ({self.log.high_watermark})")
        data = build_snapshot(image_records(image), snapshot_id,
                              last_contained_log_timestamp=p.last_contained_log_time_ms, now_ms=self.time_ms(),
                              kraft_version=self.kraft_version, voters=self.voters)
        path = self.snapshots.create(snapshot_id, data, p.last_contained_log_time_ms)
        if path is not None:
            log.info("Wrote KRaft snapshot %s (%d bytes)%s", path.name, len(data), f" because {reason}" if reason else "")
        return path

    def maybe_clean(self, force: bool = False) -> bool:
        """Snapshot retention (`metadata.max.retention.bytes/ms`), at most every 60 s unless `force`."""
        now = self.time_ms()
        if not force and now - self._last_clean_ms < SNAPSHOT_CLEAN_INTERVAL_MS:
            self.snapshots.delete_pending(now)
            return False
        self._last_clean_ms = now
        try:
            cleaned = self.snapshots.maybe_clean(self, retention_bytes=self.config.retention_max_bytes,
                                                 retention_ms=self.config.retention_ms)
            self.log.delete_pending_files(now)
        except (KafkaStorageError, OSError) as e:
            # Retention is housekeeping: the commit that ran it stands; the next pass tries again.
            log.error("Error while cleaning the metadata log %s behind its snapshots: %s", self.directory, e)
            return False
        return cleaned


def snapshot_provenance(snapshot_id: OffsetAndEpoch, contents: SnapshotContents) -> MetadataProvenance:
    """The provenance of an image loaded from a snapshot (Kafka: offset = snapshot end offset - 1)."""
    return MetadataProvenance(snapshot_id.offset - 1, snapshot_id.epoch, contents.last_contained_log_timestamp, True)
