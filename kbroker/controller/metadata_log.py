"""`__cluster_metadata-0` on one node: Kafka's metadata log, as a `UnifiedLog` of metadata record batches.

Format (what `kafka-dump-log --cluster-metadata-decoder` reads): RecordBatch v2, each record with a
null key and as value one metadata record framed by Kafka's `MetadataRecordSerde` (frame version,
record type, record version, body). The batch's partition leader epoch is the quorum epoch; a
single-node quorum is in epoch 1 (the epoch Kafka's lone voter elects itself in). One batch per
controller operation, so an operation's records become durable together, as Kafka's atomic
`ControllerResult`s do.

The directory lives under `metadata.log.dir` (default: the first of `log.dirs`) and is not one of the
`LogManager`'s partitions: Kafka's LogManager skips it too. Never deleted by retention (Kafka trims the
metadata log only behind snapshots, which come with the Raft quorum, issue 13).

Synchronous, no asyncio: appends and `flush` (fsync) run where the controller calls them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from kbroker.controller.result import MetadataRecord
from kbroker.log.config import LogConfig
from kbroker.log.errors import KafkaStorageError
from kbroker.log.unified_log import UnifiedLog
from kbroker.metadata.loader import MetadataBatch
from kbroker.protocol.metadata_records.serde import decode_metadata_record, encode_metadata_record
from kbroker.protocol.records import RecordBatch, SimpleRecord, batch_size_at, build_batch

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


def _metadata_log_config() -> LogConfig:
    # Kafka's metadata log: 1 GiB segments (metadata.log.segment.bytes), no time or size retention.
    return LogConfig.from_props({}, {"retention.ms": "-1", "retention.bytes": "-1",
                                     "segment.bytes": str(1 << 30)})


class ClusterMetadataLog:
    """Append batches of metadata records; replay them from the start."""

    def __init__(self, metadata_log_dir: Path, time_ms: Callable[[], int],
                 on_fatal: Callable[[str], None] | None = None) -> None:
        self.directory = Path(metadata_log_dir) / CLUSTER_METADATA_DIR
        self.time_ms = time_ms
        self.on_fatal = on_fatal or _halt
        # Recovery from offset 0 on every start: the metadata log is small, and a torn tail after a
        # crash must be cut before the first replay.
        self.log = UnifiedLog(self.directory, _metadata_log_config(), topic=CLUSTER_METADATA_TOPIC,
                              partition=0, had_clean_shutdown=False, time_ms=time_ms)

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

    def read_all(self) -> Iterator[MetadataBatch]:
        """Every data batch, records decoded, in log order."""
        offset = int(self.log.log_start_offset)
        end = self.end_offset
        while offset < end:
            info = self.log.read(offset, _READ_CHUNK, max_offset=end, min_one_message=True)
            if info.region is None or info.region.size == 0:
                return
            buf = memoryview(info.region.read_bytes())
            pos = 0
            next_offset = offset
            while pos + 12 <= len(buf):
                size = batch_size_at(buf, pos)
                if pos + size > len(buf):
                    break
                batch = RecordBatch(buf[pos : pos + size])
                pos += size
                next_offset = batch.next_offset
                if batch.is_control:
                    continue
                records = [decode_metadata_record(r.value) for r in batch.iter_records() if r.value is not None]
                yield MetadataBatch(batch.base_offset, batch.partition_leader_epoch, batch.max_timestamp, records,
                                    size)
            if next_offset <= offset:
                return
            offset = next_offset

    def close(self) -> None:
        self.log.close()
