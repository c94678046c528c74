"""One client connection: request framing, the broker-wide bounds, dispatch, and in-order responses.

Framing: a 4-byte big-endian size, then exactly that many bytes, each read into an exact-size view of
a buffer from the server's `FrameBuffers` (kbroker.net.frames: reused for large frames once nothing
uses them, resident only as bytes arrive); `get_buffer` hands out a memoryview of the part still to
fill. A read never spans two frames' bodies, but the view of a frame's body goes 4 bytes past it
(`SIZE_READ_AHEAD`): when the client has already sent its next request, the read that completes a
frame also brings the next size prefix, copied out after the frame is dispatched, and a pipelined
request costs one read, not two (docs/benchmarks.md, "Responses written together, size prefixes
read ahead"). A negative size or one above `socket.request.max.bytes` closes the connection before
any allocation, as Kafka's NetworkReceive does (InvalidReceiveException).

Bounds (kbroker.net.bounds): a frame takes its announced size from the broker-wide `MemoryPool`
(`queued.max.request.bytes`) when its size prefix arrives, and a slot of the `RequestQueueBound`
(`queued.max.requests`) only once its last byte has arrived; both are given back when its handler
returns. A frame still arriving therefore never holds a request slot (issue 19, finding 3). A complete
frame that finds the request queue full waits on this connection (reading paused) until a slot is
passed to it. A frame must arrive within `kbroker.request.receive.timeout.ms` of its first byte (time
during which the broker itself paused reading does not count), else the server closes the connection;
bytes of an unfinished frame are not activity for `connections.max.idle.ms` either.

Ordering: every dispatched request gets a slot in a FIFO. A synchronous handler result fills its slot
at once; an awaitable fills it from a done-callback (no task per request). Slots are written from the
head only, so responses leave in request order however the handlers complete; several requests may be
in flight (pipelining).

Writing: the first response that is ready in an iteration of the event loop is written at once; later
ones of small requests (under `COALESCED_REQUEST_BYTES`) wait for the end of the iteration (one
`call_soon`'d `_flush`) and leave together, in one `writev`. libuv reads a socket up to 32 times per
readiness event, and a read never spans two frames' bodies, so a pipelining client's small requests are
often handled in one iteration: their answers then cost one system call, not one each. The first answer
still leaves at once so that the client can send its next request meanwhile, and a large request's
answer is never held back behind the requests handled after it (the per-request cost being small
beside its bytes). Measured in docs/benchmarks.md, "Responses written together, size prefixes read
ahead".

Reading pauses when too many responses are pending on this connection, when the client does not read
its responses (transport write buffer above its high-water mark), or while a bound makes this
connection wait.

Throttling (client quotas, KIP-219): a response is sent at once with its `throttle_time_ms`, and the
connection then reads nothing more until that time has passed (the "throttle" pause reason), as
Kafka's channel is muted by its `ThrottledChannel`. The throttle comes from the request context
(`ctx.throttle_time_ms`, set while the request was dispatched: the request quota, the produce quota,
also for an acks=0 produce that gets no response) or from a delayed response's `throttle_time_ms`
(a Fetch answered after waiting).

Closing frees what the connection holds at once, not at the next garbage collection (issue 19,
finding 7): the partial frame's buffer (an mmap is unmapped), frames waiting for a slot, queued
responses, and the references that would form cycles (writer callbacks, transport).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import mmap
import socket
import struct
import time
from collections import deque
from functools import partial
from typing import TYPE_CHECKING, cast

from kbroker.api.context import NO_RESPONSE, CloseConnection, RequestContext, is_awaitable_result
from kbroker.net.writer import ResponseWriter
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.types import FramePart
from kbroker.security.principal import PrincipalMappingError, SslPrincipalMapper
from kbroker.security.sasl import SaslServerAuthenticator

if TYPE_CHECKING:
    from kbroker.metrics.meters import RequestMetrics
    from kbroker.net.server import KafkaServer
    from kbroker.net.settings import ListenerEndpoint

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
# A frame is read into a buffer 4 bytes longer than itself: a read that completes it may also bring the
# next frame's size prefix, which saves a pipelining client's requests one read each (see "Framing").
SIZE_READ_AHEAD = 4
_API_VERSIONS_KEY = 18
# Responses pending on one connection before it stops reading (clients send at most
# max.in.flight.requests.per.connection, 5 by default, so this only bites misbehaving ones).
MAX_PENDING_PER_CONNECTION = 64
# The response of a request smaller than this may wait for the end of the loop iteration, to leave with
# the others ready by then (see "Writing" above); a larger request's response is written at once.
COALESCED_REQUEST_BYTES = 64 * 1024
_ids = itertools.count()


def _foreign_protocol(first: bytes) -> str | None:
    """What the first bytes of a connection say when they are not a Kafka size prefix, or None.

    A TLS record starts 0x16 (handshake) 0x03 (major version): a ClientHello from a client configured
    for SSL (Kafka would only log an "Invalid receive" size of about 369 MB). HTTP starts with a method.
    """
    if first[:1] == b"\x16" and first[1:2] == b"\x03":
        return ("it sent a TLS ClientHello to a PLAINTEXT listener: the client is configured for SSL "
                "(security.protocol=SSL or SASL_SSL): point it at an SSL or SASL_SSL listener, or set "
                "security.protocol=PLAINTEXT in the client")
    if first in (b"GET ", b"POST", b"PUT ", b"HEAD", b"DELE", b"OPTI", b"PATC"):
        return "it sent an HTTP request to the Kafka listener (an HTTP client or a browser pointed at the Kafka port)"
    return None


class _Slot:
    """One request's place in the response order, and (metrics on) the times of its life."""

    __slots__ = ("small", "parts", "done", "close", "stats", "received", "dispatched", "local_done", "completed",
                 "close_after")

    def __init__(self, small: bool) -> None:
        # A request under COALESCED_REQUEST_BYTES: its response may wait for the end of the loop iteration.
        self.small = small
        self.parts: list[FramePart] | None = None
        self.done = False
        self.close = False
        # Kafka's RequestMetrics of the request's API (None: metrics off, or not decoded), and the
        # time.monotonic() readings its times are split by (kbroker.metrics.meters.RequestMetrics).
        self.stats: RequestMetrics | None = None
        self.received = 0.0
        self.dispatched = 0.0
        self.local_done = 0.0
        self.completed = 0.0
        self.close_after = False  # close once this response is written (a failed SASL authentication)


