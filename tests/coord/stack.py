"""An in-process broker stack (real LogManager / ReplicaManager / LocalController in a temp dir) with the
group coordinator runtime, and a way to call the group APIs through real request/response frames."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from kbroker.api.context import RequestContext
from kbroker.api.dispatcher import ApiDispatcher
from kbroker.config import KafkaConfig
from kbroker.protocol import (
    decode_request_frame,
    decode_response_frame,
    encode_request_frame,
    encode_response_frame,
)
from kbroker.protocol.headers import RequestHeader
from kbroker.services import build_services, shutdown_services


class Stack:
    def __init__(self, tmp: Path, **overrides: str) -> None:
        props = {"log.dirs": str(tmp / "data"), "node.id": "1", "listeners": "PLAINTEXT://127.0.0.1:9092",
                 "offsets.topic.num.partitions": "3", "group.initial.rebalance.delay.ms": "0"}
        props.update(overrides)
        self.config = KafkaConfig(props)
        self.services = build_services(self.config)
        self.log_manager = self.services.log_manager
        self.metadata = self.services.metadata
        self.replica_manager = self.services.replica_manager
        self.runtime = self.services.group_coordinator
        self.dispatcher = ApiDispatcher(self.services)
        self.correlation = 0

    def start(self) -> None:
        """Needs a running loop (schedules loading and timers on it)."""
        self.runtime.startup()
        self.services.transaction_coordinator.startup()

    async def wait_loaded(self) -> None:
        for _ in range(1000):
            if not self.runtime.loading:
                return
            await asyncio.sleep(0)
        raise AssertionError(f"partitions still loading: {self.runtime.loading}")

    @property
    def coordinator(self) -> Any:
        return self.runtime

    async def call(self, api_key: int, version: int, request: Any) -> Any:
        self.correlation += 1
        frame = encode_request_frame(RequestHeader(api_key=api_key, api_version=version,
                                                   correlation_id=self.correlation, client_id="t"), request)
        header, body = decode_request_frame(memoryview(frame)[4:])
        response = self.dispatcher.handle(RequestContext(listener_name="PLAINTEXT", client_id="t",
                                                         peer=("127.0.0.1", 5555)), header, body)
        if inspect.isawaitable(response):
            response = await asyncio.wait_for(response, 10)
        parts = encode_response_frame(api_key, version, self.correlation, response)
        data = b"".join(bytes(p) for p in parts)
        cid, decoded = decode_response_frame(api_key, version, memoryview(data)[4:])
        assert cid == self.correlation
        return decoded

    def shutdown(self) -> None:
        shutdown_services(self.services)


def run_on_stack(tmp: Path, body: Callable[[Stack], Awaitable[None]], **overrides: str) -> None:
    """``body`` on a started stack (``overrides``: broker configs), then shut the stack down."""
    async def main() -> None:
        stack = Stack(tmp, **overrides)
        stack.start()
        try:
            await body(stack)
        finally:
            stack.shutdown()

    asyncio.run(main())
