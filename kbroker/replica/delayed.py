"""The two delayed operations of the data path: DelayedProduce (acks=all) and DelayedFetch
(long polling), as in Kafka's `DelayedProduce.scala` / `DelayedFetch.scala`.

Must not import net/ or api/.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kbroker.protocol.errors import ErrorCode
from kbroker.replica.fetch_session import FetchPartitionRequest, PartitionResult
from kbroker.replica.purgatory import DelayedOperation

if TYPE_CHECKING:
    from kbroker.replica.replica_manager import ProducePartitionResult, ReplicaManager


@dataclass(slots=True)
class FetchParams:
    """Request-level fetch settings (Kafka's FetchParams)."""

    replica_id: int = -1  # >= 0: a follower's fetch (reads up to the LEO, updates its replica state)
    replica_epoch: int = -1  # the follower's broker epoch (Fetch v15+ ReplicaState, KIP-903)
    max_wait_ms: int = 0
    min_bytes: int = 1
    max_bytes: int = 0x7FFFFFFF
    isolation_level: int = 0
    # Kafka's fetchOnlyLeader: followers and consumers below Fetch v11 read from the leader only; a v11+
    # consumer (client metadata present, KIP-392) may read from a follower, up to its HW.
    fetch_only_leader: bool = True
    client_rack: str = ""  # Fetch v11+ rack_id, for the replica selector


class DelayedProduce(DelayedOperation["dict[tuple[str, int], ProducePartitionResult]"]):
    """Waits until the high watermark of every appended partition passes its last offset (Kafka's
    `DelayedProduce` over `Partition.checkEnoughReplicasReachOffset`)."""

    __slots__ = ("_rm", "results", "required_offsets")

    def __init__(
        self,
        delay_ms: int,
        rm: ReplicaManager,
        results: dict[tuple[str, int], ProducePartitionResult],
        required_offsets: dict[tuple[str, int], int],
    ) -> None:
        super().__init__(delay_ms)
        self._rm = rm
        self.results = results
        self.required_offsets = required_offsets  # key -> offset HW must reach (last offset + 1)

    def try_complete(self) -> bool:
        for key, required in list(self.required_offsets.items()):
            partition = self._rm.get_partition(*key)
            if partition is None:
                # Deleted (or moved) while we waited.
                self.results[key].error = ErrorCode.NOT_LEADER_OR_FOLLOWER
                self.results[key].base_offset = -1
                del self.required_offsets[key]
            else:
                done, error = partition.check_enough_replicas_reach_offset(required)
                if done:
                    if error != ErrorCode.NONE:
                        # Kafka: the ISR shrank below min.insync.replicas while we waited
                        # (NOT_ENOUGH_REPLICAS_AFTER_APPEND), or the leadership moved away.
                        self.results[key].error = error
                        self.results[key].base_offset = -1
                    del self.required_offsets[key]
        if not self.required_offsets:
            return self.force_complete()
        return False

    def on_complete(self) -> dict[tuple[str, int], ProducePartitionResult]:
        # Whatever is still waiting at expiry timed out (Kafka: REQUEST_TIMED_OUT per partition).
        for key in self.required_offsets:
            r = self.results[key]
            r.error = ErrorCode.REQUEST_TIMED_OUT
            r.base_offset = -1
            r.log_append_time_ms = -1
        return self.results


class DelayedFetch(DelayedOperation[dict[Hashable, PartitionResult]]):
    """Waits until `min_bytes` are readable across the requested partitions, or `max_wait_ms`."""

    __slots__ = ("_rm", "params", "requests")

    def __init__(self, rm: ReplicaManager, params: FetchParams, requests: list[FetchPartitionRequest]) -> None:
        super().__init__(params.max_wait_ms)
        self._rm = rm
        self.params = params
        self.requests = requests

    def try_complete(self) -> bool:
        accumulated = 0
        min_bytes = self.params.min_bytes
        isolation = self.params.isolation_level
        for req in self.requests:
            if not req.topic:
                continue
            partition = self._rm.partition_for_fetch(req.topic, req.partition, self.params)
            if partition is None or partition.is_offline:
                return self.force_complete()  # the answer changed: an error to report now
            if self.params.replica_id >= 0 and req.replica_high_watermark < partition.high_watermark:
                return self.force_complete()  # KIP-1166: the follower's HW is behind ours: tell it now
            end = partition.fetchable_end(isolation)
            if end < req.fetch_offset:
                return self.force_complete()  # truncated: the client must see OFFSET_OUT_OF_RANGE
            if end > req.fetch_offset:
                if self.params.replica_id >= 0 and self._rm.should_leader_throttle(partition, self.params.replica_id):
                    continue  # Kafka's DelayedFetch: a throttled partition's bytes do not complete the wait
                if min_bytes <= 1:
                    return self.force_complete()
                accumulated += self._rm.readable_bytes(partition, req, isolation)
                if accumulated >= min_bytes:
                    return self.force_complete()
        return False

    def on_complete(self) -> dict[Hashable, PartitionResult]:
        results, _ = self._rm.read_from_local_log(self.params, self.requests)
        self._rm.record_fetch(self.params, self.requests, results)
        return results


__all__ = ["DelayedFetch", "DelayedProduce", "FetchParams"]
