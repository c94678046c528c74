"""The transaction coordinator service (Kafka's TransactionCoordinator + TransactionStateManager +
TransactionMarkerChannelManager, on the coordinator runtime).

It owns a `CoordinatorRuntime` of `TransactionStateShard`s, one per `__transaction_state` partition this
broker leads (`abs(hashCode(transactional.id)) % transaction.state.log.num.partitions`, as Kafka's
`partitionFor`), loaded from the log when the broker becomes leader (a metadata publisher, like the
group coordinator) and answering COORDINATOR_LOAD_IN_PROGRESS meanwhile. `__transaction_state` is
created on first use (FindCoordinator key type 1 or InitProducerId with a transactional id), compacted,
with `transaction.state.log.num.partitions` partitions and `transaction.state.log.segment.bytes`
segments. On a single node its replication factor is capped at 1 (as `offsets.topic.replication.factor`
is); a broker of a KRaft cluster (`process.roles=broker`) asks the controller for
`transaction.state.log.replication.factor` with `min.insync.replicas` = `transaction.state.log.min.isr`,
as Kafka does, and the coordinator follows the leadership of its partitions (load on becoming leader,
unload on becoming follower, through this publisher).

Markers (`transaction_marker_channel.py`, Kafka's TransactionMarkerChannelManager): once PrepareCommit /
PrepareAbort is committed, the markers go to each partition's current leader: appended in-process for
partitions led here (`write_marker_replicated`, what the WriteTxnMarkers handler also calls: the
append, then acks=all), sent in WriteTxnMarkers requests to other brokers. CompleteCommit /
CompleteAbort is written when every marker is acknowledged. EndTxn (and an InitProducerId that had
to abort an open transaction) is answered once the transaction completed, so the producer's next
transaction never meets CONCURRENT_TRANSACTIONS (Kafka answers after PrepareX; if the coordinator
moves meanwhile the client retries EndTxn on the new one, which answers once it completed). A marker
for a `__consumer_offsets` partition also completes the group coordinator's pending transactional
offsets.

The periodic task `transaction.abort.timed.out.transaction.cleanup.interval.ms` aborts transactions
older than their `transaction.timeout.ms` with a bumped epoch (the producer is fenced).

Must not import kbroker.net or kbroker.api.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar, cast

from kbroker.coord.coordinator_runtime import Append, CoordinatorRuntime, CoordinatorTimer
from kbroker.coord.runtime import (
    CoordinatorPartitions,
    LoopScheduler,
    PeriodicTask,
    partition_for,
)
from kbroker.coord.service import Answer
from kbroker.coord.transaction_marker_channel import (
    NO_LEADER,
    PendingCompleteTxn,
    TransactionMarkerChannelManager,
)
from kbroker.coord.transaction_state import (
    MAX_EPOCH,
    TV_2,
    EndTxnResult,
    InitResult,
    TopicPartition,
    TransactionMetadata,
    TransactionState,
    TransactionStateShard,
)
from kbroker.coord.transaction_verifier import TransactionVerifier, add_partition_error
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.topic import GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME

if TYPE_CHECKING:
    from kbroker.config import KafkaConfig
    from kbroker.controller.controller import Controller
    from kbroker.coord.producer_id_manager import ProducerIdManager
    from kbroker.coord.service import GroupCoordinatorService
    from kbroker.metadata.cache import MetadataCache
    from kbroker.metadata.delta import MetadataDelta
    from kbroker.metadata.image import MetadataImage
    from kbroker.metadata.loader import LoaderManifest
    from kbroker.replica.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

T = TypeVar("T")
TRANSACTION_STATE_TOPIC = TRANSACTION_STATE_TOPIC_NAME
TRANSACTION_VERSION_FEATURE = "transaction.version"


def _map_write_error(error: ErrorCode) -> ErrorCode:
    """A `__transaction_state` write that did not commit: a lost partition -> NOT_COORDINATOR, anything
    else (a timeout) -> COORDINATOR_NOT_AVAILABLE."""
    if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
        return ErrorCode.NOT_COORDINATOR
    return ErrorCode.COORDINATOR_NOT_AVAILABLE


class TransactionCoordinatorService:
    """What the transaction API handlers call; a metadata publisher for `__transaction_state`."""

    name = "TransactionCoordinator"

    def __init__(self, config: KafkaConfig, replica_manager: ReplicaManager, controller: Controller,
                 metadata: MetadataCache, producer_ids: ProducerIdManager, groups: GroupCoordinatorService,
                 time_ms: Callable[[], int]) -> None:
        self.config = config
        self.replica_manager = replica_manager
        self.controller = controller
        self.metadata = metadata
        self.producer_ids = producer_ids
        self.groups = groups
        self.time_ms = time_ms
        self.active = False
        self.runtime: CoordinatorRuntime[TransactionStateShard] | None = None
        self.partitions: CoordinatorPartitions[TransactionStateShard] | None = None
        self.scheduler: LoopScheduler | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._abort_timer: PeriodicTask | None = None
        self._expire_timer: PeriodicTask | None = None
        self.markers: TransactionMarkerChannelManager | None = None
        self.verifier: TransactionVerifier | None = None
        # Transactions whose markers are on their way, by (__transaction_state partition, id), and what
        # waits for their completion (the EndTxn / InitProducerId answers).
        self._completing: dict[tuple[int, str], list[Callable[[ErrorCode], None]]] = {}

    # -- lifecycle -----------------------------------------------------------------------------------

    def startup(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        partitions = self.partitions = CoordinatorPartitions.start(
            TRANSACTION_STATE_TOPIC, self.replica_manager, self._new_shard, loop=loop, time_ms=lambda: self.time_ms(),
            write_timeout_ms=int(self.config["offsets.commit.timeout.ms"]), map_write_error=_map_write_error,
            on_unload=self._on_unloaded)
        self.scheduler = partitions.scheduler
        self.runtime = partitions.runtime
        timeout_ms = int(self.config.get("request.timeout.ms", 30000))
        self.markers = TransactionMarkerChannelManager(
            self.metadata.node_id, self._leader_of, self._endpoint_of, self._write_local_marker,
            self._on_markers_written, request_timeout_ms=timeout_ms, retry_backoff_ms=100,
            security=self.config.inter_broker_security())
        self.verifier = TransactionVerifier(self.metadata.node_id, self._endpoint_of, request_timeout_ms=timeout_ms,
                                            security=self.markers.security)
        self.active = True
        info = self.metadata.topic(TRANSACTION_STATE_TOPIC)
        if info is not None:
            partitions.load_hosted(info.num_partitions)
        self._abort_timer = PeriodicTask(
            loop, int(self.config["transaction.abort.timed.out.transaction.cleanup.interval.ms"]),
            self.abort_timed_out_transactions, self._running)
        self._expire_timer = PeriodicTask(
            loop, int(self.config["transaction.remove.expired.transaction.cleanup.interval.ms"]),
            self.expire_transactional_ids, self._running)

    def shutdown(self) -> None:
        self.active = False
        for timer in (self._abort_timer, self._expire_timer):
            if timer is not None:
                timer.cancel()
        if self.markers is not None:
            self.markers.close()
        if self.verifier is not None:
            self.verifier.close()
        if self.runtime is not None:
            self.runtime.close()
        if self.scheduler is not None:
            self.scheduler.cancel_all()
        for key in list(self._completing):
            self._finish(key, ErrorCode.NOT_COORDINATOR)

    def _new_shard(self, partition: int, timer: CoordinatorTimer,
                   append: Append) -> TransactionStateShard:
        hosted = self.replica_manager.get_partition(TRANSACTION_STATE_TOPIC, partition)
        # The coordinator epoch is the partition's leader epoch (Kafka: the epoch of the
        # __transaction_state partition's leadership), carried in every marker.
        epoch = max(0, int(hosted.leader_epoch)) if hosted is not None else 0
        return TransactionStateShard(partition, append,
                                     lambda m, commit: self._send_markers(partition, epoch, m, commit),
                                     lambda: self.time_ms(), epoch, self.transaction_version)

    def _running(self) -> bool:
        return self.active and self.runtime is not None

    def expire_transactional_ids(self) -> None:
        if self.runtime is None:
            return
        now = self.time_ms()
        expiration = int(self.config["transactional.id.expiration.ms"])
        for p, _shard in self.runtime.active_shards():
            self.runtime.write(p, lambda shard: shard.expire_transactional_ids(now, expiration), _ignore, _ignore)

    def abort_timed_out_transactions(self) -> None:
        if self.runtime is None:
            return
        now = self.time_ms()
        for p, _shard in self.runtime.active_shards():
            def op(shard: TransactionStateShard) -> list[str]:
                aborted = shard.abort_timed_out(now)
                for tid in aborted:
                    log.info("Aborted the timed-out transaction of %s", tid)
                return aborted

            self.runtime.write(p, op, _ignore, _ignore)

    def transaction_version(self) -> int:
        """The finalized `transaction.version` of the cluster (0 when absent): 2 turns on transactions
        version 2 (KIP-890 part 2) for the clients that read it from ApiVersions."""
        return int(self.metadata.image.features.level(TRANSACTION_VERSION_FEATURE))

    # -- ownership -----------------------------------------------------------------------------------

    def num_partitions(self) -> int:
        info = self.metadata.topic(TRANSACTION_STATE_TOPIC)
        if info is not None:
            return int(info.num_partitions)
        return int(self.config["transaction.state.log.num.partitions"])

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions())

    def state_topic_status(self) -> ErrorCode:
        if self.metadata.topic(TRANSACTION_STATE_TOPIC) is not None:
            return ErrorCode.NONE
        return ErrorCode.COORDINATOR_NOT_AVAILABLE

    async def create_state_topic(self) -> ErrorCode:
        if self.metadata.topic(TRANSACTION_STATE_TOPIC) is not None:
            return ErrorCode.NONE
        in_cluster = self._in_kraft_cluster()
        configs = {
            "cleanup.policy": "compact",
            "compression.type": "uncompressed",
            "min.insync.replicas": str(int(self.config["transaction.state.log.min.isr"])) if in_cluster else "1",
            "segment.bytes": str(int(self.config["transaction.state.log.segment.bytes"])),
            "unclean.leader.election.enable": "false",
        }
        # With fewer live brokers than the factor the controller refuses (INVALID_REPLICATION_FACTOR) and
        # FindCoordinator answers COORDINATOR_NOT_AVAILABLE until enough have registered, as Kafka.
        replication_factor = int(self.config["transaction.state.log.replication.factor"]) if in_cluster else 1
        try:
            await self.controller.create_topic(TRANSACTION_STATE_TOPIC,
                                               num_partitions=int(self.config["transaction.state.log.num.partitions"]),
                                               replication_factor=replication_factor, configs=configs)
        except KafkaError as exc:
            if exc.error_code == ErrorCode.TOPIC_ALREADY_EXISTS:
                return ErrorCode.NONE
            log.warning("Cannot create %s: %s", TRANSACTION_STATE_TOPIC, exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.NONE

    def _in_kraft_cluster(self) -> bool:
        raw = self.config["process.roles"]
        roles = {str(r).strip() for r in (raw.split(",") if isinstance(raw, str) else raw or [])}
        raw_voters = self.config.get("controller.quorum.voters") or []
        voters = [v for v in (raw_voters.split(",") if isinstance(raw_voters, str) else raw_voters) if str(v).strip()]
        # A combined node of a multi-voter quorum is a cluster member too; a one-voter one caps as the single node.
        return roles == {"broker"} or (roles == {"broker", "controller"} and len(voters) > 1)

    def _partition(self, transactional_id: str) -> int:
        p = self.partition_for(transactional_id)
        if self.partitions is not None and self.active:
            self.partitions.sync(p)
        return p

    def _on_unloaded(self, partition: int) -> None:
        """This broker stopped leading a `__transaction_state` partition (unloaded by
        `CoordinatorPartitions`): its markers in flight are dropped (the new coordinator sends them
        again) and their waiters get NOT_COORDINATOR."""
        if self.markers is not None:
            self.markers.remove_markers_for_partition(partition)
        for key in [k for k in self._completing if k[0] == partition]:
            self._finish(key, ErrorCode.NOT_COORDINATOR)

    def coordinator_status(self, transactional_id: str) -> ErrorCode:
        """NONE when this broker coordinates the id (FindCoordinator), else the reason."""
        if not self.active or self.runtime is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = self.runtime.status(self._partition(transactional_id))
        return ErrorCode.NONE if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS else error

    # -- metadata publisher --------------------------------------------------------------------------

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage, manifest: LoaderManifest) -> None:
        if self.active and self.partitions is not None:
            self.partitions.on_metadata_update(delta, self.metadata.node_id)

    # -- markers ---------------------------------------------------------------------------------------

    def _leader_of(self, topic: str, partition: int) -> int | None:
        reg = self.metadata.image.partition(topic, partition)
        if reg is None:
            return None
        return int(reg.leader) if reg.leader >= 0 else NO_LEADER

    def _endpoint_of(self, broker_id: int) -> tuple[str, int] | None:
        reg = self.metadata.image.cluster.broker(broker_id)
        if reg is None or reg.fenced:
            return None
        return self.replica_manager.endpoint_lookup(broker_id)

    def _send_markers(self, partition: int, coordinator_epoch: int, m: TransactionMetadata, commit: bool) -> None:
        """The shard prepared `m`: once that record is committed, its markers go to the leaders."""
        key = (partition, m.transactional_id)
        self._completing.setdefault(key, [])
        txn = PendingCompleteTxn(partition, coordinator_epoch, m.transactional_id, m.producer_id, m.producer_epoch,
                                 commit, set(m.partitions), transaction_version=m.client_transaction_version)

        def send() -> None:
            if self.markers is None or not self.active or self.runtime is None \
                    or self.runtime.status(partition) != ErrorCode.NONE:
                self._finish(key, ErrorCode.NOT_COORDINATOR)
                return
            self.markers.add(txn)

        assert self.runtime is not None
        self.runtime.defer(send, lambda error: self._finish(key, error))

    def _on_markers_written(self, txn: PendingCompleteTxn) -> None:
        """Every leader acknowledged: CompleteCommit / CompleteAbort."""
        key = (txn.coordinator_partition, txn.transactional_id)
        if self.runtime is None:
            self._finish(key, ErrorCode.NOT_COORDINATOR)
            return
        self.runtime.write(txn.coordinator_partition, lambda shard: shard.complete_transaction(
            txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.commit),
            lambda result: self._finish(key, cast(ErrorCode, result)), lambda error: self._finish(key, error))

    def _finish(self, key: tuple[int, str], error: ErrorCode) -> None:
        for waiter in self._completing.pop(key, []):
            try:
                waiter(error)
            except Exception:
                log.exception("Completing the transaction of %s failed", key[1])

    def _write_local_marker(self, txn: PendingCompleteTxn, topic: str, p: int) -> ErrorCode | asyncio.Future[ErrorCode]:
        return self.write_marker_replicated(topic, p, txn.producer_id, txn.producer_epoch, txn.coordinator_epoch,
                                            txn.commit, txn.transaction_version)

    def write_marker_replicated(self, topic: str, p: int, producer_id: int, producer_epoch: int,
                                coordinator_epoch: int, commit: bool,
                                transaction_version: int = 0) -> ErrorCode | asyncio.Future[ErrorCode]:
        """WriteTxnMarkers' work on one partition led here: the marker, then acks=all (Kafka appends
        markers with requiredAcks -1: a marker acknowledged to the coordinator survives a leader change)."""
        error = self.write_marker(topic, p, producer_id, producer_epoch, coordinator_epoch, commit, transaction_version)
        partition = self.replica_manager.get_partition(topic, p)
        if error != ErrorCode.NONE or partition is None:
            return error
        return self.replica_manager.await_replication((topic, p), partition.log_end_offset,
                                                      int(self.config.get("request.timeout.ms", 30000)))

    def write_marker(self, topic: str, p: int, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                     commit: bool, transaction_version: int = 0) -> ErrorCode:
        """Append one COMMIT/ABORT marker to a partition led here (no wait for the followers).
        ``transaction_version``: the marker's (WriteTxnMarkers v2, KIP-1228); 2 checks its epoch strictly."""
        partition = self.replica_manager.get_partition(topic, p)
        if partition is None:
            info = self.metadata.topic(topic)
            if info is None or not 0 <= p < info.num_partitions:
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        try:
            partition.append_txn_marker(producer_id, producer_epoch, coordinator_epoch, commit, transaction_version)
        except KafkaError as exc:
            return exc.error_code
        except OSError:
            return ErrorCode.KAFKA_STORAGE_ERROR
        self.replica_manager.on_high_watermark_moved((topic, p))
        if topic == GROUP_METADATA_TOPIC_NAME:
            self.groups.complete_transaction(p, producer_id, commit)
        return ErrorCode.NONE

    # -- KIP-890 part 1: produce verification ---------------------------------------------------------

    def add_partition_implicitly(self, transactional_id: str, producer_id: int, epoch: int, topic: str,
                                 partition: int) -> ErrorCode | asyncio.Future[ErrorCode]:
        """Transactions version 2 (KIP-890 part 2): a Produce v12+ / TxnOffsetCommit v5 of a TV2 client
        adds its partition to the transaction itself (Kafka's AddPartitionsToTxnManager with the
        `addPartition` operation): in-process when this broker coordinates the id, else AddPartitionsToTxn
        v5 with `verify_only=false` to the coordinator's broker. The answer is a produce error: NONE,
        NOT_ENOUGH_REPLICAS (coordinator unavailable, or the previous transaction still completing:
        retriable), INVALID_PRODUCER_ID_MAPPING, INVALID_PRODUCER_EPOCH (a late produce of a transaction
        that ended: its epoch is below the bumped one)."""
        if self.state_topic_status() != ErrorCode.NONE:
            return ErrorCode.NOT_ENOUGH_REPLICAS
        p = self.partition_for(transactional_id)
        leader = self._leader_of(TRANSACTION_STATE_TOPIC, p)
        if leader is not None and leader >= 0 and leader != self.metadata.node_id and self.verifier is not None:
            return self.verifier.verify(leader, transactional_id, producer_id, epoch, topic, partition,
                                        add_partition=True)
        rt = self.runtime
        if rt is None or not self.active or rt.status(self._partition(transactional_id)) != ErrorCode.NONE:
            return ErrorCode.NOT_ENOUGH_REPLICAS
        answer = self.add_partitions(transactional_id, producer_id, epoch, {(topic, partition)},
                                     client_transaction_version=TV_2)
        if isinstance(answer, asyncio.Future):
            out: asyncio.Future[ErrorCode] = answer.get_loop().create_future()

            def relay(f: asyncio.Future[ErrorCode]) -> None:
                if not out.done():
                    out.set_result(ErrorCode.NOT_ENOUGH_REPLICAS if f.cancelled() or f.exception() is not None
                                   else add_partition_error(f.result()))

            answer.add_done_callback(relay)
            return out
        return add_partition_error(answer)

    def verify_transaction(self, transactional_id: str, producer_id: int, epoch: int, topic: str,
                           partition: int) -> ErrorCode | asyncio.Future[ErrorCode]:
        """Is (topic, partition) in the producer's Ongoing transaction? Asked of this broker's
        coordinator when it owns the id, else (AddPartitionsToTxn v4 `verify_only`) of the broker leading
        the id's `__transaction_state` partition (Kafka's AddPartitionsToTxnManager). The errors are
        those a produce answers: NOT_ENOUGH_REPLICAS while the coordinator is unavailable,
        INVALID_PRODUCER_ID_MAPPING, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE."""
        if self.state_topic_status() != ErrorCode.NONE:
            return ErrorCode.NOT_ENOUGH_REPLICAS
        p = self.partition_for(transactional_id)
        leader = self._leader_of(TRANSACTION_STATE_TOPIC, p)
        if leader is not None and leader >= 0 and leader != self.metadata.node_id and self.verifier is not None:
            return self.verifier.verify(leader, transactional_id, producer_id, epoch, topic, partition)
        rt = self.runtime
        if rt is None or not self.active or rt.status(self._partition(transactional_id)) != ErrorCode.NONE:
            return ErrorCode.NOT_ENOUGH_REPLICAS  # not here, or still loading (after a failover): retriable
        txn = self.describe(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if txn.producer_epoch != epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if txn.state != TransactionState.ONGOING or (topic, partition) not in txn.partitions:
            return ErrorCode.INVALID_TXN_STATE
        return ErrorCode.NONE

    # -- operations ----------------------------------------------------------------------------------

    def _call(self, transactional_id: str, op: Callable[[TransactionStateShard], T],
              on_error: Callable[[ErrorCode], T], wait_completion: bool = False) -> Answer[T]:
        """Run `op`; with `wait_completion`, an answer that left the transaction completing (markers on
        their way) is held until CompleteCommit/CompleteAbort is written (or fails with its error)."""
        partition = self._partition(transactional_id)
        if self.runtime is None or not self.active:
            return on_error(ErrorCode.NOT_COORDINATOR)
        box: list[T] = []
        future: asyncio.Future[T] | None = None
        key = (partition, transactional_id)

        def deliver(result: T) -> None:
            if future is None:
                box.append(result)
            elif not future.done():
                future.set_result(result)

        def complete(value: object) -> None:
            result = cast(T, value)
            waiters = self._completing.get(key) if wait_completion else None
            if waiters is None or _error_of(result) != ErrorCode.NONE:
                deliver(result)
                return
            waiters.append(lambda error: deliver(result if error == ErrorCode.NONE else on_error(error)))

        self.runtime.write(partition, op, complete, lambda error: complete(on_error(error)))
        if box:
            return box[0]
        assert self._loop is not None
        future = self._loop.create_future()
        return future

    async def init_producer_id(self, transactional_id: str, txn_timeout_ms: int, producer_id: int,
                               producer_epoch: int) -> InitResult:
        if txn_timeout_ms <= 0 or txn_timeout_ms > int(self.config["transaction.max.timeout.ms"]):
            return InitResult(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        if self.state_topic_status() != ErrorCode.NONE:
            error = await self.create_state_topic()
            if error != ErrorCode.NONE:
                return InitResult(error)
        status = self.runtime.status(self._partition(transactional_id)) if self.runtime else ErrorCode.NOT_COORDINATOR
        if status != ErrorCode.NONE:
            return InitResult(status)
        fresh = await self.producer_ids.generate_producer_id()
        answer = self._call(transactional_id, lambda shard: shard.init_producer_id(
            transactional_id, txn_timeout_ms, producer_id, producer_epoch, lambda: fresh), InitResult,
            wait_completion=True)
        return await answer if isinstance(answer, asyncio.Future) else answer

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: set[TopicPartition], verify_only: bool = False,
                       client_transaction_version: int = 0) -> Answer[ErrorCode]:
        return self._call(transactional_id, lambda shard: shard.add_partitions(
            transactional_id, producer_id, producer_epoch, partitions, verify_only, client_transaction_version),
            _same)

    def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                    group_id: str) -> Answer[ErrorCode]:
        """AddOffsetsToTxn: the group's `__consumer_offsets` partition joins the transaction."""
        tp = (GROUP_METADATA_TOPIC_NAME, self.groups.partition_for(group_id))
        return self.add_partitions(transactional_id, producer_id, producer_epoch, {tp})

    def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                        commit: bool) -> Answer[ErrorCode]:
        return self._call(transactional_id, lambda shard: shard.end_transaction(
            transactional_id, producer_id, producer_epoch, commit), _same, wait_completion=True)

    async def end_transaction_v2(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                 commit: bool) -> EndTxnResult:
        """EndTxn v5+ (transactions version 2): the epoch is bumped; answered (as for v0-4) once the
        transaction completed, with the producer id and epoch the client goes on with."""
        fresh: list[int] = []
        current = self.describe(transactional_id)
        if current is not None and current.producer_epoch >= MAX_EPOCH - 2:
            fresh.append(await self.producer_ids.generate_producer_id())  # the bump may rotate the id

        def new_producer_id() -> int:
            if not fresh:
                raise KafkaError("the epoch moved on; retry", error_code=ErrorCode.CONCURRENT_TRANSACTIONS)
            return fresh[0]

        def op(shard: TransactionStateShard) -> EndTxnResult:
            try:
                return shard.end_transaction_v2(transactional_id, producer_id, producer_epoch, commit,
                                                new_producer_id)
            except KafkaError as exc:
                return EndTxnResult(exc.error_code)

        answer = self._call(transactional_id, op, EndTxnResult, wait_completion=True)
        return await answer if isinstance(answer, asyncio.Future) else answer

    def describe(self, transactional_id: str) -> TransactionMetadata | None:
        if self.runtime is None:
            return None
        ctx = self.runtime.context(self._partition(transactional_id))
        return None if ctx is None or ctx.shard is None else ctx.shard.describe(transactional_id)

    def all_transactions(self) -> list[TransactionMetadata]:
        if self.runtime is None:
            return []
        return [m for _p, shard in self.runtime.active_shards() for m in shard.txns.values()]


def _error_of(result: object) -> ErrorCode:
    if isinstance(result, (InitResult, EndTxnResult)):
        return result.error
    return result if isinstance(result, ErrorCode) else ErrorCode.NONE


def _same(value: T) -> T:
    return value


def _ignore(_value: object) -> None:
    return None


__all__ = ["TRANSACTION_STATE_TOPIC", "TransactionCoordinatorService"]
