"""Delayed operations and the purgatory that holds them (Kafka's DelayedOperationPurgatory).

A delayed operation (a long-polling Fetch, an acks=all Produce) waits until a condition holds or its
timeout passes. It is watched under keys (topic-partitions); an append or a high-watermark move
calls `check_and_complete(key)`, which re-tests the operations watching that key.

Kafka uses a hierarchical timing wheel and a reaper thread; on one asyncio loop a
`loop.call_later` timer per operation is the same thing (the loop keeps its timers in a heap), and
an `asyncio.Future` per operation is what the handler awaits: no task per request.

Must not import net/ or api/.
"""

from __future__ import annotations

import asyncio
import functools
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable, Mapping
from typing import Generic, TypeVar

T = TypeVar("T")


class DelayedOperation(ABC, Generic[T]):
    """One waiting request. Subclasses implement `try_complete`, `on_complete`, `on_expiration`.

    `try_complete` checks the condition and calls `force_complete()` when it holds (Kafka's
    contract); `on_complete` computes the result that resolves `future`.
    """

    __slots__ = ("delay_ms", "future", "completed", "expired", "_timer", "_keys", "__weakref__")

    def __init__(self, delay_ms: int, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.delay_ms = max(0, int(delay_ms))
        if loop is None:
            loop = asyncio.get_running_loop()  # created by handlers running on the broker's loop
        self.future: asyncio.Future[T] = loop.create_future()
        self.completed = False
        self.expired = False
        self._timer: asyncio.TimerHandle | None = None
        self._keys: tuple[Hashable, ...] = ()

    # -- subclass API ----------------------------------------------------------------------------

    @abstractmethod
    def try_complete(self) -> bool:
        """Complete the operation if its condition holds; return whether it completed."""

    @abstractmethod
    def on_complete(self) -> T:
        """Compute the operation's result (called exactly once)."""

    def on_expiration(self) -> None:
        """Hook run before `on_complete` when the timeout passed (metrics, logging)."""

    # -- completion ----------------------------------------------------------------------------

    def force_complete(self) -> bool:
        """Complete now, whatever the condition. Returns False if another path completed it first."""
        if self.completed:
            return False
        self.completed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.future.done():  # the awaiting side went away (connection closed)
            return True
        try:
            result = self.on_complete()
        except BaseException as exc:  # the handler re-raises it where the response is awaited
            self.future.set_exception(exc)
        else:
            self.future.set_result(result)
        return True

    def _expire(self) -> None:
        self._timer = None
        if self.completed:
            return
        self.expired = True
        self.on_expiration()
        self.force_complete()


class DelayedOperationPurgatory(Generic[T]):
    """Operations watched by key, completed by `check_and_complete` or by their timer (one kind of
    operation per purgatory, as in Kafka: produce, fetch)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._watchers: dict[Hashable, dict[int, DelayedOperation[T]]] = {}
        # The keys some operation watches (a key leaves when its last operation does): the hot paths'
        # `key in purgatory.watched_keys`, which spares a call per key when nothing waits.
        self.watched_keys: Mapping[Hashable, object] = self._watchers
        self._pending: dict[int, DelayedOperation[T]] = {}
        self._shutdown = False

    def __len__(self) -> int:
        """Operations waiting (Kafka's `PurgatorySize` metric)."""
        self._reap()
        return len(self._pending)

    def watched(self, key: Hashable) -> int:
        ops = self._watchers.get(key)
        return 0 if ops is None else sum(1 for op in ops.values() if not op.completed)

    def try_complete_else_watch(self, op: DelayedOperation[T], keys: Iterable[Hashable]) -> bool:
        """Complete `op` at once if it can; otherwise watch it under `keys` and arm its timer.

        Returns True when it completed immediately.
        """
        if op.try_complete():
            return True
        if self._shutdown:
            op.force_complete()
            return True
        op._keys = tuple(keys)
        oid = id(op)
        for key in op._keys:
            self._watchers.setdefault(key, {})[oid] = op
        self._pending[oid] = op
        if op.delay_ms == 0:
            op._expire()
            self._unwatch(op)
            return True
        loop = op.future.get_loop()
        op._timer = loop.call_later(op.delay_ms / 1000.0, self._on_timer, op)
        # If the awaiting side is cancelled (connection closed), stop watching.
        op.future.add_done_callback(functools.partial(self._on_future_done, op))
        return False

    def check_and_complete(self, key: Hashable) -> int:
        """Re-test every operation watching `key`; returns how many completed."""
        ops = self._watchers.get(key)
        if not ops:
            return 0
        done = 0
        for op in list(ops.values()):
            if op.completed:
                self._unwatch(op)
                continue
            if op.try_complete():
                done += 1
                self._unwatch(op)
        return done

    def _on_timer(self, op: DelayedOperation[T]) -> None:
        op._expire()
        self._unwatch(op)

    def _on_future_done(self, op: DelayedOperation[T], _future: object = None) -> None:
        if not op.completed:
            # Cancelled from outside: forget it without computing a response nobody reads.
            op.completed = True
            if op._timer is not None:
                op._timer.cancel()
                op._timer = None
        self._unwatch(op)

    def _unwatch(self, op: DelayedOperation[T]) -> None:
        oid = id(op)
        if self._pending.pop(oid, None) is None:
            return
        for key in op._keys:
            ops = self._watchers.get(key)
            if ops is not None:
                ops.pop(oid, None)
                if not ops:
                    del self._watchers[key]

    def _reap(self) -> None:
        for op in [op for op in self._pending.values() if op.completed]:
            self._unwatch(op)

    def shutdown(self) -> None:
        """Complete every waiting operation now (their responses go out before the broker stops)."""
        self._shutdown = True
        for op in list(self._pending.values()):
            op.force_complete()
            self._unwatch(op)
