"""kbroker.net over a real socket: ordering, pipelining, sendfile vs fallback, bad frames, limits.

Every test runs on uvloop and on the default asyncio loop (the `loop_kind` fixture).
"""

from __future__ import annotations

import hashlib
import os
import socket
import struct
import time
from pathlib import Path

import kbroker.protocol as protocol


def test_api_versions_round_trip(start_server, h) -> None:
    server = start_server()
    assert h.api_versions_ok(server)


def test_pipelined_requests_answered_in_order(start_server, h) -> None:
    server = start_server()
    with server.connect() as s:
        # A slow (awaitable) request first, then fast synchronous ones and a NO_RESPONSE: every
        # answer must come back in request order, the slow one first.
        batch = h.request(1, b"sleep:300:slow") + h.request(2, b"echo:a") + h.request(3, b"noresp")
        batch += h.request(4, b"sleep:50:mid") + h.request(5, b"echo:b")
        s.sendall(batch)
        started = time.monotonic()
        got = [h.read_test_response(s) for _ in range(4)]
        assert got == [(1, b"slow"), (2, b"a"), (4, b"mid"), (5, b"b")]
        assert time.monotonic() - started >= 0.25  # the fast ones waited behind the slow one


def test_many_pipelined_requests(start_server, h) -> None:
    server = start_server()
    n = 500  # more than the per-connection bound: reading pauses and resumes
    with server.connect() as s:
        s.sendall(b"".join(h.request(i, b"echo:%d" % i) for i in range(n)))
        for i in range(n):
            assert h.read_test_response(s) == (i, b"%d" % i)


def _count_calls(monkeypatch, owner: type, name: str, arg_of_call) -> list:
    """Record `arg_of_call(args)` for every call of the server's own `owner.name` (the client is a real socket)."""
    calls: list = []
    real = getattr(owner, name)

    def counting(self, *args):
        calls.append(arg_of_call(args))
        return real(self, *args)

    monkeypatch.setattr(owner, name, counting)
    return calls


def _pipelined_echoes(server, h, n: int) -> None:
    """`n` echo requests in one send, then every answer, in order."""
    with server.connect() as s:
        s.sendall(b"".join(h.request(i, b"echo:%d" % i) for i in range(n)))
        for i in range(n):
            assert h.read_test_response(s) == (i, b"%d" % i)


def test_responses_ready_together_leave_in_one_write(start_server, h, monkeypatch) -> None:
    # Issue 17 (the fixed cost per request): requests read in one burst are answered by one write to
    # the transport, not one each; writing each response as it completed made it 20 for 20 requests.
    from kbroker.net.writer import ResponseWriter

    writes = _count_calls(monkeypatch, ResponseWriter, "write", lambda args: len(args[0]))
    server = start_server()
    n = 20
    _pipelined_echoes(server, h, n)
    assert sum(writes) == 2 * n  # every response's two parts, each written once
    if type(server.loop).__module__.startswith("uvloop"):
        # libuv reads a socket up to 32 times per readiness event (one read per pipelined frame, the
        # next size prefix read ahead), so the 20 frames are handled in one to three iterations of the
        # loop. asyncio's own loop (the fallback without uvloop) reads once per event: one response per
        # iteration.
        assert 1 <= len(writes) <= 4, writes


def test_a_pipelined_request_costs_one_read(start_server, h, monkeypatch) -> None:
    # Issue 17: the read that completes a frame also brings the next frame's size prefix (4 bytes read
    # ahead), so pipelined requests take one read each after the first, not two (size, then body).
    from kbroker.net.connection import KafkaConnection

    reads = _count_calls(monkeypatch, KafkaConnection, "buffer_updated", lambda args: args[0])
    server = start_server()
    n = 20
    _pipelined_echoes(server, h, n)
    assert len(reads) <= n + 2, reads  # two reads per request before: 40


def test_frames_cut_anywhere_are_read_whole(start_server, h) -> None:
    # The read-ahead of the next size prefix, whatever part of it arrives with the frame before: the
    # requests (small ones and pooled ones of 64 KiB or more) sent in pieces cut at random places.
    import random

    rng = random.Random(17)
    server = start_server()
    tags = [b"%d" % i for i in range(60)]
    pads = [b"x" * rng.choice((0, 1, 3, 700, 70_000)) for _ in tags]
    stream = b"".join(h.request(i, b"echo:" + tag + b":" + pad) for i, (tag, pad) in enumerate(zip(tags, pads, strict=True)))
    with server.connect() as s:
        pos = 0
        while pos < len(stream):
            step = rng.choice((1, 2, 3, 4, 5, 7, 13, 4096, 70_001))
            s.sendall(stream[pos:pos + step])
            pos += step
            if rng.random() < 0.05:
                time.sleep(0.002)  # let a read end mid-prefix
        for i, tag in enumerate(tags):
            assert h.read_test_response(s) == (i, tag)


