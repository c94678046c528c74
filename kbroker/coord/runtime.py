"""The coordinator runtime's binding to the broker: the event loop and the replica manager.

The sans-IO `kbroker.coord.coordinator_runtime.CoordinatorRuntime` gets from here: keyed timers on the
event loop (`LoopScheduler`: `loop.call_later`, never a task or a thread), a `PartitionWriter` that
appends coordinator records to a partition of a state topic through the replica manager's acks=-1
path (`ReplicaPartitionWriter`: the delayed-produce purgatory tells when the high watermark passes the
write, and that is reported back to the runtime), and a `CoordinatorLoader` that reads a partition's
log back (`LogLoader`), and `CoordinatorPartitions`, which keeps the runtime's loaded partitions of
a state topic in step with this broker's leadership (what the group and the transaction coordinator
services do as metadata publishers). Also the group coordinator's pieces that are not state: which partition of
`__consumer_offsets` owns a group (`abs(java String.hashCode(group id)) % partitions`, Kafka's
`Utils.abs(groupId.hashCode())`) and the group.* / offsets.* settings.

Must not import kbroker.net or kbroker.api.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar

from kbroker.coord.config import CoordinatorConfig
from kbroker.coord.coordinator_runtime import (
    AppendResult,
    CoordinatorRuntime,
    CoordinatorShard,
    Record,
    Replay,
    ReplayEndTxn,
    ReplayTransactional,
    ShardFactory,
    TxnProducer,
)
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.record_format import ControlRecordType, parse_control_record_type
from kbroker.protocol.records import SimpleRecord, build_batch, iter_whole_batches
from kbroker.protocol.topic import GROUP_METADATA_TOPIC_NAME

if TYPE_CHECKING:
    from kbroker.config import KafkaConfig
    from kbroker.log.unified_log import UnifiedLog
    from kbroker.metadata.delta import MetadataDelta
    from kbroker.replica.replica_manager import ProducePartitionResult, ReplicaManager

log = logging.getLogger(__name__)

GROUP_METADATA_TOPIC = GROUP_METADATA_TOPIC_NAME
S = TypeVar("S", bound=CoordinatorShard)


def java_string_hashcode(s: str) -> int:
    """Java's String.hashCode: over UTF-16 code units, wrapping at 32 bits (signed)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def java_abs(n: int) -> int:
    """Kafka's Utils.abs: Integer.MIN_VALUE maps to 0, not to itself."""
    return 0 if n == -(2**31) else abs(n)


def partition_for(group_id: str, num_partitions: int) -> int:
    return java_abs(java_string_hashcode(group_id)) % num_partitions