class KafkaConnection(asyncio.BufferedProtocol):
    """asyncio protocol for one Kafka client connection."""

    def __init__(self, server: KafkaServer, endpoint: ListenerEndpoint) -> None:
        self._server = server
        self._endpoint = endpoint
        self._listener_name = self.listener_name = endpoint.name
        self._loop = server.loop
        self._max_request = server.config.socket_request_max_bytes
        self.transport: asyncio.Transport | None = None
        # Replaced in connection_made (the peer's address and the connection id are not known yet).
        self.ctx = RequestContext(listener_name=endpoint.name)
        self.connection_id = ""
        self._size_buf = bytearray(4)
        self._size_view = memoryview(self._size_buf)
        self._frame: bytearray | mmap.mmap | None = None
        self._view = self._size_view
        self._filled = 0
        self._frame_size = -1  # size of the frame being read (or waiting for memory)
        self._holding = 0  # bytes of the memory pool held by the frame being read
        # When the frame being read started arriving (its first size byte, or the moment reading resumed
        # after the broker paused it); 0.0 while no frame is partly received.
        self.receiving_since = 0.0
        # Complete frames waiting for a request slot, with the pool bytes each holds and when it arrived.
        self._ready: deque[tuple[memoryview, int, float]] = deque()
        self._queue: deque[_Slot] = deque()
        self._writer: ResponseWriter | None = None
        self._pause_reasons: set[str] = set()
        self._reading_paused = False
        self._closed = False
        self._closing_when_idle = False
        self._close_after_write = False
        self._flush_scheduled = False
        # Why the broker closed this connection (None: the client closed it), for the DEBUG close line.
        self.close_reason: str | None = None
        self.closed_future: asyncio.Future[None] = self._loop.create_future()
        # Last complete request received or response written (connections.max.idle.ms).
        self.last_active = time.monotonic()
        # Client-quota throttling: reading resumes at this loop time (0.0: not throttled).
        self._throttled_until = 0.0
        self._throttle_timer: asyncio.TimerHandle | None = None

    # -- asyncio callbacks --

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport does not subclass asyncio.Transport, hence a cast, not an isinstance check.
        self.transport = transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        peer = transport.get_extra_info("peername") or ("", 0)
        local = transport.get_extra_info("sockname") or ("", 0)
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                # Kafka's Acceptor enables keepalive too: dead peers are eventually noticed.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            except OSError:
                pass
            self._server.apply_socket_buffers(sock)
        self.connection_id = f"{local[0]}:{local[1]}-{peer[0]}:{peer[1]}-{next(_ids)}"
        self.ctx = self._server.new_context(self._listener_name, (peer[0], peer[1]), self.connection_id)
        endpoint = self._endpoint
        tls = endpoint.ssl_context is not None
        if tls or endpoint.sasl is not None:
            if not self._authenticate_transport(transport, endpoint):
                self._closed = True
                transport.abort()
                return
        self._writer = ResponseWriter(
            self._loop,
            transport,
            # Bytes on a TLS connection must go through OpenSSL: sendfile only on plaintext ones.
            self._server.config.sendfile_enable and not tls,
            self._on_writer_idle,
            self._on_writer_error,
        )
        if not self._server.register(self, peer[0]):
            self._closed = True
            transport.abort()
            return
        log.debug("Accepted connection %s", self.connection_id)

    def _authenticate_transport(self, transport: asyncio.Transport, endpoint: ListenerEndpoint) -> bool:
        """The principal of a TLS client certificate, the SASL state of a SASL listener; False: refuse."""
        ctx = self.ctx
        if endpoint.ssl_context is not None:
            ssl_object = transport.get_extra_info("ssl_object")
            peercert = ssl_object.getpeercert() if ssl_object is not None else None
            try:
                ctx.principal = str(SslPrincipalMapper(endpoint.principal_mapping_rules).principal(peercert))
            except PrincipalMappingError as e:
                log.info("Failed authentication with %s (channelId=%s) (%s)", ctx.peer[0], self.connection_id, e)
                return False
        if endpoint.sasl is not None:
            ctx.sasl = SaslServerAuthenticator(endpoint.sasl)
            ctx.failed_authentication_delay_ms = endpoint.failed_authentication_delay_ms
        return True

    def connection_lost(self, exc: BaseException | None) -> None:
        if not self._closed:
            if self.close_reason is not None:
                log.debug("Connection %s closed by the broker: %s", self.connection_id, self.close_reason)
            elif exc is not None:
                log.debug("Connection %s lost: %s", self.connection_id, exc)
            else:
                log.debug("Connection %s closed by the client", self.connection_id)
        self._closed = True
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
            self._throttle_timer = None
        server = self._server
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
        server.memory_pool.forget(self)
        server.request_bound.forget(self)  # a slot already passed to us comes back in on_request_granted
        holding, self._holding = self._holding, 0
        for _frame, held, _received in self._ready:
            holding += held
        self._ready.clear()
        self._drop_frame_buffer()
        server.memory_pool.release(holding)
        self._queue.clear()
        server.unregister(self)
        # The transport drops its reference to us after this callback; drop ours to it now, so that
        # nothing of this connection waits for the garbage collector.
        self.transport = None
        if not self.closed_future.done():
            self.closed_future.set_result(None)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame_size >= 0 and self._frame is None:
            # Waiting for the memory pool, yet the loop still reads: take the memory anyway.
            self._server.memory_pool.forget(self)
            self._server.memory_pool.force_allocate(self._frame_size)
            self._take_frame_buffer()
        return self._view[self._filled :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._filled == 0 and self._frame is None:
            self.receiving_since = time.monotonic()  # the first bytes of a new frame's size prefix
        filled = self._filled = self._filled + nbytes
        if self._frame is None:
            if filled == 4:
                self._on_size(_SIZE.unpack(self._size_buf)[0])
            return
        size = self._frame_size
        if filled < size:
            return
        # The frame is complete. Up to 4 bytes past it are the next frame's size prefix, read ahead.
        view = self._view
        frame = view[:size]
        ahead = filled - size
        if ahead:
            self._size_buf[:ahead] = view[size:filled]
        self._frame = None
        self._view = self._size_view
        self._filled = ahead
        self._frame_size = -1
        self.last_active = now = time.monotonic()
        self.receiving_since = now if ahead else 0.0
        self._on_frame_received(frame, now)
        if ahead == SIZE_READ_AHEAD:
            transport = self.transport
            if self._closing or transport is None or transport.is_closing():
                self._filled = 0  # nothing more is read on this connection
            else:
                self._on_size(_SIZE.unpack(self._size_buf)[0])

    def eof_received(self) -> bool:
        # Closing after a half-close is what Kafka does too; pending responses are flushed first.
        if self._queue or self._ready or self._writing:
            self._closing_when_idle = True
            self._pause("eof")
            return True
        return False

    def pause_writing(self) -> None:
        self._pause("write")

    def resume_writing(self) -> None:
        # Unpause first: if the writer refills the buffer (the next chunk of a file region) the
        # transport calls pause_writing again from inside writer.resume_writing, re-adding the reason.
        self._unpause("write")
        if self._writer is not None:
            self._writer.resume_writing()

    # -- framing and the memory pool --

    def _on_size(self, size: int) -> None:
        if size <= 0 or size > self._max_request:
            foreign = _foreign_protocol(bytes(self._size_buf))
            if foreign is not None:
                log.warning("Closing connection %s on listener %s: %s", self.connection_id,
                            self._listener_name, foreign)
                self.abort(foreign)
                return
            # Kafka: InvalidReceiveException ("Invalid receive (size = N larger than M)"): close.
            log.warning(
                "Closing connection %s: invalid request size %d (socket.request.max.bytes=%d)",
                self.connection_id,
                size,
                self._max_request,
            )
            self.abort(f"invalid request size {size}")
            return
        self._frame_size = size
        pool = self._server.memory_pool
        if pool.try_allocate(size):
            self._take_frame_buffer()
            return
        self._view = self._size_view[4:]  # nothing to read into until the pool grants the memory
        self._filled = 0
        self._pause("memory")
        pool.wait(self, size)

    def _take_frame_buffer(self) -> None:
        """The pool holds `_frame_size` bytes for us: take the frame's buffer and read into it."""
        self._holding = self._frame_size
        self._frame, self._view = self._server.frame_buffers.take(self._frame_size + SIZE_READ_AHEAD)
        self._filled = 0

    def on_memory_granted(self) -> None:
        """MemoryPool callback: the pool now holds our frame's size for us."""
        if self._closed or self._frame_size < 0 or self._frame is not None:
            self._server.memory_pool.release(max(self._frame_size, 0))
            return
        self._take_frame_buffer()
        self._unpause("memory")

    def _drop_frame_buffer(self) -> None:
        """Free the buffer of a partly received frame now: release our view, unmap an mmap."""
        frame, self._frame = self._frame, None
        view, self._view = self._view, self._size_view
        self._filled = 0
        self._frame_size = -1
        self.receiving_since = 0.0
        if view is not self._size_view:
            view.release()
        if isinstance(frame, mmap.mmap):
            try:
                frame.close()
            except BufferError:
                pass  # a view handed to the event loop is still alive: unmapped when it goes

    # -- the request queue bound --

    def _on_frame_received(self, frame: memoryview, received: float) -> None:
        holding, self._holding = self._holding, 0
        bound = self._server.request_bound
        if self._ready or not bound.try_acquire():
            # The request queue is full: keep the frame, stop reading, wait for a slot (FIFO).
            self._ready.append((frame, holding, received))
            self._pause("queue")
            if len(self._ready) == 1:
                bound.wait(self)
            return
        self._dispatch(frame, holding, received, received)

    def on_request_granted(self) -> None:
        """RequestQueueBound callback (scheduled, never re-entrant): a slot is held for us."""
        bound = self._server.request_bound
        if self._closing or not self._ready:
            bound.release()  # passed on to the next waiter; our frames are dropped at close
            return
        frame, holding, received = self._ready.popleft()
        self._dispatch(frame, holding, received, time.monotonic())
        if self._ready:
            bound.wait(self)
        else:
            self._unpause("queue")

    # -- dispatch --

    def _dispatch(self, frame: memoryview, holding: int, received: float, dispatched: float) -> None:
        """Hand one complete request to the dispatcher; it holds a request slot and `holding` bytes.

        `received`: when its last byte arrived; `dispatched`: now (the same when no slot was waited for).
        """
        server = self._server
        codec = server.codec
        slot = _Slot(len(frame) < COALESCED_REQUEST_BYTES)
        self._queue.append(slot)
        if len(self._queue) >= MAX_PENDING_PER_CONNECTION:
            self._pause("pending")
        try:
            try:
                header, body = codec.decode_request_frame(frame)
            except codec.UnsupportedVersionError as e:
                header = e.header
                result = server.dispatcher.handle_unsupported(self.ctx, header)
                # Kafka answers an unsupported ApiVersions with a v0 body (KIP-511); anything else
                # that the dispatcher chose to answer is encoded at the version the client asked.
                version = 0 if header.api_key == _API_VERSIONS_KEY else header.api_version
                self._on_result(slot, header, version, result)
                return
            except codec.ProtocolError as e:
                log.warning("Closing connection %s: malformed request: %s", self.connection_id, e)
                self._finish(slot, None, close=True, reason=f"malformed request: {e}")
                return
            ctx = self.ctx
            ctx.client_id = header.client_id
            ctx.request_size = len(frame) + 4
            metrics = server.metrics
            if metrics is not None:
                stats = slot.stats = metrics.request(header.api_key)
                stats.requests[header.api_version] += 1
                slot.received = received
                slot.dispatched = dispatched
                result = server.dispatcher.handle(ctx, header, body)
                slot.local_done = slot.completed = time.monotonic()
            else:
                result = server.dispatcher.handle(ctx, header, body)
            if ctx.throttle_time_ms:
                self.throttle(ctx.throttle_time_ms)
                ctx.throttle_time_ms = 0
            if ctx.close_after_response:
                # A failed SASL handshake or authentication: answer, read nothing more, then close.
                slot.close_after = True
                self._pause("closing")
            self._on_result(slot, header, header.api_version, result)
        except CloseConnection as e:
            self._finish(slot, None, close=True, reason=str(e) or "closed by the request handler")
        except Exception as e:
            log.exception("Closing connection %s: error while handling a request", self.connection_id)
            self._finish(slot, None, close=True, reason=f"error while handling a request: {e!r}")
        finally:
            server.request_bound.release()
            server.memory_pool.release(holding)

    def _on_result(self, slot: _Slot, header: RequestHeader, version: int, result: object) -> None:
        if result is None:
            # handle_unsupported answers None for "close, as Kafka does".
            self._finish(slot, None, close=True, reason=f"unsupported request (api key {header.api_key})")
        elif result is NO_RESPONSE:
            self._finish(slot, None)
        elif is_awaitable_result(result):
            fut = asyncio.ensure_future(result, loop=self._loop)
            fut.add_done_callback(partial(self._on_awaited, slot, header, version))
        else:
            throttle_ms = getattr(result, "throttle_time_ms", 0)
            if throttle_ms:
                self.throttle(throttle_ms)
            self._finish(slot, self._encode(header, version, result))

    def _on_awaited(self, slot: _Slot, header: RequestHeader, version: int, fut: asyncio.Future[object]) -> None:
        if self._closed:
            return
        if slot.stats is not None:
            slot.completed = time.monotonic()  # the delayed operation (a purgatory) is done
        try:
            result = fut.result()
        except CloseConnection as e:
            self._finish(slot, None, close=True, reason=str(e) or "closed by the request handler")
            return
        except BaseException as e:
            log.exception("Closing connection %s: error while completing a request", self.connection_id)
            self._finish(slot, None, close=True, reason=f"error while completing a request: {e!r}")
            return
        if result is NO_RESPONSE:
            self._finish(slot, None)
            return
        throttle_ms = getattr(result, "throttle_time_ms", 0)
        if throttle_ms:
            self.throttle(throttle_ms)
        try:
            parts = self._encode(header, version, result)
        except Exception:
            log.exception("Closing connection %s: cannot encode a response", self.connection_id)
            self._finish(slot, None, close=True, reason="cannot encode a response")
            return
        self._finish(slot, parts)

    def _encode(self, header: RequestHeader, version: int, body: object) -> list[FramePart]:
        return self._server.codec.encode_response_frame(header.api_key, version, header.correlation_id, body)

    def _finish(self, slot: _Slot, parts: list[FramePart] | None, close: bool = False,
                reason: str | None = None) -> None:
        if close and reason is not None and self.close_reason is None:
            self.close_reason = reason
        slot.parts = parts
        slot.close = close
        slot.done = True
        if close:
            self._pause("closing")  # nothing after a fatal request is read
        if self._queue and self._queue[0] is slot:
            if self._flush_scheduled and slot.small:
                return  # a response left earlier in this loop iteration: this one joins the flush at its end
            if not self._flush_scheduled:
                self._flush_scheduled = True
                self._loop.call_soon(self._scheduled_flush)
            self._flush()

    def _scheduled_flush(self) -> None:
        """The flush `_finish` deferred to the end of the loop iteration (see the module docstring)."""
        self._flush_scheduled = False
        self._flush()

    def _flush(self) -> None:
        """Write every completed response at the head of the queue, in order, in one batch.

        Consecutive ready responses (say the fast ones queued behind a slow Fetch) go to the writer as
        one list of parts: one `writelines`, so one send for all of them.
        """
        writer = self._writer
        if self._closed or writer is None or writer.busy:
            return
        q = self._queue
        batch: list[FramePart] = []
        timed: list[_Slot] | None = None
        close = False
        while q and q[0].done:
            slot = q.popleft()
            if slot.close:
                close = True
                break
            if slot.stats is not None:
                if timed is None:
                    timed = [slot]
                else:
                    timed.append(slot)
            if slot.parts:
                batch.extend(slot.parts)
            if slot.close_after:
                close = True
                break
        if batch:
            self.last_active = flushed = time.monotonic()
            written = writer.write(batch)
            if timed is not None:
                self._record(timed, flushed, time.monotonic())
            if not written:
                # A file region is being sent; _on_writer_idle continues (and closes, if asked to).
                self._close_after_write = close
                return
        elif timed is not None:  # answered by nothing (acks=0): no queue or send time
            now = time.monotonic()
            self._record(timed, now, now)
        if close:
            self.close()
            return
        if len(q) < MAX_PENDING_PER_CONNECTION:
            self._unpause("pending")
        if not q and not self._ready and self._closing_when_idle:
            self.close()

    @staticmethod
    def _record(slots: list[_Slot], flushed: float, sent: float) -> None:
        """RequestMetrics of requests whose responses were handed to the transport together.

        A Fetch response with file regions is "sent" when its first part is written; the rest of its
        sendfile is not in ResponseSendTimeMs (docs/operations.md, "Metrics")."""
        for slot in slots:
            stats = slot.stats
            if stats is not None:
                stats.record(slot.received, slot.dispatched, slot.local_done, slot.completed, flushed, sent)

    def _on_writer_idle(self) -> None:
        self.last_active = time.monotonic()
        if self._close_after_write:
            self.close()
            return
        self._flush()

    def _on_writer_error(self, exc: BaseException) -> None:
        log.warning("Closing connection %s: cannot send a file region: %s", self.connection_id, exc)
        self.abort(f"cannot send a file region: {exc}")

    # -- reading flow control --

    def throttle(self, throttle_ms: int) -> None:
        """Read nothing more for `throttle_ms` (KIP-219); a longer throttle extends a shorter one."""
        if throttle_ms <= 0 or self._closed:
            return
        until = self._loop.time() + throttle_ms / 1000.0
        if until <= self._throttled_until:
            return
        self._throttled_until = until
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
        self._throttle_timer = self._loop.call_at(until, self._end_throttle)
        self._pause("throttle")

    def _end_throttle(self) -> None:
        self._throttle_timer = None
        self._throttled_until = 0.0
        self._unpause("throttle")

    @property
    def throttled(self) -> bool:
        return self._throttle_timer is not None

    def _pause(self, reason: str) -> None:
        self._pause_reasons.add(reason)
        if not self._reading_paused and self.transport is not None and not self._closed:
            self._reading_paused = True
            self.transport.pause_reading()

    def _unpause(self, reason: str) -> None:
        self._pause_reasons.discard(reason)
        if (
            self._reading_paused
            and not self._pause_reasons
            and self.transport is not None
            and not self._closed
        ):
            self._reading_paused = False
            if self.receiving_since:
                # A frame was cut off by our own pause: its receive deadline starts again now.
                self.receiving_since = time.monotonic()
            self.transport.resume_reading()

    # -- closing --

    @property
    def _writing(self) -> bool:
        """A file region (and what follows it) is still being sent."""
        return self._writer is not None and self._writer.busy

    @property
    def waiting_requests(self) -> int:
        """Complete requests waiting for a `queued.max.requests` slot (Kafka's RequestQueueSize share)."""
        return len(self._ready)

    @property
    def reading_paused(self) -> bool:
        """The broker stopped reading this connection (flow control or a bound), not the client."""
        return self._reading_paused

    @property
    def idle(self) -> bool:
        """No request being handled, waiting for a slot, or being written.

        A partly received frame does not make a connection busy: its bytes are not activity
        (`last_active` moves only with complete requests and responses), so a client that sends
        half a frame and stops is closed by `connections.max.idle.ms` like any idle one.
        """
        return not self._queue and not self._ready and not self._writing

    @property
    def _closing(self) -> bool:
        return self._closed or "closing" in self._pause_reasons

    def close_when_idle(self, reason: str = "the broker is shutting down") -> None:
        """Stop reading; close once every pending response is written (clean shutdown)."""
        if self.close_reason is None:
            self.close_reason = reason
        self._closing_when_idle = True
        self._pause("shutdown")
        if not self._queue and not self._ready and not self._writing:
            self.close()

    def close(self, reason: str | None = None) -> None:
        """Close after the transport has flushed what it already holds."""
        if reason is not None and self.close_reason is None:
            self.close_reason = reason
        if self.transport is not None and not self.transport.is_closing():
            if self._writer is not None and self._writer.busy:
                self.abort()
                return
            self.transport.close()

    def abort(self, reason: str | None = None) -> None:
        if reason is not None and self.close_reason is None:
            self.close_reason = reason
        if self.transport is not None:
            self.transport.abort()
