"""The listener side: `KafkaServer` (one asyncio server per listener), its bounds and its timers.

`KafkaServer(config, dispatcher)` binds every listener of `config.listeners` (a `SocketServerConfig`,
built from `KafkaConfig` by kbroker.broker: this package never imports kbroker.config), accepts
connections (bounded by `max.connections` / `max.connections.per.ip`), owns the broker-wide
`MemoryPool` (`queued.max.request.bytes`) and `RequestQueueBound` (`queued.max.requests`), and on
`stop()` stops accepting, lets in-flight requests finish and closes.

Connection creation rates (KIP-612, `connection_quotas`: kbroker.cluster.connection_quotas): each
accepted connection is recorded; when a listener's (or the broker's) rate is over its bound, the
listener stops starting new connections for the throttle time -- they wait, reading paused, in order,
as connections wait in the backlog of Kafka's blocked Acceptor -- and a connection from an IP over
its `connection_creation_rate` quota is closed after that IP's throttle time.

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
from collections import deque
from collections.abc import Callable
from typing import Protocol

from kbroker.api.context import RequestContext
from kbroker.metrics.meters import BrokerMetrics
from kbroker.net.bounds import MemoryPool, RequestQueueBound
from kbroker.net.connection import KafkaConnection
from kbroker.net.frames import FrameBuffers
from kbroker.net.settings import ListenerEndpoint, SocketServerConfig
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.types import FramePart
from kbroker.protocol.types import ProtocolError as _ProtocolError
from kbroker.protocol.types import UnsupportedVersionError as _UnsupportedVersionError

log = logging.getLogger(__name__)


class ConnectionThrottleLike(Protocol):
    @property
    def accept_delay_ms(self) -> int: ...

    @property
    def ip_close_delay_ms(self) -> int: ...


class ConnectionRateQuotas(Protocol):
    """Kafka's ConnectionQuotas rate checks (kbroker.cluster.connection_quotas.ConnectionQuotas)."""

    def record(self, listener: str, ip: str, now_ms: int) -> ConnectionThrottleLike: ...


class _AcceptGate:
    """One listener's Acceptor while it is throttled: connections wait in arrival order."""

    __slots__ = ("blocked_until", "waiting", "timer")

    def __init__(self) -> None:
        self.blocked_until = 0.0
        self.waiting: deque[tuple[KafkaConnection, str]] = deque()
        self.timer: asyncio.TimerHandle | None = None


_ACCEPT_THROTTLED = "connection creation rate"


class _Holding(asyncio.BufferedProtocol):
    """A throttled connection's protocol until it is admitted: keeps its bytes, reads no more."""

    def __init__(self, conn: KafkaConnection) -> None:
        self.conn = conn
        self.held = bytearray()
        self._buf = bytearray(16384)

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(self._buf)

    def buffer_updated(self, nbytes: int) -> None:
        self.held += self._buf[:nbytes]
        if self.conn.transport is not None:
            self.conn.transport.pause_reading()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.conn.connection_lost(exc)

    def pause_writing(self) -> None:
        self.conn.pause_writing()

    def resume_writing(self) -> None:
        self.conn.resume_writing()


class Dispatcher(Protocol):
    """What answers requests (api/dispatcher.py's ApiDispatcher): a response object, an awaitable of one,
    NO_RESPONSE (acks=0), or None for "close the connection" (an unsupported request)."""

    def handle(self, ctx: RequestContext, header: RequestHeader, body: object) -> object: ...

    def handle_unsupported(self, ctx: RequestContext, header: RequestHeader) -> object: ...


class FrameCodec(Protocol):
    """The frame API the connections decode requests and encode responses with: the `kbroker.protocol`
    package itself by default (tests/net adds a test-only API key to it)."""

    @property
    def ProtocolError(self) -> type[_ProtocolError]: ...  # noqa: N802 - the package's attribute

    @property
    def UnsupportedVersionError(self) -> type[_UnsupportedVersionError]: ...  # noqa: N802

    def decode_request_frame(self, frame: memoryview) -> tuple[RequestHeader, object]: ...

    def encode_response_frame(self, api_key: int, api_version: int, correlation_id: int,
                              body: object) -> list[FramePart]: ...


