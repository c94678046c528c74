"""`run_now`: drive a coroutine that never suspends to its result, without an event loop.

The `LocalController`'s operations commit synchronously inside their coroutine (append, fsync,
publish), so tests can call them from plain functions, or from inside a running loop, and get the
answer at once. A coroutine that does suspend is a test bug: it fails loudly instead of hanging.
"""

from __future__ import annotations

import inspect
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_now(coro: Coroutine[Any, Any, T]) -> T:
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise AssertionError(f"{coro!r} suspended; run_now only drives coroutines that complete at once")


class SyncAdmin:
    """The controller's admin operations run synchronously (`run_now`), and the config helper's reads:
    what the in-process tests call where they used to call the TopicManager."""

    def __init__(self, controller: Any, configs: Any) -> None:
        self.controller = controller
        self.configs = configs

    def __getattr__(self, name: str) -> Any:
        op = getattr(self.controller, name, None)
        if op is not None and inspect.iscoroutinefunction(op):
            return lambda *args, **kwargs: run_now(op(*args, **kwargs))
        return getattr(self.configs, name)