def test_unsupported_api_versions_answered_with_v0(start_server, h) -> None:
    server = start_server()
    with server.connect() as s:
        s.sendall(
            h.api_versions_request(9, version=3)[:6] + struct.pack(">h", 99) + h.api_versions_request(9)[8:]
        )
        corr, body = protocol.decode_response_frame(18, 0, h.read_frame(s))
        assert corr == 9 and body.error_code == 35  # UNSUPPORTED_VERSION, v0 body (KIP-511)


def test_unknown_api_key_closes_only_that_connection(start_server, h) -> None:
    server = start_server()
    with server.connect() as bad:
        frame = struct.pack(">hhi", 32000, 0, 1) + struct.pack(">h", -1)
        bad.sendall(struct.pack(">i", len(frame)) + frame)
        assert h.is_closed(bad)
    assert h.api_versions_ok(server)


def _make_file(path: Path, size: int) -> bytes:
    data = os.urandom(size)
    path.write_bytes(data)
    return data


def _region_roundtrip(server, h, path: Path, pos: int, length: int, slow_reader: bool) -> bytes:
    with server.connect(timeout=30) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        # bytes before and after the region in the same response stream: echo, region, echo
        s.sendall(
            h.request(1, b"echo:before")
            + h.request(2, b"region:%s:%d:%d" % (str(path).encode(), pos, length))
            + h.request(3, b"echo:after")
        )
        if slow_reader:
            time.sleep(0.3)  # let the socket buffers fill: sendfile must hit EAGAIN and wait
        assert h.read_test_response(s) == (1, b"before")
        corr, body = h.read_test_response(s)
        assert corr == 2
        assert h.read_test_response(s) == (3, b"after")
        return body


def test_sendfile_and_fallback_deliver_identical_bytes(start_server, h, tmp_path: Path, monkeypatch) -> None:
    calls = {"sendfile": 0, "eagain": 0, "partial": 0}
    real_sendfile = os.sendfile

    def counting_sendfile(out_fd: int, in_fd: int, offset: int, count: int) -> int:
        calls["sendfile"] += 1
        try:
            sent = real_sendfile(out_fd, in_fd, offset, count)
            calls["partial"] += sent < count
            return sent
        except BlockingIOError:
            calls["eagain"] += 1
            raise

    monkeypatch.setattr(os, "sendfile", counting_sendfile)
    size = 24 * 1024 * 1024
    data = _make_file(tmp_path / "segment.log", size)
    expected = hashlib.sha256(data[1000 : 1000 + size - 5000]).hexdigest()
    with_sendfile = start_server(**{"kbroker.sendfile.enable": "true"})
    without = start_server(**{"kbroker.sendfile.enable": "false"})
    assert with_sendfile.server.config.sendfile_enable and not without.server.config.sendfile_enable
    for server in (with_sendfile, without):
        before = dict(calls)
        body = _region_roundtrip(server, h, tmp_path / "segment.log", 1000, size - 5000, slow_reader=True)
        assert len(body) == size - 5000
        assert hashlib.sha256(body).hexdigest() == expected
        if server is with_sendfile:
            # the slow reader made the socket buffer fill: partial sends, resumed on writability
            assert calls["sendfile"] > before["sendfile"] + 1 and calls["partial"] > before["partial"]
        else:
            assert calls == before  # the fallback never calls sendfile


def test_sendfile_region_after_buffered_bytes(start_server, h, tmp_path: Path) -> None:
    # Many small responses queued in the transport, then a region: the region must wait for the
    # transport to drain, and nothing may interleave.
    data = _make_file(tmp_path / "seg.log", 3 * 1024 * 1024)
    server = start_server()
    with server.connect(timeout=30) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)
        big = b"x" * 60000
        reqs = [h.request(i, b"echo:" + big) for i in range(40)]
        reqs.append(h.request(40, b"region:%s:0:%d" % (str(tmp_path / "seg.log").encode(), len(data))))
        reqs += [h.request(41 + i, b"echo:%d" % i) for i in range(5)]
        s.sendall(b"".join(reqs))
        time.sleep(0.3)
        for i in range(40):
            assert h.read_test_response(s) == (i, big)
        assert h.read_test_response(s) == (40, data)
        for i in range(5):
            assert h.read_test_response(s) == (41 + i, b"%d" % i)


def test_oversize_size_prefix_closes_only_that_connection(start_server, h) -> None:
    server = start_server(**{"socket.request.max.bytes": "1000"})
    with server.connect() as ok, server.connect() as bad:
        bad.sendall(struct.pack(">i", 1001))
        assert h.is_closed(bad)
        ok.sendall(h.request(1, b"echo:still-here"))
        assert h.read_test_response(ok) == (1, b"still-here")
    with server.connect() as bad:
        bad.sendall(struct.pack(">i", 2_000_000_000))  # nothing is allocated for it
        assert h.is_closed(bad)
    with server.connect() as bad:
        bad.sendall(struct.pack(">i", -5))
        assert h.is_closed(bad)
    assert h.api_versions_ok(server)


