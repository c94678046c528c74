"""One hosted topic-partition: its log, leader epoch, ISR and high watermark (Kafka's `Partition`).

A partition is either the leader here or a follower. As leader it keeps one `ReplicaState` per
remote replica (the follower's log end offset, when it last caught up, its broker epoch), updated
from the follower's Fetch requests; the high watermark is the smallest log end offset of the
maximal ISR (Kafka's `maybeIncrementLeaderHW`); the ISR shrinks when a follower has not caught up
for `replica.lag.time.max.ms` and expands when it reaches the high watermark, each change proposed
to the controller through AlterPartition (KIP-497). As follower it appends what the leader sent
(offsets and leader epochs kept, the epoch cache and the producer state updated) and takes
HW = min(leader HW, own LEO).

Sans-IO: the ISR changes are decided here and returned as `AlterPartitionItem`s; the replica
manager sends them (`AlterPartitionManager`) and hands the answer back to
`handle_alter_partition_response`. The clock is passed in.

KIP-497 ISR states (Kafka's `PartitionState`): committed (`isr`), or an update in flight: an
expansion counts the new replica in the *maximal* ISR at once (the high watermark waits for it, so
acks=all never loses it whichever way the controller decides), a shrink keeps the old, larger ISR
as maximal until the controller commits. While an update is in flight no other is proposed. A
response applies only if it matches the in-flight proposal, carries our leader epoch and a
partition epoch not older than ours (partition-epoch fencing, KIP-497/KIP-841).

KIP-704 leader recovery: after an unclean election the controller marks the partition RECOVERING
(ISR = the new leader alone). Kafka's leader "recovers" at once -- there is nothing to recover in its
log today -- and marks itself RECOVERED in `makeLeader`; every AlterPartition it sends carries
RECOVERED, so its first ISR expansion moves the controller's state to RECOVERED (the controller
refuses an ISR of more than one while RECOVERING, and RECOVERED -> RECOVERING). Followers keep the
state of the registration. kbroker does the same (`leader_recovery_state`).

Must not import net/ or api/.
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from kbroker.log.errors import KafkaStorageError
from kbroker.log.results import LogAppendInfo
from kbroker.log.unified_log import UnifiedLog
from kbroker.log.validator import CheckedBatch
from kbroker.metrics.meters import TopicMetrics
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.regions import FileRegion

# FetchRequest isolation levels, plus Kafka's FetchIsolation.LOG_END for follower fetches (never on
# the wire: a fetch carrying a replica id reads up to the log end offset).
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
FETCH_LOG_END = 2

UNKNOWN_OFFSET = -1

# Kafka's LeaderRecoveryState (KIP-704), as on the wire (the metadata package's enum lives above replica/).
RECOVERED = 0
RECOVERING = 1

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ReadInfo:
    """What a read returned: record parts (FileRegions) and their total size."""

    records: FileRegion | None
    size: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: list[tuple[int, int]] | None = None


@dataclass(slots=True)
class ReplicaState:
    """What the leader knows of one follower (Kafka's `Replica` / `ReplicaState`)."""

    broker_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    last_caught_up_time_ms: int = 0
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_time_ms: int = 0
    broker_epoch: int = -1

    def is_caught_up(self, leader_end_offset: int, now_ms: int, max_lag_ms: int) -> bool:
        """Kafka's `ReplicaState.isCaughtUp`: at the leader's LEO, or caught up within the lag bound."""
        return leader_end_offset == self.log_end_offset or now_ms - self.last_caught_up_time_ms <= max_lag_ms

    def update_fetch_state(self, fetch_offset: int, log_start_offset: int, fetch_time_ms: int,
                           leader_end_offset: int, broker_epoch: int) -> None:
        """Kafka's `Replica.updateFetchStateOrThrow`. The follower caught up at this fetch if it asked
        for the leader's LEO; it caught up at the *previous* fetch if it now asks for at least the LEO
        the leader had then (KAFKA-7027's rule: a follower that keeps up with a busy leader is never
        exactly at the LEO, but is always past where the leader was one fetch ago)."""
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, fetch_time_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.log_end_offset = fetch_offset
        self.log_start_offset = log_start_offset
        self.last_fetch_leader_log_end_offset = leader_end_offset
        self.last_fetch_time_ms = fetch_time_ms
        self.broker_epoch = broker_epoch

    def reset(self, now_ms: int, leader_end_offset: int, is_new_leader: bool, in_sync: bool) -> None:
        """Kafka's `resetReplicaState` on becoming (or staying) leader: an ISR member counts as caught
        up now, any other as never (so it does not hold the high watermark back)."""
        self.last_caught_up_time_ms = now_ms if in_sync else 0
        if is_new_leader:
            self.log_end_offset = UNKNOWN_OFFSET
            self.log_start_offset = UNKNOWN_OFFSET
            self.last_fetch_leader_log_end_offset = UNKNOWN_OFFSET
            self.last_fetch_time_ms = 0
            self.broker_epoch = -1
        else:
            self.last_fetch_leader_log_end_offset = leader_end_offset
            self.last_fetch_time_ms = now_ms


class IsrChange(enum.Enum):
    EXPAND = "expand"
    SHRINK = "shrink"


@dataclass(frozen=True, slots=True)
class AlterPartitionItem:
    """One proposed ISR change (a partition's entry of an AlterPartition request)."""

    topic: str
    partition: int
    topic_id: uuid.UUID
    leader_id: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]
    # (broker id, broker epoch) per ISR member, AlterPartition v3+ (KIP-903); -1: unknown.
    new_isr_with_epochs: tuple[tuple[int, int], ...]
    change: IsrChange
    leader_recovery_state: int = 0


