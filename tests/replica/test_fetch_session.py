"""KIP-227 fetch sessions: creation, incremental updates, errors, eviction, forgotten partitions."""

from __future__ import annotations

import uuid

from kbroker.protocol.errors import ErrorCode
from kbroker.replica.fetch_session import (
    FetchManager,
    FetchPartitionRequest,
    FetchSessionCache,
    FullFetchContext,
    IncrementalFetchContext,
    PartitionResult,
    SessionErrorContext,
    SessionlessFetchContext,
    next_epoch,
)

Z = uuid.UUID(int=0)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def req(topic: str, p: int, offset: int = 0, max_bytes: int = 1024) -> FetchPartitionRequest:
    return FetchPartitionRequest((topic, p), topic, Z, p, offset, max_bytes)


def res(hw: int, size: int = 0, error: ErrorCode = ErrorCode.NONE) -> PartitionResult:
    return PartitionResult(error, high_watermark=hw, last_stable_offset=hw, log_start_offset=0,
                           records=b"x" * size if size else None, records_size=size)


def manager(slots: int = 10, clock: Clock | None = None) -> FetchManager:
    return FetchManager(FetchSessionCache(slots, clock or Clock()))


def open_session(fm: FetchManager, reqs: list[FetchPartitionRequest], results: dict) -> int:
    ctx = fm.new_context(12, 0, 0, reqs, [])
    assert isinstance(ctx, FullFetchContext)
    sid, parts = ctx.update_and_generate_response(results)
    assert [r.key for r, _ in parts] == [r.key for r in reqs]
    return sid


def test_old_versions_are_sessionless() -> None:
    fm = manager()
    ctx = fm.new_context(6, 0, 0, [req("t", 0)], [])
    assert isinstance(ctx, SessionlessFetchContext)
    assert ctx.update_and_generate_response({("t", 0): res(5)})[0] == 0
    assert len(fm.cache) == 0


def test_full_fetch_creates_session_and_incremental_sends_only_changes() -> None:
    fm = manager()
    a, b = req("t", 0), req("t", 1)
    sid = open_session(fm, [a, b], {a.key: res(5), b.key: res(7)})
    assert sid != 0 and len(fm.cache) == 1
    # Incremental epoch 1, nothing added: both partitions are read, nothing changed -> empty response.
    ctx = fm.new_context(12, sid, 1, [], [])
    assert isinstance(ctx, IncrementalFetchContext)
    assert {r.key for r in ctx.partitions_to_read()} == {a.key, b.key}
    sid2, parts = ctx.update_and_generate_response({a.key: res(5), b.key: res(7)})
    assert sid2 == sid and parts == []
    # Epoch 2: the high watermark of partition 1 moved -> only it is sent.
    ctx = fm.new_context(12, sid, 2, [], [])
    _, parts = ctx.update_and_generate_response({a.key: res(5), b.key: res(8)})
    assert [r.key for r, _ in parts] == [b.key]
    # Epoch 3: records for partition 0 -> sent; it then moves to the end of the session order.
    ctx = fm.new_context(12, sid, 3, [], [])
    _, parts = ctx.update_and_generate_response({a.key: res(5, size=10), b.key: res(8)})
    assert [r.key for r, _ in parts] == [a.key]
    ctx = fm.new_context(12, sid, 4, [], [])
    assert [r.key for r in ctx.partitions_to_read()] == [b.key, a.key]


def test_errors_are_always_sent() -> None:
    fm = manager()
    a = req("t", 0)
    sid = open_session(fm, [a], {a.key: res(5)})
    ctx = fm.new_context(12, sid, 1, [], [])
    _, parts = ctx.update_and_generate_response({a.key: res(5, error=ErrorCode.NOT_LEADER_OR_FOLLOWER)})
    assert len(parts) == 1 and parts[0][1].error == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_incremental_adds_updates_and_forgets_partitions() -> None:
    fm = manager()
    a, b = req("t", 0), req("t", 1)
    sid = open_session(fm, [a, b], {a.key: res(5), b.key: res(5)})
    c = req("u", 0)
    a2 = req("t", 0, offset=3)
    ctx = fm.new_context(12, sid, 1, [c, a2], [b.key])
    reading = {r.key: r for r in ctx.partitions_to_read()}
    assert set(reading) == {a.key, c.key}
    assert reading[a.key].fetch_offset == 3
    _, parts = ctx.update_and_generate_response({a.key: res(5), c.key: res(0)})
    # The new partition is always sent once (its cached high watermark starts unknown).
    assert [r.key for r, _ in parts] == [c.key]


def test_unknown_session_and_wrong_epoch() -> None:
    fm = manager()
    ctx = fm.new_context(12, 12345, 1, [], [])
    assert isinstance(ctx, SessionErrorContext) and ctx.error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    a = req("t", 0)
    sid = open_session(fm, [a], {a.key: res(1)})
    ctx = fm.new_context(12, sid, 5, [], [])
    assert isinstance(ctx, SessionErrorContext) and ctx.error == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert ctx.update_and_generate_response({}) == (0, [])
    # The right epoch still works afterwards.
    assert isinstance(fm.new_context(12, sid, 1, [], []), IncrementalFetchContext)


def test_topic_id_mismatch_within_a_session() -> None:
    fm = manager()
    a = req("t", 0)
    sid = open_session(fm, [a], {a.key: res(1)})
    ctx = fm.new_context(13, sid, 1, [], [])
    assert isinstance(ctx, SessionErrorContext) and ctx.error == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR


def test_final_epoch_closes_session_and_is_sessionless() -> None:
    fm = manager()
    a = req("t", 0)
    sid = open_session(fm, [a], {a.key: res(1)})
    ctx = fm.new_context(12, sid, -1, [a], [])
    assert isinstance(ctx, SessionlessFetchContext)
    assert fm.cache.get(sid) is None
    # A new full fetch naming an old session also drops it and opens a fresh one.
    sid2 = open_session(fm, [a], {a.key: res(1)})
    ctx = fm.new_context(12, sid2, 0, [a], [])
    new_sid, _ = ctx.update_and_generate_response({a.key: res(1)})
    assert fm.cache.get(sid2) is None and new_sid not in (0, sid2)


def test_cache_full_gives_session_id_zero_until_eviction_allowed() -> None:
    clock = Clock()
    fm = manager(slots=1, clock=clock)
    a, b = req("t", 0), req("t", 1)
    sid = open_session(fm, [a, b], {a.key: res(1), b.key: res(1)})
    # A smaller session cannot evict a bigger, fresh one.
    ctx = fm.new_context(12, 0, 0, [a], [])
    assert ctx.update_and_generate_response({a.key: res(1)})[0] == 0
    assert fm.cache.get(sid) is not None
    # Once the old session is stale (idle > 2 minutes) it is evicted.
    clock.now += 120_001
    ctx = fm.new_context(12, 0, 0, [a], [])
    new_sid, _ = ctx.update_and_generate_response({a.key: res(1)})
    assert new_sid != 0 and fm.cache.get(sid) is None


def test_zero_slots_disables_sessions() -> None:
    fm = manager(slots=0)
    ctx = fm.new_context(12, 0, 0, [req("t", 0)], [])
    assert ctx.update_and_generate_response({("t", 0): res(1)})[0] == 0


def test_epoch_wraps_to_one() -> None:
    assert next_epoch(0x7FFFFFFF) == 1
    assert next_epoch(1) == 2
