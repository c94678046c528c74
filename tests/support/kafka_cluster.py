"""A KRaft cluster of Apache Kafka 4.3.1 processes (controllers and brokers) that kbroker brokers join.

Owns: writing each node's server.properties, `kafka-storage format` (one cluster id for every node,
kbroker's log dirs included), starting `kafka.Kafka` per node in the background with its logs in the
test's directory, waiting for it, stopping (SIGTERM) and killing (SIGKILL) it. Tests skip, saying why,
when Java or the jars are missing (`cluster_unavailable_reason`). Use::

    cluster = KafkaCluster(tmp_path)                 # a controller quorum of one voter (node 1)
    cluster.start_controller()
    kafka = cluster.add_kafka_broker(2).start()      # optional: an Apache Kafka broker
    kb = cluster.kbroker(3).start()                  # a kbroker broker (tests/support/broker.KBroker)
    ...
    cluster.stop_all()

Every node listens on loopback ports chosen when it is created; heap is small (`-Xmx384m`) so a
2-core machine can hold a controller and a broker JVM.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

from tests.support.broker import KBroker, free_port
from tests.support.java import (
    REPO_ROOT,
    TOOLS_LOG4J_CONFIG,
    java_classpath,
    java_executable,
    java_unavailable_reason,
    run_java_main,
)

CONTROLLER_LISTENER = "CONTROLLER"
NODE_JVM_OPTS: tuple[str, ...] = ("-Xmx384m", "-Xms128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                 "-Djava.awt.headless=true")
STARTED_LINE = "Kafka Server started"


def cluster_unavailable_reason() -> str | None:
    reason = java_unavailable_reason()
    return None if reason is None else f"Kafka cluster unavailable: {reason}"


def new_cluster_id() -> str:
    """Kafka's `Uuid.randomUuid()`: never one whose string starts with "-" (a command line would take
    `-t -abc...` for an option: kafka-storage format failed on 1 id in 64)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def _write_props(path: Path, props: Mapping[str, str]) -> None:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))


def format_storage(config_file: Path, cluster_id: str, log_path: Path) -> None:
    """`kafka-storage format -t <id> -c <config>` (also for a kbroker broker's config: it writes the
    meta.properties v1 a Kafka broker would have)."""
    proc = run_java_main("kafka-storage", ["format", "-t", cluster_id, "-c", str(config_file), "--ignore-formatted"],
                         timeout=120)
    log_path.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"kafka-storage format failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")