@dataclass(frozen=True, slots=True)
class AlterPartitionResult:
    """The controller's answer for one partition (AlterPartitionResponse.PartitionData)."""

    error: ErrorCode
    leader_id: int = -1
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    partition_epoch: int = -1
    leader_recovery_state: int = 0


@dataclass(slots=True)
class IsrState:
    """Kafka's `PartitionState`: the committed ISR and, while an AlterPartition is in flight, the
    proposal and the maximal ISR the high watermark is computed over."""

    isr: frozenset[int]
    pending: AlterPartitionItem | None = None
    maximal_isr: frozenset[int] = field(default=frozenset())

    @staticmethod
    def committed(isr: frozenset[int]) -> IsrState:
        return IsrState(isr, None, isr)

    @property
    def is_inflight(self) -> bool:
        return self.pending is not None


def compute_high_watermark(leader_end_offset: int, remote: dict[int, ReplicaState], maximal_isr: frozenset[int],
                           now_ms: int, max_lag_ms: int, is_eligible: Callable[[int], bool]) -> int:
    """Kafka's `maybeIncrementLeaderHW` candidate: the smallest LEO among the maximal ISR, and among
    caught-up eligible replicas about to join it (so the HW never passes a replica the ISR is about
    to count). An unknown LEO (-1) holds the candidate at -1: the caller never moves the HW down."""
    hw = leader_end_offset
    for replica in remote.values():
        waits_to_join = replica.is_caught_up(leader_end_offset, now_ms, max_lag_ms) and is_eligible(replica.broker_id)
        if replica.log_end_offset < hw and (replica.broker_id in maximal_isr or waits_to_join):
            hw = replica.log_end_offset
    return hw


def out_of_sync_replicas(isr: frozenset[int], local_id: int, remote: dict[int, ReplicaState],
                         leader_end_offset: int, now_ms: int, max_lag_ms: int) -> set[int]:
    """Kafka's `getOutOfSyncReplicas`: ISR followers that have not caught up within `max_lag_ms`
    (either stuck, or fetching but never reaching the leader's LEO)."""
    out = set()
    for rid in isr:
        if rid == local_id:
            continue
        state = remote.get(rid)
        if state is None or not state.is_caught_up(leader_end_offset, now_ms, max_lag_ms):
            out.add(rid)
    return out


def follower_in_sync(follower_end_offset: int, high_watermark: int, leader_epoch_start_offset: int) -> bool:
    """Kafka's `isFollowerInSync`: caught up to the high watermark, and past the start of the current
    leader epoch (so a follower never joins the ISR before it has at least this leader's first offset)."""
    return follower_end_offset >= high_watermark and follower_end_offset >= leader_epoch_start_offset


