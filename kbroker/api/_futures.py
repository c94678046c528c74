"""Future plumbing for delayed requests (not a handler: the dispatcher skips `_` modules).

A delayed produce or fetch waits in the purgatory on a loop future. Wrapping that wait in a coroutine
would cost an asyncio Task per delayed request (the network layer has to `ensure_future` a coroutine);
chaining a derived future with a done-callback costs one future and one callback, and the network layer
completes the response slot from the future's own done-callback.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def chain_future(
    source: asyncio.Future[T],
    on_result: Callable[[T], R],
    on_error: Callable[[Exception], R] | None = None,
) -> asyncio.Future[R]:
    """A future completed with `on_result(result)` once `source` completes.

    An exception from `source` goes to `on_error` (whose return value completes the derived future)
    or, without it, straight through; an exception raised by either callback fails the derived future.
    Cancelling `source` cancels the derived future.
    """
    derived: asyncio.Future[R] = source.get_loop().create_future()

    def done(fut: asyncio.Future[T]) -> None:
        if derived.done():
            return
        if fut.cancelled():
            derived.cancel()
            return
        exc = fut.exception()
        try:
            if exc is None:
                value = on_result(fut.result())
            elif on_error is not None and isinstance(exc, Exception):
                value = on_error(exc)
            else:
                derived.set_exception(exc)
                return
        except BaseException as raised:  # noqa: BLE001 - the network layer decides how to answer it
            derived.set_exception(raised)
            return
        derived.set_result(value)

    source.add_done_callback(done)
    return derived


def identity(value: Any) -> Any:
    return value
