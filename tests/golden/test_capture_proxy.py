"""CaptureProxy records frames faithfully: forwarding is byte-exact, files are named by the
request's api key and version, responses pair by correlation id (a request without a response,
like Produce acks=0, must not shift the pairing), and a connection keeps its accept-time label."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.golden.capture_proxy import CaptureProxy


def _read_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        assert chunk, "unexpected end of stream"
        buf += chunk
    return buf


def _request(api_key: int, version: int, correlation_id: int, payload: bytes) -> bytes:
    frame = struct.pack(">hhih", api_key, version, correlation_id, 4) + b"test" + payload
    return struct.pack(">i", len(frame)) + frame


class FakeBroker:
    """Answers every request with `correlation_id + b"resp:" + payload-length`, except requests
    whose api key is 0 (Produce) and whose payload starts with b"acks0", which get no answer."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        with conn:
            while True:
                head = conn.recv(4, socket.MSG_WAITALL)
                if len(head) < 4:
                    return
                frame = _read_exact(conn, struct.unpack(">i", head)[0])
                api_key, _, correlation_id = struct.unpack_from(">hhi", frame)
                payload = frame[14:]
                if api_key == 0 and payload.startswith(b"acks0"):
                    continue
                body = struct.pack(">i", correlation_id) + b"resp:" + str(len(payload)).encode()
                conn.sendall(struct.pack(">i", len(body)) + body)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[tuple[CaptureProxy, int]]:
    broker = FakeBroker()
    proxy = CaptureProxy(tmp_path, ("127.0.0.1", broker.port))
    port = proxy.start()
    yield proxy, port
    proxy.stop()
    broker.close()


def _roundtrip(sock: socket.socket, data: bytes) -> bytes:
    sock.sendall(data)
    size = struct.unpack(">i", _read_exact(sock, 4))[0]
    return _read_exact(sock, size)


def test_frames_are_recorded_and_named_by_api(proxy: tuple[CaptureProxy, int], tmp_path: Path) -> None:
    capture, port = proxy
    capture.label = "client-a"
    with socket.create_connection(("127.0.0.1", port)) as sock:
        assert _roundtrip(sock, _request(18, 4, 1, b"")) == struct.pack(">i", 1) + b"resp:0"
        assert _roundtrip(sock, _request(3, 12, 2, b"x" * 10)) == struct.pack(">i", 2) + b"resp:10"
    assert capture.wait_quiet(5)
    files = sorted(p.name for p in (tmp_path / "client-a").iterdir())
    assert files == ["0001-ApiVersions-v4.req", "0001-ApiVersions-v4.resp",
                     "0002-Metadata-v12.req", "0002-Metadata-v12.resp"]
    assert (tmp_path / "client-a" / "0002-Metadata-v12.req").read_bytes() == _request(3, 12, 2, b"x" * 10)[4:]
    assert (tmp_path / "client-a" / "0002-Metadata-v12.resp").read_bytes() == struct.pack(">i", 2) + b"resp:10"


def test_responses_pair_by_correlation_id_across_a_request_without_response(
    proxy: tuple[CaptureProxy, int], tmp_path: Path
) -> None:
    capture, port = proxy
    capture.label = "acks0"
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(_request(0, 9, 10, b"acks0-records"))
        assert _roundtrip(sock, _request(0, 9, 11, b"acks1")) == struct.pack(">i", 11) + b"resp:5"
    assert capture.wait_quiet(5)
    by_seq = {e.seq: e for e in capture.exchanges if e.label == "acks0"}
    assert by_seq[1].correlation_id == 10 and by_seq[1].response_file is None
    assert by_seq[2].response_file == tmp_path / "acks0" / "0002-Produce-v9.resp"
    assert not (tmp_path / "acks0" / "0001-Produce-v9.resp").exists()


def test_connection_keeps_the_label_it_was_accepted_under(
    proxy: tuple[CaptureProxy, int], tmp_path: Path
) -> None:
    capture, port = proxy
    capture.label = "first"
    with socket.create_connection(("127.0.0.1", port)) as sock:
        _roundtrip(sock, _request(18, 3, 1, b""))
        capture.label = "second"
        _roundtrip(sock, _request(18, 3, 2, b""))
    assert capture.wait_quiet(5)
    assert sorted(p.name for p in (tmp_path / "first").iterdir()) == [
        "0001-ApiVersions-v3.req", "0001-ApiVersions-v3.resp",
        "0002-ApiVersions-v3.req", "0002-ApiVersions-v3.resp",
    ]
    assert not (tmp_path / "second").exists()