def _default_context_factory(listener_name: str, peer: tuple[str, int], connection_id: str) -> RequestContext:
    return RequestContext(listener_name=listener_name, peer=peer, connection_id=connection_id)


class KafkaServer:
    """Accepts Kafka connections on every listener and hands their requests to `dispatcher`."""

    def __init__(
        self,
        config: SocketServerConfig,
        dispatcher: Dispatcher,
        *,
        codec: FrameCodec | None = None,
        context_factory: Callable[[str, tuple[str, int], str], RequestContext] | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        metrics: BrokerMetrics | None = None,
        connection_quotas: ConnectionRateQuotas | None = None,
    ) -> None:
        if codec is None:
            import kbroker.protocol as protocol_package

            codec = protocol_package
        self.config = config
        self.dispatcher = dispatcher
        self.codec: FrameCodec = codec
        self.new_context = context_factory or _default_context_factory
        # RequestMetrics and socket-server metrics are recorded into it (None: metrics off).
        self.metrics = metrics
        self.loop = loop or asyncio.get_running_loop()
        self.memory_pool = MemoryPool(config.queued_max_request_bytes)
        # What request frames are read into; large ones reused once free (kbroker.net.frames).
        self.frame_buffers = FrameBuffers()
        self.request_bound = RequestQueueBound(config.queued_max_requests, self.loop.call_soon)
        self.connections: set[KafkaConnection] = set()
        self._per_ip: dict[str, int] = {}
        self._conn_ip: dict[KafkaConnection, str] = {}
        self._servers: list[asyncio.base_events.Server] = []
        self.bound_endpoints: list[ListenerEndpoint] = []
        self._check_timer: asyncio.TimerHandle | None = None
        self.connection_quotas = connection_quotas
        self._gates: dict[str, _AcceptGate] = {}
        # Kafka's ConnectionDisconnectListener: told the connection id of each closed connection (the
        # share session cache releases the records of a share consumer that went away).
        self.connection_disconnect_listeners: list[Callable[[str], None]] = []

    # -- lifecycle --

    async def start(self, start_serving: bool = True) -> list[ListenerEndpoint]:
        """Bind every listener; returns the endpoints with the ports actually bound (port 0 resolved).

        `start_serving=False` binds and listens without accepting (connections wait in the kernel's
        backlog) until `enable_request_processing`, as Kafka's SocketServer binds its acceptors at
        construction and enables them once the broker has registered (BrokerServer.startup): a client
        that connects to a KRaft broker's port early never reads a Metadata without this broker in it."""
        backlog = self.config.socket_listen_backlog_size
        for endpoint in self.config.listeners:
            host = endpoint.host or None  # empty host: every interface, as Kafka does
            if endpoint.sock is not None:  # bound and listening already (the implicit controller listener)
                server = await self.loop.create_server(
                    lambda endpoint=endpoint: KafkaConnection(self, endpoint),  # type: ignore[misc]
                    sock=endpoint.sock,
                    backlog=backlog,
                    ssl=endpoint.ssl_context,
                    start_serving=start_serving,
                )
            else:
                server = await self.loop.create_server(
                    lambda endpoint=endpoint: KafkaConnection(self, endpoint),  # type: ignore[misc]
                    host=host,
                    port=endpoint.port,
                    reuse_address=True,
                    backlog=backlog,
                    ssl=endpoint.ssl_context,
                    start_serving=start_serving,
                )
            self._servers.append(server)
            port = server.sockets[0].getsockname()[1] if server.sockets else endpoint.port
            bound = dataclasses.replace(endpoint, port=port)
            self.bound_endpoints.append(bound)
            log.info("Listening on %s", bound)
        if self._check_interval() > 0:
            self._schedule_check()
        return self.bound_endpoints

    async def enable_request_processing(self) -> None:
        """Start accepting on every listener bound with `start(start_serving=False)`."""
        for server in self._servers:
            await server.start_serving()

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
        self.frame_buffers.clear()

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
            self.metrics.listener(conn.listener_name).record_connection_creation(int(time.monotonic() * 1000))
        if self.connection_quotas is not None:
            self._admit(conn, ip)
        return True

    # -- connection creation rates (KIP-612) --

    def _admit(self, conn: KafkaConnection, ip: str) -> None:
        gate = self._gates.get(conn.listener_name)
        if gate is None:
            gate = self._gates[conn.listener_name] = _AcceptGate()
        if gate.waiting or time.monotonic() < gate.blocked_until:
            conn._pause(_ACCEPT_THROTTLED)
            gate.waiting.append((conn, ip))
            self._hold(conn)
            self._schedule_gate(conn.listener_name, gate)
            return
        self._accept_now(conn, ip, gate)

    def _accept_now(self, conn: KafkaConnection, ip: str, gate: _AcceptGate) -> None:
        assert self.connection_quotas is not None
        now = time.monotonic()
        throttle = self.connection_quotas.record(conn.listener_name, ip, int(now * 1000))
        if throttle.ip_close_delay_ms > 0:
            log.info("Throttling connection %s: %s is over its connection_creation_rate quota; closing it in %d ms",
                     conn.connection_id, ip, throttle.ip_close_delay_ms)
            conn._pause(_ACCEPT_THROTTLED)
            self._hold(conn)
            self.loop.call_later(throttle.ip_close_delay_ms / 1000, conn.abort,
                                 "connection_creation_rate quota of its IP exceeded")
            return
        if throttle.accept_delay_ms > 0:
            gate.blocked_until = now + throttle.accept_delay_ms / 1000
            log.debug("Listener %s: connection creation rate over its bound; accepting again in %d ms",
                      conn.listener_name, throttle.accept_delay_ms)
        self._release(conn)

    def _hold(self, conn: KafkaConnection) -> None:
        """Keep a connection's bytes unread until it is admitted. Pausing inside connection_made does
        not hold on uvloop (it starts reading after it returns), so the transport gets a holding
        protocol that keeps what arrives and pauses at once; `_release` gives the connection back."""
        transport = conn.transport
        if transport is not None and not isinstance(transport.get_protocol(), _Holding):
            transport.set_protocol(_Holding(conn))

    def _release(self, conn: KafkaConnection) -> None:
        transport = conn.transport
        if transport is None or conn._closed:
            return
        holding = transport.get_protocol()
        if isinstance(holding, _Holding):
            transport.set_protocol(conn)
            held = holding.held
            while held and not conn._closed:
                buf = conn.get_buffer(len(held))
                n = min(len(buf), len(held))
                buf[:n] = held[:n]
                del held[:n]
                conn.buffer_updated(n)
        conn._unpause(_ACCEPT_THROTTLED)

    def _schedule_gate(self, listener: str, gate: _AcceptGate) -> None:
        if gate.timer is None:
            delay = max(0.0, gate.blocked_until - time.monotonic())
            gate.timer = self.loop.call_later(delay, self._drain_gate, listener, gate)

    def _drain_gate(self, listener: str, gate: _AcceptGate) -> None:
        gate.timer = None
        while gate.waiting and time.monotonic() >= gate.blocked_until:
            conn, ip = gate.waiting.popleft()
            if conn in self.connections:
                self._accept_now(conn, ip, gate)
        if gate.waiting:
            self._schedule_gate(listener, gate)

    def unregister(self, conn: KafkaConnection) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            for listener in self.connection_disconnect_listeners:
                try:
                    listener(conn.connection_id)
                except Exception:  # Kafka swallows a listener's error (CoreUtils.swallow)
                    log.exception("Connection disconnect listener failed for %s", conn.connection_id)
            ip = self._conn_ip.pop(conn)
            if self.metrics is not None:
                self.metrics.listener(conn.listener_name).connection_close += 1
            left = self._per_ip[ip] - 1
            if left:
                self._per_ip[ip] = left
            else:
                del self._per_ip[ip]

    def apply_socket_buffers(self, sock: socket.socket) -> None:
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