class LoopScheduler:
    """Keyed one-shot timers on an asyncio loop: scheduling a key replaces its timer."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def schedule(self, key: str, delay_ms: int, fn: Callable[[], None]) -> None:
        old = self._timers.pop(key, None)
        if old is not None:
            old.cancel()

        def run() -> None:
            if self._timers.get(key) is handle:
                del self._timers[key]
            try:
                fn()
            except Exception:
                log.exception("group coordinator timer %s failed", key)

        handle = self.loop.call_later(max(delay_ms, 0) / 1000, run)
        self._timers[key] = handle

    def cancel(self, key: str) -> None:
        handle = self._timers.pop(key, None)
        if handle is not None:
            handle.cancel()

    def cancel_all(self) -> None:
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()

    def __len__(self) -> int:
        return len(self._timers)


class PeriodicTask:
    """`fn` every `interval_ms` on the loop, for as long as `running()` holds when it is due (the
    coordinators' periodic offset expiry and transaction clean-ups; Kafka's `scheduler.schedule` with
    a period). One timer handle at a time, never a task."""

    def __init__(self, loop: asyncio.AbstractEventLoop, interval_ms: int, fn: Callable[[], None],
                 running: Callable[[], bool]) -> None:
        self.loop = loop
        self.interval_s = interval_ms / 1000
        self.fn = fn
        self.running = running
        self._handle = loop.call_later(self.interval_s, self._run)

    def _run(self) -> None:
        if not self.running():
            return
        self.fn()
        self._handle = self.loop.call_later(self.interval_s, self._run)

    def cancel(self) -> None:
        self._handle.cancel()


class CoordinatorPartitions(Generic[S]):
    """Loads and unloads the partitions of one state topic (`__consumer_offsets`,
    `__transaction_state`) in a coordinator runtime as this broker gains and loses them: Kafka's
    `CoordinatorRuntime.scheduleLoadOperation` / `scheduleUnloadOperation`, which the coordinators'
    `onElection` / `onResignation` call from the broker's metadata publisher.

    A load is scheduled at once (the partition answers COORDINATOR_LOAD_IN_PROGRESS) and runs on a
    later loop turn, one partition per turn; a partition created by the same delta is empty and loads
    at once, so the FindCoordinator that created the topic finds it usable.
    """

    def __init__(self, topic: str, runtime: CoordinatorRuntime[S], replica_manager: ReplicaManager,
                 loop: asyncio.AbstractEventLoop, scheduler: LoopScheduler,
                 on_unload: Callable[[int], None] | None = None) -> None:
        self.topic = topic
        self.runtime = runtime
        self.replica_manager = replica_manager
        self.loop = loop
        self.scheduler = scheduler
        # Told after a partition was unloaded (the transaction coordinator drops its markers in flight).
        self.on_unload = on_unload

    @classmethod
    def start(cls, topic: str, replica_manager: ReplicaManager, shard_factory: ShardFactory[S], *,
              loop: asyncio.AbstractEventLoop, time_ms: Callable[[], int], write_timeout_ms: int,
              map_write_error: Callable[[ErrorCode], ErrorCode],
              on_unload: Callable[[int], None] | None = None) -> CoordinatorPartitions[S]:
        """A runtime of `topic`'s shards bound to `loop` (its timers) and the replica manager (acks=-1
        appends whose commit, or failure mapped by `map_write_error`, is reported back; log loading)."""
        scheduler = LoopScheduler(loop)

        def on_committed(partition: int, offset: int) -> None:
            runtime.on_high_watermark_updated(partition, offset)

        def on_failed(partition: int, offset: int, error: ErrorCode) -> None:
            runtime.on_write_failed(partition, offset, map_write_error(error))

        writer = ReplicaPartitionWriter(replica_manager, topic, time_ms, write_timeout_ms, on_committed, on_failed)
        runtime = CoordinatorRuntime(writer, LogLoader(replica_manager, topic), shard_factory, scheduler)
        return cls(topic, runtime, replica_manager, loop, scheduler, on_unload)

    def _hosted(self, partition: int) -> bool:
        return self.replica_manager.get_partition(self.topic, partition) is not None

    def load_hosted(self, num_partitions: int) -> None:
        """At start-up: schedule the load of every partition of the topic this broker hosts."""
        for p in range(num_partitions):
            if self._hosted(p) and self.runtime.schedule_load(p):
                self.loop.call_soon(self.runtime.run_load, p)

    def sync(self, partition: int) -> None:
        """Before a request to `partition`: load it if this broker hosts it and it is not loaded,
        unload it if the broker no longer hosts it."""
        rt = self.runtime
        hosted = self._hosted(partition)
        known = rt.context(partition) is not None
        if hosted and not known and rt.schedule_load(partition):
            self.loop.call_soon(rt.run_load, partition)
        elif known and not hosted:
            self._unload(partition)

    def _unload(self, partition: int) -> None:
        self.runtime.unload(partition)
        if self.on_unload is not None:
            self.on_unload(partition)

    def on_metadata_update(self, delta: MetadataDelta, node_id: int) -> None:
        """Load the partitions this broker now leads; unload those it follows or no longer hosts."""
        topics = delta.topics_delta
        if topics is None:
            return
        rt = self.runtime
        changes = delta.local_changes(node_id)
        created = topics.topic_was_created(self.topic)
        for tp in changes.leaders:
            if tp.topic == self.topic and rt.schedule_load(tp.partition):
                if created:
                    rt.run_load(tp.partition)  # new and empty: usable at once by the FindCoordinator answer
                else:
                    self.loop.call_soon(rt.run_load, tp.partition)
        for tp in list(changes.followers) + sorted(changes.deletes):
            if tp.topic == self.topic and rt.context(tp.partition) is not None:
                self._unload(tp.partition)


def coordinator_config(config: KafkaConfig) -> CoordinatorConfig:
    return CoordinatorConfig(
        initial_rebalance_delay_ms=int(config["group.initial.rebalance.delay.ms"]),
        min_session_timeout_ms=int(config["group.min.session.timeout.ms"]),
        max_session_timeout_ms=int(config["group.max.session.timeout.ms"]),
        max_size=int(config["group.max.size"]),
        offsets_retention_ms=int(config["offsets.retention.minutes"]) * 60_000,
        offset_metadata_max_bytes=int(config["offset.metadata.max.bytes"]),
        consumer_session_timeout_ms=int(config["group.consumer.session.timeout.ms"]),
        consumer_heartbeat_interval_ms=int(config["group.consumer.heartbeat.interval.ms"]),
        consumer_max_size=int(config["group.consumer.max.size"]),
        consumer_assignors=_assignor_names(config["group.consumer.assignors"]),
        consumer_migration_policy=str(config["group.consumer.migration.policy"]).lower(),
        share_session_timeout_ms=int(config["group.share.session.timeout.ms"]),
        share_heartbeat_interval_ms=int(config["group.share.heartbeat.interval.ms"]),
        share_max_size=int(config["group.share.max.size"]),
    )


def _assignor_names(value: str | list[str]) -> tuple[str, ...]:
    """`group.consumer.assignors` takes short names or Kafka's class names
    (org.apache.kafka.coordinator.group.assignor.UniformAssignor -> uniform)."""
    items = value.split(",") if isinstance(value, str) else list(value)
    names = []
    for item in items:
        name = str(item).strip()
        if not name:
            continue
        short = name.rsplit(".", 1)[-1]
        if short.endswith("Assignor"):
            short = short[: -len("Assignor")]
        names.append(short.lower())
    return tuple(names) or ("uniform", "range")


class ReplicaPartitionWriter:
    """Appends coordinator records to `topic`'s partitions as the leader, with acks=-1: the local
    append happens now (its error, if any, is the append's result); the commit is reported through
    `on_committed(partition, offset)` when the high watermark passes the write (at once on a single
    replica; through the produce purgatory otherwise), or `on_failed(partition, offset, error)` when
    it never does (timeout, leadership lost)."""

    def __init__(self, replica_manager: ReplicaManager, topic: str, time_ms: Callable[[], int], timeout_ms: int,
                 on_committed: Callable[[int, int], None],
                 on_failed: Callable[[int, int, ErrorCode], None]) -> None:
        self.replica_manager = replica_manager
        self.topic = topic
        self.time_ms = time_ms
        self.timeout_ms = timeout_ms
        self.on_committed = on_committed
        self.on_failed = on_failed

    def append(self, partition: int, records: list[Record], producer: TxnProducer | None = None) -> AppendResult:
        key = (self.topic, partition)
        now = self.time_ms()
        simple = [SimpleRecord(value, k, now) for k, value in records]
        if producer is None:
            batch = build_batch(simple, now_ms=now)
        else:
            # A transactional batch of the producer (TxnOffsetCommit), in sequence with what this
            # partition already holds from it, so the log's producer state accepts it.
            pid, epoch = producer
            hosted = self.replica_manager.get_partition(self.topic, partition)
            entry = hosted.log.producer_state.producers.get(pid) if hosted is not None else None
            seq = entry.last_seq + 1 if entry is not None and entry.producer_epoch == epoch and entry.batches else 0
            batch = build_batch(simple, now_ms=now, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                is_transactional=True)
        results = self.replica_manager.append_records(self.timeout_ms, -1, True, {key: memoryview(batch)})
        if isinstance(results, dict):
            result = results[key]
            if result.error != ErrorCode.NONE:
                log.warning("Failed to write %d records to %s-%d: %s", len(records), self.topic, partition,
                            ErrorCode(result.error).name)
                return AppendResult(ErrorCode(result.error))
            next_offset = int(result.base_offset) + len(records)
            self.on_committed(partition, next_offset)  # the high watermark already passed it
            return AppendResult(ErrorCode.NONE, next_offset)
        # Appended locally; the purgatory completes the future when the high watermark passes it.
        hosted = self.replica_manager.get_partition(self.topic, partition)
        next_offset = int(hosted.log_end_offset) if hosted is not None else -1

        def done(future: asyncio.Future[dict[tuple[str, int], ProducePartitionResult]]) -> None:
            error = ErrorCode.NOT_COORDINATOR if future.cancelled() or future.exception() is not None \
                else ErrorCode(future.result()[key].error)
            if error == ErrorCode.NONE:
                self.on_committed(partition, next_offset)
            else:
                log.warning("Write to %s-%d up to offset %d did not commit: %s", self.topic, partition,
                            next_offset, error.name)
                self.on_failed(partition, next_offset, error)

        results.add_done_callback(done)
        return AppendResult(ErrorCode.NONE, next_offset)


class LogLoader:
    """Reads a partition of `topic` from its log start to its end, record by record."""

    def __init__(self, replica_manager: ReplicaManager, topic: str, chunk: int = 5 * 1024 * 1024) -> None:
        self.replica_manager = replica_manager
        self.topic = topic
        self.chunk = chunk

    def load(self, partition: int, replay: Replay, replay_txn: ReplayTransactional | None = None,
             replay_end_txn: ReplayEndTxn | None = None) -> int:
        hosted = self.replica_manager.get_partition(self.topic, partition)
        if hosted is None:
            return 0
        return load_log(hosted.log, replay, self.chunk, replay_txn, replay_end_txn)


def load_log(log_: UnifiedLog, replay: Replay, chunk: int = 5 * 1024 * 1024,
             replay_txn: ReplayTransactional | None = None, replay_end_txn: ReplayEndTxn | None = None) -> int:
    """Replay every record of one partition log; the offset loaded up to. Records of transactional
    batches go to `replay_txn` and COMMIT/ABORT markers to `replay_end_txn` when given (other
    control batches are skipped)."""
    offset = int(log_.log_start_offset)
    end = int(log_.log_end_offset)
    while offset < end:
        info = log_.read(offset, chunk, max_offset=end, min_one_message=True)
        if info.region is None or info.region.size == 0:
            break
        next_offset = offset
        for batch in iter_whole_batches(info.region.read_bytes()):
            next_offset = batch.next_offset
            if batch.is_control:
                if replay_end_txn is not None and batch.producer_id >= 0 and next_offset > offset:
                    for record in batch.iter_records():
                        try:
                            marker = parse_control_record_type(None if record.key is None else bytes(record.key))
                        except Exception:  # noqa: BLE001 - an unreadable control record is skipped
                            break
                        if marker in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
                            replay_end_txn(batch.producer_id, marker == ControlRecordType.COMMIT)
                        break
                continue
            transactional = replay_txn is not None and batch.is_transactional and batch.producer_id >= 0
            for record in batch.iter_records():
                if record.offset < offset:
                    continue
                if transactional and replay_txn is not None:
                    replay_txn(batch.producer_id, record.offset, record.key, record.value)
                else:
                    replay(record.offset, record.key, record.value)
        if next_offset <= offset:
            break
        offset = next_offset
    return end
