"""The share coordinator: durable share-partition state on `__share_group_state` (KIP-932).

Kafka's `ShareCoordinatorService` / `ShareCoordinatorShard`, on the generic coordinator runtime
(`kbroker.coord.coordinator_runtime`), as the group and transaction coordinators are. The state of
the share-partition (group, topic id, partition) lives in partition
`abs(java String.hashCode("group:topicId:partition")) % partitions` of `__share_group_state` (Kafka's
`SharePartitionKey.asCoordinatorKey`, the topic id in Kafka's base64 form), as Kafka's records: a `ShareSnapshot`
(coordinator record type 0: start offset, leader epoch, state epoch and the in-flight state batches
with delivery state and count) when it is initialized and every
`share.coordinator.snapshot.update.records.per.snapshot` (500) writes, `ShareUpdate` deltas (type 1:
the changed state batches, start offset, leader epoch) for the writes between (acknowledgements,
releases, lock expiries, the start offset moving); a load replays both.

kbroker's share-partition manager (`kbroker.coord.share_partition_manager`) talks to this service in
process. Other callers use the share coordinator's RPCs, served by kbroker.api (InitializeShareGroupState
83, ReadShareGroupState 84, WriteShareGroupState 85, DeleteShareGroupState 86,
ReadShareGroupStateSummary 87; FindCoordinator SHARE finds the coordinator): `ShareCoordinatorService.call`
runs one share-partition's operation (`ShareCoordinatorShard.initialize / read / write / delete /
summary`, Kafka 4.3.1's rules, fenced by the highest leader and state epochs seen) on the shard of its
partition. The topic has Kafka's delete policy with infinite retention; every
`share.coordinator.state.topic.prune.interval.ms` the records before the lowest latest-snapshot offset of
a partition are deleted (Kafka's pruning). A `__share_group_state` created compacted by an earlier
kbroker keeps getting snapshots only (the cleaner would drop the updates a replay needs).

Must not import kbroker.net or kbroker.api.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kbroker.coord.coordinator_runtime import Append, CoordinatorRuntime, CoordinatorTimer
from kbroker.coord.runtime import LogLoader, LoopScheduler, ReplicaPartitionWriter, java_string_hashcode
from kbroker.metrics.meters import SHARE_GROUP_METRICS
from kbroker.protocol.coordinator_records import Coordinator
from kbroker.protocol.coordinator_records.serde import (
    decode_coordinator_key,
    decode_coordinator_value,
    encode_coordinator_key,
    encode_coordinator_value,
)
from kbroker.protocol.coordinator_records.share_snapshot import ShareSnapshotKey, ShareSnapshotValue
from kbroker.protocol.coordinator_records.share_update import ShareUpdateKey, ShareUpdateValue
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.topic import SHARE_GROUP_STATE_TOPIC_NAME

if TYPE_CHECKING:
    from kbroker.config import KafkaConfig
    from kbroker.controller.controller import Controller
    from kbroker.metadata.cache import MetadataCache
    from kbroker.metadata.delta import MetadataDelta
    from kbroker.metadata.image import MetadataImage
    from kbroker.metadata.loader import LoaderManifest
    from kbroker.replica.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

STATE_TOPIC = SHARE_GROUP_STATE_TOPIC_NAME
SharePartitionKey = tuple[str, uuid.UUID, int]  # (group id, topic id, partition)


@dataclass(frozen=True, slots=True)
class StateBatch:
    first_offset: int
    last_offset: int
    delivery_state: int  # RecordState id: 0 available, 2 acknowledged, 4 archived
    delivery_count: int


@dataclass(slots=True)
class SharePartitionState:
    start_offset: int
    leader_epoch: int = 0
    state_epoch: int = 0
    snapshot_epoch: int = 0
    batches: list[StateBatch] = field(default_factory=list)
    delivery_complete_count: int = -1


def kafka_uuid(u: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def coordinator_key(key: SharePartitionKey) -> str:
    """Kafka's SharePartitionKey.asCoordinatorKey: "groupId:topicId:partition"."""
    return f"{key[0]}:{kafka_uuid(key[1])}:{key[2]}"


def partition_for(key: SharePartitionKey, num_partitions: int) -> int:
    h = java_string_hashcode(coordinator_key(key))
    return 0 if h == -(2**31) else abs(h) % num_partitions


