"""A JVM-free cluster: three kbroker controllers (process.roles=controller) and two kbroker brokers.

Real processes, formatted by `kbroker storage format` with one cluster id and a static voter set
(`controller.quorum.voters`). The controllers elect a leader over Kafka's Raft protocol; the brokers
(the MetadataFetcher / BrokerLifecycleManager that also join Apache Kafka's controllers) register with
the active QuorumController and are unfenced; `kafka-topics --create` through a broker creates a
topic; Kafka's `kafka-metadata-quorum --bootstrap-controller ... describe --status/--replication`
reads the quorum. Then the active controller is killed with SIGKILL: another voter takes over within
the Raft timeouts, the committed topic survives, and a new topic can be created through the brokers.
The slow test adds an Apache Kafka 4.3.1 broker to the same quorum: it registers with the kbroker
controller, forwards CreateTopics in an Envelope, and serves produce and a consumer group.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.broker import KBroker
from tests.support.java import java_unavailable_reason, run_java_main
from tests.support.kafka_cluster import KafkaNode, new_cluster_id
from tests.support.storage_format import format_node

pytestmark = [pytest.mark.interop, pytest.mark.java]

CONTROLLER_IDS = (1, 2, 3)
BROKER_IDS = (4, 5)
LEADER_LINE = re.compile(r"node (\d+) is the leader in epoch (\d+)")


@dataclass
class Quorum:
    cluster_id: str
    workdir: Path
    controllers: dict[int, KBroker] = field(default_factory=dict)
    brokers: dict[int, KBroker] = field(default_factory=dict)

    @property
    def voters(self) -> str:
        return ",".join(f"{i}@127.0.0.1:{c.port}" for i, c in self.controllers.items())

    def bootstrap_controllers(self, exclude: int | None = None) -> str:
        return ",".join(f"127.0.0.1:{c.port}" for i, c in self.controllers.items() if i != exclude)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def leaders(self) -> list[tuple[int, int]]:
        """(epoch, leader) of every 'is the leader' line any controller logged."""
        out = []
        for c in self.controllers.values():
            for m in LEADER_LINE.finditer(c.log_text()):
                out.append((int(m.group(2)), int(m.group(1))))
        return sorted(out)

    def wait_leader(self, after_epoch: int = 0, timeout: float = 30.0) -> tuple[int, int]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            newer = [x for x in self.leaders() if x[0] > after_epoch]
            if newer:
                return newer[-1]
            time.sleep(0.02)
        raise AssertionError(f"no leader after epoch {after_epoch} within {timeout}s")


def _format(quorum: Quorum, node: KBroker, props: dict[str, str]) -> None:
    format_node(node, quorum.cluster_id, props)


def _common(quorum: Quorum) -> dict[str, str]:
    return {
        "controller.quorum.voters": quorum.voters,
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
    }


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Quorum]:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(f"Kafka tools unavailable: {reason}")
    work = tmp_path_factory.mktemp("kquorum")
    q = Quorum(new_cluster_id(), work)
    for i in CONTROLLER_IDS:
        q.controllers[i] = KBroker(work / f"controller-{i}")
    for i in BROKER_IDS:
        q.brokers[i] = KBroker(work / f"broker-{i}")
    for i, c in q.controllers.items():
        c.overrides = {**_common(q), "process.roles": "controller", "node.id": str(i),
                       "listeners": f"CONTROLLER://127.0.0.1:{c.port}", "log.dirs": str(c.log_dir),
                       "broker.session.timeout.ms": "4000"}
        _format(q, c, c.overrides)
    for i, b in q.brokers.items():
        b.overrides = {**_common(q), "process.roles": "broker", "node.id": str(i),
                       "listeners": f"PLAINTEXT://127.0.0.1:{b.port}", "log.dirs": str(b.log_dir),
                       "broker.heartbeat.interval.ms": "500", "offsets.topic.replication.factor": "1",
                       "group.initial.rebalance.delay.ms": "0"}
        _format(q, b, b.overrides)
    kafka: list[KafkaNode] = []
    q.kafka_brokers = kafka  # type: ignore[attr-defined]
    try:
        for c in q.controllers.values():
            c.start(timeout=60)
        q.wait_leader()
        for b in q.brokers.values():
            b.start(timeout=60)  # returns once the controller has unfenced it
        yield q
    finally:
        for k in kafka:
            k.stop(30)
        stop_nodes(list(q.brokers.values()), list(q.controllers.values()))


@contextmanager
def running_quorum(q: Quorum) -> Iterator[Quorum]:
    """Start the formatted controllers, wait for a leader, start the brokers (each returns once the
    controller has unfenced it); stop them all on the way out (stop_nodes)."""
    try:
        for c in q.controllers.values():
            c.start(timeout=60)
        q.wait_leader()
        for b in q.brokers.values():
            b.start(timeout=60)
        yield q
    finally:
        stop_nodes(list(q.brokers.values()), list(q.controllers.values()))


def stop_nodes(brokers: list[KBroker], controllers: list[KBroker]) -> None:
    """SIGTERM the brokers first, while the controllers still answer their controlled shutdown (stopped
    together, each broker waited for a controller that had gone, and teardown took 30 s), then the
    controllers; whatever has not exited after 15 s is killed."""
    for group in (brokers, controllers):
        for node in group:
            if node.is_running():
                node.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        for node in group:
            try:
                if node.proc is not None:
                    node.proc.wait(15)
            except subprocess.TimeoutExpired:
                pass
            node.kill()


def _describe_status(quorum: Quorum, exclude: int | None = None) -> dict[str, str]:
    proc = run_java_main("kafka-metadata-quorum", ["--bootstrap-controller", quorum.bootstrap_controllers(exclude),
                                                   "describe", "--status"], timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = {}
    for line in proc.stdout.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def _topics(quorum: Quorum) -> dict[str, int]:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": quorum.bootstrap}).list_topics(timeout=20)
    return {name: len(t.partitions) for name, t in md.topics.items()}


def test_kbroker_quorum_elects_serves_and_fails_over(quorum: Quorum) -> None:
    epoch, leader = quorum.wait_leader()
    for i, b in quorum.brokers.items():
        assert f"The controller unfenced broker {i}" in b.log_text()

    # kafka-topics through a kbroker broker: forwarded to the active kbroker controller.
    created = run_java_main("kafka-topics", ["--bootstrap-server", quorum.brokers[BROKER_IDS[0]].bootstrap,
                                             "--create", "--topic", "before-failover", "--partitions", "3",
                                             "--replication-factor", "2"], timeout=90)
    assert created.returncode == 0 and "Created topic before-failover" in created.stdout, created.stderr

    status = _describe_status(quorum)
    assert status["ClusterId"] == quorum.cluster_id
    assert int(status["LeaderId"]) == leader
    assert int(status["LeaderEpoch"]) >= epoch
    assert int(status["HighWatermark"]) > 0
    assert all(f'"id": {i}' in status["CurrentVoters"] for i in CONTROLLER_IDS)

    # kill -9 the active controller: another voter leads a newer epoch within the Raft timeouts
    # (fetch timeout 2 s, then a pre-vote and a vote; election timeout 1 s, randomized).
    leader_epoch = int(status["LeaderEpoch"])
    killed_at = time.monotonic()
    quorum.controllers[leader].kill()
    new_epoch, new_leader = quorum.wait_leader(after_epoch=leader_epoch, timeout=20)
    failover_s = time.monotonic() - killed_at
    assert new_leader != leader
    assert failover_s < 10, failover_s
    print(f"failover: controller {leader} killed, controller {new_leader} leads epoch {new_epoch} "
          f"after {failover_s:.2f}s")

    # The brokers keep serving; the committed topic is still there; a new one can be created.
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": quorum.bootstrap})
    deadline = time.monotonic() + 30
    while True:
        fut = admin.create_topics([NewTopic("after-failover", num_partitions=2, replication_factor=2)])
        try:
            fut["after-failover"].result(timeout=30)
            break
        except Exception as e:  # noqa: BLE001 - NOT_CONTROLLER while the brokers find the new leader
            if time.monotonic() > deadline:
                raise AssertionError(f"create after failover failed: {e}") from e
            time.sleep(0.5)
    topics = _topics(quorum)
    assert topics.get("before-failover") == 3
    assert topics.get("after-failover") == 2

    status = _describe_status(quorum, exclude=leader)
    assert int(status["LeaderId"]) == new_leader
    assert int(status["LeaderEpoch"]) == new_epoch

    # The killed controller restarts from its disk and follows the new leader.
    quorum.controllers[leader].start(timeout=60)
    deadline = time.monotonic() + 30
    while f"Raft leader is now {new_leader} in epoch {new_epoch}" not in quorum.controllers[leader].log_text():
        assert time.monotonic() < deadline, quorum.controllers[leader].log_text()[-3000:]
        time.sleep(0.1)


@pytest.mark.slow
def test_apache_kafka_broker_served_by_kbroker_quorum(quorum: Quorum) -> None:
    """A Kafka 4.3.1 broker (node 6) joins the kbroker quorum: registered and unfenced by the kbroker
    QuorumController, an observer of its metadata log, CreateTopics forwarded in an Envelope."""
    from confluent_kafka import Consumer, Producer

    node = KafkaNode(quorum, 6, "broker")  # type: ignore[arg-type]  # a cluster: workdir, cluster_id, voters
    quorum.kafka_brokers.append(node)  # type: ignore[attr-defined]
    node.start(timeout=120)  # "Kafka Server started": registered and unfenced
    created = run_java_main("kafka-topics", ["--bootstrap-server", node.bootstrap, "--create", "--topic",
                                             "on-kafka", "--partitions", "2", "--replication-factor", "1"],
                            timeout=90)
    assert created.returncode == 0 and "Created topic on-kafka" in created.stdout, created.stderr
    producer = Producer({"bootstrap.servers": node.bootstrap})
    for i in range(5):
        producer.produce("on-kafka", value=b"v%d" % i, partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "g-kafka",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["on-kafka"])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < 5 and time.monotonic() < deadline:
        m = consumer.poll(1)
        if m is not None and m.error() is None:
            got.append(m.value())
    consumer.close()
    assert got == [b"v%d" % i for i in range(5)]
    status = _describe_status(quorum)
    assert '"id": 6' in status["CurrentObservers"]
    # The kbroker brokers see the Kafka broker's topic (one image, one controller).
    assert _topics(quorum).get("on-kafka") == 2
