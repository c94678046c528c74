"""The two brokers under test, started fresh, stopped after each repetition.

Pinned (the default, ``cpus=BROKER_CPU``) the broker gets core 0 only: every JVM thread of Kafka, or
kbroker's single process. ``cpus=None`` leaves it unpinned, free to use every core (what a user
sees, with the load generator sharing the machine)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Protocol

ROOT = Path(__file__).resolve().parent.parent
BROKER_CPU = "0"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


class Target(Protocol):
    name: str
    bootstrap: str
    pid: int

    def start(self, workdir: Path, port: int | None = None) -> None: ...
    def stop(self) -> None: ...


def _override_args(overrides: dict[str, str]) -> list[str]:
    return [a for k, v in overrides.items() for a in ("--override", f"{k}={v}")]


class KBrokerTarget:
    """kbroker as a user runs it: `python -m kbroker serve` with overrides, pinned with taskset."""

    name = "kbroker"

    def __init__(self, overrides: dict[str, str] | None = None, cpus: str | None = BROKER_CPU) -> None:
        self.bootstrap, self.pid = "", 0
        self.overrides = dict(overrides or {})
        self.cpus = cpus
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, workdir: Path, port: int | None = None) -> None:
        port = port or free_port()
        self._log = open(workdir / "kbroker.log", "wb")  # noqa: SIM115 - closed in stop()
        self._proc = subprocess.Popen(
            [*(["taskset", "-c", self.cpus] if self.cpus else []), sys.executable, "-m", "kbroker", "serve",
             "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
             "--override", f"log.dirs={workdir / 'data'}",
             "--override", "num.partitions=1", *_override_args(self.overrides)],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT)
        self.pid = self._proc.pid  # taskset execs the broker, so this is the broker's pid
        wait_for_port(port, 60)
        self.bootstrap = f"127.0.0.1:{port}"

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(60)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._log.close()


class KafkaTarget:
    """The reference Apache Kafka 4.3 (KRaft, combined) from benchmarks/reference/kafka.sh."""

    name = "kafka"

    def __init__(self, overrides: dict[str, str] | None = None, cpus: str | None = BROKER_CPU) -> None:
        self.bootstrap, self.pid, self._dir = "", 0, Path()
        self.overrides = dict(overrides or {})  # kafka.sh appends them, so they win
        self.cpus = cpus

    def start(self, workdir: Path, port: int | None = None) -> None:
        self._dir = workdir / "kafka"
        out = subprocess.run(["bash", str(ROOT / "benchmarks/reference/kafka.sh"), "start", "--dir", str(self._dir),
                              *(["--port", str(port)] if port else []),
                              "--override", "num.partitions=1", *_override_args(self.overrides)],
                             capture_output=True, text=True, timeout=180, check=True)
        self.bootstrap = out.stdout.strip().splitlines()[-1].split("=", 1)[1]
        self.pid = int((self._dir / "kafka.pid").read_text().strip())
        # Pin every JVM thread to the broker core, like kbroker's single process.
        if self.cpus:
            subprocess.run(["taskset", "-a", "-cp", self.cpus, str(self.pid)], capture_output=True, check=True)

    def stop(self) -> None:
        subprocess.run(["bash", str(ROOT / "benchmarks/reference/kafka.sh"), "stop", "--dir", str(self._dir)],
                       capture_output=True, timeout=120)
