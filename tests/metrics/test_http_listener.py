"""The HTTP listener on its own: the key's syntax, methods, paths, probes, and bad input closing cleanly."""

from __future__ import annotations

import asyncio

import pytest

from kbroker.net.http_listener import HttpEndpoint, MetricsHttpServer, parse_http_listener


def test_parse_http_listener() -> None:
    assert parse_http_listener("") is None
    assert parse_http_listener("  ") is None
    assert parse_http_listener("http://127.0.0.1:9404") == HttpEndpoint("127.0.0.1", 9404)
    assert parse_http_listener("http://0.0.0.0:0/") == HttpEndpoint("0.0.0.0", 0)
    assert str(HttpEndpoint("::1", 9404)) == "http://[::1]:9404"
    for bad in ("127.0.0.1:9404", "https://127.0.0.1:9404", "http://127.0.0.1", "http://h:x", "http://h:1/metrics"):
        with pytest.raises(ValueError, match="kbroker.metrics.listener"):
            parse_http_listener(bad)


async def _raw(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    writer.write_eof()  # nothing more comes: a head that is not complete is never completed
    await writer.drain()
    out = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return out


def test_requests_and_answers() -> None:
    ready = [False]

    async def main() -> None:
        server = MetricsHttpServer(HttpEndpoint("127.0.0.1", 0), lambda: b"m 1\n", "text/plain; version=0.0.4",
                                   lambda: (True, {"lag": 0}), lambda: (ready[0], {"why": "starting"}))
        bound = await server.start()
        port = bound.port
        assert port != 0
        try:
            out = await _raw(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            assert out.startswith(b"HTTP/1.1 200 OK\r\n") and out.endswith(b"\r\n\r\nm 1\n")
            assert b"Content-Length: 4\r\n" in out and b"Connection: close" in out
            out = await _raw(port, b"HEAD /metrics?x=1 HTTP/1.1\r\n\r\n")
            assert out.startswith(b"HTTP/1.1 200 OK") and out.endswith(b"\r\n\r\n")  # headers only
            out = await _raw(port, b"GET /health/ready HTTP/1.1\r\n\r\n")
            assert out.startswith(b"HTTP/1.1 503 ") and b'"status": "DOWN", "why": "starting"' in out
            ready[0] = True
            assert (await _raw(port, b"GET /health/ready HTTP/1.0\r\n\r\n")).startswith(b"HTTP/1.1 200 OK")
            assert (await _raw(port, b"GET /health/live HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 200 OK")
            assert (await _raw(port, b"POST /metrics HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 405 ")
            assert (await _raw(port, b"GET /other HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 404 ")
            assert (await _raw(port, b"garbage\r\n\r\n")).startswith(b"HTTP/1.1 400 ")
            assert (await _raw(port, b"\xff\xfe /x y\r\n\r\n")).startswith(b"HTTP/1.1 400 ")
            # A head above 8 KiB, or one that never ends before EOF: closed without an answer.
            assert await _raw(port, b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\n\r\n") == b""
            assert await _raw(port, b"GET /metrics HTTP/1.1\r\n") == b""
        finally:
            await server.stop()

    asyncio.run(main())


def test_a_client_that_sends_nothing_is_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    import kbroker.net.http_listener as http_listener

    monkeypatch.setattr(http_listener, "REQUEST_TIMEOUT_S", 0.3)

    async def main() -> None:
        server = MetricsHttpServer(HttpEndpoint("127.0.0.1", 0), lambda: b"", "text/plain",
                                   lambda: (True, {}), lambda: (True, {}))
        port = (await server.start()).port
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /met")  # and then nothing
            started = asyncio.get_running_loop().time()
            assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the server
            assert asyncio.get_running_loop().time() - started < 3
            writer.close()
        finally:
            await server.stop()

    asyncio.run(main())
