"""A test server for kbroker.net: the real `KafkaServer` on a real socket, with a small test dispatcher.

The dispatcher answers ApiVersions with the protocol package's real codec, and a test-only API key
(`TEST_KEY`, unknown to Kafka) whose request body is a command:
  b"echo:TAG"            -> synchronous response, body TAG
  b"sleep:MS:TAG"        -> a future completed MS ms later (a delayed operation), body TAG
  b"region:PATH:POS:LEN" -> body is a FileRegion of PATH (sendfile path or its fallback)
  b"raise"               -> the handler raises (connection closed)
  b"close"               -> CloseConnection (closed without a response)
  b"noresp"              -> NO_RESPONSE (nothing written, order kept)
Responses to TEST_KEY are framed as: size, correlation id, body parts.

The server runs its own event loop (uvloop or asyncio) in a thread; tests use blocking sockets.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

import kbroker.protocol as protocol
from kbroker.api.context import NO_RESPONSE, CloseConnection, RequestContext
from kbroker.broker import socket_server_config
from kbroker.config import KafkaConfig
from kbroker.net import KafkaServer
from kbroker.protocol import FileRegion, RequestHeader
from kbroker.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse

TEST_KEY = 30000
_HDR = struct.Struct(">hhi")
_SIZE = struct.Struct(">i")
_INT32 = struct.Struct(">i")
_STR_LEN = struct.Struct(">h")


class TestCodec:
    """The protocol package's frame API, plus the framing of the test-only API key."""

    ProtocolError = protocol.ProtocolError
    UnsupportedVersionError = protocol.UnsupportedVersionError

    def decode_request_frame(self, frame: memoryview) -> tuple[Any, Any]:
        if len(frame) >= 2 and struct.unpack_from(">h", frame, 0)[0] == TEST_KEY:
            if len(frame) < 10:
                raise protocol.ProtocolError("short test header")
            key, version, corr = _HDR.unpack_from(frame, 0)
            (n,) = _STR_LEN.unpack_from(frame, 8)
            pos = 10 + max(n, 0)
            client_id = bytes(frame[10:pos]).decode() if n >= 0 else None
            header = RequestHeader(
                api_key=key, api_version=version, correlation_id=corr, client_id=client_id, header_version=1
            )
            return header, bytes(frame[pos:])
        return protocol.decode_request_frame(frame)

    def encode_response_frame(
        self, api_key: int, api_version: int, correlation_id: int, body: Any
    ) -> list[Any]:
        if api_key == TEST_KEY:
            parts = list(body)
            size = 4 + sum(len(p) for p in parts)
            return [_SIZE.pack(size) + _INT32.pack(correlation_id), *parts]
        return protocol.encode_response_frame(api_key, api_version, correlation_id, body)


class TestDispatcher:
    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.handled = 0

    def handle(self, ctx: Any, header: Any, body: Any) -> Any:
        self.handled += 1
        if header.api_key == 18:
            return ApiVersionsResponse(
                error_code=0,
                api_keys=[ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=4)],
            )
        if header.api_key != TEST_KEY:
            raise CloseConnection("not served by the test dispatcher")
        cmd = body.split(b":")
        if cmd[0] == b"echo":
            return [cmd[1]]
        if cmd[0] == b"sleep":
            assert self.loop is not None
            fut = self.loop.create_future()
            self.loop.call_later(int(cmd[1]) / 1000, fut.set_result, [cmd[2]])
            return fut
        if cmd[0] == b"region":
            f = open(cmd[1].decode(), "rb")  # noqa: SIM115 - the region owns the file until written
            return [FileRegion(f, int(cmd[2]), int(cmd[3]))]
        if cmd[0] == b"raise":
            raise RuntimeError("test handler failure")
        if cmd[0] == b"close":
            raise CloseConnection("test")
        if cmd[0] == b"noresp":
            return NO_RESPONSE
        raise ValueError(f"unknown test command {body!r}")

    def handle_unsupported(self, ctx: Any, header: Any) -> Any:
        if header.api_key == 18:
            return ApiVersionsResponse(
                error_code=35,
                api_keys=[ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=4)],
            )
        raise CloseConnection("unsupported")