class Partition:
    """A topic-partition this broker hosts, as leader or follower."""

    __slots__ = ("topic", "partition", "topic_id", "log", "leader_epoch", "partition_epoch", "local_id",
                 "replicas", "isr_state", "remote_replicas", "key", "leader_id", "leader_epoch_start_offset",
                 "time_ms", "replica_lag_time_max_ms", "is_replica_eligible", "local_broker_epoch", "topic_stats",
                 "leader_recovery_state")

    def __init__(self, topic: str, partition: int, topic_id: uuid.UUID, log: UnifiedLog, leader_epoch: int = 0,
                 local_id: int = 1, replicas: tuple[int, ...] = (), *, time_ms: Callable[[], int] | None = None,
                 replica_lag_time_max_ms: int = 30000,
                 is_replica_eligible: Callable[[int, int], bool] | None = None,
                 local_broker_epoch: Callable[[], int] | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.log = log
        self.leader_epoch = leader_epoch
        self.local_id = local_id
        # No role until make_leader / make_follower (-1: Kafka's leaderReplicaIdOpt = None).
        self.leader_id = -1
        self.replicas = replicas or (local_id,)
        self.isr_state = IsrState.committed(frozenset(self.replicas))
        self.remote_replicas: dict[int, ReplicaState] = {
            r: ReplicaState(r) for r in self.replicas if r != local_id}
        self.key = (topic, partition)
        self.partition_epoch = 0
        self.leader_epoch_start_offset = UNKNOWN_OFFSET
        self.time_ms: Callable[[], int] = time_ms or log._time
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        # (broker id, broker epoch from its fetch; -1 unknown) -> may it join the ISR (registered,
        # unfenced, not shutting down, the epoch it registered with: KIP-903).
        self.is_replica_eligible: Callable[[int, int], bool] = is_replica_eligible or (lambda _b, _e: True)
        self.local_broker_epoch: Callable[[], int] = local_broker_epoch or (lambda: -1)
        # The topic's BrokerTopicMetrics, bound by the replica manager when it hosts the partition
        # (None: metrics off), so the data path records without a lookup.
        self.topic_stats: TopicMetrics | None = None
        # KIP-704: RECOVERED once led here; a follower keeps the registration's.
        self.leader_recovery_state = RECOVERED

    def __repr__(self) -> str:
        role = "leader" if self.is_leader else f"follower of {self.leader_id}"
        return f"Partition({self.topic}-{self.partition}, {role}, epoch={self.leader_epoch})"

    # -- offsets -------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_id

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

    @property
    def isr(self) -> frozenset[int]:
        """The committed ISR (what min.insync.replicas is checked against)."""
        return self.isr_state.isr

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.isr_state.maximal_isr

    def fetchable_end(self, isolation_level: int) -> int:
        """The exclusive upper bound a read may reach: LEO for followers, the HW (or the LSO for
        read_committed) for consumers."""
        if isolation_level == FETCH_LOG_END:
            return self.log_end_offset
        return self.last_stable_offset if isolation_level == READ_COMMITTED else self.high_watermark

    @property
    def min_insync_replicas(self) -> int:
        return self.log.config.min_insync_replicas

    @property
    def isr_size(self) -> int:
        return len(self.isr_state.isr)

    # -- health, as Kafka's Partition gauges read it (kafka.cluster:type=Partition) ---------------

    @property
    def effective_min_isr(self) -> int:
        """Kafka's `effectiveMinIsr`: min(min.insync.replicas, replication factor) -- a min.insync.replicas
        above the replica count would otherwise mark the partition under-min-ISR for ever."""
        return min(self.min_insync_replicas, len(self.remote_replicas) + 1)

    @property
    def is_under_replicated(self) -> bool:
        """Kafka's `isUnderReplicated`: led here and the committed ISR is smaller than the replica set."""
        return self.is_leader and not self.is_offline and len(self.replicas) - self.isr_size > 0

    @property
    def is_under_min_isr(self) -> bool:
        """Kafka's `isUnderMinIsr`: led here and the committed ISR is below the effective min ISR."""
        return self.is_leader and not self.is_offline and self.isr_size < self.effective_min_isr

    @property
    def is_at_min_isr(self) -> bool:
        """Kafka's `isAtMinIsr`: led here and the committed ISR is exactly the effective min ISR (one
        more failure and acks=all producers are refused)."""
        return self.is_leader and not self.is_offline and self.isr_size == self.effective_min_isr

    # -- becoming leader / follower ------------------------------------------------------------

    def make_leader(self, leader_epoch: int, partition_epoch: int, replicas: tuple[int, ...],
                    isr: tuple[int, ...], leader_recovery_state: int = RECOVERED) -> bool:
        """Kafka's `Partition.makeLeader`: take the registration's epochs, replicas and ISR (clearing
        any AlterPartition in flight: the registration is newer), record where the new leader epoch
        starts in the epoch cache (so a follower with entries of a later, lost epoch can still find
        its truncation point), and reset the followers' states. Returns True on a new leader epoch.

        A registration older than what this leader already applied (an AlterPartition answer can
        arrive before the metadata record it produced) is skipped, as Kafka does."""
        is_new_leader = not self.is_leader
        is_new_epoch = leader_epoch > self.leader_epoch or is_new_leader
        if not is_new_leader and leader_epoch == self.leader_epoch and partition_epoch < self.partition_epoch:
            return False
        now = self.time_ms()
        if leader_recovery_state == RECOVERING:
            # KIP-704: elected uncleanly. Kafka's recovery is immediate (nothing in the log to redo);
            # the next AlterPartition tells the controller RECOVERED.
            log.info("The topic partition %s-%d was marked as RECOVERING. Marking the topic partition as "
                     "RECOVERED.", self.topic, self.partition)
        self.leader_recovery_state = RECOVERED
        self.leader_id = self.local_id
        self.replicas = tuple(replicas) or (self.local_id,)
        self.isr_state = IsrState.committed(frozenset(isr) or frozenset({self.local_id}))
        self.partition_epoch = partition_epoch
        self.remote_replicas = {r: self.remote_replicas.get(r) or ReplicaState(r)
                                for r in self.replicas if r != self.local_id}
        if is_new_epoch:
            self.leader_epoch = leader_epoch
            self.leader_epoch_start_offset = self.log_end_offset
            if not self.log.offline and leader_epoch > self.log.leader_epoch_cache.latest_epoch:
                # No fsync here (KAFKA-15046): the log's next flush with data syncs it.
                self.log.leader_epoch_cache.assign(leader_epoch, self.log_end_offset, sync=False)
        for replica in self.remote_replicas.values():
            replica.reset(now, self.leader_epoch_start_offset, is_new_epoch, replica.broker_id in self.isr)
        # The ISR may be down to the leader: the high watermark may move at once.
        self.maybe_increment_high_watermark()
        return is_new_epoch

    def make_follower(self, leader_id: int, leader_epoch: int, partition_epoch: int, replicas: tuple[int, ...],
                      isr: tuple[int, ...], leader_recovery_state: int = RECOVERED) -> bool:
        """Kafka's `Partition.makeFollower`: forget the followers' states, take the new leader and
        epochs. The log is not truncated here: the fetcher truncates by leader epoch (KIP-101/KIP-279)
        once it reaches the leader. Returns True when the leader epoch is new (or the leader changed),
        i.e. the fetcher must restart."""
        new = leader_epoch > self.leader_epoch or leader_id != self.leader_id
        self.leader_recovery_state = leader_recovery_state
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = tuple(replicas)
        self.isr_state = IsrState.committed(frozenset(isr))
        self.remote_replicas = {}
        self.leader_epoch_start_offset = UNKNOWN_OFFSET
        return new

    # -- the high watermark --------------------------------------------------------------------

    def _eligible(self, broker_id: int) -> bool:
        state = self.remote_replicas.get(broker_id)
        return self.is_replica_eligible(broker_id, -1 if state is None else state.broker_epoch)

    def maybe_increment_high_watermark(self) -> bool:
        """HW = the smallest log end offset of the maximal ISR (the LEO with one replica). Returns
        True if it moved (Kafka's maybeIncrementLeaderHW); it never moves back."""
        plog = self.log
        if self.leader_id != self.local_id or plog.offline:
            return False
        # Kafka 4.3 (KAFKA-15583, KIP-966): the HW does not advance while the ISR is below the
        # effective min ISR (`is_under_min_isr`, spelled out: this runs after every append), so
        # nothing written then is exposed (or acknowledged to acks=all) before enough replicas have it.
        remote = self.remote_replicas
        if len(self.isr_state.isr) < min(plog.config.min_insync_replicas, len(remote) + 1):
            return False
        if remote:
            new_hw = compute_high_watermark(plog.log_end_offset, remote, self.isr_state.maximal_isr,
                                            self.time_ms(), self.replica_lag_time_max_ms, self._eligible)
        else:
            new_hw = plog.log_end_offset  # a single replica: no clock, no follower to wait for
        if new_hw > plog.high_watermark:
            plog.update_high_watermark(new_hw)
            return True
        return False

    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int, log_start_offset: int = -1,
                                    broker_epoch: int = -1) -> bool:
        """A follower fetched at `fetch_offset` (its LEO). Returns True if the high watermark moved.
        An ISR expansion this makes possible is returned by `maybe_expand_isr` (called after)."""
        state = self.remote_replicas.get(replica_id)
        if state is None:
            return False
        state.update_fetch_state(fetch_offset, log_start_offset, self.time_ms(), self.log_end_offset, broker_epoch)
        return self.maybe_increment_high_watermark()

    # -- ISR changes (sans-IO: proposals out, answers in) -----------------------------------------

    def _proposal(self, new_isr: frozenset[int], change: IsrChange) -> AlterPartitionItem:
        members = tuple(sorted(new_isr))
        with_epochs = tuple(
            (b, self.local_broker_epoch() if b == self.local_id
             else (self.remote_replicas[b].broker_epoch if b in self.remote_replicas else -1))
            for b in members)
        # Always RECOVERED: a leader has recovered by the time it proposes anything (KIP-704).
        return AlterPartitionItem(self.topic, self.partition, self.topic_id, self.local_id, self.leader_epoch,
                                  self.partition_epoch, members, with_epochs, change, RECOVERED)

    def maybe_expand_isr(self, replica_id: int) -> AlterPartitionItem | None:
        """Kafka's `maybeExpandIsr`: a follower outside the ISR that reached the high watermark (and
        the current epoch's start) joins it, through AlterPartition. The maximal ISR counts it at once."""
        if not self.is_leader or self.isr_state.is_inflight or replica_id in self.isr_state.isr:
            return None
        state = self.remote_replicas.get(replica_id)
        if state is None or not self.is_replica_eligible(replica_id, state.broker_epoch):
            return None
        if not follower_in_sync(state.log_end_offset, self.high_watermark, self.leader_epoch_start_offset):
            return None
        new_isr = self.isr_state.isr | {replica_id}
        item = self._proposal(new_isr, IsrChange.EXPAND)
        self.isr_state = IsrState(self.isr_state.isr, item, new_isr)
        return item

    def maybe_shrink_isr(self) -> AlterPartitionItem | None:
        """Kafka's `maybeShrinkIsr` (the isr-expiration task): drop followers that have not caught up
        for `replica.lag.time.max.ms`. The maximal ISR stays the old, larger one until committed."""
        if not self.is_leader or self.isr_state.is_inflight or self.log.offline:
            return None
        out = out_of_sync_replicas(self.isr_state.isr, self.local_id, self.remote_replicas, self.log_end_offset,
                                   self.time_ms(), self.replica_lag_time_max_ms)
        if not out:
            return None
        new_isr = self.isr_state.isr - out
        item = self._proposal(new_isr, IsrChange.SHRINK)
        self.isr_state = IsrState(self.isr_state.isr, item, self.isr_state.isr)
        return item

    def handle_alter_partition_response(self, item: AlterPartitionItem, result: AlterPartitionResult) -> bool:
        """Apply the controller's answer to `item`. Returns True when the proposal should be sent again
        (an unexpected error); False otherwise. Kafka's `handleAlterPartitionUpdate` /
        `handleAlterPartitionError`:

        - NONE: applies if `item` is still the proposal in flight, the answer's leader epoch is ours
          and its partition epoch is not older than ours: committed ISR = the answer's, partition
          epoch = the answer's (a stale answer is ignored: partition-epoch fencing).
        - OPERATION_NOT_ATTEMPTED, INELIGIBLE_REPLICA: the controller says it did not apply it and our
          partition epoch is right: back to the last committed ISR (a later fetch may try again).
        - FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, UNKNOWN_TOPIC_OR_PARTITION, NEW_LEADER_ELECTED,
          INVALID_REQUEST: stay pending until the metadata (a newer registration) resets the state.
        - anything else: retry.
        """
        if self.isr_state.pending is not item:
            return False  # superseded: a metadata update (or another answer) came first
        error = result.error
        if error == ErrorCode.NONE:
            if result.leader_epoch != self.leader_epoch or result.partition_epoch < self.partition_epoch:
                return False  # fenced or stale: wait for the metadata
            self.isr_state = IsrState.committed(frozenset(result.isr))
            self.partition_epoch = result.partition_epoch
            return False
        if error in (ErrorCode.OPERATION_NOT_ATTEMPTED, ErrorCode.INELIGIBLE_REPLICA):
            self.isr_state = IsrState.committed(self.isr_state.isr)
            return False
        if error in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.FENCED_LEADER_EPOCH,
                     ErrorCode.INVALID_UPDATE_VERSION, ErrorCode.NEW_LEADER_ELECTED, ErrorCode.INVALID_REQUEST,
                     ErrorCode.INVALID_REPLICA_ASSIGNMENT):
            return False
        return True

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
        already run by a worker (``log.validator.check_batches``), or None to run it here.

        acks=all with a committed ISR smaller than the effective min ISR (min(`min.insync.replicas`,
        replicas)) is refused before the append (NOT_ENOUGH_REPLICAS), as Kafka's `appendRecordsToLeader`."""
        plog = self.log
        if plog.offline:
            raise KafkaStorageError(f"the log of {self.topic}-{self.partition} is offline")
        if self.leader_id != self.local_id:
            raise KafkaError(f"{self.topic}-{self.partition} is not led here",
                             error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if required_acks == -1 and self.isr_size < self.effective_min_isr:
            raise KafkaError(
                f"The size of the current ISR {set(self.isr)} is insufficient to satisfy the min.isr "
                f"requirement of {self.effective_min_isr} for partition {self.topic}-{self.partition}",
                error_code=ErrorCode.NOT_ENOUGH_REPLICAS,
            )
        info = plog.append_as_leader(records, self.leader_epoch, checked=checked)
        self.maybe_increment_high_watermark()
        return info

    def append_txn_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                          commit: bool, transaction_version: int = 0) -> LogAppendInfo:
        """Append a COMMIT/ABORT transaction marker as the leader (WriteTxnMarkers; Kafka's
        appendRecordsToLeader with the coordinator origin)."""
        if self.is_offline:
            raise KafkaStorageError(f"the log of {self.topic}-{self.partition} is offline")
        if not self.is_leader:
            raise KafkaError(f"{self.topic}-{self.partition} is not led here",
                             error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER)
        info = self.log.append_txn_marker(producer_id, producer_epoch, coordinator_epoch, commit, self.leader_epoch,
                                          transaction_version=transaction_version)
        self.maybe_increment_high_watermark()
        return info

    def check_enough_replicas_reach_offset(self, required_offset: int) -> tuple[bool, ErrorCode]:
        """Kafka's `checkEnoughReplicasReachOffset` for DelayedProduce: done when the HW passed the
        batch; NOT_ENOUGH_REPLICAS_AFTER_APPEND if the maximal ISR is below the effective min ISR by then.
        (The HW itself does not advance under min ISR, so a batch appended before a shrink below it
        waits -- and times out -- unless the ISR grows back.)"""
        if not self.is_leader:
            return True, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.high_watermark >= required_offset:
            if self.effective_min_isr <= len(self.maximal_isr):
                return True, ErrorCode.NONE
            return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return False, ErrorCode.NONE

    def append_records_to_follower(self, records: memoryview, leader_high_watermark: int,
                                   leader_log_start_offset: int) -> LogAppendInfo:
        """Kafka's `appendRecordsToFollowerOrFutureReplica` + `ReplicaFetcherThread.processPartitionData`:
        append the leader's batches as written (offsets, leader epochs, producer ids: the epoch cache
        and the producer state follow), then HW = min(leader HW, LEO)."""
        if self.is_offline:
            raise KafkaStorageError(f"the log of {self.topic}-{self.partition} is offline")
        info = self.log.append_as_follower(records)
        self.update_follower_high_watermark(leader_high_watermark, leader_log_start_offset)
        return info

    def update_follower_high_watermark(self, leader_high_watermark: int, leader_log_start_offset: int = -1) -> None:
        """HW = min(leader HW, own LEO); the log start offset follows the leader's (retention or
        DeleteRecords there: Kafka's `maybeIncrementLogStartOffset(LeaderOffsetIncremented)`), never past the HW."""
        hw = min(leader_high_watermark, self.log_end_offset)
        if hw > self.log.high_watermark:
            self.log.update_high_watermark(hw)
        if self.log.log_start_offset < leader_log_start_offset <= self.log.high_watermark:
            self.log.delete_records_before(leader_log_start_offset)

    def truncate_to(self, offset: int) -> None:
        """Truncate the follower's log (divergence found by leader epoch); the HW never passes the LEO."""
        self.log.truncate_to(offset)

    def read(self, fetch_offset: int, max_bytes: int, isolation_level: int, min_one_message: bool) -> ReadInfo:
        """Read from `fetch_offset` up to the fetchable end (HW / LSO / LEO) as a file region."""
        hw = self.high_watermark
        lso = self.last_stable_offset
        data = self.log.read(
            fetch_offset,
            max_bytes,
            max_offset=self.fetchable_end(isolation_level),
            min_one_message=min_one_message,
        )
        region = data.region
        size = 0 if region is None else region.size
        # read_committed gets the aborted transactions overlapping what it may read (Kafka's
        # collectAbortedTxns up to the LSO); the other isolation levels none.
        aborted: list[tuple[int, int]] | None = None
        if isolation_level == READ_COMMITTED:
            aborted = self.log.collect_aborted_transactions(fetch_offset, lso) if size else []
        return ReadInfo(region if size else None, size, hw, lso, self.log_start_offset, aborted)

    def _below_fetchable(self, timestamp: int, last_fetchable: int) -> tuple[int, int, int] | None:
        found = self.log.fetch_offset_by_timestamp(timestamp)
        return found if found is not None and found[0] < last_fetchable else None

    def fetch_offset_for_timestamp(self, timestamp: int, isolation_level: int | None) -> tuple[int, int, int] | None:
        """(offset, timestamp, leader epoch) for a ListOffsets query, or None when there is no answer."""
        if isolation_level is None:  # debug/follower: up to the log end
            last_fetchable = self.log_end_offset
        else:
            last_fetchable = self.fetchable_end(isolation_level)
        # Kafka's fetchOffsetForTimestamp: a client asking a new leader whose high watermark has not yet
        # reached the start of its leader epoch gets OFFSET_NOT_AVAILABLE (and retries), never an offset
        # below what the previous leader already exposed -- "latest" must not go backwards across a
        # leader change (a Spark query would see lost data).
        lagging = (isolation_level is not None and self.is_leader
                   and self.leader_epoch_start_offset > self.high_watermark)
        if lagging and (timestamp == -1 or (timestamp >= 0 and self._below_fetchable(timestamp, last_fetchable)
                                            is None)):
            raise KafkaError(
                f"Failed to fetch offsets for partition {self.topic}-{self.partition} with leader epoch "
                f"{self.leader_epoch} as this partition's high watermark ({self.high_watermark}) is lagging "
                f"behind the start offset from the beginning of this epoch ({self.leader_epoch_start_offset}).",
                error_code=ErrorCode.OFFSET_NOT_AVAILABLE)
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
