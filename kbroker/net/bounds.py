"""The broker-wide bounds on received requests: `MemoryPool` (bytes) and `RequestQueueBound` (count).

Kafka bounds two different things, at two different moments, and so does kbroker:

- `MemoryPool` is Kafka's `SimpleMemoryPool` behind `queued.max.request.bytes`: a connection takes
  a frame's announced size from the pool when the 4-byte size prefix arrives, before its receive
  buffer exists, and gives it back when the request's handler has returned (or the connection
  closes). A frame that is still arriving holds memory, because it does. Like Kafka's pool, an
  allocation is granted while anything is left, so one frame may overshoot the bound. Connections
  refused wait in FIFO order (and stop reading); `release` grants the waiters synchronously.
- `RequestQueueBound` is the bound of Kafka's request queue (`RequestChannel`, `queued.max.requests`):
  it counts *complete* requests, from the moment their last byte arrived until their handler has
  returned (a delayed operation then waits in purgatory, outside the bound, as in Kafka). A frame
  still arriving takes no slot: a few hundred connections that send a size prefix and stop cannot
  starve the complete requests of everyone else (issue 19, finding 3). A connection whose complete
  request finds the queue full keeps the frame, stops reading and waits in FIFO order; a released
  slot passes directly to the head waiter, which is run through `schedule` (the event loop's
  `call_soon`), never re-entrantly: handlers run from inside `release` would recurse once per waiter.
  On the single event loop a handler returns before the next frame is handled, so complete requests
  rarely fill this bound today; it keeps Kafka's meaning for when handling is handed off the loop.

Sans-IO: no asyncio, no sockets; the waiters are the connections (anything with the methods of
`MemoryWaiter` / `RequestWaiter`). Tested on their own in tests/net/test_bounds.py.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Protocol


class MemoryWaiter(Protocol):
    def on_memory_granted(self) -> None:
        """The pool now holds this waiter's frame size for it: allocate the buffer, resume reading."""


class RequestWaiter(Protocol):
    def on_request_granted(self) -> None:
        """A request slot is now held for this waiter: dispatch one waiting request (it releases it)."""


class MemoryPool:
    """Bytes of request buffers allocated and not yet released (`queued.max.request.bytes`)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes  # <= 0: no bound, only accounting
        self.used = 0
        self._waiters: deque[tuple[MemoryWaiter, int]] = deque()

    @property
    def bounded(self) -> bool:
        return self.max_bytes > 0

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def _has_room(self) -> bool:
        return self.max_bytes <= 0 or self.used < self.max_bytes

    def try_allocate(self, nbytes: int) -> bool:
        """Take `nbytes` if anything is left and nobody waits before us; False: call `wait`."""
        if self._waiters or not self._has_room():
            return False
        self.used += nbytes
        return True

    def force_allocate(self, nbytes: int) -> None:
        """Take `nbytes` whatever is left (the transport reads anyway; see KafkaConnection.get_buffer)."""
        self.used += nbytes

    def wait(self, waiter: MemoryWaiter, nbytes: int) -> None:
        self._waiters.append((waiter, nbytes))

    def forget(self, waiter: MemoryWaiter) -> None:
        """Drop `waiter` from the queue (it closed, or allocated another way)."""
        if self._waiters:
            self._waiters = deque(w for w in self._waiters if w[0] is not waiter)

    def release(self, nbytes: int) -> None:
        if nbytes <= 0:
            return
        self.used -= nbytes
        while self._waiters and self._has_room():
            waiter, size = self._waiters.popleft()
            self.used += size
            waiter.on_memory_granted()


class RequestQueueBound:
    """Complete requests received and not yet handed off by their handler (`queued.max.requests`)."""

    def __init__(self, max_requests: int, schedule: Callable[[Callable[[], None]], object]) -> None:
        self.max_requests = max_requests
        self.requests = 0  # slots held, including those granted to a waiter not yet run
        self._schedule = schedule
        self._waiters: deque[RequestWaiter] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def try_acquire(self) -> bool:
        if self._waiters or self.requests >= self.max_requests:
            return False
        self.requests += 1
        return True

    def wait(self, waiter: RequestWaiter) -> None:
        self._waiters.append(waiter)

    def forget(self, waiter: RequestWaiter) -> None:
        if self._waiters:
            self._waiters = deque(w for w in self._waiters if w is not waiter)

    def release(self) -> None:
        """Give back one slot; with waiters, the slot passes to the first one (run via `schedule`)."""
        if self._waiters:
            waiter = self._waiters.popleft()
            self._schedule(waiter.on_request_granted)
            return
        self.requests -= 1
