"""Checks `kbroker spark` runs before it starts a JVM, so a user's mistake costs seconds, not minutes.

Without them, a job pointed at an address where no broker listens starts Spark, retries metadata for
the Kafka source's default timeouts and ends minutes later in a long stack trace; a machine without
Java fails inside Maven with an empty message. Each check answers with one line that names the cause
and what to do.

- `check_bootstrap`: one ApiVersions v0 round trip to each bootstrap address (a second or two at
  most). ApiVersions v0 is the request every Kafka broker answers before anything else (KIP-35) and
  needs no body; the bytes are built here because spark/ talks to brokers only through Kafka clients
  and must not import kbroker's protocol package (the import contract in pyproject.toml).
- `check_java`: `java` on PATH or under JAVA_HOME, and that it runs.
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
import time
from pathlib import Path

_API_VERSIONS = 18
_CORRELATION_ID = 0x6B62  # "kb"
_CLIENT_ID = b"kbroker-spark-preflight"


class PreflightError(RuntimeError):
    """A check failed; the message is the one line shown to the user."""


def _api_versions_v0() -> bytes:
    body = struct.pack(">hhih", _API_VERSIONS, 0, _CORRELATION_ID, len(_CLIENT_ID)) + _CLIENT_ID
    return struct.pack(">i", len(body)) + body


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed the connection without answering")
        data += chunk
    return bytes(data)


def probe(address: str, timeout_s: float = 2.0) -> str | None:
    """None when a Kafka broker answers ApiVersions at `address`, else why not (a short phrase)."""
    host, sep, port_text = address.strip().rpartition(":")
    if not sep or not port_text.isdigit():
        return "not a host:port address"
    host = host.strip("[]")
    deadline = time.monotonic() + timeout_s
    try:
        with socket.create_connection((host, int(port_text)), timeout=timeout_s) as sock:
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            sock.sendall(_api_versions_v0())
            (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
            if size < 6 or size > 1 << 20:
                return "answered, but not as a Kafka broker"
            frame = _recv_exactly(sock, size)
            correlation_id, error_code = struct.unpack_from(">ih", frame)
            if correlation_id != _CORRELATION_ID:
                return "answered, but not as a Kafka broker"
            if error_code != 0:
                return f"answered ApiVersions with error code {error_code}"
            return None
    except ConnectionRefusedError:
        return "connection refused"
    except socket.gaierror as e:
        return f"cannot resolve host ({e.strerror or e})"
    except TimeoutError:
        return f"no answer within {timeout_s:g} s"
    except OSError as e:
        return e.strerror or str(e)


def check_bootstrap(bootstrap: str, timeout_s: float = 2.0) -> None:
    """Pass when at least one address of `bootstrap` (comma-separated) answers as a Kafka broker
    (a Kafka client needs only one to bootstrap); else raise PreflightError naming every address."""
    addresses = [a.strip() for a in bootstrap.split(",") if a.strip()]
    if not addresses:
        raise PreflightError("no bootstrap servers given (--bootstrap host:port)")
    failures = []
    for address in addresses:
        why = probe(address, timeout_s)
        if why is None:
            return
        failures.append(f"{address} ({why})")
    raise PreflightError(
        f"no Kafka broker answers at {', '.join(failures)}: start one with `kbroker serve` or pass "
        "--bootstrap host:port (--skip-broker-check to submit anyway)"
    )


def java_executable() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("java")
    return Path(found) if found else None


def check_java() -> None:
    """Raise PreflightError unless a Java runtime is found and runs (`java -version`)."""
    java = java_executable()
    if java is None:
        raise PreflightError("Java not found: Spark needs a Java 17 or 21 runtime; install one and put "
                             "`java` on PATH or set JAVA_HOME")
    try:
        proc = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise PreflightError(f"Java at {java} does not run: {e}") from e
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise PreflightError(f"Java at {java} does not run (exit {proc.returncode}): {last[0]}")