def encode_snapshot(key: SharePartitionKey, state: SharePartitionState, now_ms: int) -> tuple[bytes, bytes]:
    k = encode_coordinator_key(ShareSnapshotKey(group_id=key[0], topic_id=key[1], partition=key[2]))
    v = encode_coordinator_value(ShareSnapshotValue(
        snapshot_epoch=state.snapshot_epoch, state_epoch=state.state_epoch, leader_epoch=state.leader_epoch,
        start_offset=state.start_offset, delivery_complete_count=state.delivery_complete_count,
        create_timestamp=now_ms, write_timestamp=now_ms,
        state_batches=[ShareSnapshotValue.StateBatch(first_offset=b.first_offset, last_offset=b.last_offset,
                                                     delivery_state=b.delivery_state, delivery_count=b.delivery_count)
                       for b in state.batches]), 0)
    return k, v


def encode_update(key: SharePartitionKey, snapshot_epoch: int, leader_epoch: int, start_offset: int,
                  delivery_complete_count: int, batches: list[StateBatch]) -> tuple[bytes, bytes]:
    """A ShareUpdate record (coordinator record type 1): the batches that changed since the state
    recorded so far, the start offset and leader epoch (Kafka's ShareCoordinatorRecordHelpers
    .newShareUpdateRecord); it carries no state epoch (an update never changes it)."""
    k = encode_coordinator_key(ShareUpdateKey(group_id=key[0], topic_id=key[1], partition=key[2]))
    v = encode_coordinator_value(ShareUpdateValue(
        snapshot_epoch=snapshot_epoch, leader_epoch=leader_epoch, start_offset=start_offset,
        delivery_complete_count=delivery_complete_count,
        state_batches=[ShareUpdateValue.StateBatch(first_offset=b.first_offset, last_offset=b.last_offset,
                                                   delivery_state=b.delivery_state, delivery_count=b.delivery_count)
                       for b in batches]), 0)
    return k, v


NEGATIVE_PARTITION_ID = "The partition id cannot be a negative number."
READ_UNINITIALIZED = "Read operation on uninitialized share partition not allowed."
WRITE_UNINITIALIZED = "Write operation on uninitialized share partition not allowed."


@dataclass(frozen=True, slots=True)
class ShareRpcResult:
    """One share-partition's answer to a share coordinator RPC."""
    error: ErrorCode
    message: str | None
    state: SharePartitionState | None = None


