"""The network persister (Kafka's DefaultStatePersister / PersisterStateManager), on a fake transport.

Routing: each share-partition's RPC goes to the leader of its `__share_group_state` partition, or, before
the topic exists, FindCoordinator SHARE asks this broker; the operations of one loop turn for one
coordinator, RPC and group go in one request. Retry: NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS /
a lost connection are retried with backoff (finding the coordinator again) until the deadline; fencing
errors are not. Reads record the leader epoch; an uninitialized share-partition is initialized by its
first write.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import pytest

from kbroker.client import ConnectionClosedError
from kbroker.coord.share_coordinator import SharePartitionState, StateBatch, coordinator_key, partition_for
from kbroker.coord.share_persister import (
    FIND_COORDINATOR,
    INITIALIZE,
    READ,
    READ_UNINITIALIZED,
    WRITE,
    NetworkSharePersister,
    PersisterRetryPolicy,
)
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.find_coordinator import FindCoordinatorResponse
from kbroker.protocol.messages.initialize_share_group_state import InitializeShareGroupStateResponse
from kbroker.protocol.messages.read_share_group_state import ReadShareGroupStateResponse
from kbroker.protocol.messages.write_share_group_state import WriteShareGroupStateResponse

FAST = PersisterRetryPolicy(initial_backoff_ms=1, max_backoff_ms=4, timeout_ms=300)
TID = uuid.UUID(int=7)

Answer = Callable[[int, int, object], object]  # (node, api, request) -> response, or raises


class FakeLocator:
    def __init__(self, partitions: int | None, leaders: dict[int, int]) -> None:
        self.partitions = partitions
        self.leaders = leaders

    def state_topic_partitions(self) -> int | None:
        return self.partitions

    def leader_of(self, partition: int) -> int | None:
        return self.leaders.get(partition)


class FakeTransport:
    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.sent: list[tuple[int, int, object]] = []

    async def send(self, node_id: int, api_key: int, request: object, response_type: type, version: int | None = None
                   ) -> object:
        self.sent.append((node_id, api_key, request))
        await asyncio.sleep(0)
        return self.answer(node_id, api_key, request)

    def apis(self) -> list[tuple[int, int]]:
        return [(n, a) for n, a, _r in self.sent]


def _partitions_of(request: object) -> list[tuple[uuid.UUID, object]]:
    return [(t.topic_id, p) for t in request.topics for p in t.partitions]  # type: ignore[attr-defined]


def _ok(error: ErrorCode = ErrorCode.NONE, message: str | None = None) -> Answer:
    """Every partition of every request answered with `error` (reads: start offset 5, no batches)."""

    def answer(node: int, api: int, request: object) -> object:
        if api == READ:
            R = ReadShareGroupStateResponse
            return R(results=[R.ReadStateResult(topic_id=tid, partitions=[R.PartitionResult(
                partition=p.partition, error_code=error, error_message=message, state_epoch=1, start_offset=5,
                state_batches=[R.StateBatch(first_offset=5, last_offset=6, delivery_state=0, delivery_count=2)])])
                for tid, p in _partitions_of(request)])
        if api == WRITE:
            W = WriteShareGroupStateResponse
            return W(results=[W.WriteStateResult(topic_id=tid, partitions=[W.PartitionResult(
                partition=p.partition, error_code=error, error_message=message)]) for tid, p in _partitions_of(request)])
        if api == INITIALIZE:
            In = InitializeShareGroupStateResponse
            return In(results=[In.InitializeStateResult(topic_id=tid, partitions=[In.PartitionResult(
                partition=p.partition, error_code=error)]) for tid, p in _partitions_of(request)])
        raise AssertionError(api)

    return answer


def _key(group: str, partition: int) -> tuple[str, uuid.UUID, int]:
    return (group, TID, partition)


def _run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def _state(start: int, *batches: tuple[int, int, int, int]) -> SharePartitionState:
    return SharePartitionState(start, batches=[StateBatch(*b) for b in batches])


def test_retry_policy_backs_off_exponentially_until_the_deadline() -> None:
    policy = PersisterRetryPolicy(initial_backoff_ms=100, max_backoff_ms=1000, timeout_ms=3000)
    assert [policy.backoff_ms(n) for n in range(6)] == [100, 200, 400, 800, 1000, 1000]
    assert policy.retry(ErrorCode.NOT_COORDINATOR, 0, 0, 0) == 100
    assert policy.retry(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, 3, 0, 1000) == 800
    assert policy.retry(ErrorCode.NOT_COORDINATOR, 5, 0, 2500) is None  # past the deadline
    for final in (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.FENCED_STATE_EPOCH, ErrorCode.INVALID_REQUEST):
        assert policy.retry(final, 0, 0, 0) is None


def test_writes_go_to_each_keys_coordinator_batched_per_coordinator_and_group() -> None:
    keys = [_key("g", p) for p in range(12)] + [_key("h", 0)]
    leaders = {0: 10, 1: 11, 2: 12}
    expected = {k: leaders[partition_for(k, 3)] for k in keys}
    assert len(set(expected.values())) > 1

    async def scenario() -> tuple[FakeTransport, list[ErrorCode]]:
        transport = FakeTransport(_ok())
        persister = NetworkSharePersister(1, FakeLocator(3, leaders), transport, FAST)
        for k in keys:  # known to the coordinator: a write, no initialization
            persister._initialized.add(k)
            persister.write_state(k, _state(0, (0, 0, 2, 1)))
        waits = [persister.write_completion(k) for k in keys]
        return transport, [await w for w in waits if w is not None]

    transport, results = _run(scenario())  # type: ignore[misc]
    assert results == [ErrorCode.NONE] * len(keys)
    # one request per (coordinator, group): every key reached its coordinator, none twice
    routed = {(r.group_id, tid, p.partition): node for node, _api, r in transport.sent  # type: ignore[attr-defined]
              for tid, p in _partitions_of(r)}
    assert routed == expected
    assert len(transport.sent) == len({(node, k[0]) for k, node in expected.items()})
    assert {a for _n, a in transport.apis()} == {WRITE}


def test_not_coordinator_finds_the_new_coordinator_and_retries() -> None:
    key = _key("g", 0)
    locator = FakeLocator(1, {0: 1})

    def answer(node: int, api: int, request: object) -> object:
        if node == 1:
            locator.leaders[0] = 2  # the leadership moved meanwhile
            return _ok(ErrorCode.NOT_COORDINATOR)(node, api, request)
        return _ok()(node, api, request)

    async def scenario() -> tuple[FakeTransport, ErrorCode]:
        transport = FakeTransport(answer)
        persister = NetworkSharePersister(1, locator, transport, FAST)
        persister._initialized.add(key)
        persister.write_state(key, _state(3))
        w = persister.write_completion(key)
        assert w is not None
        return transport, await w

    transport, error = _run(scenario())  # type: ignore[misc]
    assert error == ErrorCode.NONE
    assert transport.apis() == [(1, WRITE), (2, WRITE)]


@pytest.mark.parametrize("failure", ["load", "connection"])
def test_load_in_progress_and_lost_connections_are_retried(failure: str) -> None:
    key = _key("g", 0)
    calls = {"n": 0}

    def answer(node: int, api: int, request: object) -> object:
        calls["n"] += 1
        if calls["n"] <= 2:
            if failure == "connection":
                raise ConnectionClosedError("gone")
            return _ok(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)(node, api, request)
        return _ok()(node, api, request)

    async def scenario() -> tuple[FakeTransport, ErrorCode]:
        transport = FakeTransport(answer)
        persister = NetworkSharePersister(1, FakeLocator(1, {0: 4}), transport, FAST)
        persister._initialized.add(key)
        persister.write_state(key, _state(0))
        w = persister.write_completion(key)
        assert w is not None
        return transport, await w

    transport, error = _run(scenario())  # type: ignore[misc]
    assert error == ErrorCode.NONE
    assert transport.apis() == [(4, WRITE)] * 3


def test_gives_up_at_the_deadline_and_does_not_retry_fencing() -> None:
    async def scenario(error: ErrorCode) -> tuple[int, ErrorCode]:
        transport = FakeTransport(_ok(error))
        persister = NetworkSharePersister(1, FakeLocator(1, {0: 4}), transport, FAST)
        key = _key("g", 0)
        persister._initialized.add(key)
        persister.write_state(key, _state(0))
        w = persister.write_completion(key)
        assert w is not None
        result = await w
        assert persister.read_state(key)[0] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS  # dropped: read again
        return len(transport.sent), result

    n, error = _run(scenario(ErrorCode.NOT_COORDINATOR))  # type: ignore[misc]
    assert error == ErrorCode.NOT_COORDINATOR and n > 3
    n, error = _run(scenario(ErrorCode.FENCED_LEADER_EPOCH))  # type: ignore[misc]
    assert (n, error) == (1, ErrorCode.FENCED_LEADER_EPOCH)


def test_read_records_the_leader_epoch_and_uninitialized_is_initialized_by_the_first_write() -> None:
    known, fresh = _key("g", 0), _key("g", 1)

    def answer(node: int, api: int, request: object) -> object:
        response = _ok()(node, api, request)
        if api == READ:  # partition 1 has no state at the coordinator
            for t in response.results:  # type: ignore[attr-defined]
                for r in t.partitions:
                    if r.partition == 1:
                        r.error_code, r.error_message = ErrorCode.INVALID_REQUEST, READ_UNINITIALIZED
        return response

    async def scenario() -> FakeTransport:
        transport = FakeTransport(answer)
        persister = NetworkSharePersister(1, FakeLocator(1, {0: 9}), transport, FAST)
        assert persister.read_state(known, 4) == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, None)
        assert persister.read_state(fresh, 4) == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, None)
        for _ in range(20):
            await asyncio.sleep(0)
        error, state = persister.read_state(known, 4)
        assert error == ErrorCode.NONE and state is not None
        assert (state.start_offset, state.leader_epoch, state.batches) == (5, 4, [StateBatch(5, 6, 0, 2)])
        assert persister.read_state(fresh, 4) == (ErrorCode.NONE, None)  # the manager initializes it
        persister.write_state(fresh, _state(10, (10, 10, 2, 1)))
        w = persister.write_completion(fresh)
        assert w is not None and await w == ErrorCode.NONE
        persister.write_state(known, _state(7, (7, 7, 2, 3)))
        w = persister.write_completion(known)
        assert w is not None and await w == ErrorCode.NONE
        return transport

    transport = _run(scenario())
    apis = [a for _n, a in transport.apis()]  # type: ignore[attr-defined]
    # both reads in one request; the first write of 1 initializes it, then writes its batches
    assert apis == [READ, INITIALIZE, WRITE, WRITE]
    reads = [p for _n, a, r in transport.sent for _t, p in _partitions_of(r) if a == READ]  # type: ignore[attr-defined]
    assert {p.leader_epoch for p in reads} == {4}
    writes = [p for _n, a, r in transport.sent for _t, p in _partitions_of(r) if a == WRITE]  # type: ignore[attr-defined]
    assert [(p.partition, p.leader_epoch, p.start_offset) for p in writes] == [(1, 4, 10), (0, 4, 7)]
    inits = [p for _n, a, r in transport.sent for _t, p in _partitions_of(r) if a == INITIALIZE]  # type: ignore[attr-defined]
    assert [(p.partition, p.start_offset) for p in inits] == [(1, 10)]


def test_writes_of_one_share_partition_are_serialized_and_coalesced() -> None:
    key = _key("g", 0)

    async def scenario() -> tuple[FakeTransport, list[ErrorCode]]:
        transport = FakeTransport(_ok())
        persister = NetworkSharePersister(1, FakeLocator(1, {0: 2}), transport, FAST)
        persister._initialized.add(key)
        persister.write_state(key, _state(0, (0, 0, 2, 1)))
        first = persister.write_completion(key)
        await asyncio.sleep(0)  # the first is in flight
        persister.write_state(key, _state(1, (1, 1, 2, 1)))
        persister.write_state(key, _state(2, (2, 2, 2, 1)))  # supersedes the one before, not sent yet
        second = persister.write_completion(key)
        assert first is not None and second is not None and first is not second
        return transport, [await first, await second]

    transport, results = _run(scenario())  # type: ignore[misc]
    assert results == [ErrorCode.NONE, ErrorCode.NONE]
    starts = [p.start_offset for _n, _a, r in transport.sent for _t, p in _partitions_of(r)]
    assert starts == [0, 2]


def test_find_coordinator_share_before_the_state_topic_exists() -> None:
    key = _key("g", 0)

    def answer(node: int, api: int, request: object) -> object:
        if api == FIND_COORDINATOR:
            assert request.key_type == 2 and request.coordinator_keys == [coordinator_key(key)]  # type: ignore[attr-defined]
            F = FindCoordinatorResponse
            return F(coordinators=[F.Coordinator(key=coordinator_key(key), node_id=3, host="h", port=1)])
        return _ok()(node, api, request)

    async def scenario() -> FakeTransport:
        transport = FakeTransport(answer)
        persister = NetworkSharePersister(1, FakeLocator(None, {}), transport, FAST)
        persister._initialized.add(key)
        persister.write_state(key, _state(0))
        w = persister.write_completion(key)
        assert w is not None and await w == ErrorCode.NONE
        return transport

    transport = _run(scenario())
    assert transport.apis() == [(1, FIND_COORDINATOR), (3, WRITE)]  # type: ignore[attr-defined]


def test_a_leader_in_another_epoch_reads_the_state_again() -> None:
    """A state read for a summary (epoch -1) or in an older leader epoch is not reused by a new leader."""
    key = _key("g", 0)

    async def scenario() -> FakeTransport:
        transport = FakeTransport(_ok())
        persister = NetworkSharePersister(1, FakeLocator(1, {0: 2}), transport, FAST)
        assert persister.read_state(key)[0] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        for _ in range(20):
            await asyncio.sleep(0)
        assert persister.read_state(key)[0] == ErrorCode.NONE  # reused by another summary
        assert persister.read_state(key, 3)[0] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS  # the leader reads
        for _ in range(20):
            await asyncio.sleep(0)
        assert persister.read_state(key, 3)[0] == ErrorCode.NONE
        assert persister.read_state(key, 4)[0] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS  # a newer leader epoch
        for _ in range(20):
            await asyncio.sleep(0)
        return transport

    transport = _run(scenario())
    reads = [p.leader_epoch for _n, a, r in transport.sent for _t, p in _partitions_of(r) if a == READ]  # type: ignore[attr-defined]
    assert reads == [-1, 3, 4]
