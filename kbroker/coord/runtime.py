"""The group coordinator's runtime: `__consumer_offsets`, loop timers, writes and loading.

Binds the pure `GroupCoordinator` to the broker: which partition of `__consumer_offsets` owns a group
(`abs(java String.hashCode(group id)) % partitions`, Kafka's `Utils.abs(groupId.hashCode())`), creating
that topic on first use (compacted, internal), appending coordinator records through the replica
manager (internal-topic writes allowed), loading every partition back at startup one partition per
event-loop turn (groups answer COORDINATOR_LOAD_IN_PROGRESS meanwhile), the periodic offset expiry,
and keyed timers on the event loop (`loop.call_later`, never a task or a thread).

Must not import kbroker.net or kbroker.api.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from kbroker.controller.controller import Controller
from kbroker.coord.config import CoordinatorConfig
from kbroker.coord.coordinator import GroupCoordinator
from kbroker.metadata.delta import MetadataDelta
from kbroker.metadata.image import MetadataImage
from kbroker.metadata.loader import LoaderManifest
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.records import RecordBatch, SimpleRecord, batch_size_at, build_batch

log = logging.getLogger(__name__)

GROUP_METADATA_TOPIC = "__consumer_offsets"


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


def _setting(config: Any, key: str, default: Any) -> Any:
    try:
        value = config[key]
    except (KeyError, TypeError):
        return default
    return default if value is None else value


def coordinator_config(config: Any) -> CoordinatorConfig:
    return CoordinatorConfig(
        initial_rebalance_delay_ms=int(_setting(config, "group.initial.rebalance.delay.ms", 3000)),
        min_session_timeout_ms=int(_setting(config, "group.min.session.timeout.ms", 6000)),
        max_session_timeout_ms=int(_setting(config, "group.max.session.timeout.ms", 1800000)),
        max_size=int(_setting(config, "group.max.size", 2**31 - 1)),
        offsets_retention_ms=int(_setting(config, "offsets.retention.minutes", 10080)) * 60_000,
        offset_metadata_max_bytes=int(_setting(config, "offset.metadata.max.bytes", 4096)),
        consumer_session_timeout_ms=int(_setting(config, "group.consumer.session.timeout.ms", 45000)),
        consumer_heartbeat_interval_ms=int(_setting(config, "group.consumer.heartbeat.interval.ms", 5000)),
        consumer_max_size=int(_setting(config, "group.consumer.max.size", 2**31 - 1)),
        consumer_assignors=_assignor_names(_setting(config, "group.consumer.assignors", ["uniform", "range"])),
        consumer_migration_policy=str(_setting(config, "group.consumer.migration.policy", "bidirectional")).lower(),
    )


def _assignor_names(value: Any) -> tuple[str, ...]:
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


class GroupCoordinatorRuntime:
    """The broker's group coordinator service (what the group API handlers call)."""

    name = "GroupCoordinator"

    def __init__(self, config: Any, replica_manager: Any, controller: Controller, metadata: Any,
                 time_ms: Callable[[], int]) -> None:
        self.config = config
        self.replica_manager = replica_manager
        self.controller = controller
        self.metadata = metadata
        self.time_ms = time_ms
        self.loading: set[int] = set()
        self.active = False
        self.scheduler: LoopScheduler | None = None
        self.coordinator: GroupCoordinator | None = None
        self._expiry: asyncio.TimerHandle | None = None

    # -- lifecycle -----------------------------------------------------------------------------------

    def startup(self) -> None:
        """Load every hosted `__consumer_offsets` partition (one per loop turn) and start offset expiry."""
        loop = asyncio.get_running_loop()
        self.scheduler = LoopScheduler(loop)
        self.coordinator = GroupCoordinator(coordinator_config(self.config), self.scheduler, self._write,
                                            self.time_ms, self.group_status, topics=self.metadata)
        self.active = True
        info = self.metadata.topic(GROUP_METADATA_TOPIC)
        if info is not None:
            self.loading = set(range(info.num_partitions))
            for p in sorted(self.loading):
                loop.call_soon(self._load_partition, p)
        interval = int(_setting(self.config, "offsets.retention.check.interval.ms", 600000))
        self._schedule_expiry(loop, interval)

    def _schedule_expiry(self, loop: asyncio.AbstractEventLoop, interval_ms: int) -> None:
        def run() -> None:
            if not self.active or self.coordinator is None:
                return
            try:
                self.coordinator.expire_offsets()
            except Exception:
                log.exception("offset expiry failed")
            self._expiry = loop.call_later(interval_ms / 1000, run)

        self._expiry = loop.call_later(interval_ms / 1000, run)

    def shutdown(self) -> None:
        """Answer every waiting JoinGroup/SyncGroup with NOT_COORDINATOR and stop all timers."""
        self.active = False
        if self._expiry is not None:
            self._expiry.cancel()
        if self.coordinator is not None:
            self.coordinator.unload_all()
        if self.scheduler is not None:
            self.scheduler.cancel_all()

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage, manifest: LoaderManifest) -> None:
        """Metadata publisher: committed offsets of deleted topics are removed, as Kafka does
        (GroupCoordinator.onPartitionsDeleted)."""
        topics = delta.topics_delta
        if topics is not None and topics.deleted_topic_ids:
            self.on_topics_deleted(sorted(t.name for t in topics.deleted_topics()))

    def on_topics_deleted(self, names: list[str]) -> None:
        if self.active and self.coordinator is not None:
            self.coordinator.remove_offsets_of_topics(set(names))

    # -- ownership -----------------------------------------------------------------------------------

    def num_partitions(self) -> int:
        info = self.metadata.topic(GROUP_METADATA_TOPIC)
        if info is not None:
            return int(info.num_partitions)
        return int(_setting(self.config, "offsets.topic.num.partitions", 50))

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions())

    def group_status(self, group_id: str) -> ErrorCode:
        if not self.active:
            return ErrorCode.NOT_COORDINATOR
        p = self.partition_for(group_id)
        if p in self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if self.replica_manager.get_partition(GROUP_METADATA_TOPIC, p) is None:
            return ErrorCode.NOT_COORDINATOR
        return ErrorCode.NONE

    def offsets_topic_status(self) -> ErrorCode:
        """NONE once `__consumer_offsets` exists, COORDINATOR_NOT_AVAILABLE before."""
        if self.metadata.topic(GROUP_METADATA_TOPIC) is not None:
            return ErrorCode.NONE
        return ErrorCode.COORDINATOR_NOT_AVAILABLE

    async def create_offsets_topic(self) -> ErrorCode:
        """Create `__consumer_offsets` on first use through the controller, as Kafka's FindCoordinator does."""
        if self.metadata.topic(GROUP_METADATA_TOPIC) is not None:
            return ErrorCode.NONE
        partitions = int(_setting(self.config, "offsets.topic.num.partitions", 50))
        configs = {
            "cleanup.policy": "compact",
            "compression.type": "producer",
            "segment.bytes": str(int(_setting(self.config, "offsets.topic.segment.bytes", 104857600))),
        }
        try:
            # offsets.topic.replication.factor is capped at the single node we have (docs/consumer-groups.md).
            await self.controller.create_topic(GROUP_METADATA_TOPIC, num_partitions=partitions,
                                               replication_factor=1, configs=configs)
        except KafkaError as exc:
            if exc.error_code == ErrorCode.TOPIC_ALREADY_EXISTS:
                return ErrorCode.NONE
            log.warning("Cannot create %s: %s", GROUP_METADATA_TOPIC, exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        log.info("Created %s with %d partitions", GROUP_METADATA_TOPIC, partitions)
        return ErrorCode.NONE

    # -- writes --------------------------------------------------------------------------------------

    def _write(self, group_id: str, records: list[tuple[bytes, bytes | None]]) -> ErrorCode:
        p = self.partition_for(group_id)
        now = self.time_ms()
        batch = build_batch([SimpleRecord(value, key, now) for key, value in records], now_ms=now)
        results = self.replica_manager.append_records(
            int(_setting(self.config, "offsets.commit.timeout.ms", 5000)), 1, True,
            {(GROUP_METADATA_TOPIC, p): memoryview(batch)},
        )
        result = results[(GROUP_METADATA_TOPIC, p)]
        if result.error != ErrorCode.NONE:
            log.warning("Failed to write %d records of group %s to %s-%d: %s", len(records), group_id,
                        GROUP_METADATA_TOPIC, p, ErrorCode(result.error).name)
        return ErrorCode(result.error)

    # -- loading -------------------------------------------------------------------------------------

    def _load_partition(self, p: int) -> None:
        if not self.active or self.coordinator is None:
            return
        partition = self.replica_manager.get_partition(GROUP_METADATA_TOPIC, p)
        try:
            if partition is not None:
                groups = self.load_log(partition.log, self.coordinator)
                self.coordinator.start_member_sessions(sorted(groups))
        except Exception:
            log.exception("Failed to load %s-%d", GROUP_METADATA_TOPIC, p)
        finally:
            self.loading.discard(p)

    @staticmethod
    def load_log(log_: Any, coordinator: GroupCoordinator, chunk: int = 5 * 1024 * 1024) -> set[str]:
        """Replay every record of one partition log into `coordinator`; the group ids seen."""
        from kbroker.coord.records import decode_key

        seen: set[str] = set()
        offset = int(log_.log_start_offset)
        end = int(log_.log_end_offset)
        while offset < end:
            info = log_.read(offset, chunk, max_offset=end, min_one_message=True)
            if info.region is None or info.region.size == 0:
                break
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
                for record in batch.iter_records():
                    if record.offset < offset:
                        continue
                    coordinator.replay_record(record.key, record.value)
                    if record.key is not None:
                        k = decode_key(record.key)
                        if k is not None:
                            seen.add(k.group)
            if next_offset <= offset:
                break
            offset = next_offset
        return seen
