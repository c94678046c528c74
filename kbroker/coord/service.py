"""The group coordinator service: what the group API handlers call (Kafka's GroupCoordinatorService).

It owns a `CoordinatorRuntime` of `GroupCoordinatorShard`s, one per `__consumer_offsets` partition this
broker leads, routes each request to the shard of its group (`partition_for`) as a write operation
(JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetDelete, DeleteGroups,
ConsumerGroupHeartbeat) or a read operation (OffsetFetch, DescribeGroups, ListGroups,
ConsumerGroupDescribe), and answers once the runtime releases the answer: after the high watermark
of the partition passed every record the operation (and those before it) wrote. An answer is the
value itself when it is already committed (the single-replica case: no future is made), else a loop
future. Requests that wait inside the state machine (JoinGroup until the join phase completes,
SyncGroup until the leader's assignment) answer through their callback, which the service wraps so
that it too waits for the commit of whatever operation completes it.

Lifecycle: `startup` loads every hosted partition (one per event-loop turn; groups answer
COORDINATOR_LOAD_IN_PROGRESS meanwhile) and starts the periodic offset expiry; `create_offsets_topic`
creates `__consumer_offsets` through the controller on first use (FindCoordinator);
`shutdown` unloads everything (waiting requests get NOT_COORDINATOR, timers stop). As a metadata
publisher it loads and unloads partitions as this broker gains and loses their leadership.

Must not import kbroker.net or kbroker.api.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, TypeAlias, TypeVar, Union, cast

from kbroker.coord.config import map_append_error
from kbroker.coord.consumer_coordinator import HeartbeatRequestData, HeartbeatResult
from kbroker.coord.consumer_group import ConsumerGroup
from kbroker.coord.coordinator_runtime import Append, CoordinatorRuntime, CoordinatorTimer
from kbroker.coord.group import JoinResult, SyncResult
from kbroker.coord.group_config import GroupConfig
from kbroker.coord.group_metadata_manager import GroupDescription
from kbroker.coord.offset_metadata_manager import CommitRequestPartition, FetchedOffset
from kbroker.coord.runtime import (
    GROUP_METADATA_TOPIC,
    CoordinatorPartitions,
    LoopScheduler,
    PeriodicTask,
    coordinator_config,
    partition_for,
)
from kbroker.coord.shard import GroupCoordinatorShard
from kbroker.coord.share_group import ShareGroup
from kbroker.coord.share_group_initialization import InitializeRequest, TopicPartitions
from kbroker.coord.share_group_protocol import ShareHeartbeatRequestData, ShareMemberListener
from kbroker.coord.share_group_state_client import (
    GroupStatePersister,
    delete_share_state,
    initialize_share_state,
)
from kbroker.metadata.image import ConfigResource, ConfigResourceType
from kbroker.metrics.meters import GROUP_COORDINATOR_METRICS
from kbroker.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kbroker.config import KafkaConfig
    from kbroker.controller.controller import Controller
    from kbroker.metadata.cache import MetadataCache
    from kbroker.metadata.delta import MetadataDelta
    from kbroker.metadata.image import MetadataImage
    from kbroker.metadata.loader import LoaderManifest
    from kbroker.replica.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

T = TypeVar("T")
U = TypeVar("U")
# An answer: the value when it is committed already, else a future completed when it is.
Answer: TypeAlias = Union[T, "asyncio.Future[T]"]  # noqa: UP007 - a generic alias over a TypeVar


class GroupCoordinatorService:
    """The broker's group coordinator (what the group API handlers call), and a metadata publisher:
    it loads a `__consumer_offsets` partition when this broker becomes its leader, unloads it when the
    broker stops leading it, and removes the committed offsets of deleted topics."""

    name = "GroupCoordinator"

    def __init__(self, config: KafkaConfig, replica_manager: ReplicaManager, controller: Controller,
                 metadata: MetadataCache, time_ms: Callable[[], int]) -> None:
        self.config = config
        self.replica_manager = replica_manager
        self.controller = controller
        self.metadata = metadata
        self.time_ms = time_ms
        self.coordinator_config = coordinator_config(config)
        self.active = False
        self.scheduler: LoopScheduler | None = None
        self.runtime: CoordinatorRuntime[GroupCoordinatorShard] | None = None
        self.partitions: CoordinatorPartitions[GroupCoordinatorShard] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._expiry: PeriodicTask | None = None
        # Told when a share-group member leaves or is fenced (the share-partition manager releases
        # the records it acquired); set by the wiring.
        self.share_member_listener: ShareMemberListener | None = None
        self.share_group_deleted_listener: Callable[[str], None] | None = None
        # KIP-932 (ShareGroupStatePartitionMetadata): the share coordinator the group coordinator
        # initializes and deletes share-partition states through; None: no share coordinator (tests).
        self.share_state_persister: GroupStatePersister | None = None
        self._share_tasks: set[asyncio.Task[None]] = set()

    # -- lifecycle -----------------------------------------------------------------------------------

    def startup(self) -> None:
        """Load every hosted `__consumer_offsets` partition (one per loop turn) and start offset expiry."""
        loop = self._loop = asyncio.get_running_loop()
        # A failed write as Kafka's normalizeException: a timeout -> COORDINATOR_NOT_AVAILABLE, a lost
        # leadership -> NOT_COORDINATOR (the client looks for the coordinator again).
        partitions = self.partitions = CoordinatorPartitions.start(
            GROUP_METADATA_TOPIC, self.replica_manager, self._new_shard, loop=loop, time_ms=lambda: self.time_ms(),
            write_timeout_ms=int(self.config["offsets.commit.timeout.ms"]), map_write_error=map_append_error)
        self.scheduler = partitions.scheduler
        self.runtime = partitions.runtime
        self.active = True
        info = self.metadata.topic(GROUP_METADATA_TOPIC)
        if info is not None:
            partitions.load_hosted(info.num_partitions)
        self._expiry = PeriodicTask(loop, int(self.config["offsets.retention.check.interval.ms"]), self._expire_offsets,
                                    self._running)

    def _new_shard(self, partition: int, timer: CoordinatorTimer, append: Append) -> GroupCoordinatorShard:
        shard = GroupCoordinatorShard(self.coordinator_config, timer, lambda _group, records: append(records),
                                      lambda: self.time_ms(), topics=self.metadata)
        shard.offset_manager.txn_writer = lambda records, pid, epoch: append(records, (pid, epoch))

        def initialized_partitions(group_id: str) -> TopicPartitions | None:
            # Assignment gating only where the group coordinator initializes share-partition states.
            if self.share_state_persister is None:
                return None
            return shard.share_state_partitions.initialized_partitions(group_id)

        shard.group_manager.share.initialized_partitions = initialized_partitions
        shard.group_manager.share.listener = self._on_share_member_left
        shard.group_manager.share.deleted_listener = self._on_share_group_deleted
        shard.group_manager.group_config = self.group_config
        return shard

    def group_config(self, group_id: str) -> GroupConfig:
        """The group's configs: its GROUP resource in the metadata image over the broker's keys."""
        overrides = self.metadata.image.configs.config_map(ConfigResource(ConfigResourceType.GROUP, group_id))
        return GroupConfig.evaluate(overrides, lambda key: self.config[key] if key in self.config else None)

    def _on_share_member_left(self, group_id: str, member_id: str) -> None:
        if self.share_member_listener is not None:
            self.share_member_listener(group_id, member_id)

    def _on_share_group_deleted(self, group_id: str) -> None:
        if self.share_group_deleted_listener is not None:
            self.share_group_deleted_listener(group_id)

    def _running(self) -> bool:
        return self.active and self.runtime is not None

    def _expire_offsets(self) -> None:
        if self.runtime is not None:
            for p, _shard in self.runtime.active_shards():
                self.runtime.write(p, lambda shard: shard.expire_offsets(), _ignore, _ignore)

    def shutdown(self) -> None:
        """Answer every waiting JoinGroup/SyncGroup with NOT_COORDINATOR and stop all timers."""
        self.active = False
        if self._expiry is not None:
            self._expiry.cancel()
        if self.runtime is not None:
            self.runtime.close()
        if self.scheduler is not None:
            self.scheduler.cancel_all()
        for task in list(self._share_tasks):
            task.cancel()

    def on_topics_deleted(self, names: list[str]) -> None:
        """Hook for topic deletion: committed offsets of deleted topics are removed, as Kafka does."""
        if not self.active or self.runtime is None:
            return
        topics = set(names)
        for p, _shard in self.runtime.active_shards():
            self.runtime.write(p, lambda shard: shard.remove_offsets_of_topics(topics), _ignore, _ignore)

    @property
    def loading(self) -> set[int]:
        """The partitions still loading."""
        if self.runtime is None:
            return set()
        return {p for p in self.runtime.partitions() if self.runtime.status(p) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}

    # -- ownership -----------------------------------------------------------------------------------

    def num_partitions(self) -> int:
        info = self.metadata.topic(GROUP_METADATA_TOPIC)
        if info is not None:
            return int(info.num_partitions)
        return int(self.config["offsets.topic.num.partitions"])

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions())

    def _partition(self, group_id: str) -> int:
        """The group's partition, its shard loaded (or loading) when this broker hosts it and dropped
        when it no longer does."""
        p = self.partition_for(group_id)
        if self.partitions is not None and self.active:
            self.partitions.sync(p)
        return p

    def group_status(self, group_id: str) -> ErrorCode:
        if not self.active or self.runtime is None:
            return ErrorCode.NOT_COORDINATOR
        return self.runtime.status(self._partition(group_id))

    def offsets_topic_status(self) -> ErrorCode:
        """NONE once `__consumer_offsets` exists, COORDINATOR_NOT_AVAILABLE before."""
        if self.metadata.topic(GROUP_METADATA_TOPIC) is not None:
            return ErrorCode.NONE
        return ErrorCode.COORDINATOR_NOT_AVAILABLE

    async def create_offsets_topic(self) -> ErrorCode:
        """Create `__consumer_offsets` on first use through the controller, as Kafka's FindCoordinator
        does. The metadata publisher below loads its (empty) partitions as the creation commits."""
        if self.metadata.topic(GROUP_METADATA_TOPIC) is not None:
            return ErrorCode.NONE
        partitions = int(self.config["offsets.topic.num.partitions"])
        configs = {
            "cleanup.policy": "compact",
            "compression.type": "producer",
            "segment.bytes": str(int(self.config["offsets.topic.segment.bytes"])),
        }
        # A single node caps offsets.topic.replication.factor at itself (docs/consumer-groups.md). A broker
        # in a KRaft cluster (process.roles=broker) asks for the configured factor, as Kafka does: with
        # fewer live brokers the controller refuses (INVALID_REPLICATION_FACTOR) and FindCoordinator
        # answers COORDINATOR_NOT_AVAILABLE until enough brokers have registered (issue 12).
        raw_roles = self.config["process.roles"]
        roles = {str(r).strip() for r in (raw_roles.split(",") if isinstance(raw_roles, str) else raw_roles or [])}
        raw_voters = self.config.get("controller.quorum.voters") or []
        voters = [v for v in (raw_voters.split(",") if isinstance(raw_voters, str) else raw_voters) if str(v).strip()]
        # A combined node of a multi-voter quorum is a cluster member too; a one-voter one caps as the single node.
        in_cluster = roles == {"broker"} or (roles == {"broker", "controller"} and len(voters) > 1)
        replication_factor = int(self.config["offsets.topic.replication.factor"]) if in_cluster else 1
        try:
            await self.controller.create_topic(GROUP_METADATA_TOPIC, num_partitions=partitions,
                                               replication_factor=replication_factor, configs=configs)
        except KafkaError as exc:
            if exc.error_code == ErrorCode.TOPIC_ALREADY_EXISTS:
                return ErrorCode.NONE
            log.warning("Cannot create %s: %s", GROUP_METADATA_TOPIC, exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        log.info("Created %s with %d partitions", GROUP_METADATA_TOPIC, partitions)
        return ErrorCode.NONE

    # -- metadata publisher (Kafka's GroupCoordinator.onElection / onResignation) ---------------------

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage, manifest: LoaderManifest) -> None:
        topics = delta.topics_delta
        if topics is None:
            return
        if topics.deleted_topic_ids:
            self.on_topics_deleted(sorted(t.name for t in topics.deleted_topics()))
            self.cleanup_share_group_state(set(topics.deleted_topic_ids))
        if self.active and self.partitions is not None:  # before startup(), it loads whatever is hosted then
            self.partitions.on_metadata_update(delta, self.metadata.node_id)

    # -- running operations --------------------------------------------------------------------------

    def _call(self, group_id: str, op: Callable[[GroupCoordinatorShard], T], on_error: Callable[[ErrorCode], T],
              read: bool = False) -> Answer[T]:
        return self._call_partition(self._partition(group_id), op, on_error, read)

    def _call_partition(self, partition: int, op: Callable[[GroupCoordinatorShard], T],
                        on_error: Callable[[ErrorCode], T], read: bool = False) -> Answer[T]:
        if self.runtime is None or not self.active:
            return on_error(ErrorCode.NOT_COORDINATOR)
        box: list[T] = []
        future: asyncio.Future[T] | None = None

        def complete(value: object) -> None:  # the runtime hands back what `op` returned: a T
            result = cast(T, value)
            if future is None:
                box.append(result)
            elif not future.done():
                future.set_result(result)

        def fail(error: ErrorCode) -> None:
            complete(on_error(error))

        if read:
            self.runtime.read(partition, op, complete, fail)
        else:
            self.runtime.write(partition, op, complete, fail)
        if box:
            return box[0]
        assert self._loop is not None
        future = self._loop.create_future()
        return future

    def _deferring(self, respond: Callable[[T], None], on_error: Callable[[ErrorCode], T]) -> Callable[[T], None]:
        """A callback for the state machine: its answer is sent once the operation that produced it
        committed (or `on_error` if it never does)."""
        runtime = self.runtime

        def deferred(result: T) -> None:
            if runtime is None:
                respond(result)
            else:
                runtime.defer(lambda: respond(result), lambda error: respond(on_error(error)))

        return deferred

    # -- the classic protocol ------------------------------------------------------------------------

    def join_group(self, group_id: str, member_id: str, group_instance_id: str | None, protocol_type: str,
                   protocols: list[tuple[str, bytes]], session_timeout_ms: int, rebalance_timeout_ms: int,
                   client_id: str, client_host: str, require_known_member_id: bool,
                   respond: Callable[[JoinResult], None], supports_skip_assignment: bool = False) -> None:
        def on_error(error: ErrorCode) -> JoinResult:
            return JoinResult(error, member_id)

        answer = self._deferring(respond, on_error)
        self._call(group_id, lambda shard: shard.join_group(
            group_id, member_id, group_instance_id, protocol_type, protocols, session_timeout_ms,
            rebalance_timeout_ms, client_id, client_host, require_known_member_id, answer,
            supports_skip_assignment), lambda error: respond(on_error(error)))

    def sync_group(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                   protocol_type: str | None, protocol_name: str | None, assignments: dict[str, bytes],
                   respond: Callable[[SyncResult], None]) -> None:
        answer = self._deferring(respond, SyncResult)
        self._call(group_id, lambda shard: shard.sync_group(
            group_id, generation_id, member_id, group_instance_id, protocol_type, protocol_name, assignments,
            answer), lambda error: respond(SyncResult(error)))

    def heartbeat(self, group_id: str, generation_id: int, member_id: str,
                  group_instance_id: str | None) -> Answer[ErrorCode]:
        return self._call(group_id, lambda shard: shard.heartbeat(group_id, generation_id, member_id,
                                                                  group_instance_id), _same)

    def leave_group(self, group_id: str,
                    members: list[tuple[str, str | None]]) -> Answer[tuple[ErrorCode, list[ErrorCode]]]:
        return self._call(group_id, lambda shard: shard.leave_group(group_id, members), lambda e: (e, []))

    def describe_group(self, group_id: str, not_classic_error: bool = False
                       ) -> Answer[tuple[ErrorCode, str | None, GroupDescription]]:
        """DescribeGroups of one group. `not_classic_error` (v6+): GROUP_ID_NOT_FOUND with a message for
        a group that is not a classic one."""
        def op(shard: GroupCoordinatorShard) -> tuple[ErrorCode, str | None, GroupDescription]:
            if not_classic_error and group_id not in shard.groups:
                message = f"Group {group_id} is not a classic group." \
                    if group_id in shard.consumer_groups or group_id in shard.group_manager.share_groups \
                    else f"Group {group_id} not found."
                return ErrorCode.GROUP_ID_NOT_FOUND, message, GroupDescription(group_id, "Dead", "", "", [])
            error, description = shard.describe_group(group_id)
            return error, None, description

        return self._call(group_id, op, lambda e: (e, None, GroupDescription(group_id, "Dead", "", "", [])),
                          read=True)

    def list_groups(self, states: list[str], types: list[str]) -> Answer[list[tuple[str, str, str, str]]]:
        """(group id, protocol type, state, type) of every group of the loaded partitions."""
        if self.runtime is None or not self.active:
            return []
        parts = [self._call_partition(p, lambda shard: shard.list_groups(states, types), lambda _e: [], read=True)
                 for p, _shard in self.runtime.active_shards()]
        return then(gather(parts), lambda lists: sorted(entry for listed in lists for entry in listed))

    def delete_groups(self, group_ids: list[str]) -> Answer[list[ErrorCode]]:
        def delete(gid: str) -> Answer[ErrorCode]:
            return self._call(gid, lambda shard: shard.delete_groups([gid])[0], _same)

        persister = self.share_state_persister
        if persister is None or self._loop is None:
            return gather([delete(gid) for gid in group_ids])

        async def delete_with_share_state(gid: str) -> ErrorCode:
            # Kafka's deleteShareGroups: a share group's initialized and initializing topics move to
            # deleting, their states are deleted through the persister, then the group is deleted.
            def prepare(shard: GroupCoordinatorShard) -> tuple[ErrorCode, TopicPartitions]:
                group = shard.group_manager.share_groups.get(gid)
                if group is None or group.members or shard.group_status(gid) != ErrorCode.NONE:
                    return ErrorCode.NONE, {}  # not a deletable share group: DeleteGroups answers why
                return shard.share_state_partitions.prepare_delete(gid)

            error, partitions = await _awaited(self._call(gid, prepare, lambda e: (e, {})))
            if error == ErrorCode.NONE and partitions:
                error = await delete_share_state(persister, gid, partitions)
            if error != ErrorCode.NONE:
                return error
            return await _awaited(delete(gid))

        def is_share_group(gid: str) -> bool:
            shard = self.shard_for(gid)
            return shard is not None and gid in shard.group_manager.share_groups

        loop = self._loop
        return gather([loop.create_task(delete_with_share_state(gid)) if is_share_group(gid) else delete(gid)
                       for gid in group_ids])

    # -- offsets -------------------------------------------------------------------------------------

    def commit_offsets(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                       retention_ms: int, partitions: list[CommitRequestPartition],
                       api_version: int = 8) -> Answer[list[ErrorCode]]:
        return self._call(group_id, lambda shard: shard.commit_offsets(
            group_id, generation_id, member_id, group_instance_id, retention_ms, partitions, api_version),
            lambda e: [e] * len(partitions))

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None, member_id: str | None = None,
                      member_epoch: int = -1,
                      require_stable: bool = False) -> Answer[tuple[ErrorCode, list[FetchedOffset]]]:
        return self._call(group_id, lambda shard: shard.fetch_offsets(group_id, partitions, member_id, member_epoch,
                                                                      require_stable),
                          lambda e: (e, []), read=True)

    def delete_offsets(self, group_id: str,
                       partitions: list[tuple[str, int]]) -> Answer[tuple[ErrorCode, list[ErrorCode]]]:
        return self._call(group_id, lambda shard: shard.delete_offsets(group_id, partitions), lambda e: (e, []))

    def txn_commit_offsets(self, group_id: str, producer_id: int, producer_epoch: int, generation_id: int,
                           member_id: str, group_instance_id: str | None,
                           partitions: list[CommitRequestPartition]) -> Answer[list[ErrorCode]]:
        """TxnOffsetCommit: offsets held until the producer's transaction commits."""
        return self._call(group_id, lambda shard: shard.offset_manager.txn_commit_offsets(
            group_id, producer_id, producer_epoch, generation_id, member_id, group_instance_id, partitions),
            lambda e: [e] * len(partitions))

    def complete_transaction(self, partition: int, producer_id: int, commit: bool) -> None:
        """A transaction marker was written to `__consumer_offsets` partition `partition`."""
        if self.runtime is None or not self.active:
            return
        self.runtime.write(partition, lambda shard: shard.offset_manager.complete_txn(producer_id, commit),
                           _ignore, _ignore)

    # -- the consumer protocol (KIP-848) -------------------------------------------------------------

    def consumer_group_heartbeat(self, req: HeartbeatRequestData) -> Answer[HeartbeatResult]:
        return self._call(req.group_id, lambda shard: shard.consumer_group_heartbeat(req), HeartbeatResult)

    def consumer_group_describe(self, group_id: str
                                ) -> Answer[tuple[ErrorCode, str | None, ConsumerGroup | None, str]]:
        """(error, message, the group, its preferred assignor)."""
        def op(shard: GroupCoordinatorShard) -> tuple[ErrorCode, str | None, ConsumerGroup | None, str]:
            error, message, group = shard.consumer_group_describe(group_id)
            assignor = shard.group_manager.preferred_assignor(group) if group is not None else ""
            return error, message, group, assignor

        return self._call(group_id, op, lambda e: (e, None, None, ""), read=True)

    # -- share groups (KIP-932) ----------------------------------------------------------------------

    def share_group_heartbeat(self, req: ShareHeartbeatRequestData) -> Answer[HeartbeatResult]:
        def op(shard: GroupCoordinatorShard) -> HeartbeatResult:
            before = shard.group_manager.share_groups.get(req.group_id)
            epoch = before.group_epoch if before is not None else 0
            result = shard.share_group_heartbeat(req)
            after = shard.group_manager.share_groups.get(req.group_id)
            if result.error == ErrorCode.NONE and req.member_epoch != -1 and after is not None \
                    and after.group_epoch > epoch:
                GROUP_COORDINATOR_METRICS.share_rebalances += 1  # Kafka's share-group-rebalance-count
            self._maybe_initialize_share_state(shard, req.group_id, result)
            return result

        # Answered at once: the partitions being initialized are not assigned until initialized (the
        # share protocol's assignment gating), so no member fetches them before.
        return self._call(req.group_id, op, HeartbeatResult)

    # -- share-partition state metadata (ShareGroupStatePartitionMetadata) -----------------------------

    def _maybe_initialize_share_state(self, shard: GroupCoordinatorShard, group_id: str,
                                      result: HeartbeatResult) -> None:
        """After a share-group heartbeat: the subscribed partitions not initialized yet are recorded as
        initializing and initialized through the persister, after the heartbeat (Kafka adds a timer task)."""
        group = shard.group_manager.share_groups.get(group_id)
        if result.error != ErrorCode.NONE or group is None or self.share_state_persister is None \
                or self._loop is None:
            return
        request = shard.share_state_partitions.maybe_initialize(group_id, group.group_epoch,
                                                                group.subscribed_topic_names())
        if request is not None:
            self._spawn_share_task(self._initialize_share_state(request))

    def _spawn_share_task(self, coro: Coroutine[object, object, None]) -> asyncio.Task[None]:
        assert self._loop is not None
        task = self._loop.create_task(coro)
        self._share_tasks.add(task)
        task.add_done_callback(self._share_tasks.discard)
        return task

    async def _initialize_share_state(self, request: InitializeRequest) -> None:
        persister = self.share_state_persister
        if persister is None:
            return
        gid = request.group_id
        try:
            done, failed = await initialize_share_state(persister, request)
        except Exception:  # noqa: BLE001 - Kafka: "Persister initialization failed", uninitialized
            log.exception("Persister initialization of share group %s failed", gid)
            done, failed = {}, {tid: set(ps) for tid, ps in request.partitions.items()}
        if done:
            error = await _awaited(self._call(gid, lambda shard: shard.share_state_partitions.initialize_succeeded(
                gid, done), _same))
            if error != ErrorCode.NONE:
                failed = {**failed, **done}
        if failed:
            await _awaited(self._call(gid, lambda shard: shard.share_state_partitions.initialize_failed(gid, failed),
                                      _same))

    def share_initialized_partitions(self, group_id: str) -> Answer[TopicPartitions]:
        """Kafka's `initializedShareGroupPartitions`: what DescribeShareGroupOffsets lists without topics."""
        return self._call(group_id, lambda shard: shard.share_state_partitions.initialized_partitions(group_id),
                          lambda _e: {}, read=True)

    def share_state_initialized(self, group_id: str, partitions: TopicPartitions) -> Answer[ErrorCode]:
        """AlterShareGroupOffsets initialized these share-partitions through the persister."""
        return self._call(group_id, lambda shard: shard.share_state_partitions.initialize_succeeded(
            group_id, partitions), _same)

    def share_state_deleted(self, group_id: str, topic_ids: set[uuid.UUID]) -> Answer[ErrorCode]:
        """DeleteShareGroupOffsets deleted these topics' share-partition states."""
        return self._call(group_id, lambda shard: shard.share_state_partitions.remove_topics(group_id, topic_ids),
                          _same)

    def cleanup_share_group_state(self, topic_ids: set[uuid.UUID]) -> None:
        """Deleted topics leave every share group's ShareGroupStatePartitionMetadata (Kafka's
        `maybeCleanupShareGroupState`)."""
        if not self.active or self.runtime is None:
            return
        for p, _shard in self.runtime.active_shards():
            self.runtime.write(p, lambda shard: shard.share_state_partitions.on_topics_deleted(topic_ids),
                               _ignore, _ignore)

    def share_group_describe(self, group_id: str) -> Answer[tuple[ErrorCode, str | None, ShareGroup | None]]:
        return self._call(group_id, lambda shard: shard.share_group_describe(group_id), lambda e: (e, None, None),
                          read=True)

    def share_offsets_alterable(self, group_id: str, create: bool) -> Answer[tuple[ErrorCode, str | None]]:
        """AlterShareGroupOffsets (`create`) / DeleteShareGroupOffsets: (error, message) of the group check."""
        return self._call(group_id, lambda shard: shard.share_offsets_alterable(group_id, create),
                          lambda e: (e, None))

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        info = self.metadata.topic_by_id(topic_id)
        return None if info is None else str(info.name)

    # -- tests and tools -----------------------------------------------------------------------------

    def shard_for(self, group_id: str) -> GroupCoordinatorShard | None:
        """The loaded shard that owns `group_id` (None when not loaded here)."""
        if self.runtime is None:
            return None
        ctx = self.runtime.context(self._partition(group_id))
        return None if ctx is None else ctx.shard