def test_garbage_and_truncated_frames(start_server, h) -> None:
    server = start_server()
    with server.connect() as other:
        with server.connect() as bad:
            bad.sendall(struct.pack(">i", 12) + os.urandom(12))  # garbage header / body
            assert h.is_closed(bad)
        with server.connect() as bad:
            frame = h.api_versions_request(3)
            bad.sendall(struct.pack(">i", 5) + frame[4:9])  # an ApiVersions header cut short
            assert h.is_closed(bad)
        with server.connect() as bad:
            bad.sendall(h.api_versions_request(4)[:10])  # truncated: then the client goes away
        other.sendall(h.request(5, b"echo:alive"))
        assert h.read_test_response(other) == (5, b"alive")
    assert h.api_versions_ok(server)


def test_handler_exception_and_close_connection(start_server, h) -> None:
    server = start_server()
    with server.connect() as s:
        s.sendall(h.request(1, b"echo:first") + h.request(2, b"raise") + h.request(3, b"echo:never"))
        assert h.read_test_response(s) == (1, b"first")  # responses before the failure are written
        assert h.is_closed(s)
    with server.connect() as s:
        s.sendall(h.request(1, b"close"))
        assert h.is_closed(s)
    assert h.api_versions_ok(server)


def test_broker_wide_request_bound(start_server, h) -> None:
    # A byte bound smaller than one request: requests still flow one at a time (the pool grants an
    # allocation while anything is left, like Kafka's MemoryPool).
    server = start_server(**{"queued.max.request.bytes": "10", "queued.max.requests": "1"})
    with server.connect() as a, server.connect() as b:
        a.sendall(b"".join(h.request(i, b"sleep:10:%d" % i) for i in range(20)))
        b.sendall(b"".join(h.request(i, b"echo:%d" % i) for i in range(20)))
        for i in range(20):
            assert h.read_test_response(a) == (i, b"%d" % i)
            assert h.read_test_response(b) == (i, b"%d" % i)
    held = server.call(lambda: (server.server.request_bound.requests, server.server.memory_pool.used))
    assert held == (0, 0)


def test_connection_limits_and_idle_close(start_server, h) -> None:
    server = start_server(**{"max.connections.per.ip": "2", "connections.max.idle.ms": "300"})
    with server.connect() as a, server.connect() as b, server.connect() as c:
        assert h.is_closed(c)  # over max.connections.per.ip
        a.sendall(h.request(1, b"echo:x"))
        assert h.read_test_response(a) == (1, b"x")
        assert h.is_closed(b, timeout=5)  # idle longer than connections.max.idle.ms


def test_clean_stop_finishes_in_flight_requests(start_server, h) -> None:
    server = start_server()
    with server.connect() as s:
        s.sendall(h.request(1, b"sleep:300:late"))
        time.sleep(0.1)
        import asyncio

        fut = asyncio.run_coroutine_threadsafe(server.server.stop(5), server.loop)
        assert h.read_test_response(s) == (1, b"late")
        assert h.is_closed(s)
        fut.result(10)


def test_clean_stop_finishes_a_region_being_sent(start_server, h, tmp_path: Path) -> None:
    import asyncio

    data = _make_file(tmp_path / "seg.log", 8 * 1024 * 1024)
    server = start_server()
    with server.connect(timeout=30) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)
        s.sendall(h.request(1, b"region:%s:0:%d" % (str(tmp_path / "seg.log").encode(), len(data))))
        time.sleep(0.3)  # the region is mid-send: the socket buffers are full
        fut = asyncio.run_coroutine_threadsafe(server.server.stop(10), server.loop)
        time.sleep(0.2)
        assert h.read_test_response(s) == (1, data)
        assert h.is_closed(s)
        fut.result(15)


def test_memory_bound_makes_others_wait_until_memory_is_released(start_server, h) -> None:
    # queued.max.request.bytes: a frame takes its announced size from the pool when its size prefix
    # arrives (Kafka's memory pool), so a frame still arriving holds memory and B waits for it.
    server = start_server(**{"queued.max.request.bytes": "10"})
    with server.connect() as a, server.connect() as b:
        req_a = h.request(1, b"echo:a")
        a.sendall(req_a[:7])  # size prefix + part of the frame: A holds the whole pool
        time.sleep(0.2)
        b.sendall(h.request(2, b"echo:b"))
        b.settimeout(0.5)
        try:
            early = b.recv(100)
        except TimeoutError:
            early = b""
        assert early == b""  # B waits: its frame cannot be allocated while A's is being received
        a.sendall(req_a[7:])
        assert h.read_test_response(a) == (1, b"a")
        b.settimeout(10)
        assert h.read_test_response(b) == (2, b"b")  # released: B resumes on its own
    held = server.call(lambda: (server.server.request_bound.requests, server.server.memory_pool.used))
    assert held == (0, 0)
