"""A minimal blocking Kafka client over kbroker's own codecs, for tests that need exact requests.

Real clients hide what a test must control (an unknown topic next to a good one in one Produce,
an unsupported version, a corrupted CRC). This client sends exactly the request object it is given
and returns the decoded response, or the raw frame. It is test tooling, not a product client.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from kbroker.protocol import API_SPECS, RequestHeader, decode_response_frame, encode_request_frame

_SIZE = struct.Struct(">i")


class ConnectionClosed(Exception):
    """The broker closed the connection instead of answering."""


class RawKafkaClient:
    def __init__(self, bootstrap: str, *, client_id: str = "kbroker-tests", timeout: float = 30.0) -> None:
        host, _, port = bootstrap.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self._correlation_id = 0

    def __enter__(self) -> RawKafkaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def next_correlation_id(self) -> int:
        self._correlation_id += 1
        return self._correlation_id

    def send(self, api_key: int, api_version: int, body: Any) -> int:
        """Send one request; returns its correlation id (no wait for the response)."""
        cid = self.next_correlation_id()
        header = RequestHeader(api_key=api_key, api_version=api_version, correlation_id=cid,
                               client_id=self.client_id)
        self.sock.sendall(encode_request_frame(header, body))
        return cid

    def send_raw(self, frame: bytes) -> None:
        """Send bytes as they are (a test's malformed frame, size prefix included)."""
        self.sock.sendall(frame)

    def recv_frame(self) -> bytes:
        size = _SIZE.unpack(self._recv_exactly(4))[0]
        return self._recv_exactly(size)

    def request(self, api_key: int, api_version: int, body: Any) -> Any:
        """Send a request and return the decoded response body (checks the correlation id)."""
        cid = self.send(api_key, api_version, body)
        got_cid, response = decode_response_frame(api_key, api_version, self.recv_frame())
        assert got_cid == cid, f"correlation id {got_cid} != {cid}"
        return response

    def is_closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True when the broker closes the connection (EOF or reset) within ``timeout``."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    def _recv_exactly(self, n: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < n:
            chunk = self.sock.recv(n - len(chunks))
            if not chunk:
                raise ConnectionClosed(f"connection closed after {len(chunks)} of {n} bytes")
            chunks += chunk
        return bytes(chunks)


def request_class(api_key: int) -> Any:
    return API_SPECS[api_key].request_class