class KafkaNode:
    """One `kafka.Kafka` process: a controller or a broker."""

    def __init__(self, cluster: KafkaCluster, node_id: int, role: str, overrides: Mapping[str, str] | None = None):
        self.cluster = cluster
        self.node_id = node_id
        self.role = role
        self.dir = cluster.workdir / f"{role}-{node_id}"
        self.data = self.dir / "data"
        self.port = free_port()
        self.overrides = dict(overrides or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.config_file = self.dir / "server.properties"
        self.dir.mkdir(parents=True, exist_ok=True)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def properties(self) -> dict[str, str]:
        c = self.cluster
        props = {
            "process.roles": self.role,
            "node.id": str(self.node_id),
            "controller.quorum.voters": c.voters,
            "controller.listener.names": CONTROLLER_LISTENER,
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.data),
            "num.partitions": "1",
            "default.replication.factor": "1",
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        if self.role == "controller":
            props["listeners"] = f"{CONTROLLER_LISTENER}://127.0.0.1:{self.port}"
            # Fence a broker that stops heartbeating quickly (tests wait for it).
            props["broker.session.timeout.ms"] = "4000"
        else:
            props["listeners"] = f"PLAINTEXT://127.0.0.1:{self.port}"
            props["inter.broker.listener.name"] = "PLAINTEXT"
            props["broker.heartbeat.interval.ms"] = "500"
        props.update(self.overrides)
        return props

    def format(self) -> None:
        _write_props(self.config_file, self.properties())
        format_storage(self.config_file, self.cluster.cluster_id, self.dir / "format.log")

    def start(self, timeout: float = 90.0) -> KafkaNode:
        if not (self.data / "meta.properties").exists():
            self.format()
        else:
            _write_props(self.config_file, self.properties())
        logs = self.dir / "logs"
        logs.mkdir(exist_ok=True)
        log4j = self.dir / "log4j2.properties"
        log4j.write_text(
            "status = warn\n"
            "appender.file.type = File\nappender.file.name = FILE\n"
            f"appender.file.fileName = {logs / 'server.log'}\n"
            "appender.file.layout.type = PatternLayout\nappender.file.layout.pattern = [%d] %p %m (%c)%n\n"
            "rootLogger.level = info\nrootLogger.appenderRef.file.ref = FILE\n"
            "logger.request.name = kafka.request.logger\nlogger.request.level = warn\n")
        java = java_executable()
        assert java is not None
        cmd = [java, *NODE_JVM_OPTS, f"-Dlog4j2.configurationFile={log4j}", f"-Dkafka.logs.dir={logs}",
               "-cp", java_classpath(), "kafka.Kafka", str(self.config_file)]
        with open(logs / "stdout.log", "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=out, stdin=subprocess.DEVNULL, cwd=REPO_ROOT,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.role} {self.node_id} exited ({self.proc.returncode}):\n{self.log_tail()}")
            if STARTED_LINE in self.server_log():
                return self
            time.sleep(0.2)
        self.kill()
        raise RuntimeError(f"{self.role} {self.node_id} did not start within {timeout}s:\n{self.log_tail()}")

    def server_log(self) -> str:
        p = self.dir / "logs" / "server.log"
        return p.read_text(errors="replace") if p.exists() else ""

    def log_tail(self, lines: int = 40) -> str:
        text = self.server_log() + (self.dir / "logs" / "stdout.log").read_text(errors="replace") \
            if (self.dir / "logs" / "stdout.log").exists() else self.server_log()
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 60.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.proc = None


class KafkaCluster:
    """Kafka 4.3.1 controllers (a static quorum, `controller.quorum.voters`), Kafka brokers and kbroker
    brokers sharing one cluster id."""

    def __init__(self, workdir: Path, *, controllers: int = 1,
                 controller_overrides: Mapping[str, str] | None = None) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.cluster_id = new_cluster_id()
        self.controllers = [KafkaNode(self, 1 + i, "controller", controller_overrides) for i in range(controllers)]
        self.kafka_brokers: list[KafkaNode] = []
        self.kbrokers: list[KBroker] = []

    @property
    def voters(self) -> str:
        return ",".join(f"{c.node_id}@127.0.0.1:{c.port}" for c in self.controllers)

    @property
    def bootstrap_controllers(self) -> str:
        return ",".join(c.bootstrap for c in self.controllers)

    def start_controllers(self, timeout: float = 90.0) -> None:
        for c in self.controllers:
            c.format()
        for c in self.controllers:
            c.start(timeout)

    def add_kafka_broker(self, node_id: int, overrides: Mapping[str, str] | None = None) -> KafkaNode:
        node = KafkaNode(self, node_id, "broker", overrides)
        self.kafka_brokers.append(node)
        return node

    def kbroker_properties(self, node_id: int, port: int, log_dir: Path) -> dict[str, str]:
        return {
            "process.roles": "broker",
            "node.id": str(node_id),
            "controller.quorum.voters": self.voters,
            "controller.listener.names": CONTROLLER_LISTENER,
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "log.dirs": str(log_dir),
            "offsets.topic.replication.factor": "1",
            # As for the Kafka brokers above: a kbroker broker now asks for the configured factor.
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "broker.heartbeat.interval.ms": "500",
        }

    def kbroker(self, node_id: int, overrides: Mapping[str, str] | None = None, *, cluster_id: str | None = None,
                format_dirs: bool = True) -> KBroker:
        """A kbroker broker of this cluster, its log dir formatted with `kafka-storage format` (not started).
        `cluster_id` formats it for another cluster; `format_dirs=False` leaves it unformatted."""
        workdir = self.workdir / f"kbroker-{node_id}"
        kb = KBroker(workdir)
        props = self.kbroker_properties(node_id, kb.port, kb.log_dir)
        props.update(overrides or {})
        kb.overrides = props
        if format_dirs:
            config = workdir / "format.properties"
            _write_props(config, props)
            format_storage(config, cluster_id or self.cluster_id, workdir / "format.log")
        self.kbrokers.append(kb)
        return kb

    def metadata_quorum(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        return run_java_main("kafka-metadata-quorum", ["--bootstrap-controller", self.bootstrap_controllers, *args],
                             timeout=timeout)

    def stop_all(self) -> None:
        for kb in self.kbrokers:
            try:
                if kb.is_running():
                    kb.stop()
            except Exception:  # noqa: BLE001 - best effort on teardown, then kill
                pass
            kb.kill()
        for node in [*self.kafka_brokers, *self.controllers]:
            try:
                node.stop(30)
            except Exception:  # noqa: BLE001
                pass
            node.kill()


__all__ = ["KafkaCluster", "KafkaNode", "TOOLS_LOG4J_CONFIG", "cluster_unavailable_reason", "format_storage"]
