"""Combined nodes (`process.roles=broker,controller`): each node a Raft voter running the QuorumController
and a broker that reads the same Raft log and registers with the active controller.

Real processes formatted by `kbroker storage format`; stock clients (confluent-kafka, kafka-python) and
Kafka 4.3.1's own tools (kafka-topics, kafka-metadata-quorum) from .cache/java.

- One combined node (a one-voter quorum): topics, produce with acks=all, consumer groups committing
  offsets, `kafka-metadata-quorum --bootstrap-controller ... describe --status`; after a restart the
  topics, records and committed offsets are all there, and the controller activated on the replayed log
  (not on an empty one: it would write the bootstrap records again and lose every topic's leaders).
- Three combined nodes: an RF 3 topic with min.insync.replicas=2, an idempotent acks=all producer
  running while the node that is both the active controller and a partition leader is killed with
  SIGKILL: another voter becomes the active controller, the leaderships move, and every acknowledged
  record is read back.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.combined_cluster import CombinedNode, combined_nodes, start_all, stop_all
from tests.support.java import REPO_ROOT, java_unavailable_reason, run_java_main
from tests.support.kafka_cluster import new_cluster_id
from tests.support.storage_format import format_node

pytestmark = [pytest.mark.interop]

LEADER_LINE = re.compile(r"node (\d+) is the leader in epoch (\d+)")
ACTIVE_LINE = re.compile(r"Becoming the active controller at epoch (\d+), committed offset (-?\d+)")


_nodes = combined_nodes


def _format(node: CombinedNode, cluster_id: str) -> str:
    path = node.broker.workdir / "server.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in node.broker.overrides.items()))
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.run([sys.executable, "-m", "kbroker", "storage", "format", "-c", str(path),
                           "-t", cluster_id], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _describe_status(bootstrap_controllers: str) -> dict[str, str]:
    proc = run_java_main("kafka-metadata-quorum", ["--bootstrap-controller", bootstrap_controllers,
                                                   "describe", "--status"], timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = {}
    for line in proc.stdout.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def _consume(bootstrap: str, topic: str, group: str, count: int, timeout: float = 30) -> list[bytes]:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < count and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
        if got:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


# -- one combined node --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CombinedNode]:
    work = tmp_path_factory.mktemp("combined1")
    node = _nodes(work, (1,), {"offsets.topic.replication.factor": "1"})[1]
    out = _format(node, new_cluster_id())
    assert "Formatting metadata directory" in out, out
    try:
        node.broker.start(timeout=60)
        yield node
    finally:
        node.broker.stop()
        node.broker.kill()


@pytest.mark.java
def test_kafka_tools_against_a_one_voter_combined_node(single: CombinedNode) -> None:
    """kafka-topics through the broker listener, kafka-metadata-quorum on the controller listener."""
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(f"Kafka tools unavailable: {reason}")
    created = run_java_main("kafka-topics", ["--bootstrap-server", single.bootstrap, "--create", "--topic", "jt",
                                             "--partitions", "2", "--replication-factor", "1"], timeout=90)
    assert created.returncode == 0 and "Created topic jt" in created.stdout, created.stdout + created.stderr
    status = _describe_status(single.controller)
    assert status["LeaderId"] == "1"
    assert int(status["HighWatermark"]) > 0
    assert '"id": 1' in status["CurrentVoters"]
    assert status["ClusterId"] and '"id": 1' not in status.get("CurrentObservers", "")


def test_one_voter_combined_node_serves_clients_and_restarts_with_everything(single: CombinedNode) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka import KafkaConsumer, KafkaProducer

    log = single.broker.log_text()
    assert "node 1 is the leader in epoch 1" in log
    assert "Registered broker 1 with the controller" in log and "The controller unfenced broker 1" in log

    admin = AdminClient({"bootstrap.servers": single.bootstrap})
    admin.create_topics([NewTopic("c1", num_partitions=3, replication_factor=1)])["c1"].result(30)
    producer = Producer({"bootstrap.servers": single.bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(30):
        producer.produce("c1", value=b"v%d" % i, partition=i % 3)
    assert producer.flush(30) == 0
    assert sorted(_consume(single.bootstrap, "c1", "g1", 30)) == sorted(b"v%d" % i for i in range(30))

    # kafka-python: a topic auto-created by Metadata, a group with committed offsets.
    kp = KafkaProducer(bootstrap_servers=single.bootstrap, acks="all")
    for i in range(10):
        kp.send("kp", value=b"k%d" % i).get(timeout=30)
    kp.close()
    kc = KafkaConsumer("kp", bootstrap_servers=single.bootstrap, group_id="gk", auto_offset_reset="earliest",
                       enable_auto_commit=False, consumer_timeout_ms=10000)
    assert [m.value for m in kc][:10] == [b"k%d" % i for i in range(10)]
    kc.commit()
    kc.close()

    # Restart: Raft's log, the image, the partitions and the committed offsets all come back.
    single.broker.stop()
    single.broker.start(timeout=60)
    log = single.broker.log_text()
    assert "node 1 is the leader in epoch 2" in log
    active = ACTIVE_LINE.search(log)
    assert active is not None and int(active.group(2)) > 0, log[-3000:]  # activated on the replayed log
    md = admin.list_topics(timeout=20)
    assert len(md.topics["c1"].partitions) == 3
    assert all(p.leader == 1 for p in md.topics["c1"].partitions.values())
    consumer = Consumer({"bootstrap.servers": single.bootstrap, "group.id": "g1"})
    committed = consumer.committed([TopicPartition("c1", p) for p in range(3)], timeout=30)
    consumer.close()
    assert sum(tp.offset for tp in committed) == 30
    assert sorted(_consume(single.bootstrap, "c1", "g-reread", 30)) == sorted(b"v%d" % i for i in range(30))
    admin.create_topics([NewTopic("after-restart", num_partitions=1, replication_factor=1)])["after-restart"].result(30)


def test_kafkas_sample_config_formatted_standalone_is_a_one_voter_quorum(tmp_path: Path) -> None:
    """Kafka's quick start: `controller.quorum.bootstrap.servers` (no static voters) and
    `kbroker storage format --standalone`: the voter set comes from the bootstrap snapshot's VotersRecord."""
    from confluent_kafka.admin import AdminClient, NewTopic

    node = _nodes(tmp_path, (1,), {"offsets.topic.replication.factor": "1"})[1]
    overrides = node.broker.overrides
    del overrides["controller.quorum.voters"]
    overrides["controller.quorum.bootstrap.servers"] = node.controller
    path = node.broker.workdir / "server.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in overrides.items()))
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.run([sys.executable, "-m", "kbroker", "storage", "format", "-c", str(path), "-t",
                           new_cluster_id(), "--standalone"], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0 and "Formatting dynamic metadata voter directory" in proc.stdout, proc.stderr
    with node.broker:
        assert f"the voter set is 1@{node.controller}" in node.broker.log_text()
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        admin.create_topics([NewTopic("s", num_partitions=2, replication_factor=1)])["s"].result(30)
        assert len(admin.list_topics(timeout=20).topics["s"].partitions) == 2


# -- three combined nodes -----------------------------------------------------------------------------


_start_all = start_all


def _leaders(nodes: dict[int, CombinedNode]) -> list[tuple[int, int]]:
    out = []
    for n in nodes.values():
        out += [(int(m.group(2)), int(m.group(1))) for m in LEADER_LINE.finditer(n.broker.log_text())]
    return sorted(out)


@pytest.fixture
def trio(tmp_path: Path) -> Iterator[dict[int, CombinedNode]]:
    nodes = _nodes(tmp_path, (1, 2, 3), {"broker.session.timeout.ms": "4000",
                                         "broker.heartbeat.interval.ms": "500",
                                         "offsets.topic.replication.factor": "3"})
    cluster_id = new_cluster_id()
    for n in nodes.values():
        format_node(n.broker, cluster_id, n.broker.overrides)
    try:
        _start_all(nodes)
        yield nodes
    finally:
        stop_all(nodes.values())


def test_three_combined_nodes_survive_kill_of_the_active_controller(trio: dict[int, CombinedNode]) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    epoch, controller = _leaders(trio)[-1]
    bootstrap = ",".join(n.bootstrap for n in trio.values())
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("rf3", num_partitions=3, replication_factor=3,
                                  config={"min.insync.replicas": "2"})])["rf3"].result(30)
    md = admin.list_topics(timeout=20)
    assert all(sorted(p.replicas) == [1, 2, 3] for p in md.topics["rf3"].partitions.values())
    assert controller in {p.leader for p in md.topics["rf3"].partitions.values()}  # leaders are spread

    # A multi-voter combined cluster replicates the group coordinator's topic as configured (3), as Kafka.
    from confluent_kafka import Producer as _P

    warm = _P({"bootstrap.servers": bootstrap, "acks": "all"})
    warm.produce("rf3", value=b"warm", partition=0)
    assert warm.flush(30) == 0
    assert _consume(bootstrap, "rf3", "g-before", 1) == [b"warm"]
    offsets = admin.list_topics(timeout=20).topics["__consumer_offsets"].partitions
    assert all(len(p.replicas) == 3 for p in offsets.values())

    acked: list[bytes] = [b"warm"]
    errors: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 5, "message.timeout.ms": 60000})

        def on_delivery(err: object, msg: object) -> None:
            if err is None:
                acked.append(msg.value())  # type: ignore[attr-defined]
            else:
                errors.append(str(err))

        i = 0
        while not stop.is_set():
            producer.produce("rf3", value=b"r%06d" % i, partition=i % 3, on_delivery=on_delivery)
            producer.poll(0)
            i += 1
            time.sleep(0.005)
        producer.flush(90)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    time.sleep(2)
    before = len(acked)
    assert before > 1, errors
    killed_at = time.monotonic()
    trio[controller].broker.kill()  # SIGKILL: the active controller, and the leader of some partitions
    survivors = {i: n for i, n in trio.items() if i != controller}
    deadline = time.monotonic() + 30
    while not [x for x in _leaders(survivors) if x[0] > epoch]:
        assert time.monotonic() < deadline, "no new quorum leader"
        time.sleep(0.05)
    new_epoch, new_controller = [x for x in _leaders(survivors) if x[0] > epoch][-1]
    print(f"combined failover: node {controller} killed, node {new_controller} leads epoch {new_epoch} "
          f"after {time.monotonic() - killed_at:.2f}s")
    # The new controller fences the dead node after broker.session.timeout.ms and moves its leaderships.
    deadline = time.monotonic() + 40
    while True:
        md = AdminClient({"bootstrap.servers": ",".join(n.bootstrap for n in survivors.values())}).list_topics(
            timeout=10)
        leaders = {p.leader for p in md.topics["rf3"].partitions.values()}
        if controller not in leaders and -1 not in leaders and len(acked) > before + 50:
            break
        assert time.monotonic() < deadline, (leaders, len(acked), errors[-3:])
        time.sleep(0.5)
    stop.set()
    thread.join(120)
    assert not errors, errors[:5]
    new_bootstrap = ",".join(n.bootstrap for n in survivors.values())
    got = _consume(new_bootstrap, "rf3", "g-check", len(acked), timeout=60)
    missing = set(acked) - set(got)
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"
    print(f"combined failover: {len(acked)} records acknowledged ({len(acked) - before} after the kill), all read back")
    # The new controller serves metadata changes.
    admin = AdminClient({"bootstrap.servers": new_bootstrap})
    admin.create_topics([NewTopic("after-kill", num_partitions=2, replication_factor=2)])["after-kill"].result(30)
    assert len(admin.list_topics(timeout=20).topics["after-kill"].partitions) == 2
