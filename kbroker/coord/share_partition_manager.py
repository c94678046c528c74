"""The broker's share partitions and share sessions: Kafka's `SharePartitionManager` (KIP-932).

What ShareFetch and ShareAcknowledge call. It owns one `SharePartition` (sans-IO,
`kbroker.coord.share_partition`) per (share group, topic partition) this broker leads, created on the
first fetch of it, and the `ShareSessionCache` (`kbroker.coord.share_session`). A fetch reads the log
through the replica manager (like a consumer fetch, up to the high watermark), acquires the available
records it read for the member and returns whole batches with the acquired offset ranges; the client
keeps only the acquired records.

Initialization (Kafka's SharePartition.initialize): a new share-partition starts at the log's high
watermark (`share.auto.offset.reset=latest`, Kafka's default), its log start offset (`earliest`) or the
first offset whose timestamp is at or after now minus the duration (`by_duration:<ISO duration>`), per
group. Records before the log start offset are forgotten when retention passes them.

Group configs (the GROUP config resource, `kbroker.coord.group_config`): a share-partition runs with
its group's `share.record.lock.duration.ms`, `share.delivery.count.limit` and
`share.partition.max.record.locks` (over the broker's `group.share.*` keys, clamped into the broker's
min/max bounds), read from the metadata image each time the partition is used, so an altered config
applies to the next acquisition, as in Kafka's SharePartition (which asks its GroupConfigManager).

Acquisition locks expire when anything touches the share-partition (a fetch, an acknowledgement, a
waiting fetch's lock-deadline timer) at or after their deadline, so an expired record is handed to the
next member that fetches. A member leaving the group, closing its share session, or losing the connection
that opened it (Kafka's share session disconnect listener) releases its records.

Waiting fetches (Kafka's DelayedShareFetch, `kbroker.coord.delayed_share_fetch`) sit in
`delayed_share_fetch_purgatory`: the replica manager's partition events reach them through
`on_partition_event`, and every durable change of a share-partition (`_persist`: releases, expiries,
acknowledgements, start moves) wakes the ones watching it, on the next loop turn.

Metrics (`kbroker.metrics.meters.SHARE_GROUP_METRICS`, Kafka's ShareGroupMetrics): records acknowledged
per type, share-partition load time; per share-partition lock timeouts in `lock_timeouts`.

Durability: with a persister (the share coordinator, `kbroker.coord.share_coordinator`), a new
share-partition first reads its state (start offset, in-flight states and delivery counts) and, when it
has none, writes its initial state; every change of its durable state (acknowledgements, releases, lock
expiries, the start offset moving) is written before the request that caused it is answered. While the
state topic is created or loaded, the partition is skipped by fetches (they find nothing and retry).
Acquisition locks are not durable: records ACQUIRED at a crash are AVAILABLE again after it, with the
delivery count of their last write.

Must not import kbroker.net or kbroker.api.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from kbroker.coord.group_config import GroupConfig, parse_auto_offset_reset
from kbroker.coord.share_coordinator import SharePartitionKey, SharePartitionState, StateBatch
from kbroker.coord.share_fenced import watch_write
from kbroker.coord.share_partition import (
    AcknowledgementBatch,
    AcknowledgeType,
    AcquiredRange,
    RecordState,
    SharePartition,
    SharePartitionConfig,
)
from kbroker.coord.share_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    ShareSession,
    ShareSessionCache,
    TopicIdPartition,
)
from kbroker.metadata.image import ConfigResource, ConfigResourceType
from kbroker.metrics.meters import SHARE_GROUP_METRICS
from kbroker.protocol.errors import ErrorCode
from kbroker.replica.partition import READ_COMMITTED, READ_UNCOMMITTED
from kbroker.replica.purgatory import DelayedOperationPurgatory

if TYPE_CHECKING:
    from kbroker.config import KafkaConfig
    from kbroker.metadata.cache import MetadataCache
    from kbroker.replica.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

_NO_OVERRIDES: Mapping[str, str] = {}
# Bytes read per partition and fetch at most (a fetch's MaxBytes bounds the total).
PARTITION_READ_BYTES = 1024 * 1024
_BATCH_HEADER = 61
_TRANSACTIONAL = 0x10  # record batch attributes
_CONTROL = 0x20


class SharePersister(Protocol):
    """Where share-partition state is kept (Kafka's Persister): the share coordinator."""

    def read_state(self, key: SharePartitionKey, leader_epoch: int = -1
                   ) -> tuple[ErrorCode, SharePartitionState | None]: ...

    def write_state(self, key: SharePartitionKey, state: SharePartitionState) -> ErrorCode: ...

    def write_completion(self, key: SharePartitionKey) -> Awaitable[ErrorCode] | None:
        """The pending write of the share-partition's latest state (None: nothing to wait for)."""
        ...

    def forget(self, key: SharePartitionKey) -> None:
        """This broker's leadership of the share-partition's topic partition changed."""
        ...

    def delete_state(self, key: SharePartitionKey) -> ErrorCode: ...

    def state_keys(self, group_id: str) -> list[SharePartitionKey]: ...

    def delete_states(self, group_id: str) -> None: ...


@dataclass(slots=True)
class SharePartitionRequest:
    topic_id: uuid.UUID
    partition: int
    acknowledgements: list[AcknowledgementBatch] | None = None


@dataclass(slots=True)
class SharePartitionResult:
    topic_id: uuid.UUID
    partition: int
    error: ErrorCode = ErrorCode.NONE
    acknowledge_error: ErrorCode = ErrorCode.NONE
    records: bytes | None = None
    acquired: list[AcquiredRange] = field(default_factory=list)
    leader_epoch: int = -1
    acknowledged: bool = False  # the request acknowledged records of this partition


@dataclass(slots=True)
class ShareFetchOutcome:
    error: ErrorCode
    message: str | None = None
    partitions: dict[TopicIdPartition, SharePartitionResult] = field(default_factory=dict)
    session: ShareSession | None = None

    def acquired_any(self) -> bool:
        return any(r.acquired for r in self.partitions.values())


class SharePartitionManager:
    """Share partitions and share sessions of this broker."""

    def __init__(self, config: KafkaConfig, replica_manager: ReplicaManager | None, metadata: MetadataCache | None,
                 time_ms: Callable[[], int], persister: SharePersister | None = None) -> None:
        self.persister = persister
        self.replica_manager = replica_manager
        self.metadata = metadata
        self.time_ms = time_ms
        self.config = config
        self.sessions = ShareSessionCache(int(config["group.share.max.share.sessions"]))
        self.partitions: dict[tuple[str, uuid.UUID, int], SharePartition] = {}
        # The leader epoch of the topic partition each share-partition was initialized under: a
        # share-partition does not survive a change of leadership (the new leader reads the state).
        self._leader_epochs: dict[tuple[str, uuid.UUID, int], int] = {}
        # The state epoch of the state each share-partition was read from, written back with every state
        # (an AlterShareGroupOffsets on a cluster initializes a higher one: a leader still holding the
        # old state is fenced, FENCED_STATE_EPOCH, and reads it again).
        self._state_epochs: dict[tuple[str, uuid.UUID, int], int] = {}
        # group id -> (the overrides mapping it was evaluated from, its configs): the image's maps are
        # immutable and shared while unchanged, so an identical mapping means nothing to re-evaluate.
        self._group_configs: dict[str, tuple[Mapping[str, str], GroupConfig, SharePartitionConfig]] = {}
        # Kafka's delayedShareFetchPurgatory: ShareFetches waiting for records to acquire
        # (`kbroker.coord.delayed_share_fetch`), woken by `on_partition_event` and `wake`.
        self.delayed_share_fetch_purgatory: DelayedOperationPurgatory[ShareFetchOutcome] = (
            DelayedOperationPurgatory("ShareFetch"))
        self._woken: set[tuple[str, uuid.UUID, int]] = set()
        # Kafka's SharePartitionMetrics AcquisitionLockTimeoutPerSec, per share-partition.
        self.lock_timeouts: dict[tuple[str, uuid.UUID, int], int] = {}
        # When each share-partition's initialization was first tried (Kafka's PartitionLoadTimeMs).
        self._load_started: dict[tuple[str, uuid.UUID, int], float] = {}

    def _broker_value(self, key: str) -> object:
        return self.config[key] if key in self.config else None

    def _evaluated(self, group_id: str) -> tuple[GroupConfig, SharePartitionConfig]:
        overrides: Mapping[str, str] = self.metadata.image.configs.config_map(
            ConfigResource(ConfigResourceType.GROUP, group_id)) if self.metadata is not None else _NO_OVERRIDES
        cached = self._group_configs.get(group_id)
        if cached is not None and cached[0] is overrides:
            return cached[1], cached[2]
        gc = GroupConfig.evaluate(overrides, self._broker_value)
        pc = SharePartitionConfig(record_lock_duration_ms=gc.share_record_lock_duration_ms,
                                  delivery_count_limit=gc.share_delivery_count_limit,
                                  max_in_flight_records=gc.share_partition_max_record_locks,
                                  renew_acknowledge_enable=gc.share_renew_acknowledge_enable)
        self._group_configs[group_id] = (overrides, gc, pc)
        return gc, pc

    def group_config(self, group_id: str) -> GroupConfig:
        """The group's configs (its GROUP resource in the metadata image over the broker's keys)."""
        return self._evaluated(group_id)[0]

    def partition_config_for(self, group_id: str) -> SharePartitionConfig:
        return self._evaluated(group_id)[1]

    def record_lock_duration_ms(self, group_id: str) -> int:
        """`AcquisitionLockTimeoutMs` of a ShareFetch / ShareAcknowledge response: the group's lock duration."""
        return self.group_config(group_id).share_record_lock_duration_ms

    def _current(self, group_id: str, tid: uuid.UUID, p: int) -> SharePartition | None:
        """The share-partition, running with its group's current configs."""
        sp = self.partitions.get((group_id, tid, p))
        if sp is not None:
            sp.config = self.partition_config_for(group_id)
        return sp

    # -- ShareFetch / ShareAcknowledge -----------------------------------------------------------------

    def share_fetch(self, group_id: str, member_id: str, epoch: int, requested: list[SharePartitionRequest],
                    forgotten: list[TopicIdPartition], max_records: int, record_limit_mode: bool,
                    renew_only: bool, min_bytes: int = 1, connection_id: str = "") -> ShareFetchOutcome:
        """One ShareFetch: session, acknowledgements, then acquisition (once: a waiting fetch calls
        `acquire` again). With `min_bytes` above 1 (a fetch that may wait) nothing is acquired unless
        that much can be read (Kafka's DelayedShareFetch acquires only once MinBytes is satisfied)."""
        if not group_id:
            return ShareFetchOutcome(ErrorCode.INVALID_GROUP_ID, "The group id must not be empty.")
        if not member_id:
            return ShareFetchOutcome(ErrorCode.INVALID_REQUEST, "The member id must not be empty.")
        now = self.time_ms()
        if epoch == INITIAL_EPOCH:
            if any(r.acknowledgements for r in requested):
                return ShareFetchOutcome(ErrorCode.INVALID_REQUEST,
                                         "Acknowledge data present on initial share fetch request.")
            error, session, old = self.sessions.open(group_id, member_id, connection_id)
            if old is not None:
                self._release(group_id, member_id, list(old.partitions))
        else:
            error, session = self.sessions.get(group_id, member_id, epoch)
        if error != ErrorCode.NONE or session is None:
            return ShareFetchOutcome(error, error.message)
        outcome = ShareFetchOutcome(ErrorCode.NONE, session=session)
        for tp in forgotten:
            session.partitions.pop(tp, None)
        for r in requested:
            session.partitions[(r.topic_id, r.partition)] = None
        # Kafka acquires before the request's own acknowledgements take effect (their state changes
        # complete only once written to the share coordinator): a record this request releases is
        # acquired again by a later fetch, not by this one (checked against Kafka 4.3.1 in
        # tests/differential/test_share_groups_vs_kafka.py).
        # Acknowledgements of records delivered under an earlier leadership of the partition are refused
        # (NOT_LEADER_OR_FOLLOWER), also when this request's acquisition re-initialized the share-partition.
        stale = {(r.topic_id, r.partition) for r in requested if r.acknowledgements
                 and (group_id, r.topic_id, r.partition) in self.partitions
                 and not self._led_here(group_id, (r.topic_id, r.partition))}
        if epoch != FINAL_EPOCH and not renew_only \
                and (min_bytes <= 1 or self.acquirable_bytes(outcome, group_id) >= min_bytes):
            self.acquire(outcome, group_id, member_id, max_records, record_limit_mode)
        for r in requested:
            if r.acknowledgements:
                key = (r.topic_id, r.partition)
                result = outcome.partitions.setdefault(key, SharePartitionResult(r.topic_id, r.partition))
                result.acknowledged = True
                if key in stale:  # (the acquisition above dropped the share-partition, or _acknowledge does)
                    result.acknowledge_error = ErrorCode.NOT_LEADER_OR_FOLLOWER
                    if (group_id, *key) in self.partitions and not self._led_here(group_id, key):
                        self._drop(group_id, key[0], key[1])
                    continue
                result.acknowledge_error = self._acknowledge(group_id, member_id, key, r.acknowledgements, now)
        if epoch == FINAL_EPOCH:
            self._release(group_id, member_id, list(session.partitions))
            self.sessions.close(session)
            return outcome
        if epoch != INITIAL_EPOCH:
            self.sessions.advance(session)
        return outcome

    def share_acknowledge(self, group_id: str, member_id: str, epoch: int,
                          requested: list[SharePartitionRequest]) -> ShareFetchOutcome:
        if not group_id:
            return ShareFetchOutcome(ErrorCode.INVALID_GROUP_ID, "The group id must not be empty.")
        if not member_id:
            return ShareFetchOutcome(ErrorCode.INVALID_REQUEST, "The member id must not be empty.")
        if epoch == INITIAL_EPOCH:
            return ShareFetchOutcome(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                                     "Share session epoch 0 is not allowed in ShareAcknowledge.")
        error, session = self.sessions.get(group_id, member_id, epoch)
        if error != ErrorCode.NONE or session is None:
            return ShareFetchOutcome(error, error.message)
        now = self.time_ms()
        outcome = ShareFetchOutcome(ErrorCode.NONE, session=session)
        for r in requested:
            key = (r.topic_id, r.partition)
            result = outcome.partitions.setdefault(key, SharePartitionResult(r.topic_id, r.partition))
            result.acknowledged = True
            result.acknowledge_error = self._acknowledge(group_id, member_id, key, r.acknowledgements or [], now)
            result.error = result.acknowledge_error
        if epoch == FINAL_EPOCH:
            self._release(group_id, member_id, list(session.partitions))
            self.sessions.close(session)
        else:
            self.sessions.advance(session)
        return outcome

    def acquire(self, outcome: ShareFetchOutcome, group_id: str, member_id: str, max_records: int,
                record_limit_mode: bool) -> None:
        """Acquire available records of the session's partitions into `outcome` (at most `max_records`
        in all, 0: no limit)."""
        session = outcome.session
        if session is None:
            return
        now = self.time_ms()
        budget = max_records if max_records > 0 else 0
        for key in list(session.partitions):
            if max_records > 0 and budget <= 0:
                break
            result = outcome.partitions.get(key)
            if result is not None and (result.acquired or result.error != ErrorCode.NONE):
                continue
            error, records, ranges, epoch = self._acquire_partition(group_id, member_id, key, budget,
                                                                    record_limit_mode, now)
            if error == ErrorCode.NONE and not ranges:
                continue
            if result is None:
                result = outcome.partitions[key] = SharePartitionResult(key[0], key[1])
            result.error, result.records, result.acquired, result.leader_epoch = error, records, ranges, epoch
            if max_records > 0:
                budget -= sum(r.last_offset - r.first_offset + 1 for r in ranges)

    def pending_writes(self, group_id: str, keys: list[TopicIdPartition]
                       ) -> list[tuple[TopicIdPartition, Awaitable[ErrorCode]]]:
        """The state writes an acknowledgement of these share-partitions waits for before it is
        answered (a network persister's; the in-process share coordinator has none)."""
        if self.persister is None:
            return []
        out = []
        for tid, p in keys:
            pending = self.persister.write_completion((group_id, tid, p))
            if pending is not None:
                out.append(((tid, p), pending))
        return out

    # -- members ---------------------------------------------------------------------------------------

    def on_member_left(self, group_id: str, member_id: str) -> None:
        """The group coordinator removed the member (left or fenced): release its records, drop its session."""
        session = self.sessions.remove_member(group_id, member_id)
        keys = [(tid, p) for (g, tid, p) in self.partitions if g == group_id]
        released = self._release(group_id, member_id, keys)
        if released or session is not None:
            log.info("Released %d records of member %s of share group %s", released, member_id, group_id)

    def on_disconnect(self, connection_id: str) -> None:
        """A client connection closed (Kafka's ShareSessionCache disconnect listener): the share session it
        opened, if the client did not close it, goes and its member's records here are released
        (`onMemberLeave`); when the group has no session left on this broker, its share-partitions here
        are dropped (`onGroupEmpty`: the next use reads their state from the share coordinator again, so
        an AlterShareGroupOffsets or DeleteShareGroupOffsets meanwhile is seen)."""
        session, empty_group = self.sessions.disconnected(connection_id)
        if session is not None:
            released = self._release(session.group_id, session.member_id, list(session.partitions))
            log.info("Share session of member %s of group %s closed with its connection: %d records released",
                     session.member_id, session.group_id, released)
        if empty_group is not None:
            for g, tid, p in [k for k in self.partitions if k[0] == empty_group]:
                self._drop(g, tid, p)

    def on_state_changed(self, group_id: str, topic_id: uuid.UUID, partition: int) -> None:
        """The group coordinator initialized or deleted the share-partition's state at its share
        coordinator (Alter/DeleteShareGroupOffsets): what this broker holds of it is stale."""
        self._drop(group_id, topic_id, partition)

    def share_partition(self, group_id: str, topic_id: uuid.UUID, partition: int) -> SharePartition | None:
        return self.partitions.get((group_id, topic_id, partition))

    def offsets_summary(self, group_id: str, topic_id: uuid.UUID, partition: int) -> tuple[int, int, int] | None:
        """(start offset, leader epoch, lag) of an initialized share-partition, None if it is not
        (DescribeShareGroupOffsets). Lag (KIP-1226): the records from the start offset up to the high
        watermark not yet acknowledged or archived."""
        sp = self.partitions.get((group_id, topic_id, partition))
        if sp is None and self.persister is not None:
            error, state = self.persister.read_state((group_id, topic_id, partition))
            if error == ErrorCode.NONE and state is not None and state.start_offset >= 0:
                sp = SharePartition.from_state(state.start_offset, [
                    (b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in state.batches],
                    self.partition_config_for(group_id))
                return self._summary(sp, topic_id, partition)
        if sp is None:
            return None
        self._expire(group_id, topic_id, partition, sp, self.time_ms())
        return self._summary(sp, topic_id, partition)

    def _summary(self, sp: SharePartition, topic_id: uuid.UUID, partition: int) -> tuple[int, int, int]:
        info = self.metadata.topic_by_id(topic_id) if self.metadata is not None else None
        p = self.replica_manager.get_partition(info.name, partition) \
            if info is not None and self.replica_manager is not None else None
        if p is None:
            return sp.start_offset, -1, -1
        done = sum(1 for o in range(sp.start_offset, min(sp.next_offset, p.high_watermark))
                   if sp.state_of(o) in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED))
        return sp.start_offset, p.leader_epoch, max(0, p.high_watermark - sp.start_offset - done)

    def expire_locks(self) -> int:
        now = self.time_ms()
        expired = 0
        for (g, tid, p), sp in list(self.partitions.items()):
            n = sp.expire_locks(now)
            if n:
                self.lock_timeouts[(g, tid, p)] = self.lock_timeouts.get((g, tid, p), 0) + n
                self._persist(g, tid, p, sp)
            expired += n
        return expired

    # -- internals -------------------------------------------------------------------------------------

    def _release(self, group_id: str, member_id: str, keys: list[TopicIdPartition]) -> int:
        released = 0
        for tid, p in keys:
            sp = self.partitions.get((group_id, tid, p))
            if sp is not None:
                n = sp.release_member(member_id)
                if n:
                    self._persist(group_id, tid, p, sp)
                released += n
        return released

    def _expire(self, group_id: str, tid: uuid.UUID, p: int, sp: SharePartition, now: int) -> None:
        n = sp.expire_locks(now)
        if n:
            key = (group_id, tid, p)
            self.lock_timeouts[key] = self.lock_timeouts.get(key, 0) + n
            self._persist(group_id, tid, p, sp)

    # -- waiting ShareFetches (Kafka's DelayedShareFetch keys) -----------------------------------------

    def on_partition_event(self, key: tuple[str, int]) -> None:
        """The replica manager's append / high-watermark / leadership event of a topic partition (Kafka's
        `completeDelayedShareFetchRequest(DelayedShareFetchPartitionKey)`)."""
        self.delayed_share_fetch_purgatory.check_and_complete(key)

    def wake(self, group_id: str, tid: uuid.UUID, p: int) -> None:
        """The share-partition's state changed (records released, locks expired, start moved): the fetches
        waiting on it look again (Kafka's DelayedShareFetchGroupKey). Deferred to the next loop turn, so a
        state change made by a waiting fetch's own acquisition never re-enters it."""
        gkey = (group_id, tid, p)
        if not self.delayed_share_fetch_purgatory.watched(gkey):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.delayed_share_fetch_purgatory.check_and_complete(gkey)
            return
        if gkey not in self._woken:
            self._woken.add(gkey)
            loop.call_soon(self._wake_now, gkey)

    def _wake_now(self, gkey: tuple[str, uuid.UUID, int]) -> None:
        self._woken.discard(gkey)
        self.delayed_share_fetch_purgatory.check_and_complete(gkey)

    def delayed_share_fetch_keys(self, group_id: str, outcome: ShareFetchOutcome) -> list[object]:
        """The keys a waiting fetch of the outcome's session is watched under: (topic, partition) and
        (group id, topic id, partition) of each of its partitions."""
        keys: list[object] = []
        if outcome.session is None:
            return keys
        for tid, p in outcome.session.partitions:
            info = self.metadata.topic_by_id(tid) if self.metadata is not None else None
            if info is not None:
                keys.append((info.name, p))
            keys.append((group_id, tid, p))
        return keys

    def acquirable_bytes(self, outcome: ShareFetchOutcome, group_id: str) -> int:
        """Bytes a read from each of the session's share-partitions' next fetch offset would return now
        (Kafka's DelayedShareFetch.isMinBytesSatisfied), without acquiring anything."""
        if outcome.session is None or self.replica_manager is None:
            return 0
        total = 0
        for tid, p in outcome.session.partitions:
            sp = self.partitions.get((group_id, tid, p))
            error, name = self._topic_partition((tid, p))
            partition = self.replica_manager.get_partition(name, p) if error == ErrorCode.NONE else None
            if sp is None or partition is None or not partition.is_leader:
                continue
            self._expire(group_id, tid, p, sp, self.time_ms())
            if not sp.can_acquire():
                continue
            fetch_offset = sp.next_fetch_offset()
            isolation = READ_COMMITTED if self.group_config(group_id).share_isolation_level == "read_committed" \
                else READ_UNCOMMITTED
            if fetch_offset >= partition.fetchable_end(isolation):
                continue
            try:
                total += partition.read(fetch_offset, PARTITION_READ_BYTES, isolation, False).size
            except Exception:  # noqa: BLE001 - an unreadable partition adds nothing
                continue
        return total

    def next_lock_deadline(self, outcome: ShareFetchOutcome, group_id: str) -> int | None:
        """The earliest acquisition-lock deadline among the session's share-partitions."""
        if outcome.session is None:
            return None
        deadlines = [d for tid, p in outcome.session.partitions
                     if (sp := self.partitions.get((group_id, tid, p))) is not None
                     and (d := sp.next_lock_deadline()) is not None]
        return min(deadlines) if deadlines else None

    def expire_and_wake(self, outcome: ShareFetchOutcome, group_id: str) -> None:
        """Expire the due acquisition locks of the session's share-partitions (Kafka's
        AcquisitionLockTimerTask), waking the fetches waiting on them."""
        if outcome.session is None:
            return
        now = self.time_ms()
        for tid, p in list(outcome.session.partitions):
            sp = self.partitions.get((group_id, tid, p))
            if sp is not None:
                self._expire(group_id, tid, p, sp, now)

    def _persist(self, group_id: str, tid: uuid.UUID, p: int, sp: SharePartition,
                 leader_epoch: int = -1) -> ErrorCode:
        """Write the share-partition's durable state (nothing without a persister), with the leader
        epoch it was initialized under. Every durable change may let a waiting fetch acquire: wake them."""
        self.wake(group_id, tid, p)
        if self.persister is None:
            return ErrorCode.NONE
        if leader_epoch < 0:
            leader_epoch = max(0, self._leader_epochs.get((group_id, tid, p), 0))
        state = SharePartitionState(sp.start_offset, leader_epoch, self._state_epochs.get((group_id, tid, p), 0), 0,
                                    [StateBatch(*b) for b in sp.state_batches()])
        error = self.persister.write_state((group_id, tid, p), state)
        if error != ErrorCode.NONE:
            log.warning("Cannot write the state of share-partition %s %s-%d: %s", group_id, tid, p, error.name)
        # Every write path (acknowledge, release, lock expiry, ...): a fenced write drops it (share_fenced).
        watch_write(error, self.persister.write_completion((group_id, tid, p)) if error == ErrorCode.NONE else None,
                    lambda e: self.on_write_fenced(group_id, tid, p, sp, e))
        return error

    def on_write_fenced(self, group_id: str, tid: uuid.UUID, p: int, sp: SharePartition, error: ErrorCode) -> None:
        """Kafka's fencedSharePartitionHandler: the share-partition `sp` (if still the cached one) is
        removed; the fetches waiting on it look again and the next use reads its state again."""
        if self.partitions.get((group_id, tid, p)) is not sp:
            return
        log.info("The share partition %s %s-%d is fenced: %s", group_id, tid, p, error.name)
        self._drop(group_id, tid, p)
        self.wake(group_id, tid, p)

    # -- AlterShareGroupOffsets / DeleteShareGroupOffsets (the group is empty: nothing is acquired) --------

    def alter_start_offset(self, group_id: str, topic_id: uuid.UUID, partition: int, start_offset: int,
                           leader_epoch: int = 0) -> ErrorCode:
        """Kafka's persister `initializeState` from AlterShareGroupOffsets: the share-partition starts
        again at `start_offset` with nothing in flight (the state is written before the answer)."""
        sp = SharePartition(start_offset, self.partition_config_for(group_id))
        error = self._persist(group_id, topic_id, partition, sp, leader_epoch)
        if error == ErrorCode.NONE:
            self.partitions[(group_id, topic_id, partition)] = sp
        return error

    def initialized_partitions(self, group_id: str, topic_id: uuid.UUID,
                               num_partitions: int) -> tuple[ErrorCode, list[int]]:
        """The partitions of a topic whose share-partition the group has initialized (live or on
        `__share_group_state`)."""
        found = []
        for p in range(num_partitions):
            if (group_id, topic_id, p) in self.partitions:
                found.append(p)
                continue
            if self.persister is not None:
                error, state = self.persister.read_state((group_id, topic_id, p))
                if error != ErrorCode.NONE:
                    return error, []
                if state is not None:
                    found.append(p)
        return ErrorCode.NONE, found

    def initialized_topics(self, group_id: str) -> set[uuid.UUID]:
        """The topics of which the group has initialized a share-partition (live or with a state): what
        DescribeShareGroupOffsets lists when it names no topic (Kafka: the group's initialized topics)."""
        topics = {tid for g, tid, _p in self.partitions if g == group_id}
        if self.persister is not None:
            topics |= {tid for _g, tid, _p in self.persister.state_keys(group_id)}
        return topics

    def delete_start_offsets(self, group_id: str, topic_id: uuid.UUID, partitions: list[int]) -> ErrorCode:
        """Kafka's persister `deleteState` from DeleteShareGroupOffsets: the share-partitions are forgotten
        (the next fetch initializes them again by `share.auto.offset.reset`)."""
        for p in partitions:
            if self.persister is not None:
                error = self.persister.delete_state((group_id, topic_id, p))
                if error != ErrorCode.NONE:
                    return error
            self.partitions.pop((group_id, topic_id, p), None)
            self._state_epochs.pop((group_id, topic_id, p), None)
        return ErrorCode.NONE

    def on_group_deleted(self, group_id: str) -> None:
        """DeleteGroups removed an empty share group: its share-partitions and their states go."""
        for key in [k for k in self.partitions if k[0] == group_id]:
            del self.partitions[key]
            self._state_epochs.pop(key, None)
        self._group_configs.pop(group_id, None)
        if self.persister is not None:
            self.persister.delete_states(group_id)

    def _drop(self, group_id: str, tid: uuid.UUID, p: int) -> None:
        """The topic partition's leadership changed since the share-partition was initialized: it is
        initialized again from the share coordinator's state at its next use (Kafka's
        SharePartitionManager removes a share-partition when its leader changes)."""
        self.partitions.pop((group_id, tid, p), None)
        self._leader_epochs.pop((group_id, tid, p), None)
        self._state_epochs.pop((group_id, tid, p), None)
        if self.persister is not None:
            self.persister.forget((group_id, tid, p))

    def on_write_failed(self, group_id: str, key: TopicIdPartition) -> None:
        """A state write failed: the share-partition is read again from the coordinator at its next use
        (its in-memory state may be ahead of the durable one)."""
        self._drop(group_id, key[0], key[1])

    def _led_here(self, group_id: str, key: TopicIdPartition) -> bool:
        """The share-partition's topic partition is still led here in the epoch it was initialized in."""
        if self.replica_manager is None or self.metadata is None:
            return True
        info = self.metadata.topic_by_id(key[0])
        partition = self.replica_manager.get_partition(info.name, key[1]) if info is not None else None
        if partition is None or not partition.is_leader:
            return False
        return self._leader_epochs.get((group_id, key[0], key[1]), partition.leader_epoch) == partition.leader_epoch

    def _acknowledge(self, group_id: str, member_id: str, key: TopicIdPartition,
                     batches: list[AcknowledgementBatch], now: int) -> ErrorCode:
        sp = self._current(group_id, key[0], key[1])
        if sp is not None and not self._led_here(group_id, key):
            self._drop(group_id, key[0], key[1])
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if sp is None:
            error, _name = self._topic_partition(key)
            return error if error != ErrorCode.NONE else ErrorCode.INVALID_RECORD_STATE
        self._expire(group_id, key[0], key[1], sp, now)
        error = sp.acknowledge(member_id, batches, now)
        if error == ErrorCode.NONE:
            written = self._persist(group_id, key[0], key[1], sp)
            if written != ErrorCode.NONE:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
            for b in batches:
                if len(b.acknowledge_types) == 1:
                    SHARE_GROUP_METRICS.record_acknowledgement(b.acknowledge_types[0], b.last_offset - b.first_offset + 1)
                else:
                    for t in b.acknowledge_types:
                        SHARE_GROUP_METRICS.record_acknowledgement(t, 1)
        return error

    def _initialize(self, group_id: str, key: TopicIdPartition, name: str, log_start: int, high_watermark: int,
                    leader_epoch: int, offset_for_time: Callable[[int], int | None] | None = None
                    ) -> SharePartition | None:
        """Kafka's SharePartition.initialize: the durable state if there is one, else a start offset by
        `share.auto.offset.reset` (written at once, so a restart resumes there). None while the state
        cannot be read (the state topic is being created or loaded)."""
        gkey = (group_id, key[0], key[1])
        self._load_started.setdefault(gkey, time.monotonic())
        if self.persister is not None:
            error, state = self.persister.read_state(gkey, leader_epoch)
            if error != ErrorCode.NONE:
                return None
            if state is not None and state.start_offset < 0:
                # Initialized by the group coordinator (start offset -1): the start offset comes from
                # share.auto.offset.reset below, written under the state epoch it was initialized with.
                self._state_epochs[gkey] = state.state_epoch
            elif state is not None:
                self._loaded(gkey)
                sp = SharePartition.from_state(state.start_offset, [
                    (b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in state.batches],
                    self.partition_config_for(group_id))
                self.partitions[gkey] = sp
                self._leader_epochs[gkey] = leader_epoch
                self._state_epochs[gkey] = state.state_epoch
                log.info("Recovered share-partition %s %s-%d at offset %d (%d in flight)", group_id, name, key[1],
                         sp.start_offset, sp.in_flight())
                return sp
        reset = self.group_config(group_id).share_auto_offset_reset
        strategy, duration_ms = parse_auto_offset_reset(reset)
        if strategy == "earliest":
            start = log_start
        elif strategy == "by_duration":
            # Kafka: the first offset with a timestamp at or after now - duration; the high watermark if none.
            found = offset_for_time(self.time_ms() - duration_ms) if offset_for_time is not None else None
            start = high_watermark if found is None else max(log_start, min(found, high_watermark))
        else:
            start = high_watermark
        sp = SharePartition(start, self.partition_config_for(group_id))
        if self._persist(group_id, key[0], key[1], sp, leader_epoch) != ErrorCode.NONE:
            return None
        self.partitions[gkey] = sp
        self._leader_epochs[gkey] = leader_epoch
        self._loaded(gkey)
        log.info("Initialized share-partition %s %s-%d at offset %d (%s)", group_id, name, key[1], start, reset)
        return sp

    def _loaded(self, gkey: tuple[str, uuid.UUID, int]) -> None:
        started = self._load_started.pop(gkey, None)
        if started is not None:
            SHARE_GROUP_METRICS.partition_load_time.observe(time.monotonic() - started)

    def _archive_aborted(self, group_id: str, member_id: str, key: TopicIdPartition, sp: SharePartition,
                         data: bytes, aborted: list[tuple[int, int]], ranges: list[AcquiredRange],
                         now: int) -> list[AcquiredRange]:
        """read_committed (Kafka's SharePartition.filterAbortedTransactionalAcquiredRecords): the
        acquired records of aborted transactions are archived, never delivered, and left out of the
        acquired ranges."""
        archived = []
        for first, last in aborted_batches(data, aborted):
            for r in ranges:
                lo, hi = max(first, r.first_offset), min(last, r.last_offset)
                if lo <= hi:
                    archived.append((lo, hi))
        if not archived:
            return ranges
        sp.acknowledge(member_id, [AcknowledgementBatch(lo, hi, (int(AcknowledgeType.REJECT),))
                                   for lo, hi in archived], now)
        self._persist(group_id, key[0], key[1], sp)
        return _without(ranges, archived)

    def _topic_partition(self, key: TopicIdPartition) -> tuple[ErrorCode, str]:
        info = self.metadata.topic_by_id(key[0]) if self.metadata is not None else None
        if info is None:
            return ErrorCode.UNKNOWN_TOPIC_ID, ""
        if not 0 <= key[1] < info.num_partitions:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, info.name
        return ErrorCode.NONE, info.name

    def _acquire_partition(self, group_id: str, member_id: str, key: TopicIdPartition, max_records: int,
                           record_limit_mode: bool, now: int
                           ) -> tuple[ErrorCode, bytes | None, list[AcquiredRange], int]:
        error, name = self._topic_partition(key)
        if error != ErrorCode.NONE:
            return error, None, [], -1
        partition = self.replica_manager.get_partition(name, key[1]) if self.replica_manager is not None else None
        if partition is None or not partition.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, None, [], -1
        sp = self._current(group_id, key[0], key[1])
        if sp is not None and self._leader_epochs.get((group_id, key[0], key[1]), -1) != partition.leader_epoch:
            self._drop(group_id, key[0], key[1])
            sp = None
        if sp is None:
            def offset_for_time(timestamp: int) -> int | None:
                found = partition.fetch_offset_for_timestamp(timestamp, None)
                return None if found is None else found[0]

            sp = self._initialize(group_id, key, name, partition.log_start_offset, partition.high_watermark,
                                  partition.leader_epoch, offset_for_time)
            if sp is None:
                return ErrorCode.NONE, None, [], partition.leader_epoch  # state not readable yet: retried
        self._expire(group_id, key[0], key[1], sp, now)
        if partition.log_start_offset > sp.start_offset:
            sp.move_start_to(partition.log_start_offset)
            self._persist(group_id, key[0], key[1], sp, partition.leader_epoch)
        if not sp.can_acquire():
            return ErrorCode.NONE, None, [], partition.leader_epoch
        fetch_offset = sp.next_fetch_offset()
        # share.isolation.level: read_committed reads up to the last stable offset (Kafka 4.3.1).
        isolation = READ_COMMITTED if self.group_config(group_id).share_isolation_level == "read_committed" \
            else READ_UNCOMMITTED
        if fetch_offset >= partition.fetchable_end(isolation):
            return ErrorCode.NONE, None, [], partition.leader_epoch
        try:
            info = partition.read(fetch_offset, PARTITION_READ_BYTES, isolation, True)
        except Exception as exc:  # noqa: BLE001 - a log error answers the partition, never the request
            log.warning("Share fetch of %s-%d at %d failed: %s", name, key[1], fetch_offset, exc)
            return ErrorCode.UNKNOWN_SERVER_ERROR, None, [], partition.leader_epoch
        if info.records is None:
            return ErrorCode.NONE, None, [], partition.leader_epoch
        data = info.records.read_bytes()
        data, batch_ends = _complete_batches(data)
        if not batch_ends:
            return ErrorCode.NONE, None, [], partition.leader_epoch
        ranges = sp.acquire(member_id, fetch_offset, batch_ends[-1], max_records, now,
                            () if record_limit_mode else tuple(batch_ends))
        if ranges and isolation == READ_COMMITTED and info.aborted_transactions:
            ranges = self._archive_aborted(group_id, member_id, key, sp, data, info.aborted_transactions, ranges,
                                           now)
        if not ranges:
            return ErrorCode.NONE, None, [], partition.leader_epoch
        # Only the batches up to the last acquired offset are sent.
        last = ranges[-1].last_offset
        cut = _cut_after(data, last)
        return ErrorCode.NONE, data[:cut], ranges, partition.leader_epoch


def aborted_batches(data: bytes, aborted: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The (first, last) offsets of the transactional data batches of `data` that belong to aborted
    transactions (`aborted`: (producer id, first offset), what a read_committed read returns), as
    Kafka's consumer finds them: a producer's transaction is aborted from its first offset up to its
    next control batch (the abort marker)."""
    pending = sorted(aborted, key=lambda a: a[1])
    i, open_aborted, out = 0, set(), []
    pos = 0
    while pos + _BATCH_HEADER <= len(data):
        base = int.from_bytes(data[pos:pos + 8], "big", signed=True)
        length = int.from_bytes(data[pos + 8:pos + 12], "big", signed=True)
        if length <= 0:
            break
        attributes = int.from_bytes(data[pos + 21:pos + 23], "big")
        last = base + int.from_bytes(data[pos + 23:pos + 27], "big", signed=True)
        producer_id = int.from_bytes(data[pos + 43:pos + 51], "big", signed=True)
        while i < len(pending) and pending[i][1] <= last:
            open_aborted.add(pending[i][0])
            i += 1
        if attributes & _CONTROL:
            open_aborted.discard(producer_id)
        elif attributes & _TRANSACTIONAL and producer_id in open_aborted:
            out.append((base, last))
        pos += 12 + length
    return out


def _without(ranges: list[AcquiredRange], removed: list[tuple[int, int]]) -> list[AcquiredRange]:
    out = ranges
    for first, last in removed:
        kept: list[AcquiredRange] = []
        for r in out:
            if r.last_offset < first or r.first_offset > last:
                kept.append(r)
                continue
            if r.first_offset < first:
                kept.append(AcquiredRange(r.first_offset, first - 1, r.delivery_count))
            if r.last_offset > last:
                kept.append(AcquiredRange(last + 1, r.last_offset, r.delivery_count))
        out = kept
    return out


def _complete_batches(data: bytes) -> tuple[bytes, list[int]]:
    """The complete v2 batches of a log read and the last offset of each."""
    pos, ends = 0, []
    while pos + _BATCH_HEADER <= len(data):
        base = int.from_bytes(data[pos:pos + 8], "big", signed=True)
        length = int.from_bytes(data[pos + 8:pos + 12], "big", signed=True)
        if length <= 0 or pos + 12 + length > len(data):
            break
        delta = int.from_bytes(data[pos + 23:pos + 27], "big", signed=True)
        ends.append(base + delta)
        pos += 12 + length
    return data[:pos], ends


def _cut_after(data: bytes, last_offset: int) -> int:
    """Byte length of the batches of `data` up to the one holding `last_offset`."""
    pos = 0
    while pos + _BATCH_HEADER <= len(data):
        base = int.from_bytes(data[pos:pos + 8], "big", signed=True)
        length = int.from_bytes(data[pos + 8:pos + 12], "big", signed=True)
        pos += 12 + length
        if base > last_offset:
            return pos - 12 - length
        delta = int.from_bytes(data[pos - 12 - length + 23:pos - 12 - length + 27], "big", signed=True)
        if base + delta >= last_offset:
            return pos
    return pos
