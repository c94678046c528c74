"""The replica manager: hosted partitions, appends (acks 0/1/-1), fetches (long polling), fetch
sessions, and the purgatories that hold delayed requests (Kafka's `ReplicaManager`).

Appends are synchronous calls into the storage layer on the event loop (the log is synchronous
by design), except for the record checks of batches that may be expensive (compressed, recompressed
or large: ``log.validator.needs_worker``): a Produce request hands those to a worker pool
(``concurrent.futures.ThreadPoolExecutor``, :data:`VALIDATION_WORKERS` threads) and the append
itself happens back on the loop when the check is done. Appends to one partition stay in arrival
order: while a partition has a check in flight, every later append to it (heavy or not) queues
behind it (``_append_queues``), so pipelined requests of an idempotent producer are appended in
order. Small uncompressed batches of a partition with nothing queued are checked and appended at
once on the loop (the fast path). What waits is otherwise only the *response*: acks=-1 goes
through the produce purgatory and is completed when the high watermark passes the appended offsets
(at once on a single replica, but through the same path replication will use); a fetch that finds fewer than `min_bytes` waits in
the fetch purgatory and is woken by appends to any partition it reads.

New partitions are hosted incrementally (issue 19, finding 4): creating a log costs milliseconds
(files, index preallocation, fsync), so a CreateTopics of thousands of partitions hosted in one go
held the loop for about a minute. `apply_delta` hosts the first :data:`SYNC_HOSTING_PARTITIONS` new
partitions (leaders or followers) at once, and every one that belongs to an internal topic (the
coordinators load them), so small creations behave as before. A restart replays every existing
partition (and then, once the controller unfences the broker, makes each of them leader again): at
10,000 partitions one pass blocked the loop longer than `broker.session.timeout.ms`, heartbeats
stopped and the controller fenced and unfenced the broker in a loop (issue 12/17; Kafka loads logs
on recovery threads and heartbeats from its own thread). So a partition whose log exists but is not
hosted, and a hosted follower becoming leader, wait their turn like new ones; a change to a partition
this broker leads, and a hosted partition becoming (or staying) a follower, apply at once. The rest are
hosted in chunks of at most :data:`HOSTING_CHUNK_SECONDS` of loop time, one chunk per loop turn, the
way a Kafka broker catches up with the metadata log after the controller has answered. Until its
turn comes a partition is in the image but not hosted, and is answered NOT_LEADER_OR_FOLLOWER
(`missing_partition_error`), which every client retries after refreshing metadata. With no running
loop (tests that drive the services without one) everything is hosted at once.

Must not import net/ or api/. The broker config and the metadata image live above this package:
their types are imported for the type checker only. Which topics are internal is Kafka's
`Topic.isInternal` (`kbroker.protocol.topic`); a new log's config comes from the LogManager's
`config_for_topic` hook (the one resolver, `ConfigurationControlManager.log_config`).

A failed log directory (Kafka's `handleLogDirFailure`): the LogManager reports it once, possibly
from a worker thread; the reaction runs on the event loop. Every partition whose log (or future
log) is in that directory joins `offline` and keeps its (offline) log, as Kafka's
`HostedPartition.Offline`: produce, fetch, ListOffsets and DeleteRecords answer KAFKA_STORAGE_ERROR
and Metadata shows no leader with this broker as an offline replica; waiting operations on them
complete, and a replica move touching the directory stops. The broker halts, as Kafka does, when every log directory is offline or when the
directory holding the metadata log (`metadata.log.dir`) fails. On one node there is no other
replica to move leadership to: the partitions stay offline until a restart with the directory
repaired (or removed from `log.dirs`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Container, Hashable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kbroker.clock import Clock, wall_clock_ms
from kbroker.log.errors import KafkaStorageError
from kbroker.log.manager import LogManager
from kbroker.log.unified_log import UnifiedLog
from kbroker.log.validator import CheckedBatch, check_batches, needs_worker, validation_params
from kbroker.metrics.meters import BrokerMetrics, TopicMetrics
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.topic import INTERNAL_TOPICS, is_internal
from kbroker.replica.alter_partition_manager import AlterPartitionManager, SendAlterPartition
from kbroker.replica.delayed import DelayedFetch, DelayedProduce, FetchParams
from kbroker.replica.fetch_session import (
    FetchManager,
    FetchPartitionRequest,
    FetchSessionCache,
    PartitionResult,
)
from kbroker.replica.partition import AlterPartitionItem, AlterPartitionResult, IsrChange, Partition
from kbroker.replica.purgatory import DelayedOperationPurgatory
from kbroker.replica.replica_fetcher import (
    InitialFetchState,
    ReplicaFetcherConfig,
    ReplicaFetcherManager,
    initial_fetch_offset,
)
from kbroker.replica.replication_quota import UNLIMITED_REPLICA_QUOTA, ReplicaQuota
from kbroker.replica.truncation import UNDEFINED_EPOCH, diverging_epoch

if TYPE_CHECKING:
    from kbroker.config import KafkaConfig
    from kbroker.metadata.cache import MetadataCache
    from kbroker.metadata.delta import MetadataDelta, PartitionInfo
    from kbroker.metadata.image import MetadataImage, TopicPartition
    from kbroker.metadata.loader import LoaderManifest

log = logging.getLogger(__name__)

# Append failures Kafka answers with log_start_offset -1 (ReplicaManager.appendToLocalLog).
_NO_LOG_START_ERRORS = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.MESSAGE_TOO_LARGE,
    ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.CORRUPT_MESSAGE, ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.INVALID_TOPIC_EXCEPTION,
})
# Fetch errors Kafka does not count as failed fetch requests (ReplicaManager.readFromLog's expected ones).
_EXPECTED_FETCH_ERRORS = frozenset({
    ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.REPLICA_NOT_AVAILABLE,
    ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.INCONSISTENT_TOPIC_ID, ErrorCode.UNKNOWN_TOPIC_ID,
    ErrorCode.OFFSET_OUT_OF_RANGE,
})


@dataclass(slots=True)
class ProducePartitionResult:
    """One partition's produce outcome (Kafka's PartitionResponse)."""

    error: ErrorCode
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    record_errors: list[tuple[int, str | None]] | None = None
    error_message: str | None = None


#: Threads checking (decompressing, walking, recompressing) produced batches off the event loop.
VALIDATION_WORKERS = max(1, min(4, os.cpu_count() or 1))


@dataclass(slots=True)
class _PendingAppend:
    """An append waiting for its off-loop check, or queued behind one of the same partition."""

    records: memoryview
    required_acks: int
    internal_topics_allowed: bool
    on_done: Callable[[ProducePartitionResult, int], None]
    heavy: bool = False  # its check runs on the worker pool (`log.validator.needs_worker`)
    ready: bool = False
    checked: list[CheckedBatch] | None = None
    error: BaseException | None = None


# New leaders hosted at once by `apply_delta` (beyond them: incrementally, see the module docstring).
SYNC_HOSTING_PARTITIONS = 16
# Loop time one deferred hosting chunk may take before yielding to other work.
HOSTING_CHUNK_SECONDS = 0.02


RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


def _fetcher_config(config: KafkaConfig) -> ReplicaFetcherConfig:
    """replica.fetch.* from the broker config (Kafka's names and defaults)."""
    d = ReplicaFetcherConfig()
    return ReplicaFetcherConfig(
        fetch_wait_max_ms=int(config.get("replica.fetch.wait.max.ms", d.fetch_wait_max_ms)),
        fetch_min_bytes=int(config.get("replica.fetch.min.bytes", d.fetch_min_bytes)),
        fetch_max_bytes=int(config.get("replica.fetch.max.bytes", d.fetch_max_bytes)),
        fetch_response_max_bytes=int(config.get("replica.fetch.response.max.bytes", d.fetch_response_max_bytes)),
        fetch_backoff_ms=int(config.get("replica.fetch.backoff.ms", d.fetch_backoff_ms)),
        socket_timeout_ms=int(config.get("replica.socket.timeout.ms", d.socket_timeout_ms)),
        security=config.inter_broker_security(),
    )


def halt_broker(reason: str) -> None:
    """Kafka's ``Exit.halt(1)`` after a fatal log dir failure: no shutdown hooks, no clean marker
    (the next start recovers the logs)."""
    log.critical("%s", reason)
    logging.shutdown()
    os._exit(1)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class ReplicaManager:
    """All partitions this broker hosts, and the produce/fetch paths over them."""

    def __init__(
        self, config: KafkaConfig, log_manager: LogManager, metadata: MetadataCache, time_ms: Clock = wall_clock_ms
    ) -> None:
        self.config = config
        self.log_manager = log_manager
        self.metadata = metadata
        self.time_ms = time_ms
        self.node_id = config.node_id
        # BrokerTopicMetrics and the ISR counters are recorded here (None: metrics off); set by the
        # wiring before any partition is hosted.
        self.metrics: BrokerMetrics | None = None
        self._partitions: dict[tuple[str, int], Partition] = {}
        # Partitions this broker follows: (topic, partition) -> leader id, and their Partition objects.
        self.followers: dict[tuple[str, int], int] = {}
        self._follower_partitions: dict[tuple[str, int], Partition] = {}
        # Replication (issue 12): replica.lag.time.max.ms, the fetchers, the ISR-change channel.
        self.replica_lag_time_max_ms = int(config.get("replica.lag.time.max.ms", 30000))
        self.alter_partition_manager = AlterPartitionManager(self.node_id, self.broker_epoch, None)
        # The leader's address for the inter-broker listener; the wiring may replace it.
        self.endpoint_lookup: Callable[[int], tuple[str, int] | None] = self._image_endpoint
        self.replica_fetcher_manager = ReplicaFetcherManager(
            self, lambda broker_id: self.endpoint_lookup(broker_id), _fetcher_config(config),
            int(config.get("num.replica.fetchers", 1)))
        self._deferred_fetches: dict[tuple[str, int], InitialFetchState] = {}
        # KIP-73: leader.replication.throttled.* (the wiring hands in the broker's quota; the follower
        # quota goes to replica_fetcher_manager.quota).
        self.leader_quota: ReplicaQuota = UNLIMITED_REPLICA_QUOTA
        self._isr_timer: asyncio.TimerHandle | None = None
        # KIP-392: replica.selector.class (only Kafka's RackAwareReplicaSelector is known).
        selector = config.get("replica.selector.class") or ""
        self.rack_aware_replica_selector = selector == RACK_AWARE_REPLICA_SELECTOR
        if selector and not self.rack_aware_replica_selector:
            log.warning("replica.selector.class %s is not supported: consumers read from leaders", selector)
        self.follower_reads = 0  # consumer partition reads served as a follower (KIP-392)
        # Partitions assigned here whose log could not be opened or created (a failed disk).
        self.offline: set[tuple[str, int]] = set()
        self.produce_purgatory: DelayedOperationPurgatory[dict[tuple[str, int], ProducePartitionResult]] = (
            DelayedOperationPurgatory("Produce"))
        # Kafka's completeDelayedShareFetchRequest(DelayedShareFetchPartitionKey): the share-partition
        # manager's waiting ShareFetches, told of the same partition events as the fetch purgatory.
        self.delayed_share_fetch_listener: Callable[[tuple[str, int]], None] | None = None
        # The keys the listener's purgatory watches (None: call the listener for every key).
        self.delayed_share_fetch_watched: Container[Hashable] | None = None
        self.fetch_purgatory: DelayedOperationPurgatory[dict[Hashable, PartitionResult]] = (
            DelayedOperationPurgatory("Fetch"))
        slots = int(config["max.incremental.fetch.session.cache.slots"])
        self.fetch_manager = FetchManager(FetchSessionCache(slots, time_ms))
        self._validation_pool: ThreadPoolExecutor | None = None
        self._append_queues: dict[tuple[str, int], deque[_PendingAppend]] = {}
        # Partitions not hosted (or not led) yet (incremental hosting), in the order they will be hosted:
        # the newest state and whether this broker is its leader (else a follower).
        self._pending_leaders: dict[tuple[str, int], tuple[TopicPartition, PartitionInfo, bool]] = {}
        self._hosting_scheduled = False
        self._shut_down = False
        # Log dir failures: reported by the LogManager (any thread), handled on the loop.
        self._loop = _running_loop()
        self.halt: Callable[[str], None] = halt_broker
        self.metadata_log_dir: Path | None = None
        try:
            self.metadata_log_dir = Path(os.path.abspath(config.metadata_log_dir))
        except (AttributeError, KeyError, TypeError, ValueError):
            self.metadata_log_dir = None
        log_manager.log_dir_failure_listener = self._log_dir_failed
        # AlterReplicaLogDirs: the copies into future logs (kbroker.replica.alter_log_dirs).
        from kbroker.replica.alter_log_dirs import ReplicaAlterLogDirsManager  # noqa: PLC0415 - builds on this one

        self.alter_log_dirs = ReplicaAlterLogDirsManager(self)

    # -- lifecycle -------------------------------------------------------------------------------

    name = "ReplicaManager"

    def shutdown(self) -> None:
        self._shut_down = True
        self._pending_leaders.clear()
        if self._isr_timer is not None:
            self._isr_timer.cancel()
            self._isr_timer = None
        self.replica_fetcher_manager.close_now()
        self.alter_partition_manager.shutdown()
        self.alter_log_dirs.shutdown()
        self.produce_purgatory.shutdown()
        self.fetch_purgatory.shutdown()
        if self._validation_pool is not None:
            self._validation_pool.shutdown(wait=False, cancel_futures=True)
            self._validation_pool = None

    # -- partitions ------------------------------------------------------------------------------

    def get_partition(self, topic: str, partition: int) -> Partition | None:
        """The partition if this broker leads it (the produce and consumer-fetch paths serve only
        leaders; a follower's partition is in `followers`)."""
        return self._partitions.get((topic, partition))


    def maybe_start_transaction_verification(self, topic: str, partition: int, producer_id: int, sequence: int,
                                             epoch: int, supports_epoch_bump: bool) -> None:
        """Before a transactional produce is verified with its coordinator (KIP-890): tell the led
        partition's producer state the sequence the append may start at (Kafka's
        Partition.maybeStartTransactionVerification). Nothing when the partition is not led here:
        the append answers for that."""
        p = self._partitions.get((topic, partition))
        if p is None or not p.is_leader or p.is_offline:
            return
        p.log.producer_state.maybe_start_transaction_verification(producer_id, sequence, epoch, supports_epoch_bump,
                                                                  self.time_ms())
    def partitions(self) -> list[Partition]:
        return list(self._partitions.values())

    def follower_partition(self, topic: str, partition: int) -> Partition | None:
        """The partition if this broker follows it (the replica fetchers' view)."""
        return self._follower_partitions.get((topic, partition))

    # -- replication: the image's view of the cluster ---------------------------------------------

    def set_alter_partition_sender(self, send: SendAlterPartition | None) -> None:
        """The wiring's channel to the controller for AlterPartition (server/ provides it)."""
        self.alter_partition_manager.send_alter_partition = send

    def broker_epoch(self) -> int:
        """This broker's epoch as registered in the metadata image (-1 before registration)."""
        reg = self.metadata.image.cluster.broker(self.node_id)
        return -1 if reg is None else reg.epoch

    def is_replica_eligible(self, broker_id: int, broker_epoch: int) -> bool:
        """Kafka's `isReplicaIsrEligible`: registered, unfenced, not in controlled shutdown, and (when
        the follower sent one) at the broker epoch it registered with (KIP-903: a restarted broker with a
        stale log must not rejoin through a fetch of its previous incarnation)."""
        reg = self.metadata.image.cluster.broker(broker_id)
        if reg is None or reg.fenced or reg.in_controlled_shutdown:
            return False
        return broker_epoch < 0 or reg.epoch == broker_epoch

    def _image_endpoint(self, broker_id: int) -> tuple[str, int] | None:
        """A broker's endpoint for the inter-broker listener, from its registration in the image
        (`inter.broker.listener.name`, else this broker's first listener's name, else any)."""
        reg = self.metadata.image.cluster.broker(broker_id)
        if reg is None:
            return None
        name = self.config.get("inter.broker.listener.name")
        if not name:
            listeners = self.config.listeners
            name = listeners[0].name if listeners else "PLAINTEXT"
        ep = reg.endpoint(str(name)) or next(iter(reg.listeners.values()), None)
        return None if ep is None else (ep.host, ep.port)

    # -- failed log directories (Kafka's ReplicaManager.handleLogDirFailure) --------------------------

    def _log_dir_failed(self, d: Path) -> None:
        """The LogManager's listener: hop to the event loop when there is one (the report may come
        from a worker thread: a background flush or checkpoint write)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            self.handle_log_dir_failure(d)
        elif _running_loop() is loop:
            loop.call_soon(self.handle_log_dir_failure, d)
        else:
            loop.call_soon_threadsafe(self.handle_log_dir_failure, d)

    def handle_log_dir_failure(self, d: Path) -> None:
        """Take the partitions of the failed directory offline; halt when no directory is left or
        the metadata log's directory failed (Kafka's handleLogDirFailure and KIP-858)."""
        d = Path(d)
        moved = [tp for tp in self.alter_log_dirs.moving() if (f := self.log_manager.future_log(*tp)) is not None
                 and f.parent_dir == d]
        for tp in moved:
            self.alter_log_dirs.stop(tp)
        lost: list[tuple[str, int]] = []
        for key, part in list(self._partitions.items()):
            if part.log.parent_dir == d:
                # Kafka's HostedPartition.Offline: the partition stays known, its log is offline
                # (every read and append raises KAFKA_STORAGE_ERROR, Metadata shows no leader).
                lost.append(key)
                self.alter_log_dirs.stop(key)
                self.offline.add(key)
                self._complete_delayed_fetches(key)
                self.produce_purgatory.check_and_complete(key)
        for key in list(self.followers):
            plog = self.log_manager.get_log(*key)
            if plog is not None and plog.parent_dir == d:
                lost.append(key)
                self.followers.pop(key)
                self._follower_partitions.pop(key, None)
                self.replica_fetcher_manager.remove_fetcher_for_partitions([key])
                self.offline.add(key)
        log.error("Partitions %s are offline due to the failure of log directory %s",
                  ", ".join(f"{t}-{p}" for t, p in sorted(lost)) or "(none)", d)
        if not self.log_manager.live_log_dirs:
            dirs = ", ".join(str(x) for x in self.log_manager.log_dirs)
            self.halt(f"Shutdown broker because all log dirs in {dirs} have failed")
        elif self.metadata_log_dir is not None and Path(os.path.abspath(d)) == self.metadata_log_dir:
            self.halt(f"Shutdown broker because the metadata log dir {d} has failed")

    # -- metadata publisher (Kafka's ReplicaManager.applyDelta) -------------------------------------

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage, manifest: LoaderManifest) -> None:
        self.apply_delta(delta, image)

    def apply_delta(self, delta: MetadataDelta, image: MetadataImage) -> None:
        """Become leader, become follower or stop (and delete) each local partition the delta touches.

        Kafka's `ReplicaManager.applyDelta`: deletes first (a topic deleted and re-created in one delta
        gets a fresh log), then leaders with the image's leader epoch, then followers. A log that
        cannot be created (a failed or full disk) leaves that partition unhosted and logs why; the
        other partitions carry on.
        """
        if delta.topics_delta is None:
            return
        changes = delta.local_changes(self.node_id)
        for tp in sorted(changes.deletes):
            self._stop_partition(tp.topic, tp.partition, delete=True)
        if changes.deletes and self.metrics is not None:
            # Kafka's BrokerTopicStats.removeMetrics for the topics no longer hosted here (one pass
            # over the hosted partitions per delta, not per deleted partition).
            hosted = {t for t, _p in self._partitions}
            for topic in {tp.topic for tp in changes.deletes} - hosted:
                self.metrics.remove_topic(topic)
        loop = _running_loop()
        hosted_now = 0
        pending = self._pending_leaders
        for tp, info in sorted(changes.leaders.items()):
            key = (tp.topic, tp.partition)
            if key in self._partitions:
                self._make_leader(tp, info)  # a leader already: its new epoch / ISR at once
            elif key in pending:
                pending[key] = (tp, info, True)  # still waiting: host it with the newest state
            elif loop is None or is_internal(tp.topic) or hosted_now < SYNC_HOSTING_PARTITIONS:
                hosted_now += 1
                self._make_leader(tp, info)
            else:
                # New, replayed at start-up (an existing log) or a follower taking the leadership
                # (it answers NOT_LEADER_OR_FOLLOWER until its turn): hosted in chunks, issue 12/17.
                pending[key] = (tp, info, True)
        for tp, info in sorted(changes.followers.items()):
            key = (tp.topic, tp.partition)
            if key in self._partitions or key in self._follower_partitions:
                pending.pop(key, None)
                self._make_follower(tp, info)  # hosted: stop leading / follow the new leader at once
            elif key in pending:
                pending[key] = (tp, info, False)
            elif loop is None or is_internal(tp.topic) or hosted_now < SYNC_HOSTING_PARTITIONS:
                hosted_now += 1
                self._make_follower(tp, info)
            else:
                pending[key] = (tp, info, False)
        self.start_deferred_fetchers()
        if loop is not None and not self._shut_down and any(
                not f.partitions for f in self.replica_fetcher_manager.fetchers.values()):
            # Kafka's shutdownIdleFetcherThreads: a leader we no longer follow anything from.
            loop.create_task(self.replica_fetcher_manager.shutdown_idle_fetchers())
        if self._pending_leaders and loop is not None and not self._hosting_scheduled:
            log.info("Hosting %d new partition(s) incrementally", len(self._pending_leaders))
            self._hosting_scheduled = True
            loop.call_soon(self._host_pending)

    def _host_pending(self) -> None:
        """Host deferred partitions for at most HOSTING_CHUNK_SECONDS, then yield the loop."""
        self._hosting_scheduled = False
        if self._shut_down:
            return
        deadline = time.monotonic() + HOSTING_CHUNK_SECONDS
        pending = self._pending_leaders
        while pending:
            self._host_deferred(*pending.pop(next(iter(pending))))
            if time.monotonic() >= deadline:
                break
        if pending:
            loop = _running_loop()
            if loop is not None:
                self._hosting_scheduled = True
                loop.call_soon(self._host_pending)
            else:  # pragma: no cover - a loop runs this callback
                while pending:
                    self._host_deferred(*pending.pop(next(iter(pending))))
        else:
            log.info("Hosted every deferred new partition")

    def _host_deferred(self, tp: TopicPartition, info: PartitionInfo, leader: bool) -> None:
        if leader:
            self._make_leader(tp, info)
        else:
            self._make_follower(tp, info)

    @property
    def pending_hosting(self) -> int:
        """Partitions assigned here and not hosted (or not led) yet (incremental hosting)."""
        return len(self._pending_leaders)

    def _host_log(self, tp: TopicPartition, info: PartitionInfo) -> UnifiedLog | None:
        try:
            plog = self.log_manager.get_or_create_log(tp.topic, tp.partition, topic_id=info.topic_id)
        except (KafkaStorageError, OSError) as e:
            # Kafka marks the partition offline (its log dir failed); produce and fetch get
            # KAFKA_STORAGE_ERROR for it, the other partitions carry on.
            log.error("Cannot host %s-%d: %s", tp.topic, tp.partition, e)
            self.offline.add((tp.topic, tp.partition))
            return None
        self.offline.discard((tp.topic, tp.partition))
        return plog

    def _new_partition(self, tp: TopicPartition, info: PartitionInfo, plog: UnifiedLog) -> Partition:
        reg = info.partition
        part = Partition(tp.topic, tp.partition, info.topic_id, plog, leader_epoch=reg.leader_epoch,
                         local_id=self.node_id, replicas=tuple(reg.replicas), time_ms=self.time_ms,
                         replica_lag_time_max_ms=self.replica_lag_time_max_ms,
                         is_replica_eligible=self.is_replica_eligible, local_broker_epoch=self.broker_epoch)
        if self.metrics is not None:
            part.topic_stats = self.metrics.topic(tp.topic)
        return part

    def _make_leader(self, tp: TopicPartition, info: PartitionInfo) -> None:
        key = (tp.topic, tp.partition)
        reg = info.partition
        self.followers.pop(key, None)
        # Kafka's makeLeaders: stop fetching first, then take the leadership.
        self.replica_fetcher_manager.remove_fetcher_for_partitions([key])
        self._deferred_fetches.pop(key, None)
        part = self._partitions.get(key)
        if part is None:
            part = self._follower_partitions.pop(key, None)
            if part is None:
                plog = self._host_log(tp, info)
                if plog is None:
                    return
                part = self._new_partition(tp, info, plog)
            self._partitions[key] = part
        pending = part.isr_state.pending
        new_epoch = part.make_leader(reg.leader_epoch, reg.partition_epoch, tuple(reg.replicas), tuple(reg.isr),
                                     int(reg.leader_recovery_state))
        if (pending is not None and not new_epoch and part.isr_state.pending is None
                and part.isr == frozenset(pending.new_isr)):
            # Our proposal, committed, reached us through the metadata before the AlterPartition answer
            # (which will now be ignored as stale): count the change here, once.
            self._count_isr_change(pending)
        # An ISR shrink committed by the metadata may let the HW (and waiting acks=all) move.
        self.on_high_watermark_moved(key)
        if len(part.replicas) > 1:
            self._ensure_isr_expiration()

    def _make_follower(self, tp: TopicPartition, info: PartitionInfo) -> None:
        """Kafka's makeFollower (`applyLocalFollowersDelta`): stop serving as leader (waiting produces
        answer NOT_LEADER_OR_FOLLOWER), keep (or create) the log, take the new leader and epochs, and
        (re)start the fetcher from the leader when the leader epoch changed. The log is not truncated
        here: the fetcher truncates by leader epoch once it reaches the leader."""
        key = (tp.topic, tp.partition)
        reg = info.partition
        part = self._partitions.pop(key, None)
        if part is not None:
            self._complete_delayed_fetches(key)
            self.produce_purgatory.check_and_complete(key)
        else:
            part = self._follower_partitions.get(key)
        if part is None:
            plog = self._host_log(tp, info)
            if plog is None:
                return
            part = self._new_partition(tp, info, plog)
        self._follower_partitions[key] = part
        self.followers[key] = reg.leader
        had_fetcher = self.replica_fetcher_manager.fetch_state(*key) is not None or key in self._deferred_fetches
        new_epoch = part.make_follower(reg.leader, reg.leader_epoch, reg.partition_epoch, tuple(reg.replicas),
                                       tuple(reg.isr), int(reg.leader_recovery_state))
        if reg.leader < 0 or reg.leader == self.node_id:
            self.replica_fetcher_manager.remove_fetcher_for_partitions([key])
            self._deferred_fetches.pop(key, None)
            return
        if new_epoch or not had_fetcher:
            self.replica_fetcher_manager.remove_fetcher_for_partitions([key])
            init = InitialFetchState(info.topic_id, reg.leader, reg.leader_epoch, initial_fetch_offset(part))
            if _running_loop() is None or self._shut_down:
                self._deferred_fetches[key] = init  # started by the first apply_delta on the loop
            else:
                self._deferred_fetches.pop(key, None)
                self.replica_fetcher_manager.add_fetcher_for_partitions({key: init})

    def start_deferred_fetchers(self) -> None:
        """Start the fetchers of partitions that became followers before the event loop ran."""
        if self._deferred_fetches and _running_loop() is not None and not self._shut_down:
            deferred, self._deferred_fetches = self._deferred_fetches, {}
            self.replica_fetcher_manager.add_fetcher_for_partitions(deferred)

    def _stop_partition(self, topic: str, partition: int, *, delete: bool) -> None:
        """Kafka's stopPartitions: stop hosting; with `delete`, remove the log too."""
        key = (topic, partition)
        self._pending_leaders.pop(key, None)
        self.alter_log_dirs.stop(key)
        self.replica_fetcher_manager.remove_fetcher_for_partitions([key])
        self._deferred_fetches.pop(key, None)
        self._partitions.pop(key, None)
        self._follower_partitions.pop(key, None)
        self.followers.pop(key, None)
        self.offline.discard(key)
        if delete:
            self.log_manager.delete_log(topic, partition)
        # Waiting operations on the partition complete now with their errors.
        self._complete_delayed_fetches(key)
        self.produce_purgatory.check_and_complete(key)

    # -- produce ---------------------------------------------------------------------------------

    def append_records(
        self,
        timeout_ms: int,
        required_acks: int,
        internal_topics_allowed: bool,
        entries: Mapping[tuple[str, int], memoryview],
        *,
        offload: bool = False,
    ) -> dict[tuple[str, int], ProducePartitionResult] | asyncio.Future[dict[tuple[str, int], ProducePartitionResult]]:
        """Append one batch per partition. Returns the results, or a future when something waits:
        an off-loop check (``offload``, the Produce path; see the module docstring) or acks=-1."""
        if required_acks not in (0, 1, -1):
            return {k: ProducePartitionResult(ErrorCode.INVALID_REQUIRED_ACKS) for k in entries}
        results: dict[tuple[str, int], ProducePartitionResult] = {}
        waiting: dict[tuple[str, int], int] = {}
        # The running loop, looked up only for a partition that goes through its queue: CPython 3.11's
        # get_running_loop makes a getpid system call (its fork check) each time.
        loop: asyncio.AbstractEventLoop | None = None
        pending: list[tuple[tuple[str, int], _PendingAppend]] = []
        # One pass over the request's partitions, each looked up once (a request may name thousands).
        partitions = self._partitions
        queues = self._append_queues
        for key, records in entries.items():
            partition = partitions.get(key)
            if offload:
                # Whether checking the batch belongs on the worker pool (log.validator.needs_worker); the
                # append goes through the partition's queue when it does, or when a queue is in use
                # (both only on a running loop; without one the append is inline, as it always was).
                heavy = False
                if partition is not None and records is not None:
                    try:
                        heavy = needs_worker(records, partition.log.config)
                    except Exception:  # noqa: BLE001 - malformed framing: the inline check reports it
                        pass
                if (heavy or key in queues) and (loop is not None or (loop := _running_loop()) is not None):
                    job = _PendingAppend(records, required_acks, internal_topics_allowed, lambda r, n: None, heavy)
                    pending.append((key, job))
                    continue
            result, next_offset = self._append_to_local_log(key, records, required_acks, internal_topics_allowed,
                                                            partition=partition)
            results[key] = result
            if result.error == ErrorCode.NONE:
                waiting[key] = next_offset
                # New data: wake the fetches waiting on this partition.
                self._complete_delayed_fetches(key)
        if not pending:
            return self._await_acks(timeout_ms, required_acks, results, waiting)
        assert loop is not None
        outer: asyncio.Future[dict[tuple[str, int], ProducePartitionResult]] = loop.create_future()
        remaining = [len(pending)]

        def on_done(key: tuple[str, int], result: ProducePartitionResult, next_offset: int) -> None:
            results[key] = result
            if result.error == ErrorCode.NONE:
                waiting[key] = next_offset
            remaining[0] -= 1
            if remaining[0] == 0 and not outer.done():
                tail = self._await_acks(timeout_ms, required_acks, results, waiting)
                if isinstance(tail, dict):
                    outer.set_result(tail)
                else:
                    def relay(f: asyncio.Future[dict[tuple[str, int], ProducePartitionResult]]) -> None:
                        if outer.done():
                            return
                        if f.cancelled():
                            outer.cancel()
                        elif (exc := f.exception()) is not None:
                            outer.set_exception(exc)
                        else:
                            outer.set_result(f.result())

                    tail.add_done_callback(relay)

        for key, job in pending:
            job.on_done = lambda r, n, key=key: on_done(key, r, n)  # type: ignore[misc]
            self._enqueue(loop, key, job)
        return outer

    def _await_acks(
        self, timeout_ms: int, required_acks: int, results: dict[tuple[str, int], ProducePartitionResult],
        waiting: dict[tuple[str, int], int],
    ) -> dict[tuple[str, int], ProducePartitionResult] | asyncio.Future[dict[tuple[str, int], ProducePartitionResult]]:
        if required_acks != -1 or not waiting:
            return results
        # The common single-replica case: the high watermark already passed every batch, so the
        # delayed operation would complete at once. Answer without creating it (no future, no timer).
        if all(
            (p := self._partitions.get(key)) is not None and p.high_watermark >= required
            for key, required in waiting.items()
        ):
            return results
        op = DelayedProduce(timeout_ms, self, results, waiting)
        if self.produce_purgatory.try_complete_else_watch(op, list(waiting)):
            return results
        return op.future

    # -- off-loop checks, in partition order ----------------------------------------------------

    def _enqueue(self, loop: asyncio.AbstractEventLoop, key: tuple[str, int], job: _PendingAppend) -> None:
        queue = self._append_queues.setdefault(key, deque())
        queue.append(job)
        partition = self._partitions.get(key)
        if not job.heavy or partition is None:
            job.ready = True  # checked inline when its turn comes
            if len(queue) == 1:
                self._drain(key)
            return
        if self._validation_pool is None:
            self._validation_pool = ThreadPoolExecutor(VALIDATION_WORKERS, thread_name_prefix="kbroker-validate")
        params = validation_params(partition.log.config, self.time_ms(), topic_partition=f"{key[0]}-{key[1]}")
        fut = loop.run_in_executor(self._validation_pool, check_batches, job.records, params)

        def checked(f: asyncio.Future[list[CheckedBatch]]) -> None:
            if f.cancelled():
                job.error = KafkaError("broker shutting down", error_code=ErrorCode.KAFKA_STORAGE_ERROR)
            elif (exc := f.exception()) is not None:
                job.error = exc
            else:
                job.checked = f.result()
            job.ready = True
            self._drain(key)

        fut.add_done_callback(checked)

    def _drain(self, key: tuple[str, int]) -> None:
        """Append every ready job at the head of the partition's queue, in order."""
        queue = self._append_queues.get(key)
        while queue and queue[0].ready:
            job = queue.popleft()
            result, next_offset = self._append_to_local_log(
                key, job.records, job.required_acks, job.internal_topics_allowed, checked=job.checked,
                check_error=job.error)
            if result.error == ErrorCode.NONE:
                self._complete_delayed_fetches(key)
            job.on_done(result, next_offset)
        if queue is not None and not queue:
            del self._append_queues[key]

    def _append_to_local_log(
        self, key: tuple[str, int], records: memoryview, required_acks: int, internal_topics_allowed: bool,
        checked: list[CheckedBatch] | None = None, check_error: BaseException | None = None,
        *, partition: Partition | None = None,
    ) -> tuple[ProducePartitionResult, int]:
        """``partition``: the caller's lookup of ``key`` in the hosted partitions, or None to look it up."""
        topic = key[0]
        # Kafka's order: a partition missing from the metadata is UNKNOWN_TOPIC_OR_PARTITION
        # (KafkaApis) before the internal-topic check (ReplicaManager.appendToLocalLog).
        if partition is None:
            partition = self._partitions.get(key)
        if partition is None:
            return ProducePartitionResult(self.missing_partition_error(topic, key[1])), -1
        if topic in INTERNAL_TOPICS and not internal_topics_allowed:  # protocol.topic.is_internal, spelled out
            log.debug("refused a client write to internal topic %s", topic)
            return ProducePartitionResult(ErrorCode.INVALID_TOPIC_EXCEPTION), -1
        stats = partition.topic_stats
        if stats is not None:
            stats.total_produce_requests += 1
        try:
            if check_error is not None:
                raise check_error
            info = partition.append_records_to_leader(records, required_acks, checked=checked)
        except KafkaError as exc:
            if stats is not None:
                self._record_produce_error(stats, exc.error_code, records)
            record_errors = exc.record_errors
            # Kafka only fills error_message for record validation failures
            # (RecordValidationException: INVALID_RECORD / INVALID_TIMESTAMP), never for CRC,
            # sequence or size errors.
            custom = exc.error_code in (ErrorCode.INVALID_RECORD, ErrorCode.INVALID_TIMESTAMP)
            return ProducePartitionResult(
                exc.error_code,
                # Kafka reports the log start offset with every failure except the ones its
                # ReplicaManager lists (CRC, size, storage...), so that a producer can tell an
                # OUT_OF_ORDER_SEQUENCE_NUMBER caused by retention from a real gap (KIP-360).
                log_start_offset=-1 if exc.error_code in _NO_LOG_START_ERRORS else partition.log_start_offset,
                record_errors=list(record_errors) if record_errors else None,
                error_message=str(exc) if custom and exc.args else None,
            ), -1
        except OSError as exc:
            log.error("storage error appending to %s-%d: %s", topic, key[1], exc)
            return ProducePartitionResult(ErrorCode.KAFKA_STORAGE_ERROR), -1
        except Exception:  # noqa: BLE001 - a checker bug must not take the broker down
            log.exception("unexpected error appending to %s-%d", topic, key[1])
            if stats is not None:
                stats.failed_produce_requests += 1
            return ProducePartitionResult(ErrorCode.UNKNOWN_SERVER_ERROR), -1
        if stats is not None:
            stats.bytes_in += info.valid_bytes
            stats.messages_in += info.num_messages
        # A duplicate batch (idempotent retry) returns the original offsets: the HW is past them.
        # An empty append (no batches) reports last offset -1, so it waits for offset 0: nothing.
        return ProducePartitionResult(
            ErrorCode.NONE,
            base_offset=info.first_offset,
            log_append_time_ms=info.log_append_time,
            log_start_offset=info.log_start_offset,
        ), info.last_offset + 1

    @staticmethod
    def _record_produce_error(stats: TopicMetrics, error: ErrorCode, records: memoryview | None) -> None:
        """Kafka's appendToLocalLog: an oversized batch is rejected bytes; errors other than the expected
        ones (unknown partition, not leader, too large, corrupt, storage) are failed produce requests."""
        if error in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE):
            stats.bytes_rejected += len(records) if records is not None else 0
        if error not in _NO_LOG_START_ERRORS:
            stats.failed_produce_requests += 1

    def await_replication(self, key: tuple[str, int], required_offset: int,
                          timeout_ms: int) -> ErrorCode | asyncio.Future[ErrorCode]:
        """acks=all for something appended outside `append_records` (a transaction marker): NONE once
        the high watermark passes `required_offset`, or the DelayedProduce's error (not leader any
        more, NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT); a future while it waits."""
        results = {key: ProducePartitionResult(ErrorCode.NONE)}
        outcome = self._await_acks(timeout_ms, -1, results, {key: required_offset})
        if isinstance(outcome, dict):
            return outcome[key].error
        out: asyncio.Future[ErrorCode] = outcome.get_loop().create_future()

        def done(f: asyncio.Future[dict[tuple[str, int], ProducePartitionResult]]) -> None:
            if out.done():
                return
            if f.cancelled() or f.exception() is not None:
                out.set_result(ErrorCode.REQUEST_TIMED_OUT)
            else:
                out.set_result(f.result()[key].error)

        outcome.add_done_callback(done)
        return out

    def _complete_delayed_fetches(self, key: tuple[str, int]) -> None:
        """New data, a moved high watermark or a leadership change of the partition: the fetches and
        ShareFetches waiting on it look again. Runs after every append (once per partition of a
        Produce request), so the usual case, nothing waiting, is two dictionary tests."""
        if key in self.fetch_purgatory.watched_keys:
            self.fetch_purgatory.check_and_complete(key)
        watched = self.delayed_share_fetch_watched
        if self.delayed_share_fetch_listener is not None and (watched is None or key in watched):
            self.delayed_share_fetch_listener(key)

    def on_high_watermark_moved(self, key: tuple[str, int]) -> None:
        """Complete what waited for this partition's high watermark (acks=all produces, fetches)."""
        self.produce_purgatory.check_and_complete(key)
        self._complete_delayed_fetches(key)

    # -- ISR changes (Kafka's isr-expiration task and Partition.submitAlterPartition) -------------------

    def _ensure_isr_expiration(self) -> None:
        """Run `maybe_shrink_isr` every replica.lag.time.max.ms / 2, as Kafka's ReplicaManager does."""
        loop = _running_loop()
        if self._isr_timer is not None or loop is None or self._shut_down:
            return
        self._isr_timer = loop.call_later(max(0.001, self.replica_lag_time_max_ms / 2000), self._isr_expiration)

    def _isr_expiration(self) -> None:
        self._isr_timer = None
        if self._shut_down:
            return
        try:
            self.maybe_shrink_isrs()
        finally:
            if any(len(p.replicas) > 1 for p in self._partitions.values()):
                self._ensure_isr_expiration()

    def maybe_shrink_isrs(self) -> int:
        """Propose shrinking the ISR of every led partition with lagging followers; how many were."""
        n = 0
        for part in list(self._partitions.values()):
            item = part.maybe_shrink_isr()
            if item is not None:
                log.info("Shrinking ISR of %s-%d from %s to %s", part.topic, part.partition, sorted(part.isr),
                         list(item.new_isr))
                self._submit_alter_partition(part, item)
                n += 1
        return n

    def _submit_alter_partition(self, part: Partition, item: AlterPartitionItem) -> None:
        if _running_loop() is None:
            return
        fut = self.alter_partition_manager.submit(item)

        def done(f: asyncio.Future[AlterPartitionResult]) -> None:
            if f.cancelled():
                return
            self._on_alter_partition_result(part, item, f.result())

        fut.add_done_callback(done)

    def _on_alter_partition_result(self, part: Partition, item: AlterPartitionItem,
                                   result: AlterPartitionResult) -> None:
        if self._shut_down:
            return
        if result.error != ErrorCode.NONE:
            log.info("AlterPartition of %s-%d to ISR %s: %s", part.topic, part.partition, list(item.new_isr),
                     result.error.name)
        was_pending = part.isr_state.pending is item
        retry = part.handle_alter_partition_response(item, result)
        metrics = self.metrics
        if metrics is not None and was_pending:
            # Kafka's AlterPartitionListener: markFailed on every error answer (handleAlterPartitionError),
            # markShrink / markExpand when the leader applies the committed ISR.
            if result.error != ErrorCode.NONE:
                metrics.failed_isr_updates += 1
            elif part.isr_state.pending is None:
                self._count_isr_change(item)
        if retry and part.is_leader and self._partitions.get(part.key) is part:
            loop = _running_loop()
            if loop is not None:
                loop.call_later(self.alter_partition_manager.retry_backoff_ms / 1000,
                                self._retry_alter_partition, part, item)
            return
        # A committed shrink may move the HW (and answer waiting acks=all, maybe with
        # NOT_ENOUGH_REPLICAS_AFTER_APPEND); a committed expansion changes nothing waiting but is harmless.
        part.maybe_increment_high_watermark()
        self.on_high_watermark_moved(part.key)

    def _count_isr_change(self, item: AlterPartitionItem) -> None:
        """IsrShrinksPerSec / IsrExpandsPerSec: one committed change of a partition led here."""
        if self.metrics is not None:
            if item.change == IsrChange.SHRINK:
                self.metrics.isr_shrinks += 1
            else:
                self.metrics.isr_expands += 1

    def _retry_alter_partition(self, part: Partition, item: AlterPartitionItem) -> None:
        if not self._shut_down and part.isr_state.pending is item:
            self._submit_alter_partition(part, item)

    def _update_follower_fetch_state(self, part: Partition, params: FetchParams, req: FetchPartitionRequest) -> None:
        """Kafka's `Partition.updateFollowerFetchState` + `maybeExpandIsr` after a follower's read."""
        moved = part.update_follower_fetch_state(params.replica_id, req.fetch_offset, req.log_start_offset,
                                                 params.replica_epoch)
        item = part.maybe_expand_isr(params.replica_id)
        if item is not None:
            log.info("Expanding ISR of %s-%d from %s to %s", part.topic, part.partition, sorted(part.isr),
                     list(item.new_isr))
            self._submit_alter_partition(part, item)
        if moved:
            self.on_high_watermark_moved(part.key)

    # -- fetch -----------------------------------------------------------------------------------

    def fetch_messages(
        self, params: FetchParams, requests: list[FetchPartitionRequest]
    ) -> dict[Hashable, PartitionResult] | asyncio.Future[dict[Hashable, PartitionResult]]:
        """Read now; if fewer than `min_bytes` are available and the client will wait, wait."""
        results, total = self.read_from_local_log(params, requests)
        if (
            params.max_wait_ms <= 0
            or not requests
            or total >= params.min_bytes
            or any(r.error != ErrorCode.NONE for r in results.values())
        ):
            self.record_fetch(params, requests, results)
            return results
        op = DelayedFetch(self, params, requests)
        keys = [(r.topic, r.partition) for r in requests if r.topic]
        if self.fetch_purgatory.try_complete_else_watch(op, keys):
            return op.future.result()
        return op.future

    def record_fetch(self, params: FetchParams, requests: list[FetchPartitionRequest],
                     results: Mapping[Hashable, PartitionResult]) -> None:
        """BrokerTopicMetrics of a consumer fetch being answered with `results` (Kafka counts bytes out
        in its response callback, so a delayed fetch counts only what it finally sends). Follower
        fetches count nothing here: replication brings ReplicationBytesOut."""
        if params.replica_id >= 0:
            # KafkaApis: the bytes of throttled partitions sent to a follower count towards the leader's
            # replication quota (in sync or not: only out-of-sync followers are ever held back).
            quota = self.leader_quota
            throttled = sum(r.records_size for req in requests
                            if quota.is_throttled(req.topic, req.partition) and (r := results.get(req.key)) is not None)
            quota.record(throttled)
        if self.metrics is None:
            return
        if params.replica_id >= 0:
            # Kafka's updateBytesOut for a follower: ReplicationBytesOutPerSec, broker-wide.
            self.metrics.replication_bytes_out += sum(
                r.records_size for req in requests if (r := results.get(req.key)) is not None)
            return
        hosted = self._partitions
        for req in requests:
            partition = hosted.get((req.topic, req.partition))
            stats = None if partition is None else partition.topic_stats
            result = results.get(req.key)
            if stats is None or result is None:
                continue
            stats.total_fetch_requests += 1
            stats.bytes_out += result.records_size
            if result.error not in _EXPECTED_FETCH_ERRORS:
                stats.failed_fetch_requests += 1

    def read_from_local_log(
        self, params: FetchParams, requests: list[FetchPartitionRequest]
    ) -> tuple[dict[Hashable, PartitionResult], int]:
        """Read every partition in order within the response limit (KIP-74 first-batch rule)."""
        limit = params.max_bytes
        min_one = True
        total = 0
        out: dict[Hashable, PartitionResult] = {}
        for req in requests:
            result = self._read_partition(req, params, min(req.max_bytes, limit), min_one)
            out[req.key] = result
            if result.records_size > 0:
                total += result.records_size
                limit = max(0, limit - result.records_size)
                min_one = False  # only the first non-empty partition may exceed the limits
        return out, total

    def _read_partition(
        self, req: FetchPartitionRequest, params: FetchParams, max_bytes: int, min_one: bool
    ) -> PartitionResult:
        # Partitions Kafka rejects before reading (KafkaApis: unknown to the metadata cache) carry an
        # empty aborted-transactions list; errors from the read itself carry null.
        if not req.topic:
            return PartitionResult(ErrorCode.UNKNOWN_TOPIC_ID, aborted_transactions=[])
        isolation = params.isolation_level
        partition = self.partition_for_fetch(req.topic, req.partition, params)
        if partition is None:
            if (req.topic, req.partition) in self.offline:  # its log directory failed
                return PartitionResult(ErrorCode.KAFKA_STORAGE_ERROR)
            if (req.topic, req.partition) in self._follower_partitions:
                # A follower here, and the fetch may only read from the leader (a follower's own fetch,
                # or a consumer below Fetch v11 without client metadata, KIP-392).
                return PartitionResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            return PartitionResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, aborted_transactions=[])
        if req.topic_id.int and req.topic_id != partition.topic_id:
            # A fetch by id for an id that was replaced (topic recreated): Kafka's INCONSISTENT_TOPIC_ID.
            return PartitionResult(ErrorCode.INCONSISTENT_TOPIC_ID)
        epoch_error = partition.check_leader_epoch(req.current_leader_epoch)
        if epoch_error != ErrorCode.NONE:
            return PartitionResult(epoch_error)
        # Errors carry -1 for the offsets, as Kafka's LogReadResult for an exception does
        # (OFFSET_OUT_OF_RANGE included: the client resets its position with ListOffsets).
        follower = params.replica_id >= 0
        if follower and params.replica_id not in partition.remote_replicas:
            return PartitionResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        try:
            if follower:
                # KIP-595 truncation on fetch: a follower whose last epoch ends earlier here is told
                # where (diverging_epoch), gets no records, and its fetch state is not updated.
                diverging = diverging_epoch(req.last_fetched_epoch, req.fetch_offset,
                                            partition.log.end_offset_for_epoch)
                if diverging is not None:
                    if diverging[0] == UNDEFINED_EPOCH or req.fetch_offset < partition.log_start_offset:
                        return PartitionResult(ErrorCode.OFFSET_OUT_OF_RANGE)
                    return PartitionResult(
                        ErrorCode.NONE, high_watermark=partition.high_watermark,
                        last_stable_offset=partition.last_stable_offset,
                        log_start_offset=partition.log_start_offset, diverging_epoch=diverging)
            if req.fetch_offset < partition.log_start_offset or req.fetch_offset > partition.log_end_offset:
                return PartitionResult(ErrorCode.OFFSET_OUT_OF_RANGE)
            if follower:
                if self.should_leader_throttle(partition, params.replica_id):
                    # Kafka's readFromLocalLog: a throttled out-of-sync follower gets no records.
                    self._update_follower_fetch_state(partition, params, req)
                    return PartitionResult(
                        ErrorCode.NONE, high_watermark=partition.high_watermark,
                        last_stable_offset=partition.last_stable_offset,
                        log_start_offset=partition.log_start_offset)
                self._update_follower_fetch_state(partition, params, req)
            elif not partition.is_leader:
                self.follower_reads += 1
            elif params.client_rack and partition.is_leader:
                preferred = self.preferred_read_replica(partition, params.client_rack, req.fetch_offset)
                if preferred >= 0:
                    # KIP-392: no read here; the consumer fetches from `preferred` from now on.
                    return PartitionResult(
                        ErrorCode.NONE, high_watermark=partition.high_watermark,
                        last_stable_offset=partition.last_stable_offset, log_start_offset=partition.log_start_offset,
                        aborted_transactions=[] if isolation == 1 else None, preferred_read_replica=preferred)
            if req.fetch_offset >= partition.fetchable_end(isolation) or (max_bytes <= 0 and not min_one):
                return PartitionResult(
                    ErrorCode.NONE,
                    high_watermark=partition.high_watermark,
                    last_stable_offset=partition.last_stable_offset,
                    log_start_offset=partition.log_start_offset,
                    aborted_transactions=[] if isolation == 1 else None,
                )
            info = partition.read(req.fetch_offset, max_bytes, isolation, min_one)
        except KafkaError as exc:
            return PartitionResult(exc.error_code)
        except OSError as exc:
            log.error("storage error reading %s-%d: %s", req.topic, req.partition, exc)
            return PartitionResult(ErrorCode.KAFKA_STORAGE_ERROR)
        return PartitionResult(
            ErrorCode.NONE,
            high_watermark=info.high_watermark,
            last_stable_offset=info.last_stable_offset,
            log_start_offset=info.log_start_offset,
            records=info.records,
            records_size=info.size,
            aborted_transactions=info.aborted_transactions,
        )

    def should_leader_throttle(self, partition: Partition, replica_id: int) -> bool:
        """Kafka's `shouldLeaderThrottle`: a follower outside the ISR fetching a throttled partition
        while the leader's replication rate is over `leader.replication.throttled.rate`."""
        quota = self.leader_quota
        return (replica_id not in partition.isr and quota.is_throttled(partition.topic, partition.partition)
                and quota.is_quota_exceeded())

    def partition_for_fetch(self, topic: str, partition: int, params: FetchParams) -> Partition | None:
        """The partition a fetch reads: the leader's, or (KIP-392: a v11+ consumer) this follower's."""
        part = self._partitions.get((topic, partition))
        if part is None and not params.fetch_only_leader:
            part = self._follower_partitions.get((topic, partition))
        return part

    def preferred_read_replica(self, partition: Partition, client_rack: str, fetch_offset: int) -> int:
        """Kafka's `findPreferredReadReplica` with `RackAwareReplicaSelector`: among the leader and the
        ISR followers that hold `fetch_offset`, the leader if it is in the client's rack, else the most
        caught-up replica of that rack (largest LEO, then most recently caught up); -1 for the leader
        itself, when no selector is configured, or when no replica is in that rack."""
        if not self.rack_aware_replica_selector:
            return -1
        cluster = self.metadata.image.cluster

        def rack(broker_id: int) -> str | None:
            reg = cluster.broker(broker_id)
            return None if reg is None else reg.rack

        if rack(self.node_id) == client_rack:
            return -1
        now = self.time_ms()
        candidates = [
            (r.log_end_offset, -(now - r.last_caught_up_time_ms), r.broker_id)
            for r in partition.remote_replicas.values()
            if r.broker_id in partition.isr and r.log_start_offset <= fetch_offset <= r.log_end_offset
            and rack(r.broker_id) == client_rack
        ]
        return max(candidates)[2] if candidates else -1

    def on_replication_bytes_in(self, size: int) -> None:
        """A fetcher appended `size` bytes of a leader's records (ReplicationBytesInPerSec)."""
        if self.metrics is not None:
            self.metrics.replication_bytes_in += size

    def on_follower_high_watermark_moved(self, key: tuple[str, int]) -> None:
        """A follower's HW moved (its fetcher): consumers reading from it (KIP-392) may complete."""
        self._complete_delayed_fetches(key)

    def readable_bytes(self, partition: Partition, req: FetchPartitionRequest, isolation: int) -> int:
        """Bytes a fetch at `req` would get now (used by DelayedFetch for min_bytes > 1)."""
        try:
            return partition.read(req.fetch_offset, req.max_bytes, isolation, False).size
        except (KafkaError, OSError):
            return 0

    def missing_partition_error(self, topic: str, partition: int) -> ErrorCode:
        """Why a partition is not served here: absent from the metadata image (Kafka's
        UNKNOWN_TOPIC_OR_PARTITION, also for an index past the partition count) or in the image but
        not hosted by this broker (NOT_LEADER_OR_FOLLOWER), or assigned here but offline because its
        log could not be opened (KAFKA_STORAGE_ERROR)."""
        info = self.metadata.topic(topic)
        if info is not None and 0 <= partition < info.num_partitions:
            if (topic, partition) in self.offline:
                return ErrorCode.KAFKA_STORAGE_ERROR
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
