"""The group coordinator's calls to the share coordinator (Kafka's `GroupCoordinatorService` uses the
`Persister` for them): initialize the share-partitions a share group's heartbeat found uninitialized,
and delete a deleted share group's share-partition states.

`GroupStatePersister` is the seam: on a multi-broker cluster the network persister
(`kbroker.coord.share_persister.NetworkSharePersister`: RPCs over the inter-broker listener, retried);
on a single node `InProcessGroupStatePersister` runs the share coordinator's operations in process,
retrying while `__share_group_state` is being created or loaded (what the network persister's retries do).

`initialize_share_state` is the heartbeat's half (Kafka's `persisterInitialize`): a share-partition the
share coordinator already has a state of (the share-partition leader initialized it first, from
`share.auto.offset.reset`) is recorded as initialized without being initialized again. Kafka does not
ask: its assignor hands out only initialized partitions, so no leader can initialize first; kbroker
assigns every subscribed partition at once, so it reads the summaries first rather than reset a state a
leader already wrote. The others are initialized with start offset -1 (the leader picks the start by
`share.auto.offset.reset`) and the group epoch as state epoch.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from kbroker.coord.share_coordinator import SharePartitionKey, ShareRpcResult
from kbroker.coord.share_group_initialization import InitializeRequest, TopicPartitions
from kbroker.coord.share_persister import PartitionOutcome
from kbroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kbroker.coord.share_coordinator import ShareCoordinatorService, ShareCoordinatorShard

log = logging.getLogger(__name__)

UNINITIALIZED_START_OFFSET = -1
RETRIABLE = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                       ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})


class GroupStatePersister(Protocol):
    async def read_summary(self, keys: list[SharePartitionKey]) -> dict[SharePartitionKey, PartitionOutcome]: ...

    async def initialize(self, key: SharePartitionKey, start_offset: int, state_epoch: int = 0) -> ErrorCode: ...

    async def delete(self, key: SharePartitionKey) -> ErrorCode: ...


class InProcessGroupStatePersister:
    """The single node's share coordinator, called in process (see the module docstring)."""

    def __init__(self, coordinator: ShareCoordinatorService, deadline_ms: int = 30_000, backoff_ms: int = 100) -> None:
        self.coordinator = coordinator
        self.deadline_ms = deadline_ms
        self.backoff_ms = backoff_ms

    async def read_summary(self, keys: list[SharePartitionKey]) -> dict[SharePartitionKey, PartitionOutcome]:
        out: dict[SharePartitionKey, PartitionOutcome] = {}
        for key in keys:
            out[key] = await self._op(key, "read summary", False, lambda shard, k, known: shard.summary(k, known))
        return out

    async def initialize(self, key: SharePartitionKey, start_offset: int, state_epoch: int = 0) -> ErrorCode:
        return (await self._op(key, "initialize", True, lambda shard, k, known: shard.initialize(
            k, state_epoch, start_offset, known))).error

    async def delete(self, key: SharePartitionKey) -> ErrorCode:
        return (await self._op(key, "delete", True, lambda shard, k, known: shard.delete(k, known))).error

    async def _op(self, key: SharePartitionKey, verb: str, write: bool,
                  fn: Callable[[ShareCoordinatorShard, SharePartitionKey, bool], ShareRpcResult]) -> PartitionOutcome:
        c = self.coordinator
        loop = asyncio.get_running_loop()
        end = loop.time() + self.deadline_ms / 1000
        while True:
            r = await c.call(key, _bound(fn, key, c.partition_known(key[1], key[2])), verb, write)
            if r.error not in RETRIABLE or loop.time() >= end:
                return PartitionOutcome(r.error, r.message, r.state)
            await asyncio.sleep(self.backoff_ms / 1000)


def _bound(fn: Callable[[ShareCoordinatorShard, SharePartitionKey, bool], ShareRpcResult], key: SharePartitionKey,
           known: bool) -> Callable[[ShareCoordinatorShard], ShareRpcResult]:
    return lambda shard: fn(shard, key, known)


def _group(partitions: dict[uuid.UUID, frozenset[int]] | TopicPartitions, group_id: str) -> list[SharePartitionKey]:
    return [(group_id, tid, p) for tid, ps in sorted(partitions.items(), key=lambda e: str(e[0])) for p in sorted(ps)]


async def initialize_share_state(persister: GroupStatePersister, request: InitializeRequest
                                 ) -> tuple[TopicPartitions, TopicPartitions]:
    """(initialized, failed) partitions of the request (see the module docstring)."""
    keys = _group(request.partitions, request.group_id)
    existing = await persister.read_summary(keys)
    to_init = [k for k in keys if not has_state(existing.get(k))]
    codes = await asyncio.gather(*(persister.initialize(k, UNINITIALIZED_START_OFFSET, request.group_epoch)
                                   for k in to_init))
    failed_keys = {k for k, code in zip(to_init, codes, strict=True) if code != ErrorCode.NONE}
    for k, code in zip(to_init, codes, strict=True):
        if code != ErrorCode.NONE:
            log.warning("Unable to initialize the state of share-partition %s: %s", k, code.name)
    done: TopicPartitions = {}
    failed: TopicPartitions = {}
    for k in keys:
        (failed if k in failed_keys else done).setdefault(k[1], set()).add(k[2])
    return done, failed


async def delete_share_state(persister: GroupStatePersister, group_id: str, partitions: TopicPartitions) -> ErrorCode:
    """DeleteShareGroupState for each partition; the first error, or NONE."""
    codes = await asyncio.gather(*(persister.delete(k) for k in _group(partitions, group_id)))
    return next((c for c in codes if c != ErrorCode.NONE), ErrorCode.NONE)


def has_state(outcome: PartitionOutcome | None) -> bool:
    """A summary of a share-partition the share coordinator has a state of: a start offset (its leader or
    AlterShareGroupOffsets set one) or a state epoch (the group coordinator initialized it, start offset
    -1). Without a state ReadShareGroupStateSummary answers start offset -1 and state epoch 0."""
    state = outcome.state if outcome is not None and outcome.error == ErrorCode.NONE else None
    return state is not None and (state.start_offset >= 0 or state.state_epoch > 0)
