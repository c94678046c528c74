"""Readiness probe for a Kafka-compatible broker: one Metadata v1 request over a raw socket.

Owns nothing of kbroker and imports none of it (it checks the reference Apache Kafka as well), so
the request is encoded by hand. Exit 0 and print the number of registered brokers when the broker
answers with at least one broker; exit 1 otherwise.

Usage: python3 metadata_probe.py HOST PORT [TIMEOUT_S]
"""

from __future__ import annotations

import socket
import struct
import sys

_METADATA = 3
_HEADER = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length


def _read_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed mid-response")
        buf += chunk
    return bytes(buf)


def probe(host: str, port: int, timeout: float) -> int:
    """Number of brokers in a Metadata v1 response (0 while a KRaft broker is still fenced)."""
    client_id = b"kbroker-probe"
    # Metadata v1 body: topics = null (all topics), an int32 array length of -1.
    body = _HEADER.pack(_METADATA, 1, 7, len(client_id)) + client_id + struct.pack(">i", -1)
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        (size,) = struct.unpack(">i", _read_exact(sock, 4))
        frame = _read_exact(sock, size)
    correlation_id, broker_count = struct.unpack_from(">ii", frame, 0)
    if correlation_id != 7:
        raise ValueError(f"unexpected correlation id {correlation_id}")
    return int(broker_count)


def main(argv: list[str]) -> int:
    host, port = argv[1], int(argv[2])
    timeout = float(argv[3]) if len(argv) > 3 else 5.0
    try:
        brokers = probe(host, port, timeout)
    except (OSError, ValueError, struct.error) as exc:
        print(f"metadata probe failed: {exc}", file=sys.stderr)
        return 1
    print(brokers)
    return 0 if brokers > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
