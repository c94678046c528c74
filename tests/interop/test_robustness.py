"""A real kbroker process under hostile clients (loopback only, bounded in count and time).

Garbage, truncated frames, huge and negative size prefixes, unknown API keys and versions, large
frames announced but never sent, and a flood of connections: each bad connection is closed (or
answered, for an unsupported ApiVersions) while a well-behaved connection keeps getting ApiVersions
and Metadata answers throughout, and the broker's RSS stays bounded.
"""

from __future__ import annotations

import os
import random
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

import kbroker.protocol as protocol
from kbroker.protocol import RequestHeader
from kbroker.protocol.messages.api_versions import ApiVersionsRequest
from kbroker.protocol.messages.metadata import MetadataRequest
from tests.support.broker import KBroker

pytestmark = pytest.mark.interop

_SIZE = struct.Struct(">i")


def _connect(broker: KBroker, timeout: float = 10.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", broker.port), timeout=timeout)


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def _read_frame(s: socket.socket) -> bytes:
    return _recv_exact(s, _SIZE.unpack(_recv_exact(s, 4))[0])


def _api_versions(corr: int, version: int = 3) -> bytes:
    header = RequestHeader(api_key=18, api_version=version, correlation_id=corr, client_id="robust")
    return protocol.encode_request_frame(
        header, ApiVersionsRequest(client_software_name="robustness", client_software_version="1")
    )


def _metadata(corr: int, version: int = 12) -> bytes:
    header = RequestHeader(api_key=3, api_version=version, correlation_id=corr, client_id="robust")
    return protocol.encode_request_frame(header, MetadataRequest(topics=[], allow_auto_topic_creation=False))


def _closed_by_peer(s: socket.socket, timeout: float = 10.0) -> bool:
    s.settimeout(timeout)
    try:
        while s.recv(65536):
            pass
        return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


class Monitor:
    """A well-behaved client asking ApiVersions and Metadata in a loop on its own connection."""

    def __init__(self, broker: KBroker) -> None:
        self.broker = broker
        self.answers = 0
        self.errors: list[str] = []
        self.max_latency = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        corr = 0
        with _connect(self.broker, timeout=15) as s:
            while not self._stop.is_set():
                corr += 1
                started = time.monotonic()
                try:
                    if corr % 2:
                        s.sendall(_api_versions(corr))
                        got, body = protocol.decode_response_frame(18, 3, _read_frame(s))
                    else:
                        s.sendall(_metadata(corr))
                        got, body = protocol.decode_response_frame(3, 12, _read_frame(s))
                except Exception as e:  # noqa: BLE001 - recorded and asserted on by the test
                    self.errors.append(f"request {corr}: {e!r}")
                    return
                if got != corr or getattr(body, "error_code", 0) != 0:
                    self.errors.append(f"request {corr}: correlation {got}, body {body!r}")
                    return
                self.answers += 1
                self.max_latency = max(self.max_latency, time.monotonic() - started)
                time.sleep(0.01)

    @contextmanager
    def running(self) -> Iterator[Monitor]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(30)


def _attack_garbage(broker: KBroker, rng: random.Random) -> None:
    for _ in range(30):
        with _connect(broker) as s:
            n = rng.randint(1, 200)
            s.sendall(_SIZE.pack(n) + rng.randbytes(n))
            assert _closed_by_peer(s)


def _attack_truncated(broker: KBroker) -> None:
    frame = _metadata(1)
    for cut in (2, 4, 7, 11, len(frame) - 1):
        s = _connect(broker)
        s.sendall(frame[:cut])
        s.close()  # the client goes away mid-frame
    # a header that claims more than the frame holds
    with _connect(broker) as s:
        s.sendall(_SIZE.pack(6) + frame[4:10])
        assert _closed_by_peer(s)


def _attack_sizes(broker: KBroker) -> None:
    for size in (0x7FFFFFFF, 104857601, 500_000_000, -1, -0x80000000, 0):
        with _connect(broker) as s:
            s.sendall(_SIZE.pack(size))
            assert _closed_by_peer(s), f"size prefix {size} did not close the connection"


def _attack_unknown_keys_and_versions(broker: KBroker) -> None:
    with _connect(broker) as s:  # unsupported ApiVersions version: a v0 UNSUPPORTED_VERSION answer
        frame = bytearray(_api_versions(5))
        struct.pack_into(">h", frame, 6, 99)
        s.sendall(frame)
        corr, body = protocol.decode_response_frame(18, 0, _read_frame(s))
        assert corr == 5 and body.error_code == 35
    for key, version in ((3, 99), (9999, 0), (-1, 0), (3, -5)):
        with _connect(broker) as s:
            payload = struct.pack(">hhi", key, version, 7) + struct.pack(">h", -1) + b"\x00" * 8
            s.sendall(_SIZE.pack(len(payload)) + payload)
            assert _closed_by_peer(s), f"api key {key} v{version} did not close the connection"


def _attack_announced_but_never_sent(broker: KBroker) -> list[socket.socket]:
    # Frames of ~100 MB announced, a few bytes sent, connection kept open: a slowloris that must not
    # cost the broker 100 MB each.
    held = []
    for _ in range(20):
        s = _connect(broker)
        s.sendall(_SIZE.pack(104_000_000) + b"\x00\x03")
        held.append(s)
    return held


def _attack_flood(broker: KBroker, count: int = 300) -> None:
    opened = []
    deadline = time.monotonic() + 60
    for i in range(count):
        if time.monotonic() > deadline:
            break
        s = _connect(broker)
        if i % 3 == 0:
            s.sendall(_api_versions(i))
        opened.append(s)
    for i, s in enumerate(opened):
        if i % 3 == 0:
            corr, body = protocol.decode_response_frame(18, 3, _read_frame(s))
            assert corr == i and body.error_code == 0
        s.close()


def test_broker_survives_hostile_clients(kbroker: KBroker) -> None:
    rng = random.Random(4242)
    rss_before = kbroker.rss_kb()
    with Monitor(kbroker).running() as monitor:
        time.sleep(0.2)
        _attack_garbage(kbroker, rng)
        _attack_truncated(kbroker)
        _attack_sizes(kbroker)
        _attack_unknown_keys_and_versions(kbroker)
        held = _attack_announced_but_never_sent(kbroker)
        _attack_flood(kbroker)
        time.sleep(0.5)
        rss_during = kbroker.rss_kb()
        for s in held:
            s.close()
        time.sleep(0.3)
    print(
        f"monitor answers: {monitor.answers}, worst latency {monitor.max_latency * 1000:.0f} ms; RSS before "
        f"{rss_before} kB, during {rss_during} kB, after {kbroker.rss_kb()} kB"
    )
    assert not monitor.errors, monitor.errors
    assert monitor.answers > 20, f"only {monitor.answers} monitor answers"
    assert kbroker.is_running()
    # 20 connections announced ~2 GB in total; the broker must not have grown anywhere near that.
    growth_mb = (max(rss_during, kbroker.rss_kb()) - rss_before) / 1024
    assert growth_mb < 100, f"RSS grew by {growth_mb:.0f} MB (before {rss_before} kB, during {rss_during} kB)"
    assert "Traceback" not in kbroker.log_text(), kbroker.log_text()[-5000:]


def test_pipelined_garbage_after_valid_requests(kbroker: KBroker) -> None:
    # Valid requests followed by garbage on one connection: the valid ones are answered, then the
    # connection closes; another client is unaffected.
    with _connect(kbroker) as s:
        s.sendall(_api_versions(1) + _metadata(2) + _SIZE.pack(10) + os.urandom(10))
        assert protocol.decode_response_frame(18, 3, _read_frame(s))[0] == 1
        assert protocol.decode_response_frame(3, 12, _read_frame(s))[0] == 2
        assert _closed_by_peer(s)
    with _connect(kbroker) as s:
        s.sendall(_api_versions(3))
        assert protocol.decode_response_frame(18, 3, _read_frame(s))[0] == 3


def test_stock_asyncio_loop_broker(tmp_path) -> None:
    # KBROKER_EVENT_LOOP=asyncio: the broker without uvloop (selector loop) serves and survives the same.
    broker = KBroker(tmp_path / "asyncio-broker", env={"KBROKER_EVENT_LOOP": "asyncio"})
    with broker:
        with Monitor(broker).running() as monitor:
            _attack_garbage(broker, random.Random(7))
            _attack_sizes(broker)
            time.sleep(0.3)
        assert not monitor.errors, monitor.errors
        assert monitor.answers > 5
        with _connect(broker) as s:
            s.sendall(_api_versions(1) + _metadata(2))
            assert protocol.decode_response_frame(18, 3, _read_frame(s))[0] == 1
            assert protocol.decode_response_frame(3, 12, _read_frame(s))[0] == 2
    assert "on the asyncio event loop" in broker.log_text()
    assert "Traceback" not in broker.log_text()
