"""Shared helpers of the group API handlers (not a handler: the dispatcher skips `_` modules).

Owns how a handler finds the group coordinator: the `group_coordinator` service, built by
`kbroker.services.build_services` and started by the broker (or the test stack) before any request.
The coordinator's answers are values when already committed, else loop futures: `then` / `gather`
(from `kbroker.coord.service`) build the response now or when they complete, without a task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from kbroker.api.context import BrokerServices, RequestContext
from kbroker.coord.service import GroupCoordinatorService, gather, then

T = TypeVar("T")

__all__ = ["callback_future", "client_host", "coordinator", "gather", "runtime", "then"]

def runtime(services: BrokerServices) -> GroupCoordinatorService:
    return services.group_coordinator


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


def client_host(ctx: RequestContext) -> str:
    host = ctx.peer[0]
    return f"/{host}" if host else ""