class RunningServer:
    def __init__(
        self, port: int, server: KafkaServer, loop: asyncio.AbstractEventLoop, dispatcher: TestDispatcher
    ) -> None:
        self.port = port
        self.server = server
        self.loop = loop
        self.dispatcher = dispatcher

    def connect(self, timeout: float = 10.0) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` on the server's loop and return its result."""

        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)


def encode_test_request(correlation_id: int, body: bytes, client_id: str = "t") -> bytes:
    cid = client_id.encode()
    payload = _HDR.pack(TEST_KEY, 0, correlation_id) + _STR_LEN.pack(len(cid)) + cid + body
    return _SIZE.pack(len(payload)) + payload


def api_versions_request(correlation_id: int, version: int = 3) -> bytes:
    header = RequestHeader(api_key=18, api_version=version, correlation_id=correlation_id, client_id="t")
    body = ApiVersionsRequest(client_software_name="kbroker-test", client_software_version="1")
    return protocol.encode_request_frame(header, body)


def recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def read_frame(s: socket.socket) -> bytes:
    (size,) = _SIZE.unpack(recv_exact(s, 4))
    return recv_exact(s, size)


def read_test_response(s: socket.socket) -> tuple[int, bytes]:
    frame = read_frame(s)
    return _INT32.unpack_from(frame, 0)[0], frame[4:]


def is_closed(s: socket.socket, timeout: float = 5.0) -> bool:
    """True when the peer closed the connection (EOF or reset) within `timeout`."""
    s.settimeout(timeout)
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def api_versions_ok(server: RunningServer) -> bool:
    with server.connect() as c:
        c.sendall(api_versions_request(7))
        corr, body = protocol.decode_response_frame(18, 3, read_frame(c))
        return bool(corr == 7 and body.error_code == 0)


@pytest.fixture
def h() -> SimpleNamespace:
    """The harness helpers, as a fixture (test modules cannot import a conftest reliably)."""
    return SimpleNamespace(
        TEST_KEY=TEST_KEY,
        request=encode_test_request,
        api_versions_request=api_versions_request,
        recv_exact=recv_exact,
        read_frame=read_frame,
        read_test_response=read_test_response,
        is_closed=is_closed,
        api_versions_ok=api_versions_ok,
    )


@pytest.fixture(params=["uvloop", "asyncio"])
def loop_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def start_server(loop_kind: str) -> Iterator[Callable[..., RunningServer]]:
    started: list[tuple[asyncio.AbstractEventLoop, KafkaServer, threading.Thread]] = []

    def start(**overrides: str) -> RunningServer:
        props = {"listeners": "PLAINTEXT://127.0.0.1:0", **overrides}
        # Built the way the broker builds it, so the broker keys (and their defaults) are what is tested.
        config = socket_server_config(KafkaConfig(props))
        if loop_kind == "uvloop":
            import uvloop

            loop = uvloop.new_event_loop()
        else:
            loop = asyncio.new_event_loop()
        dispatcher = TestDispatcher()
        dispatcher.loop = loop
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()

        async def boot() -> KafkaServer:
            server = KafkaServer(
                config,
                dispatcher,
                codec=TestCodec(),
                context_factory=lambda name, peer, cid: RequestContext(
                    listener_name=name, peer=peer, connection_id=cid
                ),
            )
            await server.start()
            return server

        server = asyncio.run_coroutine_threadsafe(boot(), loop).result(10)
        started.append((loop, server, thread))
        return RunningServer(server.bound_endpoints[0].port, server, loop, dispatcher)

    yield start
    for loop, server, thread in started:
        asyncio.run_coroutine_threadsafe(server.stop(5), loop).result(15)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
