"""The network persister of share-partition state: Kafka's `DefaultStatePersister` / `PersisterStateManager`.

On a multi-broker cluster the broker leading a topic partition (the share-partition leader) is in
general not the broker leading the `__share_group_state` partition that keeps the share-partition's
state (the share coordinator of the key `groupId:topicId:partition`). This persister sends the share
coordinator's RPCs over the inter-broker listener (`kbroker.client.NodeConnection`):

- InitializeShareGroupState (83) for a share-partition the coordinator does not know yet (the
  first write after a read answered "uninitialized");
- ReadShareGroupState (84) with the partition's leader epoch, when a share-partition is first used
  (recording the epoch at the coordinator fences older leaders' writes, FENCED_LEADER_EPOCH);
- WriteShareGroupState (85) with the share-partition's in-flight state batches and start offset;
- DeleteShareGroupState (86) for DeleteShareGroupOffsets / DeleteGroups.

Finding the coordinator (Kafka's `ShareCoordinatorMetadataCacheHelper`): while `__share_group_state`
exists, the leader of the key's partition (`abs(hashCode(key)) % partitions`) in the metadata image;
before that, FindCoordinator v6 with key type SHARE (2) to this broker, which creates the topic.

Batching (Kafka's `PersisterStateManager` send loop): the operations waiting for one coordinator,
RPC and group are sent in one request; one request per (coordinator, RPC, group) is in flight, what
arrives meanwhile (or in the same loop turn) goes into the next one. Writes of one share-partition are
coalesced: each carries the whole in-flight state, so a newer state supersedes one not yet sent.

Retries (Kafka's `PersisterStateManager` with its `BackoffManager`): NOT_COORDINATOR,
COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, UNKNOWN_TOPIC_OR_PARTITION of the state
topic, a lost connection or a timeout find the coordinator again after an exponential backoff
(`PersisterRetryPolicy`, sans-IO), until the operation's deadline; then it fails with the last error.
That is what carries a write across the failover of the broker hosting the coordinator: the
controller moves the `__share_group_state` leadership, the new leader loads the partition
(COORDINATOR_LOAD_IN_PROGRESS meanwhile) and the retried write lands there.

The share-partition manager is synchronous, so this persister keeps what it last read or wrote per
share-partition: `read_state` answers from that, or starts the read and answers
COORDINATOR_LOAD_IN_PROGRESS (the manager retries the partition at the next fetch); `write_state`
queues the write and answers at once, and `write_completion` is what ShareFetch / ShareAcknowledge
await before answering the acknowledgements (they complete only once written, as in Kafka).
`forget` drops a share-partition when this broker's leadership of its topic partition changes.

The group coordinator's side (Kafka's `GroupCoordinatorService` uses the same persister): `read_summary`
sends ReadShareGroupStateSummary (87) for DescribeShareGroupOffsets, `initialize` InitializeShareGroupState
for AlterShareGroupOffsets and `delete` DeleteShareGroupState for DeleteShareGroupOffsets; each awaits
the coordinators' answers (batched and retried like the rest).

Must not import kbroker.net or kbroker.api.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from kbroker.client import ClientSecurity, ConnectionClosedError, NodeConnection, RequestTimeoutError
from kbroker.coord.share_coordinator import (
    SharePartitionKey,
    SharePartitionState,
    StateBatch,
    coordinator_key,
    partition_for,
)
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.delete_share_group_state import (
    DeleteShareGroupStateRequest,
    DeleteShareGroupStateResponse,
)
from kbroker.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from kbroker.protocol.messages.initialize_share_group_state import (
    InitializeShareGroupStateRequest,
    InitializeShareGroupStateResponse,
)
from kbroker.protocol.messages.read_share_group_state import (
    ReadShareGroupStateRequest,
    ReadShareGroupStateResponse,
)
from kbroker.protocol.messages.read_share_group_state_summary import (
    ReadShareGroupStateSummaryRequest,
    ReadShareGroupStateSummaryResponse,
)
from kbroker.protocol.messages.write_share_group_state import (
    WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
)

log = logging.getLogger(__name__)

FIND_COORDINATOR = 10
INITIALIZE = 83
READ = 84
WRITE = 85
DELETE = 86
SUMMARY = 87
SHARE_KEY_TYPE = 2
FIND_COORDINATOR_SHARE_VERSION = 6
# What ReadShareGroupState answers for a share-partition the coordinator has no state of.
READ_UNINITIALIZED = "Read operation on uninitialized share partition not allowed."
WRITE_UNINITIALIZED = "Write operation on uninitialized share partition not allowed."

RETRIABLE = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                       ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                       ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_ENOUGH_REPLICAS})

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class PersisterRetryPolicy:
    """Kafka's exponential backoff for the persister's RPCs (sans-IO): attempt n (from 0) waits
    `initial * 2**n` ms, at most `max_backoff_ms`; an operation gives up `timeout_ms` after it started."""

    initial_backoff_ms: int = 100
    max_backoff_ms: int = 1000
    timeout_ms: int = 30000

    def backoff_ms(self, attempt: int) -> int:
        return int(min(self.max_backoff_ms, self.initial_backoff_ms * (2 ** min(attempt, 20))))

    def retry(self, error: ErrorCode, attempt: int, started_ms: int, now_ms: int) -> int | None:
        """The backoff before the next attempt, or None: give up (not retriable, or past the deadline)."""
        if error not in RETRIABLE:
            return None
        wait = self.backoff_ms(attempt)
        if now_ms + wait - started_ms > self.timeout_ms:
            return None
        return wait


class PersisterTransport(Protocol):
    """How a request reaches a broker (a NodeConnection per broker in production, a fake in tests).
    Raises ConnectionClosedError / RequestTimeoutError / OSError when it cannot."""

    def send(self, node_id: int, api_key: int, request: object, response_type: type[T],
             version: int | None = None) -> Awaitable[T]: ...


class CoordinatorLocator(Protocol):
    def state_topic_partitions(self) -> int | None:
        """Partitions of `__share_group_state`, None while it does not exist."""
        ...

    def leader_of(self, partition: int) -> int | None:
        """The live leader of a `__share_group_state` partition, None if it has none."""
        ...


@dataclass(slots=True)
class PartitionOutcome:
    error: ErrorCode
    message: str | None = None
    state: SharePartitionState | None = None


@dataclass(slots=True)
class _Pending:
    """One share-partition's operation waiting in a batch."""
    key: SharePartitionKey
    leader_epoch: int
    state: SharePartitionState | None
    future: asyncio.Future[PartitionOutcome]