def combine_state_batches(current: list[StateBatch], new: list[StateBatch], start_offset: int) -> list[StateBatch]:
    """Kafka's PersisterStateBatchCombiner: the new batches overwrite the offsets they cover (a later
    one wins over an earlier one), offsets below the start offset are dropped, and contiguous batches
    with the same delivery state and count are coalesced."""
    result = sorted(current, key=lambda b: b.first_offset)
    for b in new:
        if b.last_offset < b.first_offset:
            continue
        kept: list[StateBatch] = []
        for old in result:
            if old.last_offset < b.first_offset or old.first_offset > b.last_offset:
                kept.append(old)
                continue
            if old.first_offset < b.first_offset:
                kept.append(StateBatch(old.first_offset, b.first_offset - 1, old.delivery_state, old.delivery_count))
            if old.last_offset > b.last_offset:
                kept.append(StateBatch(b.last_offset + 1, old.last_offset, old.delivery_state, old.delivery_count))
        kept.append(b)
        result = sorted(kept, key=lambda x: x.first_offset)
    out: list[StateBatch] = []
    for b in result:
        if b.last_offset < start_offset:
            continue
        if b.first_offset < start_offset:
            b = StateBatch(start_offset, b.last_offset, b.delivery_state, b.delivery_count)
        prev = out[-1] if out else None
        if prev is not None and prev.last_offset + 1 == b.first_offset and \
                (prev.delivery_state, prev.delivery_count) == (b.delivery_state, b.delivery_count):
            out[-1] = StateBatch(prev.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
        else:
            out.append(b)
    return out


class ShareCoordinatorShard:
    """The share-partition states of one `__share_group_state` partition.

    Writes are Kafka's (`ShareCoordinatorShard.generateShareStateRecord`): the first state of a
    share-partition, a new state epoch (initialization) and every
    `share.coordinator.snapshot.update.records.per.snapshot`-th write after a snapshot are a full
    `ShareSnapshot` (its snapshot epoch one higher); the writes between are `ShareUpdate` deltas (the
    changed state batches, under the last snapshot's epoch). Replay applies a snapshot as the state and
    merges an update into it (Kafka's `handleShareUpdate`: PersisterStateBatchCombiner, start offset and
    leader epoch unless -1). The offset of each share-partition's latest snapshot is kept: everything
    before the lowest of them is redundant and pruned (Kafka's ShareCoordinatorOffsetsManager)."""

    def __init__(self, append: Append, time_ms: Callable[[], int], updates_per_snapshot: int = 500,
                 last_written_offset: Callable[[], int] | None = None) -> None:
        self.append = append
        self.time_ms = time_ms
        self.updates_per_snapshot = updates_per_snapshot
        self._last_written_offset = last_written_offset
        self.states: dict[SharePartitionKey, SharePartitionState] = {}
        # Kafka's leaderEpochMap / stateEpochMap: the highest epochs seen per key, what RPCs are fenced by.
        self.leader_epochs: dict[SharePartitionKey, int] = {}
        self.state_epochs: dict[SharePartitionKey, int] = {}
        # Kafka's snapshotUpdateCount: ShareUpdate records since the key's last ShareSnapshot.
        self.update_counts: dict[SharePartitionKey, int] = {}
        # The offset of each key's latest ShareSnapshot (Kafka's ShareCoordinatorOffsetsManager).
        self.snapshot_offsets: dict[SharePartitionKey, int] = {}
        self.snapshots_written = 0
        self.updates_written = 0

    def _epochs_seen(self, key: SharePartitionKey, leader_epoch: int, state_epoch: int) -> None:
        self.leader_epochs[key] = max(leader_epoch, self.leader_epochs.get(key, leader_epoch))
        self.state_epochs[key] = max(state_epoch, self.state_epochs.get(key, state_epoch))

    def write_state(self, key: SharePartitionKey, state: SharePartitionState, snapshot: bool = False) -> ErrorCode:
        """Record `state` as the share-partition's state: a ShareUpdate with the batches that changed when
        that reproduces it on replay, else (or when due, or `snapshot`) a ShareSnapshot."""
        previous = self.states.get(key)
        delta = None
        if previous is not None and not snapshot and previous.state_epoch == state.state_epoch \
                and self.update_counts.get(key, 0) < self.updates_per_snapshot:
            delta = _delta(previous.batches, state.batches, state.start_offset)
        if delta is None:
            state.snapshot_epoch = 0 if previous is None else previous.snapshot_epoch + 1
            record = encode_snapshot(key, state, self.time_ms())
        else:
            assert previous is not None
            state = SharePartitionState(state.start_offset, state.leader_epoch, previous.state_epoch,
                                        previous.snapshot_epoch,
                                        combine_state_batches(previous.batches, delta, state.start_offset),
                                        state.delivery_complete_count)
            record = encode_update(key, state.snapshot_epoch, state.leader_epoch, state.start_offset,
                                   state.delivery_complete_count, delta)
        error = self.append([record])
        if error == ErrorCode.NONE:
            self.states[key] = state
            self._epochs_seen(key, state.leader_epoch, state.state_epoch)
            if delta is None:
                self.update_counts[key] = 0
                self.snapshots_written += 1
                if self._last_written_offset is not None:
                    self.snapshot_offsets[key] = self._last_written_offset() - 1
            else:
                self.update_counts[key] = self.update_counts.get(key, 0) + 1
                self.updates_written += 1
        return error

    def redundant_offset(self) -> int | None:
        """The offset below which every record of this partition is redundant: the lowest offset of the
        live share-partitions' latest snapshots (None: nothing known)."""
        return min(self.snapshot_offsets.values()) if self.snapshot_offsets else None

    # -- the share coordinator's RPCs, one share-partition at a time (ShareCoordinatorShard) ----------

    def initialize(self, key: SharePartitionKey, state_epoch: int, start_offset: int,
                   partition_known: bool) -> ShareRpcResult:
        """InitializeShareGroupState: a fresh snapshot (no batches, leader epoch 0, delivery complete
        count 0), fenced only by a lower state epoch."""
        if key[2] < 0:
            return ShareRpcResult(ErrorCode.INVALID_REQUEST, NEGATIVE_PARTITION_ID)
        if self.state_epochs.get(key, state_epoch) > state_epoch:
            return ShareRpcResult(ErrorCode.FENCED_STATE_EPOCH, ErrorCode.FENCED_STATE_EPOCH.message)
        if not partition_known:
            return ShareRpcResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.message)
        return self._result(self.write_state(key, SharePartitionState(start_offset, 0, state_epoch,
                                                                      delivery_complete_count=0), snapshot=True))

    def read(self, key: SharePartitionKey, leader_epoch: int, partition_known: bool) -> ShareRpcResult:
        """ReadShareGroupState (Kafka's readStateAndMaybeUpdateLeaderEpoch): a leader epoch other than
        -1 is recorded (a new snapshot) and fences older leaders from then on."""
        if key[2] < 0:
            return ShareRpcResult(ErrorCode.INVALID_REQUEST, NEGATIVE_PARTITION_ID)
        state = self.states.get(key)
        if state is None:
            return ShareRpcResult(ErrorCode.INVALID_REQUEST, READ_UNINITIALIZED)
        if leader_epoch != -1 and self.leader_epochs.get(key, leader_epoch) > leader_epoch:
            return ShareRpcResult(ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.FENCED_LEADER_EPOCH.message)
        if not partition_known:
            return ShareRpcResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.message)
        if leader_epoch != -1 and leader_epoch != state.leader_epoch:
            updated = SharePartitionState(state.start_offset, leader_epoch, state.state_epoch, 0, list(state.batches),
                                          state.delivery_complete_count)
            error = self.write_state(key, updated)
            if error != ErrorCode.NONE:
                return ShareRpcResult(error, error.message)
            state = updated
        return ShareRpcResult(ErrorCode.NONE, None, state)

    def write(self, key: SharePartitionKey, state_epoch: int, leader_epoch: int, start_offset: int,
              delivery_complete_count: int, batches: list[StateBatch], partition_known: bool) -> ShareRpcResult:
        """WriteShareGroupState: the batches are merged into the recorded ones (Kafka's
        PersisterStateBatchCombiner), the start offset moves unless -1; the leader and state epochs
        recorded stay (they only fence)."""
        SHARE_GROUP_METRICS.share_coordinator_writes += 1
        if key[2] < 0:
            return ShareRpcResult(ErrorCode.INVALID_REQUEST, NEGATIVE_PARTITION_ID)
        state = self.states.get(key)
        if state is None:
            return ShareRpcResult(ErrorCode.INVALID_REQUEST, WRITE_UNINITIALIZED)
        if self.leader_epochs.get(key, leader_epoch) > leader_epoch:
            return ShareRpcResult(ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.FENCED_LEADER_EPOCH.message)
        if self.state_epochs.get(key, state_epoch) > state_epoch:
            return ShareRpcResult(ErrorCode.FENCED_STATE_EPOCH, ErrorCode.FENCED_STATE_EPOCH.message)
        if not partition_known:
            return ShareRpcResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.message)
        start = state.start_offset if start_offset == -1 else start_offset
        merged = combine_state_batches(state.batches, batches, start)
        return self._result(self.write_state(key, SharePartitionState(start, state.leader_epoch, state.state_epoch, 0,
                                                                      merged, delivery_complete_count)))

    def delete(self, key: SharePartitionKey, partition_known: bool) -> ShareRpcResult:
        """DeleteShareGroupState: a tombstone for the share-partition's state, if it has one."""
        if key[2] < 0:
            return ShareRpcResult(ErrorCode.INVALID_REQUEST, NEGATIVE_PARTITION_ID)
        if not partition_known:
            return ShareRpcResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.message)
        return self._result(self.delete_state(key))

    def summary(self, key: SharePartitionKey, partition_known: bool) -> ShareRpcResult:
        """ReadShareGroupStateSummary: the recorded epochs, start offset and delivery complete count (an
        uninitialized share-partition answers start offset -1); nothing is written or fenced."""
        if key[2] < 0:
            return ShareRpcResult(ErrorCode.INVALID_REQUEST, NEGATIVE_PARTITION_ID)
        if not partition_known:
            return ShareRpcResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.message)
        return ShareRpcResult(ErrorCode.NONE, None, self.states.get(key))

    @staticmethod
    def _result(error: ErrorCode) -> ShareRpcResult:
        return ShareRpcResult(error, None if error == ErrorCode.NONE else error.message)

    def delete_state(self, key: SharePartitionKey) -> ErrorCode:
        if key not in self.states:
            return ErrorCode.NONE
        k, _v = encode_snapshot(key, self.states[key], 0)
        error = self.append([(k, None)])
        if error == ErrorCode.NONE:
            self._forget(key)
        return error

    def _forget(self, key: SharePartitionKey) -> None:
        self.states.pop(key, None)
        self.leader_epochs.pop(key, None)
        self.state_epochs.pop(key, None)
        self.update_counts.pop(key, None)
        self.snapshot_offsets.pop(key, None)

    # -- the runtime's CoordinatorShard --------------------------------------------------------------

    def replay(self, offset: int, key: bytes | memoryview | None, value: bytes | memoryview | None) -> None:
        if key is None:
            return
        try:
            record_type, k = decode_coordinator_key(Coordinator.SHARE, key)
        except Exception:  # noqa: BLE001 - a record this coordinator does not know is skipped, as Kafka's loader does
            return
        if isinstance(k, ShareUpdateKey):
            if value is not None:  # (Kafka writes no ShareUpdate tombstones)
                self._replay_update((k.group_id, k.topic_id, k.partition), record_type, value)
            return
        if not isinstance(k, ShareSnapshotKey):
            return
        skey = (k.group_id, k.topic_id, k.partition)
        if value is None:
            self._forget(skey)
            return
        v, _version = decode_coordinator_value(Coordinator.SHARE, record_type, value)
        if isinstance(v, ShareSnapshotValue):
            self.states[skey] = SharePartitionState(
                v.start_offset, v.leader_epoch, v.state_epoch, v.snapshot_epoch,
                [StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                 for b in v.state_batches], v.delivery_complete_count)
            self._epochs_seen(skey, v.leader_epoch, v.state_epoch)
            self.update_counts[skey] = 0
            self.snapshot_offsets[skey] = offset

    def _replay_update(self, skey: SharePartitionKey, record_type: int, value: bytes | memoryview) -> None:
        """Kafka's handleShareUpdate: merged into the state so far (the snapshot's epochs stay; start offset
        and leader epoch move unless -1)."""
        v, _version = decode_coordinator_value(Coordinator.SHARE, record_type, value)
        if not isinstance(v, ShareUpdateValue):
            return
        batches = [StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                   for b in v.state_batches]
        so_far = self.states.get(skey)
        if so_far is None:
            self.states[skey] = SharePartitionState(v.start_offset, v.leader_epoch, 0, v.snapshot_epoch,
                                                    combine_state_batches([], batches, v.start_offset),
                                                    v.delivery_complete_count)
        else:
            start = so_far.start_offset if v.start_offset == -1 else v.start_offset
            self.states[skey] = SharePartitionState(
                start, so_far.leader_epoch if v.leader_epoch == -1 else v.leader_epoch, so_far.state_epoch,
                so_far.snapshot_epoch, combine_state_batches(so_far.batches, batches, start),
                v.delivery_complete_count)
        if v.leader_epoch != -1:
            self.leader_epochs[skey] = max(v.leader_epoch, self.leader_epochs.get(skey, v.leader_epoch))
        self.update_counts[skey] = self.update_counts.get(skey, 0) + 1

    def replay_transactional(self, producer_id: int, offset: int, key: bytes | memoryview | None,
                             value: bytes | memoryview | None) -> None:
        self.replay(offset, key, value)

    def replay_end_txn(self, producer_id: int, commit: bool) -> None:
        return None

    def on_loaded(self) -> None:
        if self.states:
            log.info("Loaded %d share-partition states", len(self.states))

    def on_unloaded(self) -> None:
        return None


