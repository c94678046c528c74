"""The listener side: `KafkaServer` (one asyncio server per listener) and the broker-wide request bound.

`KafkaServer(config, dispatcher)` binds every listener of `config.listeners`, accepts connections
(bounded by `max.connections` / `max.connections.per.ip`), closes idle ones after
`connections.max.idle.ms`, and on `stop()` stops accepting, lets in-flight requests finish and closes.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from kbroker.config import Endpoint, KafkaConfig
from kbroker.net.connection import KafkaConnection

log = logging.getLogger(__name__)


class Dispatcher(Protocol):
    def handle(self, ctx: Any, header: Any, body: Any) -> Any: ...

    def handle_unsupported(self, ctx: Any, header: Any) -> Any: ...


class RequestQueueBound:
    """Broker-wide bound on requests read but not yet handed to their handler.

    Kafka bounds the memory of requests received but not yet processed (`queued.max.request.bytes`,
    a memory pool the network threads allocate receive buffers from) and their number
    (`queued.max.requests`). Here a frame takes its share when its size prefix arrives, before its
    buffer is allocated, and gives it back once its handler has returned (a delayed operation then
    waits in purgatory, outside the bound, as in Kafka). Like Kafka's pool, an allocation is granted
    while anything is left, so one frame may overshoot the byte bound. Connections refused wait in
    FIFO order and stop reading meanwhile.
    """

    def __init__(self, max_requests: int, max_bytes: int) -> None:
        self.max_requests = max_requests
        self.max_bytes = max_bytes  # <= 0: no byte bound
        self.requests = 0
        self.bytes = 0
        self._waiters: deque[KafkaConnection] = deque()

    def try_acquire(self, nbytes: int, force: bool = False) -> bool:
        if not force and (
            self.requests >= self.max_requests or (self.max_bytes > 0 and self.bytes >= self.max_bytes)
        ):
            return False
        self.requests += 1
        self.bytes += nbytes
        return True

    def release(self, nbytes: int) -> None:
        if nbytes <= 0:
            return
        self.requests -= 1
        self.bytes -= nbytes
        while self._waiters:
            if not self._waiters[0].on_bound_available():
                break
            self._waiters.popleft()

    def wait(self, conn: KafkaConnection) -> None:
        self._waiters.append(conn)

    def forget(self, conn: KafkaConnection) -> None:
        try:
            self._waiters.remove(conn)
        except ValueError:
            pass


def _default_context_factory(listener_name: str, peer: tuple[str, int], connection_id: str) -> Any:
    from kbroker.api.context import RequestContext

    return RequestContext(listener_name=listener_name, peer=peer, connection_id=connection_id)


class KafkaServer:
    """Accepts Kafka connections on every listener and hands their requests to `dispatcher`."""

    def __init__(
        self,
        config: KafkaConfig,
        dispatcher: Dispatcher,
        *,
        codec: Any = None,
        context_factory: Callable[[str, tuple[str, int], str], Any] | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        if codec is None:
            import kbroker.protocol as codec
        self.config = config
        self.dispatcher = dispatcher
        self.codec = codec
        self.new_context = context_factory or _default_context_factory
        self.loop = loop or asyncio.get_running_loop()
        self.max_request_bytes: int = config["socket.request.max.bytes"]
        self.use_sendfile: bool = config["kbroker.sendfile.enable"]
        self.bound = RequestQueueBound(config["queued.max.requests"], config["queued.max.request.bytes"])
        self._send_buffer: int = config["socket.send.buffer.bytes"]
        self._receive_buffer: int = config["socket.receive.buffer.bytes"]
        self._max_connections: int = config["max.connections"]
        self._max_per_ip: int = config["max.connections.per.ip"]
        self._idle_ms: int = config["connections.max.idle.ms"]
        self.connections: set[KafkaConnection] = set()
        self._per_ip: dict[str, int] = {}
        self._conn_ip: dict[KafkaConnection, str] = {}
        self._servers: list[asyncio.base_events.Server] = []
        self.bound_endpoints: list[Endpoint] = []
        self._idle_timer: asyncio.TimerHandle | None = None

    # -- lifecycle --

    async def start(self) -> list[Endpoint]:
        """Bind every listener; returns the endpoints with the ports actually bound (port 0 resolved)."""
        backlog: int = self.config["socket.listen.backlog.size"]
        for endpoint in self.config.listeners:
            name = endpoint.name
            host = endpoint.host or None  # empty host: every interface, as Kafka does
            server = await self.loop.create_server(
                lambda name=name: KafkaConnection(self, name),  # type: ignore[misc]
                host=host,
                port=endpoint.port,
                reuse_address=True,
                backlog=backlog,
            )
            self._servers.append(server)
            port = server.sockets[0].getsockname()[1] if server.sockets else endpoint.port
            bound = Endpoint(name, endpoint.host, port, endpoint.security_protocol)
            self.bound_endpoints.append(bound)
            log.info("Listening on %s", bound)
        if self._idle_ms > 0:
            self._schedule_idle_check()
        return self.bound_endpoints

    async def stop(self, timeout: float = 30.0) -> None:
        """Stop accepting, let every connection finish its in-flight requests, then close them."""
        for server in self._servers:
            server.close()
        if self._idle_timer is not None:
            self._idle_timer.cancel()
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
                        conn.abort()
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
        if len(self.connections) >= self._max_connections or count >= self._max_per_ip:
            log.warning("Refusing connection from %s: connection limit reached", ip)
            return False
        self.connections.add(conn)
        self._per_ip[ip] = count + 1
        self._conn_ip[conn] = ip
        return True

    def unregister(self, conn: KafkaConnection) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            ip = self._conn_ip.pop(conn)
            left = self._per_ip[ip] - 1
            if left:
                self._per_ip[ip] = left
            else:
                del self._per_ip[ip]

    def apply_socket_buffers(self, sock: Any) -> None:
        try:
            if self._send_buffer > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._send_buffer)
            if self._receive_buffer > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._receive_buffer)
        except OSError as e:
            log.debug("Cannot set socket buffer sizes: %s", e)

    # -- idle connections (connections.max.idle.ms) --

    def _schedule_idle_check(self) -> None:
        interval = min(max(self._idle_ms / 10_000, 0.1), 30.0)
        self._idle_timer = self.loop.call_later(interval, self._close_idle)

    def _close_idle(self) -> None:
        deadline = time.monotonic() - self._idle_ms / 1000
        for conn in list(self.connections):
            if conn.last_active < deadline and conn.idle:
                log.debug("Closing idle connection %s", conn.connection_id)
                conn.close()
        self._schedule_idle_check()
