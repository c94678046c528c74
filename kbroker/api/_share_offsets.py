"""DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets on a multi-broker cluster:
the group coordinator answers them through the persister, as Kafka 4.3's `GroupCoordinatorService` does
(`describeShareGroupOffsets` / `describeShareGroupAllOffsets` -> `Persister.readSummary`,
`alterShareGroupOffsets` -> `Persister.initializeState`, `deleteShareGroupOffsets` ->
`Persister.deleteState`), not through the share-partitions of the broker that received the request.

- Describe sends ReadShareGroupStateSummary (87) to each share-partition's share coordinator (one
  request per coordinator broker); a partition the coordinator has no state of, or answers with an
  error, shows start offset -1 and leader epoch -1, as in Kafka ("absence of data, not an error").
  The lag (KIP-1226) is the high watermark minus the start offset minus the delivery complete count
  the leader wrote (WriteShareGroupState v1); the high watermark is this broker's when it leads the
  partition, else ListOffsets LATEST to the leader (-1 when it cannot be had).
- Without topics, the partitions the group coordinator recorded as initialized
  (ShareGroupStatePartitionMetadata, `kbroker.coord.share_group_initialization`), as in Kafka; Alter
  records the partitions it initialized there, Delete removes the topic once its states are gone.
- Alter reads the summaries and sends InitializeShareGroupState with the new start offset and the next
  state epoch (fencing a leader that would still write the old state); Delete sends DeleteShareGroupState
  for the partitions with a state (none: "There is no offset information to delete."). Both tell this
  broker's share-partition manager to drop what it holds of those share-partitions; the other leaders
  dropped theirs when the group's last share session on them closed (Kafka's `onGroupEmpty`).

Retries (COORDINATOR_NOT_AVAILABLE while `__share_group_state` is created, NOT_COORDINATOR, ...) are
the persister's. On a single node the handlers keep the in-process path (the share-partition manager).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import TypeVar, cast

from kbroker.api.context import BrokerServices
from kbroker.client import ConnectionClosedError, RequestTimeoutError
from kbroker.coord.share_coordinator import SharePartitionKey
from kbroker.coord.share_group_state_client import has_state as has_state
from kbroker.coord.share_persister import NetworkSharePersister, PartitionOutcome
from kbroker.metadata.views import TopicInfo
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse

T = TypeVar("T")
LIST_OFFSETS = 2
LIST_OFFSETS_VERSION = 7
LATEST_TIMESTAMP = -1


def network_persister(services: BrokerServices) -> NetworkSharePersister | None:
    """The network persister when this broker runs on a multi-broker cluster, else None."""
    manager = services.share_partition_manager
    persister = manager.persister if manager is not None else None
    return persister if isinstance(persister, NetworkSharePersister) else None


def candidate_topics(services: BrokerServices) -> list[TopicInfo]:
    """Every non-internal topic, by name: where a describe without topics looks for share-partitions."""
    return sorted((t for t in services.metadata.topics() if not t.is_internal and not t.name.startswith("__")),
                  key=lambda t: t.name)


async def summaries(persister: NetworkSharePersister, group_id: str,
                    partitions: Sequence[tuple[uuid.UUID, int]]) -> dict[SharePartitionKey, PartitionOutcome]:
    return await persister.read_summary([(group_id, tid, p) for tid, p in partitions])


async def awaited(answer: T | asyncio.Future[T]) -> T:
    if isinstance(answer, asyncio.Future):
        return cast(T, await answer)
    return answer


def initialized(outcome: PartitionOutcome | None) -> bool:
    return (outcome is not None and outcome.error == ErrorCode.NONE and outcome.state is not None
            and outcome.state.start_offset >= 0)


def lag(high_watermark: int | None, outcome: PartitionOutcome | None) -> int:
    """High watermark - start offset - delivery complete count; -1 when any is unknown."""
    if not initialized(outcome) or outcome is None or outcome.state is None:
        return -1
    state = outcome.state
    if high_watermark is None or high_watermark < 0 or state.delivery_complete_count < 0:
        return -1
    return max(0, high_watermark - state.start_offset - state.delivery_complete_count)


async def high_watermarks(services: BrokerServices, persister: NetworkSharePersister,
                          partitions: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """The high watermark of each partition: this broker's when it leads it, else ListOffsets (LATEST,
    read_uncommitted) to its leader over the inter-broker listener, one request per leader. A partition
    whose leader cannot answer is left out (its lag is -1)."""
    out: dict[tuple[str, int], int] = {}
    remote: dict[int, list[tuple[str, int]]] = {}
    for name, p in partitions:
        local = services.replica_manager.get_partition(name, p)
        if local is not None:
            out[(name, p)] = int(local.high_watermark)
            continue
        reg = services.metadata.image.partition(name, p)
        if reg is not None and reg.leader >= 0:
            remote.setdefault(int(reg.leader), []).append((name, p))

    async def ask(leader: int, wanted: list[tuple[str, int]]) -> None:
        Q = ListOffsetsRequest
        by_topic: dict[str, list[int]] = {}
        for name, p in wanted:
            by_topic.setdefault(name, []).append(p)
        request = Q(replica_id=-1, isolation_level=0, topics=[Q.ListOffsetsTopic(name=name, partitions=[
            Q.ListOffsetsPartition(partition_index=p, timestamp=LATEST_TIMESTAMP) for p in ps])
            for name, ps in by_topic.items()])
        try:
            response = await persister.transport.send(leader, LIST_OFFSETS, request, ListOffsetsResponse,
                                                      version=LIST_OFFSETS_VERSION)
        except (ConnectionClosedError, RequestTimeoutError, OSError, ValueError):
            return
        for t in response.topics:
            for r in t.partitions:
                if r.error_code == ErrorCode.NONE and r.offset >= 0:
                    out[(t.name, r.partition_index)] = int(r.offset)

    await asyncio.gather(*(ask(leader, wanted) for leader, wanted in remote.items()))
    return out


async def initialize(services: BrokerServices, persister: NetworkSharePersister, group_id: str,
                     offsets: Sequence[tuple[uuid.UUID, int, int]]) -> list[ErrorCode]:
    """AlterShareGroupOffsets: each (topic id, partition, start offset) initialized at its coordinator,
    with the next state epoch (a leader still holding the previous state is fenced: FENCED_STATE_EPOCH)."""
    current = await persister.read_summary([(group_id, tid, p) for tid, p, _s in offsets])

    def next_epoch(tid: uuid.UUID, p: int) -> int:
        found = current.get((group_id, tid, p))
        return found.state.state_epoch + 1 if found is not None and found.state is not None else 0

    codes = await asyncio.gather(*(persister.initialize((group_id, tid, p), start, next_epoch(tid, p))
                                   for tid, p, start in offsets))
    _dropped(services, group_id, [(tid, p) for tid, p, _s in offsets])
    return list(codes)


async def delete(services: BrokerServices, persister: NetworkSharePersister, group_id: str,
                 partitions: Sequence[tuple[uuid.UUID, int]]) -> ErrorCode:
    """DeleteShareGroupOffsets of one topic: the first error, or NONE."""
    codes = await asyncio.gather(*(persister.delete((group_id, tid, p)) for tid, p in partitions))
    _dropped(services, group_id, list(partitions))
    return next((c for c in codes if c != ErrorCode.NONE), ErrorCode.NONE)


def _dropped(services: BrokerServices, group_id: str, partitions: list[tuple[uuid.UUID, int]]) -> None:
    manager = services.share_partition_manager
    if manager is not None:
        for tid, p in partitions:
            manager.on_state_changed(group_id, tid, p)
