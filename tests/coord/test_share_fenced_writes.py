"""A share-partition whose state write is fenced leaves the share-partition manager, on every write path
(Kafka's SharePartitionManager.fencedSharePartitionHandler; `kbroker.coord.share_fenced`): an
acknowledgement, the release when a member leaves the group, the release when the connection that
opened a share session closes, and an acquisition-lock expiry. The persister answers the writes later,
as the network persister does (a future per write), with the error each test chooses."""

from __future__ import annotations

import asyncio

import pytest

from kbroker.coord.share_coordinator import SharePartitionKey, SharePartitionState
from kbroker.coord.share_partition import AcknowledgementBatch
from kbroker.coord.share_partition_manager import SharePartitionManager, SharePartitionRequest
from kbroker.protocol.errors import ErrorCode
from tests.coord.test_share_partition_manager_cluster import (
    GROUP,
    MEMBER,
    TID,
    FakePartition,
    MemoryPersister,
    Metadata,
    Replicas,
    _data,
)

E = ErrorCode
KEY = (GROUP, TID, 0)


class LaterWrites(MemoryPersister):
    """Writes complete when the test says so (`answer`), or at once with `now` set."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: dict[SharePartitionKey, asyncio.Future[ErrorCode]] = {}
        self.now: ErrorCode | None = None

    def write_state(self, key: SharePartitionKey, state: SharePartitionState) -> ErrorCode:
        if self.now is not None:
            return self.now
        self.states[key] = state
        fut = self.pending.get(key)
        if fut is None or fut.done():
            self.pending[key] = asyncio.get_running_loop().create_future()
        return E.NONE

    def write_completion(self, key: SharePartitionKey) -> asyncio.Future[ErrorCode] | None:  # type: ignore[override]
        return self.pending.get(key)

    async def answer(self, error: ErrorCode) -> None:
        for fut in self.pending.values():
            if not fut.done():
                fut.set_result(error)
        await asyncio.sleep(0)  # the done callbacks run


class Clock:
    def __init__(self) -> None:
        self.now = 1000

    def __call__(self) -> int:
        return self.now


def _manager(persister: LaterWrites, clock: Clock) -> SharePartitionManager:
    from kbroker.config import KafkaConfig
    metadata = Metadata({"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "15000"})
    return SharePartitionManager(KafkaConfig({}), Replicas(FakePartition(_data(4), 4)), metadata,  # type: ignore[arg-type]
                                 clock, persister)


def _fetch(m: SharePartitionManager, member: str, epoch: int, connection: str = "",
           acks: list[AcknowledgementBatch] | None = None) -> None:
    out = m.share_fetch(GROUP, member, epoch, [SharePartitionRequest(TID, 0, acks)], [], 2, True, False,
                        connection_id=connection)
    assert out.error == E.NONE


async def _acquired(error: ErrorCode = E.NONE) -> tuple[SharePartitionManager, LaterWrites, Clock]:
    persister, clock = LaterWrites(), Clock()
    m = _manager(persister, clock)
    _fetch(m, MEMBER, 0, "c1")  # initializes the share-partition (a write) and acquires 0-1
    await persister.answer(E.NONE)
    assert m.share_partition(*KEY) is not None
    return m, persister, clock


@pytest.mark.parametrize("error", [E.FENCED_STATE_EPOCH, E.FENCED_LEADER_EPOCH, E.GROUP_ID_NOT_FOUND])
def test_a_fenced_acknowledgement_write_drops_the_share_partition(error: ErrorCode) -> None:
    async def run() -> None:
        m, persister, _clock = await _acquired()
        _fetch(m, MEMBER, 1, acks=[AcknowledgementBatch(0, 1, (1,))])
        assert m.share_partition(*KEY) is not None  # not written yet
        await persister.answer(error)
        assert m.share_partition(*KEY) is None and KEY in persister.forgotten

    asyncio.run(run())


def test_a_fenced_release_on_member_leave_drops_the_share_partition() -> None:
    async def run() -> None:
        m, persister, _clock = await _acquired()
        m.on_member_left(GROUP, MEMBER)
        await persister.answer(E.FENCED_LEADER_EPOCH)
        assert m.share_partition(*KEY) is None

    asyncio.run(run())


def test_a_fenced_release_on_connection_close_drops_the_share_partition() -> None:
    async def run() -> None:
        m, persister, _clock = await _acquired()
        _fetch(m, "m2", 0, "c2")  # the group keeps a share session here: it is not empty (no onGroupEmpty)
        await persister.answer(E.NONE)
        m.on_disconnect("c1")
        assert m.share_partition(*KEY) is not None
        await persister.answer(E.FENCED_STATE_EPOCH)
        assert m.share_partition(*KEY) is None

    asyncio.run(run())


def test_a_fenced_write_on_lock_expiry_drops_the_share_partition() -> None:
    async def run() -> None:
        m, persister, clock = await _acquired()
        clock.now += 15_000
        assert m.expire_locks() == 2
        await persister.answer(E.NOT_LEADER_OR_FOLLOWER)
        assert m.share_partition(*KEY) is None

    asyncio.run(run())


def test_a_write_fenced_at_once_drops_it_and_other_errors_keep_it() -> None:
    async def run() -> None:
        m, persister, _clock = await _acquired()
        # A coordinator that is not available: kept (Kafka's handler only drops fenced share-partitions).
        m.on_member_left(GROUP, MEMBER)
        await persister.answer(E.COORDINATOR_NOT_AVAILABLE)
        assert m.share_partition(*KEY) is not None
        # The in-process share coordinator answers at once.
        _fetch(m, "m3", 0, "c3")
        await persister.answer(E.NONE)
        persister.now = E.FENCED_STATE_EPOCH
        m.on_member_left(GROUP, "m3")
        assert m.share_partition(*KEY) is None

    asyncio.run(run())
