"""Shared helpers of the group API handlers (not a handler: the dispatcher skips `_` modules).

Owns how a handler finds the group coordinator: `services.extras["group_coordinator"]`, put there by
the broker wiring; built here on first use when the wiring has not done so (the same object either way).
The coordinator's answers are values when already committed, else loop futures: `then` / `gather`
(from `kbroker.coord.service`) build the response now or when they complete, without a task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from kbroker.api.context import BrokerServices
from kbroker.coord.service import GroupCoordinatorService, gather, then

T = TypeVar("T")

__all__ = ["callback_future", "client_host", "coordinator", "gather", "runtime", "then"]


def runtime(services: BrokerServices) -> GroupCoordinatorService:
    rt = services.extras.get("group_coordinator")
    if rt is None:
        rt = GroupCoordinatorService(services.config, services.replica_manager, services.topic_manager,
                                     services.metadata, services.time_ms)
        services.extras["group_coordinator"] = rt
        rt.startup()
    return rt  # type: ignore[no-any-return]


def coordinator(services: BrokerServices) -> GroupCoordinatorService:
    return runtime(services)


def callback_future(convert: Callable[[T], Any]) -> tuple[asyncio.Future[Any], Callable[[T], None]]:
    """A loop future and the callback that completes it (once) with `convert(result)`: the coordinator
    answers waiting JoinGroup/SyncGroup requests through such callbacks, without a task per request."""
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    def respond(result: T) -> None:
        if not future.done():
            future.set_result(convert(result))

    return future, respond


def client_host(ctx: Any) -> str:
    peer = getattr(ctx, "peer", None)
    host = peer[0] if peer else ""
    return f"/{host}" if host else ""