@dataclass(slots=True)
class _Queue:
    pending: dict[SharePartitionKey, _Pending] = field(default_factory=dict)
    in_flight: bool = False
    scheduled: bool = False


class NetworkSharePersister:
    """The share-partition manager's persister on a multi-broker cluster (see the module docstring)."""

    def __init__(self, node_id: int, locator: CoordinatorLocator, transport: PersisterTransport,
                 policy: PersisterRetryPolicy | None = None, time_ms: Callable[[], int] | None = None) -> None:
        self.node_id = node_id
        self.locator = locator
        self.transport = transport
        self.policy = policy or PersisterRetryPolicy()
        self.time_ms = time_ms or (lambda: int(time.monotonic() * 1000))
        # What this broker last read or wrote per share-partition (None: the coordinator has none).
        self._states: dict[SharePartitionKey, SharePartitionState | None] = {}
        self._leader_epochs: dict[SharePartitionKey, int] = {}
        self._reads: dict[SharePartitionKey, asyncio.Task[None]] = {}
        self._read_errors: dict[SharePartitionKey, ErrorCode] = {}
        # The leader epoch each entry of _states was read or written with.
        self._cached_epochs: dict[SharePartitionKey, int] = {}
        # Share-partitions the coordinator has a state of (read, or initialized by us).
        self._initialized: set[SharePartitionKey] = set()
        # Writes: the newest state not yet sent and the write in flight, per share-partition.
        self._next_write: dict[SharePartitionKey, tuple[SharePartitionState, asyncio.Future[ErrorCode]]] = {}
        self._writing: dict[SharePartitionKey, asyncio.Future[ErrorCode]] = {}
        self._queues: dict[tuple[int, int, str], _Queue] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.requests_sent: dict[int, int] = {}  # per api key
        self.closed = False

    # -- the SharePersister seam (synchronous, called by the share-partition manager) -----------------

    def read_state(self, key: SharePartitionKey, leader_epoch: int = -1) -> tuple[ErrorCode, SharePartitionState | None]:
        # What was read or written is reused by a caller with the same leader epoch (or none, -1: a
        # summary); a leader in another epoch reads again (the state may have moved on meanwhile).
        if key in self._states and (leader_epoch < 0 or self._cached_epochs.get(key) == leader_epoch):
            return ErrorCode.NONE, self._states[key]
        if key not in self._reads and not self.closed:
            if leader_epoch >= 0:
                self._leader_epochs[key] = leader_epoch
            self._reads[key] = self._spawn(self._read(key, leader_epoch))
            self._states.pop(key, None)
        return self._read_errors.pop(key, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), None

    def write_state(self, key: SharePartitionKey, state: SharePartitionState) -> ErrorCode:
        if self.closed:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        state.leader_epoch = max(state.leader_epoch, self._leader_epochs.get(key, 0))
        self._leader_epochs[key] = state.leader_epoch
        self._states[key] = state
        self._cached_epochs[key] = state.leader_epoch
        queued = self._next_write.get(key)
        if queued is not None:
            self._next_write[key] = (state, queued[1])  # coalesced: the newer full state is sent
            return ErrorCode.NONE
        fut: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        self._next_write[key] = (state, fut)
        if key not in self._writing:
            self._spawn(self._write_loop(key))
        return ErrorCode.NONE

    def write_completion(self, key: SharePartitionKey) -> asyncio.Future[ErrorCode] | None:
        """The write that carries the share-partition's latest state (None: nothing pending)."""
        queued = self._next_write.get(key)
        if queued is not None:
            return queued[1]
        return self._writing.get(key)

    def forget(self, key: SharePartitionKey) -> None:
        """This broker's leadership of the topic partition changed: read the state again when used."""
        self._states.pop(key, None)
        self._cached_epochs.pop(key, None)
        self._read_errors.pop(key, None)
        self._leader_epochs.pop(key, None)

    def delete_state(self, key: SharePartitionKey) -> ErrorCode:
        self._states.pop(key, None)
        self._initialized.discard(key)
        if not self.closed:
            self._spawn(self._delete(key))
        return ErrorCode.NONE

    def state_keys(self, group_id: str) -> list[SharePartitionKey]:
        return sorted(k for k, s in self._states.items() if k[0] == group_id and s is not None)

    def delete_states(self, group_id: str) -> None:
        for key in self.state_keys(group_id):
            self.delete_state(key)

    # -- the group coordinator's operations (DescribeShareGroupOffsets, Alter..., Delete...) -------------

    async def read_summary(self, keys: list[SharePartitionKey]) -> dict[SharePartitionKey, PartitionOutcome]:
        """Kafka's `Persister.readSummary`: ReadShareGroupStateSummary (v1) to each key's share coordinator,
        one request per coordinator and group. A NONE outcome's state carries the start offset (-1: not
        initialized), leader epoch, state epoch and delivery complete count, without batches."""
        if self.closed:
            return {k: PartitionOutcome(ErrorCode.COORDINATOR_NOT_AVAILABLE) for k in keys}
        outcomes = await asyncio.gather(*(self.call(SUMMARY, k, -1, None) for k in keys))
        return dict(zip(keys, outcomes, strict=True))

    async def initialize(self, key: SharePartitionKey, start_offset: int, state_epoch: int = 0) -> ErrorCode:
        """Kafka's `Persister.initializeState` from AlterShareGroupOffsets: the share-partition's state
        starts again at `start_offset` with nothing in flight. What this broker cached is dropped."""
        if self.closed:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        self.forget(key)
        outcome = await self.call(INITIALIZE, key, -1, SharePartitionState(start_offset, 0, state_epoch))
        if outcome.error == ErrorCode.NONE:
            self._initialized.add(key)
        return outcome.error

    async def delete(self, key: SharePartitionKey) -> ErrorCode:
        """Kafka's `Persister.deleteState` from DeleteShareGroupOffsets, awaited."""
        if self.closed:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        self.forget(key)
        self._initialized.discard(key)
        return (await self.call(DELETE, key, -1, None)).error

    def close(self) -> None:
        self.closed = True
        for task in list(self._tasks):
            task.cancel()
        closer = getattr(self.transport, "close", None)
        if callable(closer):
            closer()

    # -- operations ----------------------------------------------------------------------------------

    def _spawn(self, coro: Awaitable[None]) -> asyncio.Task[None]:
        async def run() -> None:
            await coro

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _read(self, key: SharePartitionKey, leader_epoch: int) -> None:
        try:
            outcome = await self.call(READ, key, leader_epoch, None)
            if outcome.error == ErrorCode.NONE:
                self._states[key] = outcome.state
                self._cached_epochs[key] = leader_epoch
                self._initialized.add(key)
            elif outcome.error == ErrorCode.INVALID_REQUEST and outcome.message == READ_UNINITIALIZED:
                self._initialized.discard(key)
                self._states[key] = None
                self._cached_epochs[key] = leader_epoch  # the manager initializes it (share.auto.offset.reset)
            else:
                log.warning("Reading the state of share-partition %s failed: %s %s", key, outcome.error.name,
                            outcome.message or "")
                self._read_errors[key] = outcome.error
        finally:
            self._reads.pop(key, None)

    async def _write_loop(self, key: SharePartitionKey) -> None:
        """Send the share-partition's newest queued state until none is queued (one write in flight)."""
        while key in self._next_write and not self.closed:
            state, fut = self._next_write.pop(key)
            self._writing[key] = fut
            try:
                error = await self._write_once(key, state, key not in self._initialized)
            except asyncio.CancelledError:
                if not fut.done():
                    fut.set_result(ErrorCode.COORDINATOR_NOT_AVAILABLE)
                raise
            finally:
                self._writing.pop(key, None)
            if error != ErrorCode.NONE:
                log.warning("Writing the state of share-partition %s failed: %s", key, error.name)
                # The coordinator may hold an older state than ours: read it again at the next use.
                self._states.pop(key, None)
            if not fut.done():
                fut.set_result(error)

    async def _write_once(self, key: SharePartitionKey, state: SharePartitionState, initialize: bool) -> ErrorCode:
        epoch = self._leader_epochs.get(key, state.leader_epoch)
        if initialize:
            outcome = await self.call(INITIALIZE, key, epoch, state)
            if outcome.error != ErrorCode.NONE:
                return outcome.error
            self._initialized.add(key)
            if not state.batches:
                return ErrorCode.NONE
        outcome = await self.call(WRITE, key, epoch, state)
        if outcome.error == ErrorCode.INVALID_REQUEST and outcome.message == WRITE_UNINITIALIZED and not initialize:
            return await self._write_once(key, state, True)
        return outcome.error

    async def _delete(self, key: SharePartitionKey) -> None:
        outcome = await self.call(DELETE, key, -1, None)
        if outcome.error != ErrorCode.NONE:
            log.warning("Deleting the state of share-partition %s failed: %s", key, outcome.error.name)

    async def call(self, api: int, key: SharePartitionKey, leader_epoch: int,
                   state: SharePartitionState | None) -> PartitionOutcome:
        """One share-partition's RPC at its coordinator, retried (PersisterRetryPolicy) until answered."""
        started = self.time_ms()
        attempt = 0
        while True:
            node = await self.find_coordinator(key)
            if node is None:
                outcome = PartitionOutcome(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            else:
                outcome = await self._enqueue(node, api, key, leader_epoch, state)
            wait = self.policy.retry(outcome.error, attempt, started, self.time_ms())
            if wait is None or self.closed:
                return outcome
            log.debug("Share state RPC %d of %s: %s, retrying in %d ms", api, key, outcome.error.name, wait)
            attempt += 1
            await asyncio.sleep(wait / 1000)

    async def find_coordinator(self, key: SharePartitionKey) -> int | None:
        partitions = self.locator.state_topic_partitions()
        if partitions is not None:
            return self.locator.leader_of(partition_for(key, partitions))
        # No __share_group_state yet: FindCoordinator SHARE (this broker creates the topic).
        try:
            response = await self.transport.send(
                self.node_id, FIND_COORDINATOR,
                FindCoordinatorRequest(key_type=SHARE_KEY_TYPE, coordinator_keys=[coordinator_key(key)]),
                FindCoordinatorResponse, version=FIND_COORDINATOR_SHARE_VERSION)
        except (ConnectionClosedError, RequestTimeoutError, OSError, ValueError):
            return None
        for c in response.coordinators or []:
            if c.error_code == ErrorCode.NONE and c.node_id >= 0:
                return int(c.node_id)
        return None

    # -- batching per (coordinator, RPC, group) ------------------------------------------------------

    def _enqueue(self, node: int, api: int, key: SharePartitionKey, leader_epoch: int,
                 state: SharePartitionState | None) -> asyncio.Future[PartitionOutcome]:
        loop = asyncio.get_running_loop()
        qkey = (node, api, key[0])
        queue = self._queues.setdefault(qkey, _Queue())
        fut: asyncio.Future[PartitionOutcome] = loop.create_future()
        old = queue.pending.get(key)
        if old is not None and not old.future.done():
            # the same share-partition twice in one batch: the newer operation replaces it
            old.future.set_result(PartitionOutcome(ErrorCode.NONE) if api == WRITE
                                  else PartitionOutcome(ErrorCode.NOT_COORDINATOR))
        queue.pending[key] = _Pending(key, leader_epoch, state, fut)
        if not queue.in_flight and not queue.scheduled:
            queue.scheduled = True
            loop.call_soon(self._drain, qkey)
        return fut

    def _drain(self, qkey: tuple[int, int, str]) -> None:
        queue = self._queues.get(qkey)
        if queue is None:
            return
        queue.scheduled = False
        if queue.in_flight or not queue.pending:
            return
        batch, queue.pending = list(queue.pending.values()), {}
        queue.in_flight = True
        task = self._spawn(self._send(qkey, batch))

        def done(t: asyncio.Task[None]) -> None:
            queue.in_flight = False
            for p in batch:
                if not p.future.done():
                    p.future.set_result(PartitionOutcome(ErrorCode.NETWORK_EXCEPTION))
            if queue.pending and not self.closed:
                self._drain(qkey)

        task.add_done_callback(done)

    async def _send(self, qkey: tuple[int, int, str], batch: list[_Pending]) -> None:
        node, api, group = qkey
        self.requests_sent[api] = self.requests_sent.get(api, 0) + 1
        try:
            results = await self._rpc(node, api, group, batch)
        except (ConnectionClosedError, RequestTimeoutError, OSError, ValueError) as exc:
            log.info("Share state RPC %d to broker %d failed: %s", api, node, exc)
            results = {}
        for p in batch:
            outcome = results.get(p.key, PartitionOutcome(ErrorCode.NETWORK_EXCEPTION))
            if not p.future.done():
                p.future.set_result(outcome)

    async def _rpc(self, node: int, api: int, group: str, batch: list[_Pending]
                   ) -> dict[SharePartitionKey, PartitionOutcome]:
        by_topic: dict[object, list[_Pending]] = {}
        for p in batch:
            by_topic.setdefault(p.key[1], []).append(p)
        out: dict[SharePartitionKey, PartitionOutcome] = {}
        if api == READ:
            RQ = ReadShareGroupStateRequest
            rr = await self.transport.send(node, READ, RQ(group_id=group, topics=[
                RQ.ReadStateData(topic_id=ps[0].key[1], partitions=[
                    RQ.PartitionData(partition=p.key[2], leader_epoch=p.leader_epoch) for p in ps])
                for ps in by_topic.values()]), ReadShareGroupStateResponse, version=0)
            epochs = {p.key: p.leader_epoch for p in batch}
            for t in rr.results or []:
                for r in t.partitions or []:
                    k = (group, t.topic_id, r.partition)
                    st = SharePartitionState(r.start_offset, max(0, epochs.get(k, 0)), r.state_epoch, 0, [
                        StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                        for b in r.state_batches or []]) if r.error_code == ErrorCode.NONE else None
                    out[k] = PartitionOutcome(ErrorCode(r.error_code), r.error_message, st)
            return out
        if api == INITIALIZE:
            IQ = InitializeShareGroupStateRequest
            ir = await self.transport.send(node, INITIALIZE, IQ(group_id=group, topics=[
                IQ.InitializeStateData(topic_id=ps[0].key[1], partitions=[
                    IQ.PartitionData(partition=p.key[2], state_epoch=p.state.state_epoch if p.state else 0,
                                     start_offset=p.state.start_offset if p.state else -1) for p in ps])
                for ps in by_topic.values()]), InitializeShareGroupStateResponse, version=0)
            for ti in ir.results or []:
                for ri in ti.partitions or []:
                    out[(group, ti.topic_id, ri.partition)] = PartitionOutcome(ErrorCode(ri.error_code), ri.error_message)
            return out
        if api == WRITE:
            WQ = WriteShareGroupStateRequest
            wr = await self.transport.send(node, WRITE, WQ(group_id=group, topics=[
                WQ.WriteStateData(topic_id=ps[0].key[1], partitions=[_write_partition(p) for p in ps])
                for ps in by_topic.values()]), WriteShareGroupStateResponse, version=1)
            for tw in wr.results or []:
                for rw in tw.partitions or []:
                    out[(group, tw.topic_id, rw.partition)] = PartitionOutcome(ErrorCode(rw.error_code), rw.error_message)
            return out
        if api == SUMMARY:
            SQ = ReadShareGroupStateSummaryRequest
            sr = await self.transport.send(node, SUMMARY, SQ(group_id=group, topics=[
                SQ.ReadStateSummaryData(topic_id=ps[0].key[1], partitions=[
                    SQ.PartitionData(partition=p.key[2], leader_epoch=-1) for p in ps])
                for ps in by_topic.values()]), ReadShareGroupStateSummaryResponse, version=1)
            for ts in sr.results or []:
                for rs in ts.partitions or []:
                    summary = SharePartitionState(rs.start_offset, rs.leader_epoch, rs.state_epoch, 0, [],
                                                  rs.delivery_complete_count) if rs.error_code == ErrorCode.NONE else None
                    out[(group, ts.topic_id, rs.partition)] = PartitionOutcome(ErrorCode(rs.error_code),
                                                                               rs.error_message, summary)
            return out
        DQ = DeleteShareGroupStateRequest
        dr = await self.transport.send(node, DELETE, DQ(group_id=group, topics=[
            DQ.DeleteStateData(topic_id=ps[0].key[1], partitions=[DQ.PartitionData(partition=p.key[2]) for p in ps])
            for ps in by_topic.values()]), DeleteShareGroupStateResponse, version=0)
        for td in dr.results or []:
            for rd in td.partitions or []:
                out[(group, td.topic_id, rd.partition)] = PartitionOutcome(ErrorCode(rd.error_code), rd.error_message)
        return out


def _write_partition(p: _Pending) -> WriteShareGroupStateRequest.PartitionData:
    WQ = WriteShareGroupStateRequest
    s = p.state or SharePartitionState(-1)
    return WQ.PartitionData(partition=p.key[2], state_epoch=s.state_epoch, leader_epoch=max(0, p.leader_epoch),
                            start_offset=s.start_offset, delivery_complete_count=delivery_complete_count(s),
                            state_batches=[
                                WQ.StateBatch(first_offset=b.first_offset, last_offset=b.last_offset,
                                              delivery_state=b.delivery_state, delivery_count=b.delivery_count)
                                for b in s.batches])


def delivery_complete_count(state: SharePartitionState) -> int:
    """WriteShareGroupState v1's DeliveryCompleteCount (KIP-1226): the records at or after the start offset
    in a final state (ACKNOWLEDGED 2, ARCHIVED 4) in the share-partition's full in-flight state; what the
    group coordinator's DescribeShareGroupOffsets subtracts for the lag."""
    if state.start_offset < 0:
        return -1
    return sum(max(0, b.last_offset - max(b.first_offset, state.start_offset) + 1)
               for b in state.batches if b.delivery_state in (2, 4))


class MetadataCoordinatorLocator:
    """The share coordinator from the metadata image (Kafka's ShareCoordinatorMetadataCacheHelper)."""

    def __init__(self, topic_partitions: Callable[[], int | None], leader: Callable[[int], int | None]) -> None:
        self._topic_partitions = topic_partitions
        self._leader = leader

    def state_topic_partitions(self) -> int | None:
        return self._topic_partitions()

    def leader_of(self, partition: int) -> int | None:
        return self._leader(partition)


class NodeConnectionTransport:
    """One NodeConnection per broker over the inter-broker listener, reconnected when lost."""

    def __init__(self, node_id: int, endpoint_of: Callable[[int], tuple[str, int] | None],
                 request_timeout_ms: int = 30000, security: ClientSecurity | None = None) -> None:
        self.node_id = node_id
        self.endpoint_of = endpoint_of
        self.timeout_s = request_timeout_ms / 1000
        self.security = security
        self._conns: dict[int, tuple[tuple[str, int], NodeConnection]] = {}
        self._connecting: dict[int, asyncio.Lock] = {}

    async def _connection(self, node_id: int) -> NodeConnection:
        address = self.endpoint_of(node_id)
        if address is None:
            raise ConnectionClosedError(f"no endpoint for broker {node_id}")
        lock = self._connecting.setdefault(node_id, asyncio.Lock())
        async with lock:
            known = self._conns.get(node_id)
            if known is not None and known[0] == address and known[1].connected:
                return known[1]
            if known is not None:
                await known[1].close()
            conn = NodeConnection(address[0], address[1], client_id=f"broker-{self.node_id}-share-persister",
                                  connect_timeout_s=min(self.timeout_s, 5.0), request_timeout_s=self.timeout_s,
                                  security=self.security)
            await conn.connect()
            self._conns[node_id] = (address, conn)
            return conn

    async def send(self, node_id: int, api_key: int, request: object, response_type: type[T],
                   version: int | None = None) -> T:
        conn = await self._connection(node_id)
        try:
            return await conn.request(api_key, request, response_type, version=version)
        except (ConnectionClosedError, RequestTimeoutError, OSError):
            self._conns.pop(node_id, None)
            await conn.close()
            raise

    def close(self) -> None:
        conns, self._conns = self._conns, {}
        for _address, conn in conns.values():
            with contextlib.suppress(RuntimeError):  # no running loop: nothing to close on
                asyncio.get_running_loop().create_task(conn.close())


__all__ = ["MetadataCoordinatorLocator", "NetworkSharePersister", "NodeConnectionTransport", "PartitionOutcome",
           "PersisterRetryPolicy", "PersisterTransport"]
