"""The replica manager: hosted partitions, appends (acks 0/1/-1), fetches (long polling), fetch
sessions, and the purgatories that hold delayed requests (Kafka's `ReplicaManager`).

Appends are synchronous calls into the storage layer on the event loop (the log is synchronous
by design); what waits is only the *response*: acks=-1 goes through the produce purgatory and is
completed when the high watermark passes the appended offsets (at once on a single replica, but
through the same path replication will use); a fetch that finds fewer than `min_bytes` waits in
the fetch purgatory and is woken by appends to any partition it reads.

Must not import net/ or api/. The broker config and the metadata image live above this package:
their types are imported for the type checker only. Which topics are internal is Kafka's
`Topic.isInternal` (`kbroker.protocol.topic`); a new log's config comes from the LogManager's
`config_for_topic` hook (the one resolver, `ConfigurationControlManager.log_config`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kbroker.clock import Clock, wall_clock_ms
from kbroker.log.errors import KafkaStorageError
from kbroker.log.manager import LogManager
from kbroker.log.unified_log import UnifiedLog
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.topic import is_internal
from kbroker.replica.delayed import DelayedFetch, DelayedProduce, FetchParams
from kbroker.replica.fetch_session import (
    FetchManager,
    FetchPartitionRequest,
    FetchSessionCache,
    PartitionResult,
)
from kbroker.replica.partition import Partition
from kbroker.replica.purgatory import DelayedOperationPurgatory

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


@dataclass(slots=True)
class ProducePartitionResult:
    """One partition's produce outcome (Kafka's PartitionResponse)."""

    error: ErrorCode
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    record_errors: list[tuple[int, str | None]] | None = None
    error_message: str | None = None


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
        self._partitions: dict[tuple[str, int], Partition] = {}
        # Partitions this broker follows: (topic, partition) -> leader id.
        self.followers: dict[tuple[str, int], int] = {}
        # Partitions assigned here whose log could not be opened or created (a failed disk).
        self.offline: set[tuple[str, int]] = set()
        self.produce_purgatory: DelayedOperationPurgatory[dict[tuple[str, int], ProducePartitionResult]] = (
            DelayedOperationPurgatory("Produce"))
        self.fetch_purgatory: DelayedOperationPurgatory[dict[Hashable, PartitionResult]] = (
            DelayedOperationPurgatory("Fetch"))
        slots = int(config["max.incremental.fetch.session.cache.slots"])
        self.fetch_manager = FetchManager(FetchSessionCache(slots, time_ms))

    # -- lifecycle -------------------------------------------------------------------------------

    name = "ReplicaManager"

    def shutdown(self) -> None:
        self.produce_purgatory.shutdown()
        self.fetch_purgatory.shutdown()

    # -- partitions ------------------------------------------------------------------------------

    def get_partition(self, topic: str, partition: int) -> Partition | None:
        """The partition if this broker leads it (the produce and consumer-fetch paths serve only
        leaders; a follower's partition is in `followers`)."""
        return self._partitions.get((topic, partition))

    def partitions(self) -> list[Partition]:
        return list(self._partitions.values())

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
        for tp, info in sorted(changes.leaders.items()):
            self._make_leader(tp, info)
        for tp, info in sorted(changes.followers.items()):
            self._make_follower(tp, info)

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

    def _make_leader(self, tp: TopicPartition, info: PartitionInfo) -> None:
        key = (tp.topic, tp.partition)
        reg = info.partition
        self.followers.pop(key, None)
        part = self._partitions.get(key)
        if part is None:
            plog = self._host_log(tp, info)
            if plog is None:
                return
            part = Partition(tp.topic, tp.partition, info.topic_id, plog,
                             leader_epoch=reg.leader_epoch, local_id=self.node_id, replicas=tuple(reg.replicas))
            self._partitions[key] = part
        part.make_leader(reg.leader_epoch, reg.partition_epoch, tuple(reg.replicas), tuple(reg.isr))
        # Becoming leader (Kafka's makeLeader) recomputes the high watermark from the ISR: after
        # a crash the checkpointed value can lag the log, and on one replica HW = LEO.
        part.maybe_increment_high_watermark()

    def _make_follower(self, tp: TopicPartition, info: PartitionInfo) -> None:
        """Kafka's makeFollower: stop serving as leader, keep (or create) the log. The replica fetcher
        that copies from the leader comes with replication (issue 12); a single node never gets here."""
        key = (tp.topic, tp.partition)
        if key in self._partitions:
            self._stop_partition(tp.topic, tp.partition, delete=False)
        if self._host_log(tp, info) is not None:
            self.followers[key] = info.partition.leader

    def _stop_partition(self, topic: str, partition: int, *, delete: bool) -> None:
        """Kafka's stopPartitions: stop hosting; with `delete`, remove the log too."""
        key = (topic, partition)
        self._partitions.pop(key, None)
        self.followers.pop(key, None)
        self.offline.discard(key)
        if delete:
            self.log_manager.delete_log(topic, partition)
        # Waiting operations on the partition complete now with their errors.
        self.fetch_purgatory.check_and_complete(key)
        self.produce_purgatory.check_and_complete(key)

    # -- produce ---------------------------------------------------------------------------------

    def append_records(
        self,
        timeout_ms: int,
        required_acks: int,
        internal_topics_allowed: bool,
        entries: Mapping[tuple[str, int], memoryview],
    ) -> dict[tuple[str, int], ProducePartitionResult] | asyncio.Future[dict[tuple[str, int], ProducePartitionResult]]:
        """Append one batch per partition. Returns the results, or (acks=-1 still waiting) a future."""
        if required_acks not in (0, 1, -1):
            return {k: ProducePartitionResult(ErrorCode.INVALID_REQUIRED_ACKS) for k in entries}
        results: dict[tuple[str, int], ProducePartitionResult] = {}
        waiting: dict[tuple[str, int], int] = {}
        for key, records in entries.items():
            result, next_offset = self._append_to_local_log(key, records, required_acks, internal_topics_allowed)
            results[key] = result
            if result.error == ErrorCode.NONE:
                waiting[key] = next_offset
                # New data: wake the fetches waiting on this partition.
                self.fetch_purgatory.check_and_complete(key)
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

    def _append_to_local_log(
        self, key: tuple[str, int], records: memoryview, required_acks: int, internal_topics_allowed: bool
    ) -> tuple[ProducePartitionResult, int]:
        topic = key[0]
        # Kafka's order: a partition missing from the metadata is UNKNOWN_TOPIC_OR_PARTITION
        # (KafkaApis) before the internal-topic check (ReplicaManager.appendToLocalLog).
        partition = self._partitions.get(key)
        if partition is None:
            return ProducePartitionResult(self.missing_partition_error(topic, key[1])), -1
        if is_internal(topic) and not internal_topics_allowed:
            log.debug("refused a client write to internal topic %s", topic)
            return ProducePartitionResult(ErrorCode.INVALID_TOPIC_EXCEPTION), -1
        try:
            info = partition.append_records_to_leader(records, required_acks)
        except KafkaError as exc:
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
        # A duplicate batch (idempotent retry) returns the original offsets: the HW is past them.
        # An empty append (no batches) reports last offset -1, so it waits for offset 0: nothing.
        return ProducePartitionResult(
            ErrorCode.NONE,
            base_offset=info.first_offset,
            log_append_time_ms=info.log_append_time,
            log_start_offset=info.log_start_offset,
        ), info.last_offset + 1

    def on_high_watermark_moved(self, key: tuple[str, int]) -> None:
        """Complete what waited for this partition's high watermark (acks=all produces, fetches)."""
        self.produce_purgatory.check_and_complete(key)
        self.fetch_purgatory.check_and_complete(key)

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
            return results
        op = DelayedFetch(self, params, requests)
        keys = [(r.topic, r.partition) for r in requests if r.topic]
        if self.fetch_purgatory.try_complete_else_watch(op, keys):
            return op.future.result()
        return op.future

    def read_from_local_log(
        self, params: FetchParams, requests: list[FetchPartitionRequest]
    ) -> tuple[dict[Hashable, PartitionResult], int]:
        """Read every partition in order within the response limit (KIP-74 first-batch rule)."""
        limit = params.max_bytes
        min_one = True
        total = 0
        out: dict[Hashable, PartitionResult] = {}
        for req in requests:
            result = self._read_partition(req, params.isolation_level, min(req.max_bytes, limit), min_one)
            out[req.key] = result
            if result.records_size > 0:
                total += result.records_size
                limit = max(0, limit - result.records_size)
                min_one = False  # only the first non-empty partition may exceed the limits
        return out, total

    def _read_partition(
        self, req: FetchPartitionRequest, isolation: int, max_bytes: int, min_one: bool
    ) -> PartitionResult:
        # Partitions Kafka rejects before reading (KafkaApis: unknown to the metadata cache) carry an
        # empty aborted-transactions list; errors from the read itself carry null.
        if not req.topic:
            return PartitionResult(ErrorCode.UNKNOWN_TOPIC_ID, aborted_transactions=[])
        partition = self._partitions.get((req.topic, req.partition))
        if partition is None:
            return PartitionResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, aborted_transactions=[])
        if req.topic_id.int and req.topic_id != partition.topic_id:
            # A fetch by id for an id that was replaced (topic recreated): Kafka's INCONSISTENT_TOPIC_ID.
            return PartitionResult(ErrorCode.INCONSISTENT_TOPIC_ID)
        epoch_error = partition.check_leader_epoch(req.current_leader_epoch)
        if epoch_error != ErrorCode.NONE:
            return PartitionResult(epoch_error)
        # Errors carry -1 for the offsets, as Kafka's LogReadResult for an exception does
        # (OFFSET_OUT_OF_RANGE included: the client resets its position with ListOffsets).
        try:
            if req.fetch_offset < partition.log_start_offset or req.fetch_offset > partition.log_end_offset:
                return PartitionResult(ErrorCode.OFFSET_OUT_OF_RANGE)
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