class ShareCoordinatorService:
    """The broker's share coordinator: a metadata publisher for `__share_group_state` and the
    persister of the share-partition manager."""

    name = "ShareCoordinator"

    def __init__(self, config: KafkaConfig, replica_manager: ReplicaManager, controller: Controller,
                 metadata: MetadataCache, time_ms: Callable[[], int]) -> None:
        self.config = config
        self.replica_manager = replica_manager
        self.controller = controller
        self.metadata = metadata
        self.time_ms = time_ms
        self.active = False
        self.runtime: CoordinatorRuntime[ShareCoordinatorShard] | None = None
        self.scheduler: LoopScheduler | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._creating: asyncio.Task[ErrorCode] | None = None
        self._prune_timer: asyncio.TimerHandle | None = None

    # -- lifecycle -----------------------------------------------------------------------------------

    def startup(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        self.scheduler = LoopScheduler(loop)
        writer = ReplicaPartitionWriter(self.replica_manager, STATE_TOPIC, lambda: self.time_ms(),
                                        int(self.config["share.coordinator.write.timeout.ms"]),
                                        self._on_committed, self._on_write_failed)
        self.runtime = CoordinatorRuntime(writer, LogLoader(self.replica_manager, STATE_TOPIC), self._new_shard,
                                          self.scheduler)
        self.active = True
        self._schedule_prune()
        info = self.metadata.topic(STATE_TOPIC)
        if info is not None:
            for p in range(info.num_partitions):
                if self.replica_manager.get_partition(STATE_TOPIC, p) is not None and self.runtime.schedule_load(p):
                    loop.call_soon(self.runtime.run_load, p)

    def shutdown(self) -> None:
        self.active = False
        if self._prune_timer is not None:
            self._prune_timer.cancel()
            self._prune_timer = None
        if self.runtime is not None:
            self.runtime.close()
        if self.scheduler is not None:
            self.scheduler.cancel_all()

    def _new_shard(self, partition: int, timer: CoordinatorTimer, append: Append) -> ShareCoordinatorShard:
        def last_written_offset() -> int:
            ctx = self.runtime.context(partition) if self.runtime is not None else None
            return ctx.last_written_offset if ctx is not None else 0

        return ShareCoordinatorShard(append, lambda: self.time_ms(), self.updates_per_snapshot(), last_written_offset)

    def updates_per_snapshot(self) -> int:
        """`share.coordinator.snapshot.update.records.per.snapshot`; 0 (every write a snapshot) on a
        `__share_group_state` created compacted by an earlier kbroker (the cleaner would drop updates)."""
        policy = self.metadata.image.configs.topic_config(STATE_TOPIC).get("cleanup.policy", "")
        if "compact" in policy:
            return 0
        return int(self.config["share.coordinator.snapshot.update.records.per.snapshot"])

    def _schedule_prune(self) -> None:
        if self._loop is None or not self.active:
            return
        interval_s = int(self.config["share.coordinator.state.topic.prune.interval.ms"]) / 1000
        self._prune_timer = self._loop.call_later(interval_s, self._prune_and_reschedule)

    def _prune_and_reschedule(self) -> None:
        self._prune_timer = None
        try:
            self.prune()
        finally:
            self._schedule_prune()

    def prune(self) -> int:
        """Kafka's ShareCoordinatorService pruning: on each loaded partition, delete the records before
        the lowest offset of its share-partitions' latest snapshots, once committed (they are redundant).
        Returns how many partitions moved their log start offset."""
        if self.runtime is None:
            return 0
        moved = 0
        for p, shard in self.runtime.active_shards():
            offset = shard.redundant_offset()
            partition = self.replica_manager.get_partition(STATE_TOPIC, p)
            if offset is None or partition is None or not partition.is_leader:
                continue
            offset = min(offset, partition.high_watermark)
            if offset <= partition.log_start_offset or not partition.log.config.delete:
                continue
            partition.log.delete_records_before(offset)
            SHARE_GROUP_METRICS.last_pruned_offsets[(STATE_TOPIC, p)] = offset  # last-pruned-offset
            moved += 1
            log.debug("Pruned %s-%d before offset %d", STATE_TOPIC, p, offset)
        return moved

    def _on_committed(self, partition: int, offset: int) -> None:
        if self.runtime is not None:
            self.runtime.on_high_watermark_updated(partition, offset)

    def _on_write_failed(self, partition: int, offset: int, error: ErrorCode) -> None:
        if self.runtime is not None:
            self.runtime.on_write_failed(partition, offset, ErrorCode.COORDINATOR_NOT_AVAILABLE)

    # -- the state topic -----------------------------------------------------------------------------

    def num_partitions(self) -> int:
        info = self.metadata.topic(STATE_TOPIC)
        return int(info.num_partitions) if info is not None else int(
            self.config["share.coordinator.state.topic.num.partitions"])

    def ensure_state_topic(self) -> bool:
        """True when `__share_group_state` exists; else its creation is started (once)."""
        if self.metadata.topic(STATE_TOPIC) is not None:
            return True
        if self._loop is not None and (self._creating is None or self._creating.done()):
            self._creating = self._loop.create_task(self.create_state_topic())
        return False

    async def create_state_topic(self) -> ErrorCode:
        if self.metadata.topic(STATE_TOPIC) is not None:
            return ErrorCode.NONE
        # A single node caps share.coordinator.state.topic.replication.factor at itself; a broker of a
        # multi-broker cluster asks for the configured factor and min ISR, as Kafka does (with fewer
        # live brokers the controller refuses and the lookup answers COORDINATOR_NOT_AVAILABLE).
        cluster = in_kraft_cluster(self.config)
        configs = {
            # Kafka's ShareCoordinatorService: delete policy, kept forever, pruned by the coordinator.
            "cleanup.policy": "delete",
            "retention.ms": "-1",
            "compression.type": "producer",
            "segment.bytes": str(int(self.config["share.coordinator.state.topic.segment.bytes"])),
            "min.insync.replicas": str(int(self.config["share.coordinator.state.topic.min.isr"])) if cluster else "1",
        }
        replication_factor = int(self.config["share.coordinator.state.topic.replication.factor"]) if cluster else 1
        try:
            await self.controller.create_topic(
                STATE_TOPIC, num_partitions=int(self.config["share.coordinator.state.topic.num.partitions"]),
                replication_factor=replication_factor, configs=configs)
        except KafkaError as exc:
            if exc.error_code == ErrorCode.TOPIC_ALREADY_EXISTS:
                return ErrorCode.NONE
            log.warning("Cannot create %s: %s", STATE_TOPIC, exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.NONE

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage, manifest: LoaderManifest) -> None:
        topics = delta.topics_delta
        rt = self.runtime
        if topics is None or not self.active or rt is None:
            return
        changes = delta.local_changes(self.metadata.node_id)
        created = topics.topic_was_created(STATE_TOPIC)
        for tp in changes.leaders:
            if tp.topic == STATE_TOPIC and rt.schedule_load(tp.partition):
                if created:
                    rt.run_load(tp.partition)
                elif self._loop is not None:
                    self._loop.call_soon(rt.run_load, tp.partition)
        for tp in list(changes.followers) + sorted(changes.deletes):
            if tp.topic == STATE_TOPIC and rt.context(tp.partition) is not None:
                rt.unload(tp.partition)

    # -- the persister -------------------------------------------------------------------------------

    def _shard(self, key: SharePartitionKey) -> tuple[ErrorCode, int, ShareCoordinatorShard | None]:
        if not self.active or self.runtime is None or not self.ensure_state_topic():
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, None
        p = partition_for(key, self.num_partitions())
        error = self.runtime.status(p)
        if error != ErrorCode.NONE:
            if self.replica_manager.get_partition(STATE_TOPIC, p) is not None and self.runtime.schedule_load(p) \
                    and self._loop is not None:
                self._loop.call_soon(self.runtime.run_load, p)
            return error, p, None
        ctx = self.runtime.context(p)
        return ErrorCode.NONE, p, None if ctx is None else ctx.shard

    def read_state(self, key: SharePartitionKey, leader_epoch: int = -1) -> tuple[ErrorCode, SharePartitionState | None]:
        """The share-partition's last written state (None: never initialized). COORDINATOR_NOT_AVAILABLE
        / COORDINATOR_LOAD_IN_PROGRESS while the state topic is being created or loaded. A service
        never started (an in-process test stack without the broker's start-up) keeps nothing."""
        if self.runtime is None:
            return ErrorCode.NONE, None
        error, _p, shard = self._shard(key)
        if error != ErrorCode.NONE or shard is None:
            return error if error != ErrorCode.NONE else ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        return ErrorCode.NONE, shard.states.get(key)

    def write_state(self, key: SharePartitionKey, state: SharePartitionState) -> ErrorCode:
        """Append the share-partition's state (a ShareUpdate or a ShareSnapshot; acks=-1, through the runtime)."""
        if self.runtime is None:
            return ErrorCode.NONE
        SHARE_GROUP_METRICS.share_coordinator_writes += 1
        error, p, shard = self._shard(key)
        if error != ErrorCode.NONE or self.runtime is None:
            return error
        result: list[ErrorCode] = []
        started = time.monotonic()

        def committed(value: object) -> None:
            # share-coordinator-metrics write-latency-avg/max (in process: the write to its commit).
            now = time.monotonic()
            SHARE_GROUP_METRICS.share_coordinator_write_latency.record((now - started) * 1000, int(now * 1000))
            result.append(value if isinstance(value, ErrorCode) else ErrorCode.NONE)

        self.runtime.write(p, lambda s: s.write_state(key, state), committed, lambda e: result.append(e))
        return result[0] if result else ErrorCode.NONE  # not committed yet: the runtime holds nothing for us

    def write_completion(self, key: SharePartitionKey) -> None:
        """In process, a write is applied to the shard when it is appended: nothing to wait for."""
        return None

    def forget(self, key: SharePartitionKey) -> None:
        """In process, the shard is the state: nothing is cached."""
        return None

    def delete_state(self, key: SharePartitionKey) -> ErrorCode:
        """A tombstone for one share-partition's state (DeleteShareGroupOffsets)."""
        if self.runtime is None:
            return ErrorCode.NONE
        error, p, _shard = self._shard(key)
        if error != ErrorCode.NONE or self.runtime is None:
            return error
        result: list[ErrorCode] = []
        self.runtime.write(p, _deleting(key),
                           lambda value: result.append(value if isinstance(value, ErrorCode) else ErrorCode.NONE),
                           lambda e: result.append(e))
        return result[0] if result else ErrorCode.NONE

    # -- the share coordinator's RPCs (83-87), served by kbroker.api.*_share_group_state* ---------------

    def partition_known(self, topic_id: uuid.UUID, partition: int) -> bool:
        info = self.metadata.topic_by_id(topic_id)
        return info is not None and 0 <= partition < int(info.num_partitions)

    def coordinator_partition(self, key: SharePartitionKey) -> int | None:
        """The `__share_group_state` partition of a key (FindCoordinator SHARE); None while the topic
        does not exist (its creation is started)."""
        if not self.ensure_state_topic():
            return None
        return partition_for(key, self.num_partitions())

    async def call(self, key: SharePartitionKey, op: Callable[[ShareCoordinatorShard], ShareRpcResult],
                   verb: str, write: bool = True) -> ShareRpcResult:
        """Run one share-partition's operation on the shard of its `__share_group_state` partition: a
        write answers once its records committed, a read once the writes before it did. Runtime errors
        answer as Kafka's CoordinatorOperationExceptionHelper maps them, with "Unable to <verb> share
        group state: " and the error's message."""
        rt = self.runtime
        if not self.active or rt is None:
            return ShareRpcResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, "Share coordinator is not available.")
        if not self.ensure_state_topic():
            return _failed(verb, ErrorCode.NOT_COORDINATOR)
        p = partition_for(key, self.num_partitions())
        if rt.status(p) == ErrorCode.NOT_COORDINATOR and self.replica_manager.get_partition(STATE_TOPIC, p) is not None \
                and rt.schedule_load(p) and self._loop is not None:
            self._loop.call_soon(rt.run_load, p)
        fut: asyncio.Future[ShareRpcResult] = asyncio.get_running_loop().create_future()

        def done(value: object) -> None:
            if not fut.done():
                fut.set_result(value if isinstance(value, ShareRpcResult)
                               else ShareRpcResult(ErrorCode.UNKNOWN_SERVER_ERROR, None))

        def fail(error: ErrorCode) -> None:
            if not fut.done():
                fut.set_result(_failed(verb, error))

        (rt.write if write else rt.read)(p, op, done, fail)
        return await fut

    def state_keys(self, group_id: str) -> list[SharePartitionKey]:
        """The share-partitions of a group that have a state on the loaded `__share_group_state` partitions."""
        if self.runtime is None or not self.active:
            return []
        return sorted(k for _p, shard in self.runtime.active_shards() for k in shard.states if k[0] == group_id)

    def delete_states(self, group_id: str) -> None:
        """The share group was deleted: tombstones for its share-partitions' states."""
        if self.runtime is None or not self.active:
            return
        for p, shard in self.runtime.active_shards():
            for key in [k for k in shard.states if k[0] == group_id]:
                self.runtime.write(p, _deleting(key), _ignore, _ignore)


