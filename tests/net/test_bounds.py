"""The broker-wide request bounds on their own (kbroker.net.bounds): no sockets, no event loop.

`MemoryPool` is `queued.max.request.bytes` (taken at the size prefix, Kafka's memory pool);
`RequestQueueBound` is `queued.max.requests` (taken by complete requests only).
"""

from __future__ import annotations

from collections.abc import Callable

from kbroker.net.bounds import MemoryPool, RequestQueueBound


class MemoryWaiter:
    def __init__(self, log: list[str], name: str) -> None:
        self.log = log
        self.name = name

    def on_memory_granted(self) -> None:
        self.log.append(self.name)


class RequestWaiter:
    def __init__(self, bound: RequestQueueBound, log: list[str], name: str, hold: bool = False) -> None:
        self.bound = bound
        self.log = log
        self.name = name
        self.hold = hold

    def on_request_granted(self) -> None:
        self.log.append(self.name)
        if not self.hold:
            self.bound.release()  # handled at once, as a synchronous handler does


class FakeLoop:
    """`call_soon` that runs nothing until `run` is called: shows that grants are not re-entrant."""

    def __init__(self) -> None:
        self.ready: list[Callable[[], None]] = []

    def call_soon(self, fn: Callable[[], None]) -> None:
        self.ready.append(fn)

    def run(self) -> None:
        while self.ready:
            self.ready.pop(0)()


def test_unbounded_pool_only_accounts() -> None:
    pool = MemoryPool(-1)
    assert not pool.bounded
    for _ in range(1000):
        assert pool.try_allocate(100 * 1024 * 1024)
    assert pool.used == 1000 * 100 * 1024 * 1024
    for _ in range(1000):
        pool.release(100 * 1024 * 1024)
    assert pool.used == 0


def test_pool_grants_while_anything_is_left_then_queues_fifo() -> None:
    pool = MemoryPool(100)
    log: list[str] = []
    assert pool.try_allocate(60)
    assert pool.try_allocate(60)  # 60 < 100 left: granted, overshooting to 120 (Kafka's pool does too)
    assert pool.used == 120
    a, b, c = MemoryWaiter(log, "a"), MemoryWaiter(log, "b"), MemoryWaiter(log, "c")
    assert not pool.try_allocate(1)
    pool.wait(a, 30)
    pool.wait(b, 50)
    pool.wait(c, 10)
    pool.release(60)  # 60 used: a (30) then b (50) are granted, c waits (140 >= 100)
    assert log == ["a", "b"] and pool.used == 140 and pool.waiting == 1
    assert not pool.try_allocate(1)  # nobody overtakes a waiter
    pool.release(60)
    assert log == ["a", "b", "c"] and pool.used == 90 and pool.waiting == 0
    assert pool.try_allocate(5)  # no waiter, room left: granted directly again
    for n in (30, 50, 10, 5):
        pool.release(n)
    assert pool.used == 0


def test_pool_forget_and_force() -> None:
    pool = MemoryPool(10)
    log: list[str] = []
    assert pool.try_allocate(10)
    a, b = MemoryWaiter(log, "a"), MemoryWaiter(log, "b")
    pool.wait(a, 4)
    pool.wait(b, 4)
    pool.forget(a)  # a closed while waiting
    pool.force_allocate(7)  # a connection whose transport reads anyway takes its memory regardless
    assert pool.used == 17
    pool.release(7)
    pool.release(10)
    assert log == ["b"] and pool.used == 4
    pool.release(0)  # nothing held: no change
    assert pool.used == 4


def test_request_bound_counts_only_what_is_acquired_and_passes_slots_fifo() -> None:
    loop = FakeLoop()
    bound = RequestQueueBound(2, loop.call_soon)
    log: list[str] = []
    assert bound.try_acquire() and bound.try_acquire()
    assert not bound.try_acquire()
    w1, w2, w3 = (RequestWaiter(bound, log, n) for n in ("w1", "w2", "w3"))
    for w in (w1, w2, w3):
        bound.wait(w)
    bound.release()
    # The slot passed to w1 but w1 does not run inside release (its handler would recurse into the
    # next release): it is scheduled, and the slot stays counted for it meanwhile.
    assert log == [] and bound.requests == 2 and bound.waiting == 2
    assert not bound.try_acquire()  # the slot is w1's, not a newcomer's
    loop.run()
    # w1 handled and released -> w2 scheduled -> handled and released -> w3 ...
    assert log == ["w1", "w2", "w3"]
    assert bound.requests == 1 and bound.waiting == 0
    bound.release()
    assert bound.requests == 0
    assert bound.try_acquire()
    bound.release()
    assert bound.requests == 0


def test_request_bound_forget_and_many_waiters_do_not_recurse() -> None:
    loop = FakeLoop()
    bound = RequestQueueBound(1, loop.call_soon)
    log: list[str] = []
    assert bound.try_acquire()
    waiters = [RequestWaiter(bound, log, f"w{i}") for i in range(5000)]
    for w in waiters:
        bound.wait(w)
    bound.forget(waiters[1])
    bound.release()
    loop.run()  # 4999 hand-overs, each from its own scheduled callback: no RecursionError
    assert len(log) == 4999 and "w1" not in log and log[:2] == ["w0", "w2"]
    assert bound.requests == 0 and bound.waiting == 0


def test_a_held_slot_blocks_until_released() -> None:
    loop = FakeLoop()
    bound = RequestQueueBound(1, loop.call_soon)
    log: list[str] = []
    holder = RequestWaiter(bound, log, "holder", hold=True)
    assert bound.try_acquire()
    bound.wait(holder)
    bound.release()
    loop.run()
    assert log == ["holder"] and bound.requests == 1  # the holder keeps the slot it was given
    assert not bound.try_acquire()
    bound.release()
    assert bound.requests == 0
