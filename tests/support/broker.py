"""`KBroker`: a real `python -m kbroker serve` process for tests, on a free loopback port.

Owns starting, stopping (SIGTERM), killing (SIGKILL) and restarting a kbroker subprocess on the same
data directory. The broker's stderr goes to `<workdir>/kbroker-N.log` (one file per start) so a failing
test can show it: `broker.log_text()`.

    broker = KBroker(tmp_path, overrides={"num.partitions": "3"})
    broker.start()
    ... broker.bootstrap ...   # "127.0.0.1:PORT"
    broker.kill(); broker.start()   # crash and recover on the same data
    broker.stop()
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_LINE = "kbroker started"

# Apache Kafka 4.x's config/server.properties (KRaft combined mode), comments dropped: tests check
# that a stock Kafka config file starts kbroker unchanged (apart from ports and paths).
KAFKA_SAMPLE_SERVER_PROPERTIES = """
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=localhost:9093
listeners=PLAINTEXT://:9092,CONTROLLER://:9093
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs=/tmp/kraft-combined-logs
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class KBrokerError(RuntimeError):
    pass


class KBroker:
    """One kbroker process (restartable). Data lives in `workdir/data` across restarts."""

    def __init__(
        self,
        workdir: Path,
        overrides: Mapping[str, str] | None = None,
        *,
        port: int | None = None,
        python: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_dir = self.workdir / "data"
        self.overrides = {str(k): str(v) for k, v in (overrides or {}).items()}
        self.port = port or free_port()
        self.python = python or sys.executable
        self.env = dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.stderr_path: Path | None = None
        self._starts = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise KBrokerError("kbroker is not running")
        return self.proc.pid

    def command(self) -> list[str]:
        props = {
            "node.id": "1",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.log_dir),
            # Tests want retention and checkpoints to run when they ask, not 30 s after start.
            "log.initial.task.delay.ms": "0",
        }
        props.update(self.overrides)
        cmd = [self.python, "-m", "kbroker", "serve"]
        for k, v in props.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    def start(self, timeout: float = 30.0) -> KBroker:
        """Start (or restart on the same data) and wait until the broker says it is serving."""
        if self.proc is not None and self.proc.poll() is None:
            raise KBrokerError("kbroker is already running")
        self._starts += 1
        self.stderr_path = self.workdir / f"kbroker-{self._starts}.log"
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        env.update(self.env)
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                self.command(), cwd=self.workdir, stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=env
            )
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        assert self.proc is not None and self.stderr_path is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise KBrokerError(
                    f"kbroker exited with code {self.proc.returncode} while starting:\n{self.log_text()}"
                )
            if READY_LINE in self.stderr_path.read_text(errors="replace"):
                return
            time.sleep(0.05)
        self.kill()
        raise KBrokerError(f"kbroker did not start within {timeout}s:\n{self.log_text()}")

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait: the clean shutdown path. Returns the exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise KBrokerError(
                    f"kbroker did not stop within {timeout}s after SIGTERM:\n{self.log_text()}"
                ) from None
        code = self.proc.returncode
        self.proc = None
        return code

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed or checkpointed."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc = None

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def rss_kb(self) -> int:
        """Resident set size (VmRSS) of the broker process, in KiB (Linux)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise KBrokerError("no VmRSS in /proc status")

    def log_text(self) -> str:
        if self.stderr_path is None or not self.stderr_path.exists():
            return ""
        return self.stderr_path.read_text(errors="replace")

    def __enter__(self) -> KBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        try:
            if self.is_running():
                self.stop()
        finally:
            self.kill()


@contextmanager
def running_kbroker(workdir: Path, overrides: Mapping[str, str] | None = None) -> Iterator[KBroker]:
    """One started broker for a whole module (a module-scoped fixture: tests that never restart it and
    use topics and groups of their own share it instead of starting one each); on the way out it must
    stop cleanly on SIGTERM (exit code 0), as the interop `kbroker` fixture checks."""
    broker = KBroker(workdir, overrides).start()
    try:
        yield broker
    finally:
        stop_cleanly(broker)


def stop_cleanly(broker: KBroker) -> None:
    """SIGTERM a running broker and check it exited with 0; SIGKILL whatever is left either way."""
    try:
        if broker.is_running():
            code = broker.stop()
            assert code == 0, f"kbroker exited with {code} on SIGTERM:\n{broker.log_text()}"
    finally:
        broker.kill()
