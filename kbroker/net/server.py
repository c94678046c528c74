"""The listener side: `KafkaServer` (one asyncio server per listener), its bounds and its timers.

`KafkaServer(config, dispatcher)` binds every listener of `config.listeners` (a `SocketServerConfig`,
built from `KafkaConfig` by kbroker.broker: this package never imports kbroker.config), accepts
connections (bounded by `max.connections` / `max.connections.per.ip`), owns the broker-wide
`MemoryPool` (`queued.max.request.bytes`) and `RequestQueueBound` (`queued.max.requests`), and on
`stop()` stops accepting, lets in-flight requests finish and closes.

One periodic check closes (a) connections whose current frame has not fully arrived within
`kbroker.request.receive.timeout.ms` of its first byte (Kafka has no such broker-side deadline; the
clients' own `request.timeout.ms`, 30 s by default, is the bound a request is useful within), and
(b) idle ones after `connections.max.idle.ms` (Kafka's key and default; a partly received frame is
not activity). It runs every tenth of the smaller of the two, between 100 ms and 30 s.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import time
from collections.abc import Callable
from typing import Any, Protocol

from kbroker.metrics.meters import BrokerMetrics
from kbroker.net.bounds import MemoryPool, RequestQueueBound
from kbroker.net.connection import KafkaConnection
from kbroker.net.settings import ListenerEndpoint, SocketServerConfig

log = logging.getLogger(__name__)


class Dispatcher(Protocol):
    def handle(self, ctx: Any, header: Any, body: Any) -> Any: ...

    def handle_unsupported(self, ctx: Any, header: Any) -> Any: ...


def _default_context_factory(listener_name: str, peer: tuple[str, int], connection_id: str) -> Any:
    from kbroker.api.context import RequestContext

    return RequestContext(listener_name=listener_name, peer=peer, connection_id=connection_id)


class KafkaServer:
    """Accepts Kafka connections on every listener and hands their requests to `dispatcher`."""

    def __init__(
        self,
        config: SocketServerConfig,
        dispatcher: Dispatcher,
        *,
        codec: Any = None,
        context_factory: Callable[[str, tuple[str, int], str], Any] | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        metrics: BrokerMetrics | None = None,
    ) -> None:
        if codec is None:
            import kbroker.protocol as codec
        self.config = config
        self.dispatcher = dispatcher
        self.codec = codec
        self.new_context = context_factory or _default_context_factory
        # RequestMetrics and socket-server metrics are recorded into it (None: metrics off).
        self.metrics = metrics
        self.loop = loop or asyncio.get_running_loop()
        self.memory_pool = MemoryPool(config.queued_max_request_bytes)
        self.request_bound = RequestQueueBound(config.queued_max_requests, self.loop.call_soon)
        self.connections: set[KafkaConnection] = set()
        self._per_ip: dict[str, int] = {}
        self._conn_ip: dict[KafkaConnection, str] = {}
        self._servers: list[asyncio.base_events.Server] = []
        self.bound_endpoints: list[ListenerEndpoint] = []
        self._check_timer: asyncio.TimerHandle | None = None

    # -- lifecycle --

    async def start(self) -> list[ListenerEndpoint]:
        """Bind every listener; returns the endpoints with the ports actually bound (port 0 resolved)."""
        backlog = self.config.socket_listen_backlog_size
        for endpoint in self.config.listeners:
            host = endpoint.host or None  # empty host: every interface, as Kafka does
            server = await self.loop.create_server(
                lambda endpoint=endpoint: KafkaConnection(self, endpoint),  # type: ignore[misc]
                host=host,
                port=endpoint.port,
                reuse_address=True,
                backlog=backlog,
                ssl=endpoint.ssl_context,
            )
            self._servers.append(server)
            port = server.sockets[0].getsockname()[1] if server.sockets else endpoint.port
            bound = dataclasses.replace(endpoint, port=port)
            self.bound_endpoints.append(bound)
            log.info("Listening on %s", bound)
        if self._check_interval() > 0:
            self._schedule_check()
        return self.bound_endpoints

    async def stop(self, timeout: float = 30.0) -> None:
        """Stop accepting, let every connection finish its in-flight requests, then close them."""
        for server in self._servers:
            server.close()
        if self._check_timer is not None:
            self._check_timer.cancel()
            self._check_timer = None
        conns = list(self.connections)
        for conn in conns:
            conn.close_when_idle()
        if conns:
            waiters = [c.closed_future for c in conns]
            _, pending = await asyncio.wait(waiters, timeout=timeout)
            if pending:
                log.warning(
                    "%d connections did not finish within %.1fs; aborting them", len(pending), timeout
                )
                for conn in conns:
                    if not conn.closed_future.done():
                        conn.abort(f"still busy {timeout:.1f}s after the shutdown began")
                await asyncio.wait(waiters, timeout=2.0)
        for server in self._servers:
            try:
                await asyncio.wait_for(server.wait_closed(), timeout=2.0)
            except TimeoutError:
                pass
        self._servers.clear()

    # -- connection bookkeeping --

    def register(self, conn: KafkaConnection, ip: str) -> bool:
        count = self._per_ip.get(ip, 0)
        if (
            len(self.connections) >= self.config.max_connections
            or count >= self.config.max_connections_per_ip
        ):
            log.warning("Refusing connection from %s: connection limit reached", ip)
            return False
        self.connections.add(conn)
        self._per_ip[ip] = count + 1
        self._conn_ip[conn] = ip
        if self.metrics is not None:
            self.metrics.listener(conn.listener_name).connection_creation += 1
        return True

    def unregister(self, conn: KafkaConnection) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            ip = self._conn_ip.pop(conn)
            if self.metrics is not None:
                self.metrics.listener(conn.listener_name).connection_close += 1
            left = self._per_ip[ip] - 1
            if left:
                self._per_ip[ip] = left
            else:
                del self._per_ip[ip]

    def apply_socket_buffers(self, sock: Any) -> None:
        send, receive = self.config.socket_send_buffer_bytes, self.config.socket_receive_buffer_bytes
        try:
            if send > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send)
            if receive > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive)
        except OSError as e:
            log.debug("Cannot set socket buffer sizes: %s", e)

    # -- slow senders (kbroker.request.receive.timeout.ms) and idle connections (connections.max.idle.ms) --

    def _check_interval(self) -> float:
        """Seconds between checks: a tenth of the smaller enabled bound, within [0.1, 30]; 0: none."""
        bounds = [
            ms
            for ms in (self.config.connections_max_idle_ms, self.config.request_receive_timeout_ms)
            if ms > 0
        ]
        if not bounds:
            return 0.0
        return min(max(min(bounds) / 10_000, 0.1), 30.0)

    def _schedule_check(self) -> None:
        self._check_timer = self.loop.call_later(self._check_interval(), self._check_connections)

    def _check_connections(self) -> None:
        self.check_connections(time.monotonic())
        self._schedule_check()

    def check_connections(self, now: float) -> None:
        """Close the slow senders and the idle connections, as of monotonic time `now`."""
        receive_ms = self.config.request_receive_timeout_ms
        idle_ms = self.config.connections_max_idle_ms
        receive_deadline = now - receive_ms / 1000 if receive_ms > 0 else None
        idle_deadline = now - idle_ms / 1000 if idle_ms > 0 else None
        slow = 0
        for conn in list(self.connections):
            since = conn.receiving_since
            if (
                receive_deadline is not None
                and since
                and since < receive_deadline
                and not conn.reading_paused
            ):
                log.debug(
                    "Closing connection %s: its request did not arrive within %d ms",
                    conn.connection_id,
                    receive_ms,
                )
                slow += 1
                conn.abort(f"its request did not arrive within {receive_ms} ms")
            elif idle_deadline is not None and conn.last_active < idle_deadline and conn.idle:
                log.debug("Closing idle connection %s", conn.connection_id)
                conn.close(f"idle for more than {idle_ms} ms (connections.max.idle.ms)")
        if slow:
            log.info(
                "Closed %d connections whose request did not fully arrive within %d ms "
                "(kbroker.request.receive.timeout.ms)",
                slow,
                receive_ms,
            )