def _ignore(_value: object) -> None:
    return None


async def _awaited(answer: Answer[T]) -> T:
    if isinstance(answer, asyncio.Future):
        return cast(T, await answer)
    return answer


def _same(value: T) -> T:
    return value


def then(answer: Answer[T], fn: Callable[[T], U]) -> Answer[U]:
    """`fn(value)` now when the answer is there, else a future of it."""
    if not isinstance(answer, asyncio.Future):
        return fn(answer)
    out: asyncio.Future[U] = answer.get_loop().create_future()

    def done(f: asyncio.Future[T]) -> None:
        if out.done():
            return
        try:
            out.set_result(fn(f.result()))
        except Exception as exc:  # noqa: BLE001 - handed to whoever awaits
            out.set_exception(exc)

    answer.add_done_callback(done)
    return out


def gather(answers: list[Answer[T]]) -> Answer[list[T]]:
    """The answers in order: a list when all are there, else a future of the list."""
    waiting = [a for a in answers if isinstance(a, asyncio.Future)]
    if not waiting:
        return [a for a in answers if not isinstance(a, asyncio.Future)]
    out: asyncio.Future[list[T]] = waiting[0].get_loop().create_future()

    def done(_f: object) -> None:
        if out.done() or not all(f.done() for f in waiting):
            return
        try:
            out.set_result([a.result() if isinstance(a, asyncio.Future) else a for a in answers])
        except Exception as exc:  # noqa: BLE001 - handed to whoever awaits
            out.set_exception(exc)

    for f in waiting:
        f.add_done_callback(done)
    return out


__all__ = ["Answer", "GroupCoordinatorService", "gather", "then"]
