"""A static KRaft controller quorum whose voters are kbroker and Apache Kafka 4.3.1 controllers.

Owns: the voter set (`controller.quorum.voters` naming both kinds), formatting each node with its own
kind's tool (`kbroker storage format` / `kafka-storage format`, one cluster id), starting, killing
(SIGKILL) and restarting a voter of either kind, a kbroker broker and an Apache Kafka broker served by
the quorum, and reading who leads from the nodes' own logs (kbroker: `Raft leader is now N in epoch E`;
Kafka's QuorumController: `In the new epoch E, the leader is N.`). Use::

    q = MixedQuorum(tmp_path, "kkj")       # voters 1, 2: kbroker; 3: Apache Kafka
    q.start_controllers()
    q.add_kbroker_broker(11); q.add_kafka_broker(12); q.start_brokers()
    epoch, leader = q.wait_leader()
    q.kill(leader); q.wait_leader(after_epoch=epoch)
    q.stop_all()
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

from tests.support.broker import KBroker
from tests.support.java import run_java_main
from tests.support.kafka_cluster import KafkaNode, new_cluster_id
from tests.support.storage_format import format_node

KBROKER_LEADER = re.compile(r"Raft leader is now (\d+) in epoch (\d+)")
KAFKA_LEADER = re.compile(r"In the new epoch (\d+), the leader is (\d+)\.")
COMMON = {
    "controller.listener.names": "CONTROLLER",
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
}

Node = KBroker | KafkaNode


def metadata_quorum(option: str, bootstrap: str, *args: str) -> str:
    """Kafka 4.3.1's `kafka-metadata-quorum` with `--bootstrap-controller` or `--bootstrap-server`
    (`option`) and its arguments; its standard output, asserting it succeeded."""
    proc = run_java_main("kafka-metadata-quorum", [option, bootstrap, *args], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def kbroker_format(node: KBroker, cluster_id: str, props: dict[str, str], *extra: str) -> str:
    return format_node(node, cluster_id, props, *extra)


class MixedQuorum:
    """Voters `1..len(kinds)`, `k` a kbroker controller and `j` an Apache Kafka controller."""

    def __init__(self, workdir: Path, kinds: str, controller_overrides: dict[str, str] | None = None,
                 *, dynamic: bool = False) -> None:
        """`dynamic`: a KIP-853 quorum (kraft.version 1): every controller formatted with the same
        `--initial-controllers` (fresh directory ids), every node configured with
        `controller.quorum.bootstrap.servers` instead of `controller.quorum.voters`."""
        self.workdir = Path(workdir)
        self.dynamic = dynamic
        self.cluster_id = new_cluster_id()
        self.controller_overrides = dict(controller_overrides or {})
        self.controllers: dict[int, Node] = {}
        for i, kind in enumerate(kinds, start=1):
            if kind == "k":
                self.controllers[i] = KBroker(self.workdir / f"kbroker-controller-{i}")
            else:
                # KafkaNode reads workdir, cluster_id and voters from its "cluster": this object.
                self.controllers[i] = KafkaNode(self, i, "controller", self.controller_overrides)  # type: ignore[arg-type]
        self.brokers: dict[int, Node] = {}
        self.directory_ids = {i: new_cluster_id() for i in self.controllers}  # Kafka's Uuid strings
        if dynamic:
            self.controller_overrides["controller.quorum.bootstrap.servers"] = self.bootstrap_controllers(False)
            for n in self.controllers.values():
                if isinstance(n, KafkaNode):
                    n.overrides.update(self.controller_overrides)

    @property
    def initial_controllers(self) -> str:
        return ",".join(f"{i}@127.0.0.1:{n.port}:{self.directory_ids[i]}" for i, n in self.controllers.items())

    def _quorum_keys(self) -> dict[str, str]:
        if self.dynamic:
            return {"controller.quorum.bootstrap.servers": self.bootstrap_controllers(False)}
        return {"controller.quorum.voters": self.voters}

    # -- the voter set ------------------------------------------------------------------------------

    @property
    def voters(self) -> str:
        if self.dynamic:
            return ""  # KafkaNode writes this key: empty in a dynamic quorum
        return ",".join(f"{i}@127.0.0.1:{n.port}" for i, n in self.controllers.items())

    def bootstrap_controllers(self, only_running: bool = True) -> str:
        return ",".join(n.bootstrap for n in self.controllers.values() if not only_running or self.is_running(n))

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def kind(self, node_id: int) -> str:
        return "kbroker" if isinstance(self.controllers[node_id], KBroker) else "kafka"

    @staticmethod
    def is_running(node: Node) -> bool:
        return node.proc is not None and node.proc.poll() is None

    # -- starting and stopping ----------------------------------------------------------------------

    def _kbroker_controller_props(self, node_id: int, node: KBroker) -> dict[str, str]:
        return {**self._quorum_keys(), **COMMON, "process.roles": "controller",
                "node.id": str(node_id), "listeners": f"CONTROLLER://127.0.0.1:{node.port}",
                "log.dirs": str(node.log_dir), "broker.session.timeout.ms": "4000", **self.controller_overrides}

    def start_controllers(self, timeout: float = 120.0) -> None:
        for i, n in self.controllers.items():
            if isinstance(n, KBroker):
                n.overrides = self._kbroker_controller_props(i, n)
                extra = ("--initial-controllers", self.initial_controllers) if self.dynamic else ()
                kbroker_format(n, self.cluster_id, n.overrides, *extra)
            elif self.dynamic:
                n.config_file.write_text("".join(f"{k}={v}\n" for k, v in n.properties().items()))
                proc = run_java_main("kafka-storage", ["format", "-t", self.cluster_id, "-c", str(n.config_file),
                                                       "--initial-controllers", self.initial_controllers],
                                     timeout=120)
                assert proc.returncode == 0, proc.stdout + proc.stderr
            else:
                n.format()
        # kbroker voters first (they start in a second or two); a Kafka controller then joins the
        # epoch they elected, or the election if they are not a majority.
        for n in self.controllers.values():
            if isinstance(n, KBroker):
                n.start(timeout=60)
        for n in self.controllers.values():
            if isinstance(n, KafkaNode):
                n.start(timeout)

    def add_kbroker_broker(self, node_id: int) -> KBroker:
        b = KBroker(self.workdir / f"kbroker-broker-{node_id}")
        b.overrides = {**self._quorum_keys(), **COMMON, "process.roles": "broker",
                       "node.id": str(node_id), "listeners": f"PLAINTEXT://127.0.0.1:{b.port}",
                       "log.dirs": str(b.log_dir), "broker.heartbeat.interval.ms": "500",
                       "offsets.topic.replication.factor": "1", "group.initial.rebalance.delay.ms": "0"}
        kbroker_format(b, self.cluster_id, b.overrides)
        self.brokers[node_id] = b
        return b

    def add_kafka_broker(self, node_id: int) -> KafkaNode:
        node = KafkaNode(self, node_id, "broker", self._quorum_keys() if self.dynamic else None)  # type: ignore[arg-type]
        self.brokers[node_id] = node
        return node

    def start_brokers(self) -> None:
        for b in self.brokers.values():
            if isinstance(b, KBroker):
                b.start(timeout=90)  # returns once the active controller unfenced it
            else:
                b.start(timeout=150)  # "Kafka Server started": registered and unfenced

    def start(self, node_id: int) -> None:
        n = self.controllers[node_id]
        n.start(60) if isinstance(n, KBroker) else n.start(150)

    def kill(self, node_id: int) -> None:
        self.controllers[node_id].kill()

    def stop_all(self) -> None:
        """SIGTERM the brokers (their controlled shutdown needs the controllers), then the controllers;
        anything still alive after 15 s is killed."""
        for group in (list(self.brokers.values()), list(self.controllers.values())):
            for node in group:
                if self.is_running(node):
                    if isinstance(node, KafkaNode):
                        os.killpg(node.proc.pid, signal.SIGTERM)  # type: ignore[union-attr]
                    else:
                        node.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
            for node in group:
                try:
                    if node.proc is not None:
                        node.proc.wait(15)
                except subprocess.TimeoutExpired:
                    pass
                node.kill()

    # -- who leads ----------------------------------------------------------------------------------

    def _logs(self, node: Node) -> str:
        if isinstance(node, KBroker):
            return "".join(p.read_text(errors="replace") for p in sorted(node.workdir.glob("kbroker-*.log")))
        return node.server_log()

    def leaders(self) -> list[tuple[int, int]]:
        """(epoch, leader) of every leader any controller logged, sorted."""
        out: set[tuple[int, int]] = set()
        for n in self.controllers.values():
            text = self._logs(n)
            out.update((int(m.group(2)), int(m.group(1))) for m in KBROKER_LEADER.finditer(text))
            out.update((int(m.group(1)), int(m.group(2))) for m in KAFKA_LEADER.finditer(text))
        return sorted(out)

    def wait_leader(self, after_epoch: int = 0, timeout: float = 60.0) -> tuple[int, int]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            newer = [x for x in self.leaders() if x[0] > after_epoch and self.is_running(self.controllers[x[1]])]
            if newer:
                return newer[-1]
            time.sleep(0.05)
        raise AssertionError(f"no leader after epoch {after_epoch} within {timeout}s: {self.leaders()}")

    # -- Kafka's tools ------------------------------------------------------------------------------

    def describe(self, what: str, bootstrap: str | None = None) -> subprocess.CompletedProcess[str]:
        return run_java_main("kafka-metadata-quorum", ["--bootstrap-controller",
                                                       bootstrap or self.bootstrap_controllers(),
                                                       "describe", what], timeout=120)

    def metadata_dir(self, node_id: int) -> Path:
        n = self.controllers[node_id]
        return (n.log_dir if isinstance(n, KBroker) else n.data) / "__cluster_metadata-0"

    def dump_log(self, node_id: int) -> list[tuple[int, str]]:
        """`kafka-dump-log --cluster-metadata-decoder` of the node's metadata log: (offset, the record's
        line: create time, sizes, decoded payload or control record) of every record."""
        files = sorted(str(p) for p in self.metadata_dir(node_id).glob("*.log"))
        proc = run_java_main("kafka-dump-log", ["--cluster-metadata-decoder", "--files", ",".join(files)],
                             timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        out = []
        for line in proc.stdout.splitlines():
            m = re.match(r"\| offset: (\d+) (.*)$", line)
            if m:
                out.append((int(m.group(1)), m.group(2)))
        return out


__all__ = ["MixedQuorum", "kbroker_format"]
