"""DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets on a multi-broker cluster:
the group coordinator answers them through the persister, as Kafka 4.3's `GroupCoordinatorService` does
(`describeShareGroupOffsets` / `describeShareGroupAllOffsets` -> `Persister.readSummary`,
`alterShareGroupOffsets` -> `Persister.initializeState`, `deleteShareGroupOffsets` ->
`Persister.deleteState`), not through the share-partitions of the broker that received the request.

- Describe sends ReadShareGroupStateSummary (87) to each share-partition's share coordinator (one
  request per coordinator broker); a partition the coordinator has no state of, or answers with an
  error, shows start offset -1 and leader epoch -1, as in Kafka ("absence of data, not an error").
  The lag (KIP-1226) is the high watermark minus the start offset minus the delivery complete count
  the leader wrote; the high watermark is this broker's replica's (-1 when it has none).
- Without topics, Kafka lists the partitions its group coordinator recorded as initialized
  (ShareGroupStatePartitionMetadata). kbroker's group coordinator does not record them, so it asks the
  share coordinators about every partition of every non-internal topic (still one request per
  coordinator broker) and lists those with a state.
- Alter sends InitializeShareGroupState with the new start offset; Delete sends DeleteShareGroupState
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

from kbroker.api.context import BrokerServices
from kbroker.coord.share_coordinator import SharePartitionKey
from kbroker.coord.share_persister import NetworkSharePersister, PartitionOutcome
from kbroker.metadata.views import TopicInfo
from kbroker.protocol.errors import ErrorCode


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


def initialized(outcome: PartitionOutcome | None) -> bool:
    return (outcome is not None and outcome.error == ErrorCode.NONE and outcome.state is not None
            and outcome.state.start_offset >= 0)


def lag(services: BrokerServices, topic: str, partition: int, outcome: PartitionOutcome | None) -> int:
    """High watermark - start offset - delivery complete count; -1 when any is unknown."""
    if not initialized(outcome) or outcome is None or outcome.state is None:
        return -1
    state = outcome.state
    local = services.replica_manager.get_partition(topic, partition) if services.replica_manager is not None else None
    if local is None or state.delivery_complete_count < 0:
        return -1
    return max(0, int(local.high_watermark) - state.start_offset - state.delivery_complete_count)


async def initialize(services: BrokerServices, persister: NetworkSharePersister, group_id: str,
                     offsets: Sequence[tuple[uuid.UUID, int, int]]) -> list[ErrorCode]:
    """AlterShareGroupOffsets: each (topic id, partition, start offset) initialized at its coordinator."""
    codes = await asyncio.gather(*(persister.initialize((group_id, tid, p), start) for tid, p, start in offsets))
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
