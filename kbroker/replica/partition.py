"""One hosted topic-partition: its log, leader epoch and high watermark (Kafka's `Partition`).

On a single node this broker is the leader of every partition and the ISR is itself, so the high
watermark follows the log end offset after every append (Kafka's
`maybeIncrementLeaderHW` with one replica). All storage calls for the data path go through this
class, so the replica manager never touches `UnifiedLog` directly.

Must not import net/ or api/.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from kbroker.log.errors import KafkaStorageError
from kbroker.log.results import LogAppendInfo
from kbroker.log.unified_log import UnifiedLog
from kbroker.log.validator import CheckedBatch
from kbroker.metrics.meters import TopicMetrics
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.regions import FileRegion

# FetchRequest isolation levels.
READ_UNCOMMITTED = 0
READ_COMMITTED = 1


@dataclass(slots=True)
class ReadInfo:
    """What a read returned: record parts (FileRegions) and their total size."""

    records: FileRegion | None
    size: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: list[tuple[int, int]] | None = None


class Partition:
    """A topic-partition this broker leads."""

    __slots__ = ("topic", "partition", "topic_id", "log", "leader_epoch", "partition_epoch", "local_id",
                 "replicas", "isr", "follower_end_offsets", "key", "topic_stats")

    def __init__(self, topic: str, partition: int, topic_id: uuid.UUID, log: UnifiedLog, leader_epoch: int = 0,
                 local_id: int = 1, replicas: tuple[int, ...] = ()) -> None:
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.log = log
        self.leader_epoch = leader_epoch
        self.local_id = local_id
        self.replicas = replicas or (local_id,)
        self.isr: set[int] = set(self.replicas)
        # Log end offsets of the remote replicas, as their fetches report them (replication).
        self.follower_end_offsets: dict[int, int] = {r: 0 for r in self.replicas if r != local_id}
        self.key = (topic, partition)
        self.partition_epoch = 0
        # The topic's BrokerTopicMetrics, bound by the replica manager when it hosts the partition
        # (None: metrics off), so the data path records without a lookup.
        self.topic_stats: TopicMetrics | None = None

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.partition}, epoch={self.leader_epoch})"

    # -- offsets -------------------------------------------------------------------------------

    @property
    def is_offline(self) -> bool:
        return self.log.offline

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def last_stable_offset(self) -> int:
        return self.log.last_stable_offset

    def fetchable_end(self, isolation_level: int) -> int:
        """The exclusive upper bound a consumer may read: HW, or the LSO for read_committed."""
        return self.last_stable_offset if isolation_level == READ_COMMITTED else self.high_watermark

    @property
    def min_insync_replicas(self) -> int:
        return self.log.config.min_insync_replicas

    @property
    def isr_size(self) -> int:
        return len(self.isr)

    def make_leader(self, leader_epoch: int, partition_epoch: int, replicas: tuple[int, ...],
                    isr: tuple[int, ...]) -> None:
        """Kafka's `Partition.makeLeader`: take the registration's epochs, replicas and ISR. Produces
        from now on are stamped with `leader_epoch`, which the log's epoch cache records at the
        first offset written in it."""
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = tuple(replicas) or (self.local_id,)
        self.isr = set(isr) or {self.local_id}
        self.follower_end_offsets = {r: self.follower_end_offsets.get(r, 0)
                                     for r in self.replicas if r != self.local_id}

    def maybe_increment_high_watermark(self) -> bool:
        """HW = the smallest log end offset in the ISR (just the LEO on a single replica).

        Returns True if it moved (Kafka's maybeIncrementLeaderHW).
        """
        new_hw = self.log_end_offset
        for replica in self.isr:
            if replica != self.local_id:
                new_hw = min(new_hw, self.follower_end_offsets.get(replica, 0))
        if new_hw > self.high_watermark:
            self.log.update_high_watermark(new_hw)
            return True
        return False

    def update_follower_fetch_state(self, replica_id: int, log_end_offset: int) -> bool:
        """A follower reported its log end offset; returns True if the high watermark moved."""
        self.follower_end_offsets[replica_id] = log_end_offset
        return self.maybe_increment_high_watermark()

    # -- the data path ---------------------------------------------------------------------------

    def check_leader_epoch(self, current_leader_epoch: int) -> ErrorCode:
        """KIP-320 fencing: a client that knows a newer/older epoch than ours gets told so."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return ErrorCode.NONE
        if current_leader_epoch < self.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        return ErrorCode.UNKNOWN_LEADER_EPOCH

    def append_records_to_leader(self, records: memoryview, required_acks: int,
                                 checked: list[CheckedBatch] | None = None) -> LogAppendInfo:
        """Append one batch; returns the log's LogAppendInfo. ``checked``: the validator's phase 1,
        already run by a worker (``log.validator.check_batches``), or None to run it here."""
        if self.is_offline:
            raise KafkaStorageError(f"the log of {self.topic}-{self.partition} is offline")
        if required_acks == -1 and self.isr_size < self.min_insync_replicas:
            raise KafkaError(
                f"The size of the current ISR {self.isr_size} is insufficient to satisfy the min.isr "
                f"requirement of {self.min_insync_replicas} for partition {self.topic}-{self.partition}",
                error_code=ErrorCode.NOT_ENOUGH_REPLICAS,
            )
        if checked is None:
            info = self.log.append_as_leader(records, leader_epoch=self.leader_epoch)
        else:
            info = self.log.append_as_leader(records, leader_epoch=self.leader_epoch, checked=checked)
        self.maybe_increment_high_watermark()
        return info

    def read(self, fetch_offset: int, max_bytes: int, isolation_level: int, min_one_message: bool) -> ReadInfo:
        """Read from `fetch_offset` up to the fetchable end (HW / LSO) as a file region."""
        hw = self.high_watermark
        lso = self.last_stable_offset
        data = self.log.read(
            fetch_offset,
            max_bytes,
            max_offset=lso if isolation_level == READ_COMMITTED else hw,
            min_one_message=min_one_message,
        )
        region = data.region
        size = 0 if region is None else region.size
        # No transactions yet: read_committed gets an empty aborted list, read_uncommitted none.
        aborted: list[tuple[int, int]] | None = [] if isolation_level == READ_COMMITTED else None
        return ReadInfo(region if size else None, size, hw, lso, self.log_start_offset, aborted)

    def fetch_offset_for_timestamp(self, timestamp: int, isolation_level: int | None) -> tuple[int, int, int] | None:
        """(offset, timestamp, leader epoch) for a ListOffsets query, or None when there is no answer."""
        if isolation_level is None:  # debug/follower: up to the log end
            last_fetchable = self.log_end_offset
        else:
            last_fetchable = self.fetchable_end(isolation_level)
        if timestamp == -1:  # LATEST
            return last_fetchable, -1, self.leader_epoch
        if timestamp == -5:  # LATEST_TIERED: Kafka answers -1/-1 when remote storage is off
            return -1, -1, -1
        # -2 EARLIEST and -4 EARLIEST_LOCAL (the same without tiered storage), -3 MAX_TIMESTAMP and
        # timestamps are the log's lookups.
        found = self.log.fetch_offset_by_timestamp(timestamp)
        if found is None:
            return None
        offset, ts, epoch = found
        if timestamp in (-2, -4):
            return offset, ts, epoch
        if timestamp == -3:
            # Kafka answers max-timestamp from the whole log (KIP-734), -1 when the log is empty.
            return (offset, ts, epoch) if offset >= 0 else None
        # Kafka only answers with offsets a consumer can read (below HW / LSO).
        if offset >= last_fetchable:
            return None
        return offset, ts, epoch
