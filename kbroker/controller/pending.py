"""`PendingOperation`: a controller answer that exists once its records commit (Kafka's
`CompletableFuture` in the controller's deferred-event purgatory).

The quorum controller is sans-IO: an operation returns a `PendingOperation` at once, and the
controller completes it when the Raft layer reports the commit of the operation's last record (or
fails it with NOT_CONTROLLER when leadership is lost first). Tests read `done()` / `result()`
directly; `await op` gives the answer inside the broker's event loop: an operation already complete
(a validation error, a read) is answered without suspending, and only a pending one creates a loop
future (asyncio is imported then, never by the state machine).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Generic, TypeVar

T = TypeVar("T")


class PendingOperation(Generic[T]):
    __slots__ = ("name", "_done", "_value", "_error", "_callbacks")

    def __init__(self, name: str = "") -> None:
        self.name = name
        self._done = False
        self._value: T | None = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[PendingOperation[T]], None]] = []

    @classmethod
    def failed(cls, error: BaseException, name: str = "") -> PendingOperation[T]:
        op: PendingOperation[T] = cls(name)
        op.fail(error)
        return op

    def done(self) -> bool:
        return self._done

    def complete(self, value: T) -> None:
        if self._done:
            return
        self._done, self._value = True, value
        self._run_callbacks()

    def fail(self, error: BaseException) -> None:
        if self._done:
            return
        self._done, self._error = True, error
        self._run_callbacks()

    def result(self) -> T:
        if not self._done:
            raise RuntimeError(f"{self.name or 'operation'} is not complete")
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]

    def exception(self) -> BaseException | None:
        return self._error

    def add_done_callback(self, callback: Callable[[PendingOperation[T]], None]) -> None:
        if self._done:
            callback(self)
        else:
            self._callbacks.append(callback)

    def _run_callbacks(self) -> None:
        callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            cb(self)

    def __await__(self) -> Generator[object, None, T]:
        if not self._done:
            import asyncio  # only an operation still waiting for its commit needs the loop

            future = asyncio.get_running_loop().create_future()

            def wake(_op: PendingOperation[T]) -> None:
                if not future.done():
                    future.set_result(None)

            self.add_done_callback(wake)
            yield from future.__await__()
        return self.result()

    def __repr__(self) -> str:
        state = "pending" if not self._done else ("failed" if self._error is not None else "done")
        return f"PendingOperation({self.name!r}, {state})"
