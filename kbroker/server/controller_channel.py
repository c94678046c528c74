"""`ControllerChannel`: send any request to the active controller (Kafka's `NodeToControllerChannelManager`).

The active controller is the leader of the metadata quorum, which the `MetadataFetcher` follows: its id
and its endpoint on the controller listener (from the Fetch response's NodeEndpoints, or
`controller.quorum.voters`). The channel keeps one `NodeConnection` to it. A request that gets no answer
(connection lost, timeout) or a NOT_CONTROLLER answer makes the channel forget that controller and wait
for the fetcher to find the new leader, then send again, until `controller.socket.timeout.ms` runs out
(then `RequestTimeoutError`). Requests that are not idempotent (CreateTopics after a lost answer) may
thus be applied twice; the second attempt then gets the controller's answer to a repeat (e.g.
TOPIC_ALREADY_EXISTS), as with Kafka's forwarding.

The typed entry points other packages take as callables:
- `send_alter_partition(AlterPartitionRequest) -> AlterPartitionResponse` (the replica manager's
  AlterPartitionManager sends ISR changes with it);
- `send_registration` / `send_heartbeat` (the `BrokerLifecycleManager`);
- `send(api_key, body, ResponseType)` for anything else (forwarded admin requests, AllocateProducerIds).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable
from typing import TypeVar

from kbroker.client import ClientSecurity, ConnectionClosedError, NodeConnection, RequestTimeoutError
from kbroker.protocol import RequestHeader, decode_response_frame, encode_request_frame
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.alter_partition import AlterPartitionRequest, AlterPartitionResponse
from kbroker.protocol.messages.broker_heartbeat import BrokerHeartbeatRequest, BrokerHeartbeatResponse
from kbroker.protocol.messages.broker_registration import (
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
)
from kbroker.protocol.messages.envelope import EnvelopeRequest, EnvelopeResponse
from kbroker.server.broker_lifecycle import BROKER_HEARTBEAT, BROKER_REGISTRATION
from kbroker.server.metadata_follower import MetadataFollower
from kbroker.server.settings import QuorumNode

log = logging.getLogger(__name__)


class EnvelopeError(Exception):
    """The controller refused the Envelope itself (e.g. CLUSTER_AUTHORIZATION_FAILED: this broker's
    principal may not forward, or UNSUPPORTED_VERSION)."""

    def __init__(self, error_code: int) -> None:
        super().__init__(f"the controller refused the Envelope: error {error_code}")
        self.error_code = error_code

ALTER_PARTITION = 56
ENVELOPE = 58
ALTER_PARTITION_VERSION = 3
T = TypeVar("T")


class ControllerChannel:
    """One connection to the active controller, rediscovered through the metadata fetcher."""

    def __init__(self, fetcher: MetadataFollower, *, node_id: int, request_timeout_ms: int = 30000,
                 retry_backoff_ms: int = 50,
                 connection_factory: Callable[[str, int], NodeConnection] | None = None,
                 security: ClientSecurity | None = None) -> None:
        self.fetcher = fetcher
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self._connection_factory = connection_factory or (
            lambda host, port: NodeConnection(host, port, client_id=f"broker-{node_id}-to-controller",
                                              request_timeout_s=request_timeout_ms / 1000, security=security))
        self._conn: NodeConnection | None = None
        self._target: tuple[int, QuorumNode] | None = None
        self._lock = asyncio.Lock()
        self._inner_ids = itertools.count(1)

    async def _connection(self, deadline: float) -> tuple[int, NodeConnection]:
        async with self._lock:
            leader = await self.fetcher.wait_for_leader(max(0.0, deadline - time.monotonic()))
            assert leader.endpoint is not None
            target = (leader.leader_id, leader.endpoint)
            if self._conn is not None and self._conn.connected and self._target == target:
                return leader.leader_id, self._conn
            await self._drop()
            conn = self._connection_factory(leader.endpoint.host, leader.endpoint.port)
            await conn.connect()
            self._conn, self._target = conn, target
            return leader.leader_id, conn

    async def _drop(self) -> None:
        conn, self._conn, self._target = self._conn, None, None
        if conn is not None:
            await conn.close()

    async def send(self, api_key: int, body: object, response_type: type[T], *,
                   timeout_ms: int | None = None, version: int | None = None) -> T:
        """Send to the active controller and return its answer, retrying on NOT_CONTROLLER (top-level
        `error_code`) and on lost connections until the timeout."""
        deadline = time.monotonic() + (timeout_ms if timeout_ms is not None else self.request_timeout_ms) / 1000
        last: Exception | None = None
        attempt = 0
        while True:
            # Back off exponentially (up to a second) while the controller cannot be reached.
            backoff = min(1.0, self.retry_backoff_ms / 1000 * (2 ** min(attempt, 10)))
            attempt += 1
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RequestTimeoutError(f"no answer from the active controller to api {api_key}: {last}")
            try:
                controller_id, conn = await self._connection(deadline)
                resp = await conn.request(api_key, body, response_type, version=version, timeout_s=remaining)
            except TimeoutError as exc:
                last = exc
                await self._drop()
                continue
            except (ConnectionClosedError, OSError) as exc:
                last = exc
                await self._drop()
                await asyncio.sleep(backoff)
                continue
            if getattr(resp, "error_code", 0) == ErrorCode.NOT_CONTROLLER:
                last = ConnectionError(f"node {controller_id} is no longer the active controller")
                self.fetcher.forget_leader(controller_id)
                await self._drop()
                await asyncio.sleep(backoff)
                continue
            return resp

    async def _envelope_round_trip(self, build: Callable[[NodeConnection], tuple[int, EnvelopeRequest]],
                                   timeout_ms: int | None, what: str) -> tuple[int, EnvelopeResponse]:
        """One Envelope to the active controller, retried as `send` retries (a lost connection, a
        timeout, an Envelope-level NOT_CONTROLLER: the next controller, with backoff); `build` makes the
        Envelope for the connection it goes on and names the inner request's version. Another
        Envelope-level error raises `EnvelopeError` with its code. Returns (inner version, response)."""
        deadline = time.monotonic() + (timeout_ms if timeout_ms is not None else self.request_timeout_ms) / 1000
        last: Exception | None = None
        attempt = 0
        while True:
            backoff = min(1.0, self.retry_backoff_ms / 1000 * (2 ** min(attempt, 10)))
            attempt += 1
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RequestTimeoutError(f"no answer from the active controller to {what}: {last}")
            try:
                controller_id, conn = await self._connection(deadline)
                version, envelope = build(conn)
                resp = await conn.request(ENVELOPE, envelope, EnvelopeResponse, version=0, timeout_s=remaining)
            except TimeoutError as exc:
                last = exc
                await self._drop()
                continue
            except (ConnectionClosedError, OSError) as exc:
                last = exc
                await self._drop()
                await asyncio.sleep(backoff)
                continue
            if resp.error_code == ErrorCode.NOT_CONTROLLER:
                last = ConnectionError(f"node {controller_id} is no longer the active controller")
                self.fetcher.forget_leader(controller_id)
                await self._drop()
                await asyncio.sleep(backoff)
                continue
            if resp.error_code != ErrorCode.NONE or resp.response_data is None:
                raise EnvelopeError(resp.error_code or int(ErrorCode.UNKNOWN_SERVER_ERROR))
            return version, resp

    async def send_envelope(self, api_key: int, body: object, response_type: type[T], *, principal: bytes,
                            client_address: bytes, client_id: str, timeout_ms: int | None = None,
                            version: int | None = None) -> T:
        """Forward a client's request in an Envelope (KIP-590, Kafka's `ForwardingManager`): the inner
        request at the highest version both sides speak, with the client's id; the client's principal
        (`DefaultPrincipalData`) and address beside it, so the controller authorizes and throttles the
        client. An Envelope-level NOT_CONTROLLER goes to the next controller as `send` does; another
        Envelope-level error raises `EnvelopeError` with its code. `version`: the client's version of a
        request forwarded whole (Kafka forwards it as the client sent it), capped at the controller's."""
        def build(conn: NodeConnection) -> tuple[int, EnvelopeRequest]:
            inner_version = conn.version_for(api_key) if version is None else min(version, conn.version_for(api_key))
            header = RequestHeader(api_key=api_key, api_version=inner_version, correlation_id=next(self._inner_ids),
                                   client_id=client_id)
            return inner_version, EnvelopeRequest(request_data=encode_request_frame(header, body)[4:],
                                                  request_principal=principal, client_host_address=client_address)

        inner_version, resp = await self._envelope_round_trip(build, timeout_ms, f"api {api_key}")
        assert resp.response_data is not None
        _, inner_body = decode_response_frame(api_key, inner_version, memoryview(resp.response_data))
        if not isinstance(inner_body, response_type):
            raise TypeError(f"the Envelope answered {type(inner_body).__name__}, not {response_type.__name__}")
        return inner_body

    async def send_registration(self, req: BrokerRegistrationRequest) -> BrokerRegistrationResponse:
        return await self.send(BROKER_REGISTRATION, req, BrokerRegistrationResponse)

    async def send_heartbeat(self, req: BrokerHeartbeatRequest) -> BrokerHeartbeatResponse:
        return await self.send(BROKER_HEARTBEAT, req, BrokerHeartbeatResponse)

    async def send_alter_partition(self, req: AlterPartitionRequest) -> AlterPartitionResponse:
        """The seam for the replica manager's AlterPartitionManager (ISR expand/shrink).

        Sent at v3 (KIP-903), what Kafka's brokers send to a 4.x controller: the ISR goes as
        `new_isr_with_epochs` (each member with the broker epoch it fetched with, -1 when unknown) and
        the v0-2 `new_isr` must stay empty or the codec refuses to write it."""
        for topic in req.topics:
            for p in topic.partitions:
                if p.new_isr and not p.new_isr_with_epochs:
                    p.new_isr_with_epochs = [AlterPartitionRequest.BrokerState(broker_id=b, broker_epoch=-1)
                                             for b in p.new_isr]
                p.new_isr = []
        return await self.send(ALTER_PARTITION, req, AlterPartitionResponse, version=ALTER_PARTITION_VERSION)

    async def forward(self, header: RequestHeader, body: object, *, principal: bytes, client_address: bytes,
                      timeout_ms: int | None = None) -> object:
        """Kafka's `ForwardingManager.forwardRequest`: the client's request as it came -- its header
        (api version, correlation id, client id) and its body -- in an Envelope with the client's
        principal and address; the controller answers at the client's version and the inner response
        (decoded at that version) is what the broker sends back. An Envelope-level NOT_CONTROLLER goes
        to the next controller; another Envelope-level error raises `EnvelopeError` with its code.
        (`send_envelope` is the older path: one resource kbroker built, at the newest common version.)"""
        envelope = EnvelopeRequest(request_data=encode_request_frame(header, body)[4:], request_principal=principal,
                                   client_host_address=client_address)
        _, resp = await self._envelope_round_trip(lambda _conn: (header.api_version, envelope), timeout_ms,
                                                  "an Envelope")
        assert resp.response_data is not None
        correlation_id, inner_body = decode_response_frame(header.api_key, header.api_version,
                                                           memoryview(resp.response_data))
        if correlation_id != header.correlation_id:
            # Kafka's AbstractResponse.parseResponse checks the inner correlation id too.
            raise EnvelopeError(int(ErrorCode.UNKNOWN_SERVER_ERROR))
        return inner_body

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._drop()
