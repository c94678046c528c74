"""KIP-932 share-partitions and share sessions without sockets: `SharePartition` on a fake clock
(table-driven: each case is a script of acquire / acknowledge / advance steps and the states expected
after it) and `ShareSessionCache`'s epochs."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from kbroker.coord.share_partition import (
    AcknowledgementBatch,
    AcquiredRange,
    RecordState,
    SharePartition,
    SharePartitionConfig,
)
from kbroker.coord.share_session import ShareSessionCache, next_epoch
from kbroker.protocol.errors import ErrorCode

E = ErrorCode
AV, AQ, ACK, ARC = RecordState.AVAILABLE, RecordState.ACQUIRED, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
LOCK = 1000


@dataclass(frozen=True)
class Acquire:
    member: str
    first: int
    last: int
    max_records: int = 0
    expect: tuple[tuple[int, int, int], ...] = ()  # (first, last, delivery count) ranges
    batch_ends: tuple[int, ...] = ()


@dataclass(frozen=True)
class Ack:
    member: str
    batches: tuple[tuple[int, int, tuple[int, ...]], ...]
    expect: ErrorCode = E.NONE


@dataclass(frozen=True)
class Advance:
    ms: int


@dataclass(frozen=True)
class Leave:
    member: str


@dataclass(frozen=True)
class Check:
    start: int
    next: int
    states: dict[int, tuple[RecordState, int]]  # offset -> (state, delivery count)
    fetch_offset: int | None = None


def ack(member: str, *batches: tuple[int, int, tuple[int, ...]], expect: ErrorCode = E.NONE) -> Ack:
    return Ack(member, batches, expect)


CASES: dict[str, list[object]] = {
    "acquire new records, accept them, start moves": [
        Acquire("a", 0, 4, expect=((0, 4, 1),)),
        Check(0, 5, {0: (AQ, 1), 4: (AQ, 1)}, fetch_offset=5),
        ack("a", (0, 4, (ACCEPT,))),
        Check(5, 5, {}, fetch_offset=5),
    ],
    "two members share a partition: the second gets what the first did not": [
        Acquire("a", 0, 9, max_records=3, expect=((0, 2, 1),)),
        Acquire("b", 0, 9, max_records=3, expect=((3, 5, 1),)),
        Acquire("a", 3, 9, expect=((6, 9, 1),)),
        ack("a", (0, 2, (ACCEPT,))),
        Check(3, 10, {3: (AQ, 1), 6: (AQ, 1)}),
    ],
    "release makes a record available again with its delivery count": [
        Acquire("a", 0, 2, expect=((0, 2, 1),)),
        ack("a", (0, 2, (RELEASE, ACCEPT, RELEASE))),
        Check(0, 3, {0: (AV, 1), 1: (ACK, 1), 2: (AV, 1)}, fetch_offset=0),
        Acquire("b", 0, 2, expect=((0, 0, 2), (2, 2, 2))),
        ack("b", (0, 0, (ACCEPT,)), (2, 2, (ACCEPT,))),
        Check(3, 3, {}),
    ],
    "reject archives, never redelivered": [
        Acquire("a", 0, 1, expect=((0, 1, 1),)),
        ack("a", (0, 0, (REJECT,)), (1, 1, (RELEASE,))),
        Check(1, 2, {0: (ARC, 0), 1: (AV, 1)}, fetch_offset=1),  # before the start: forgotten
    ],
    "gap acknowledgements archive offsets without records": [
        Acquire("a", 0, 3, expect=((0, 3, 1),)),
        ack("a", (0, 3, (ACCEPT, GAP, GAP, ACCEPT))),
        Check(4, 4, {}),
    ],
    "lock expiry releases, the delivery count limit archives": [
        Acquire("a", 0, 0, expect=((0, 0, 1),)),
        Advance(LOCK),
        Check(0, 1, {0: (AV, 1)}),
        Acquire("b", 0, 0, expect=((0, 0, 2),)),
        Advance(LOCK),
        Acquire("a", 0, 0, expect=((0, 0, 3),)),
        ack("a", (0, 0, (RELEASE,))),
        Acquire("a", 0, 0, expect=((0, 0, 4),)),
        Advance(LOCK),
        Acquire("a", 0, 0, expect=((0, 0, 5),)),
        Advance(LOCK),  # fifth delivery (group.share.delivery.count.limit=5) ran out: archived
        Check(1, 1, {}),
        Acquire("a", 0, 0, expect=()),
    ],
    "renew extends the lock": [
        Acquire("a", 0, 0, expect=((0, 0, 1),)),
        Advance(LOCK - 1),
        ack("a", (0, 0, (RENEW,))),
        Advance(LOCK - 1),
        Check(0, 1, {0: (AQ, 1)}),
        Advance(1),
        Check(0, 1, {0: (AV, 1)}),
    ],
    "acknowledging what another member holds is INVALID_RECORD_STATE and changes nothing": [
        Acquire("a", 0, 1, expect=((0, 1, 1),)),
        ack("b", (0, 0, (ACCEPT,)), expect=E.INVALID_RECORD_STATE),
        ack("a", (0, 0, (ACCEPT,)), (5, 5, (ACCEPT,)), expect=E.INVALID_RECORD_STATE),
        Check(0, 2, {0: (AQ, 1), 1: (AQ, 1)}),
        ack("a", (0, 1, (ACCEPT,))),
        ack("a", (0, 1, (ACCEPT,))),  # before the start offset now: ignored, as Kafka does
        Acquire("a", 2, 3, expect=((2, 3, 1),)),
        ack("a", (3, 3, (ACCEPT,))),
        ack("a", (3, 3, (ACCEPT,)), expect=E.INVALID_RECORD_STATE),  # acknowledged, still in flight
    ],
    "malformed batches are INVALID_REQUEST": [
        Acquire("a", 0, 3, expect=((0, 3, 1),)),
        ack("a", (2, 1, (ACCEPT,)), expect=E.INVALID_REQUEST),
        ack("a", (0, 3, (ACCEPT, ACCEPT)), expect=E.INVALID_REQUEST),
        ack("a", (0, 0, (9,)), expect=E.INVALID_REQUEST),
        ack("a", (0, 0, ()), expect=E.INVALID_REQUEST),
        Check(0, 4, {0: (AQ, 1)}),
    ],
    "a member leaving releases its records only": [
        Acquire("a", 0, 1, expect=((0, 1, 1),)),
        Acquire("b", 2, 3, expect=((2, 3, 1),)),
        Leave("a"),
        Check(0, 4, {0: (AV, 1), 1: (AV, 1), 2: (AQ, 1)}, fetch_offset=0),
    ],
    "the in-flight window bounds new acquisitions, not redeliveries": [
        Acquire("a", 0, 200, expect=((0, 99, 1),)),  # max.record.locks 100 in this table
        Acquire("b", 100, 200, expect=()),
        ack("a", (0, 9, (ACCEPT,)), (10, 10, (RELEASE,))),
        Acquire("b", 10, 200, expect=((10, 10, 2), (100, 109, 1))),
    ],
    "batch_optimized acquisition finishes the batch it started": [
        Acquire("a", 0, 19, max_records=3, batch_ends=(4, 9, 19), expect=((0, 4, 1),)),
        Acquire("a", 5, 19, max_records=3, expect=((5, 7, 1),)),  # record_limit: exactly 3
    ],
}


@pytest.mark.parametrize("name", list(CASES))
def test_share_partition_script(name: str) -> None:
    now = [0]
    sp = SharePartition(0, SharePartitionConfig(record_lock_duration_ms=LOCK, delivery_count_limit=5,
                                                max_in_flight_records=100))
    for i, step in enumerate(CASES[name]):
        where = f"step {i}: {step}"
        if isinstance(step, Acquire):
            got = sp.acquire(step.member, step.first, step.last, step.max_records, now[0], step.batch_ends)
            assert got == [AcquiredRange(*r) for r in step.expect], where
        elif isinstance(step, Ack):
            batches = [AcknowledgementBatch(f, last, types) for f, last, types in step.batches]
            assert sp.acknowledge(step.member, batches, now[0]) == step.expect, where
        elif isinstance(step, Advance):
            now[0] += step.ms
            sp.expire_locks(now[0])
        elif isinstance(step, Leave):
            sp.release_member(step.member)
        elif isinstance(step, Check):
            assert (sp.start_offset, sp.next_offset) == (step.start, step.next), where
            for offset, (state, count) in step.states.items():
                assert (sp.state_of(offset), sp.delivery_count_of(offset)) == (state, count), f"{where} @{offset}"
            if step.fetch_offset is not None:
                assert sp.next_fetch_offset() == step.fetch_offset, where


def test_lock_deadline_is_the_earliest_acquired_lock() -> None:
    sp = SharePartition(10, SharePartitionConfig(record_lock_duration_ms=LOCK))
    assert sp.next_lock_deadline() is None
    sp.acquire("a", 10, 10, 0, 5)
    sp.acquire("a", 11, 11, 0, 7)
    assert sp.next_lock_deadline() == 5 + LOCK
    assert sp.end_offset == 11


def test_log_start_moving_forgets_records_before_it() -> None:
    sp = SharePartition(0)
    sp.acquire("a", 0, 4, 0, 0)
    sp.move_start_to(3)
    assert (sp.start_offset, sp.next_offset) == (3, 5)
    assert sp.state_of(2) == ARC and sp.state_of(3) == AQ


def test_share_session_epochs() -> None:
    cache = ShareSessionCache(max_sessions=2)
    assert cache.get("g", "m", 1) == (E.SHARE_SESSION_NOT_FOUND, None)
    error, session, old = cache.open("g", "m")
    assert error == E.NONE and session is not None and old is None and session.epoch == 1
    assert cache.get("g", "m", 2)[0] == E.INVALID_SHARE_SESSION_EPOCH
    assert cache.get("g", "m", 1) == (E.NONE, session)
    cache.advance(session)
    assert cache.get("g", "m", 2) == (E.NONE, session)
    assert cache.get("g", "m", -1) == (E.NONE, session)  # the final epoch closes whatever the epoch
    _, again, replaced = cache.open("g", "m")
    assert replaced is session and again is not None and again.epoch == 1
    assert cache.open("g", "m2")[0] == E.NONE
    assert cache.open("g", "m3")[0] == E.SHARE_SESSION_LIMIT_REACHED
    cache.close(again)
    assert cache.get("g", "m", 1)[0] == E.SHARE_SESSION_NOT_FOUND
    assert next_epoch(2**31 - 1) == 1