def in_kraft_cluster(config: KafkaConfig) -> bool:
    """A broker of a multi-broker cluster (process.roles=broker, or a combined node of a multi-voter
    quorum): share-partition leaders and share coordinators are on different brokers in general."""
    raw = config["process.roles"]
    roles = {str(r).strip() for r in (raw.split(",") if isinstance(raw, str) else raw or [])}
    raw_voters = config.get("controller.quorum.voters") or []
    voters = [v for v in (raw_voters.split(",") if isinstance(raw_voters, str) else raw_voters) if str(v).strip()]
    return roles == {"broker"} or (roles == {"broker", "controller"} and len(voters) > 1)


def _failed(verb: str, error: ErrorCode) -> ShareRpcResult:
    if error in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.REQUEST_TIMED_OUT):
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE
    elif error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        error = ErrorCode.NOT_COORDINATOR
    return ShareRpcResult(error, f"Unable to {verb} share group state: {error.message}")


def _delta(current: list[StateBatch], new: list[StateBatch], start_offset: int) -> list[StateBatch] | None:
    """The state batches a ShareUpdate needs so that merging it into `current` gives `new` (at
    `start_offset`): the batches of `new` that `current` does not hold as they are, else all of `new`;
    None when no update can (a batch of `current` has to disappear without the start offset passing it:
    that takes a snapshot)."""
    target = combine_state_batches([], new, start_offset)
    held = set(current)
    changed = [b for b in new if b not in held]
    for candidate in (changed, list(new)):
        if combine_state_batches(current, candidate, start_offset) == target:
            return candidate
    return None


def _ignore(_value: object) -> None:
    return None


def _deleting(key: SharePartitionKey) -> Callable[[ShareCoordinatorShard], ErrorCode]:
    return lambda shard: shard.delete_state(key)
