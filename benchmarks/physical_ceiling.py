"""The machine's physical ceiling for a broker's data path, measured without any broker.

Owns nothing of kbroker and imports none of it: it says how fast bytes can move on this machine
over loopback TCP at all, so broker figures (kbroker's and the reference Kafka's) can be read
against it. Three paths, each into a loopback TCP socket whose reader (a separate process)
discards what it receives:

- `tcp_send`: sendall() of one large in-memory buffer, repeatedly (the produce-side ceiling);
- `sendfile`: os.sendfile() of a page-cached file (the zero-copy Fetch path);
- `read_send`: readinto() of the same file + sendall() (the copying fallback).

Usage: python benchmarks/physical_ceiling.py [--file-mib 256] [--tcp-mib 2048] [--repeat 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path

MIB = 1024 * 1024
CHUNK = 4 * MIB


def _drain(listener: socket.socket, result: Connection) -> None:
    """Child process: accept one connection, read to EOF, report the byte count."""
    conn, _ = listener.accept()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    total = 0
    while True:
        n = conn.recv_into(view)
        if n == 0:
            break
        total += n
    conn.close()
    result.send(total)


def _measure(send: Callable[[socket.socket], int]) -> tuple[float, int]:
    """Run `send` into a fresh loopback connection; (seconds until the reader saw EOF, bytes)."""
    listener = socket.create_server(("127.0.0.1", 0))
    parent_end, child_end = mp.Pipe(duplex=False)
    reader = mp.get_context("fork").Process(target=_drain, args=(listener, child_end), daemon=True)
    reader.start()
    sock = socket.create_connection(listener.getsockname())
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    start = time.perf_counter()
    sent = send(sock)
    sock.shutdown(socket.SHUT_WR)
    received = parent_end.recv()
    elapsed = time.perf_counter() - start
    sock.close()
    listener.close()
    reader.join()
    if received != sent:
        raise RuntimeError(f"reader got {received} bytes, {sent} were sent")
    return elapsed, sent


def tcp_send(total: int) -> Callable[[socket.socket], int]:
    payload = memoryview(os.urandom(CHUNK))

    def send(sock: socket.socket) -> int:
        sent = 0
        while sent < total:
            sock.sendall(payload)
            sent += len(payload)
        return sent

    return send


def sendfile(path: Path) -> Callable[[socket.socket], int]:
    def send(sock: socket.socket) -> int:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            offset = 0
            while offset < size:
                offset += os.sendfile(sock.fileno(), f.fileno(), offset, size - offset)
        return size

    return send


def read_send(path: Path) -> Callable[[socket.socket], int]:
    def send(sock: socket.socket) -> int:
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        sent = 0
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(view):
                sock.sendall(view[:n])
                sent += n
        return sent

    return send


def _make_cached_file(directory: Path, mib: int) -> Path:
    path = directory / "ceiling.bin"
    block = os.urandom(MIB)
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(block)
    with open(path, "rb") as f:  # read it once so it sits in the page cache
        while f.read(CHUNK):
            pass
    return path


def run(file_mib: int, tcp_mib: int, repeat: int) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="kbroker-ceiling-") as tmp:
        path = _make_cached_file(Path(tmp), file_mib)
        cases = {"tcp_send": tcp_send(tcp_mib * MIB), "sendfile": sendfile(path), "read_send": read_send(path)}
        for name, send in cases.items():
            rates = []
            nbytes = 0
            for _ in range(repeat):
                elapsed, nbytes = _measure(send)
                rates.append(nbytes / MIB / elapsed)
            results[name] = {
                "bytes": float(nbytes),
                "median_mib_s": round(statistics.median(rates), 1),
                "best_mib_s": round(max(rates), 1),
                "worst_mib_s": round(min(rates), 1),
            }
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file-mib", type=int, default=256, help="size of the page-cached file")
    parser.add_argument("--tcp-mib", type=int, default=2048, help="bytes sent per tcp_send run")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    results = run(args.file_mib, args.tcp_mib, args.repeat)
    print(f"{'path':<10} {'MiB sent':>9} {'median MiB/s':>13} {'best':>8} {'worst':>8}")
    for name, r in results.items():
        print(f"{name:<10} {r['bytes'] / MIB:>9.0f} {r['median_mib_s']:>13.1f} {r['best_mib_s']:>8.1f} "
              f"{r['worst_mib_s']:>8.1f}")
    document = {"cpu_count": os.cpu_count(), "python": sys.version.split()[0], "results": results}
    print(json.dumps(document))
    if args.json:
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
