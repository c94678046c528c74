"""Eligible leader replicas (KIP-966) on real processes: one kbroker controller and three kbroker brokers.

Every node is formatted by `kbroker storage format` with default features, which finalizes
`eligible.leader.replicas.version=1` as Kafka 4.3.1's format does. The slow variant runs the same
scenario with Apache Kafka 4.3.1's controller (formatted by `kafka-storage format`) over the same three
kbroker brokers: the same states must come out (the differential). A topic of one partition, RF 3,
`min.insync.replicas=2` takes acks=all records. The brokers are stopped (SIGTERM: controlled shutdown,
clean-shutdown markers with the broker epoch) one by one, the leader last: the ISR drops to 1 (the
stopped member enters the ELR; `kafka-topics --describe` prints it under "Elr:") and then to 0 (no
leader, ELR holds both). The ELR member that is not the last leader comes back first: the controller
elects it from the ELR, without unclean election (unclean.leader.election.enable stays false), and
every acknowledged record is read back from it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cluster.test_kbroker_quorum import Quorum, _common, _format, stop_nodes
from tests.support.broker import KBroker
from tests.support.java import java_unavailable_reason, run_java_main
from tests.support.kafka_cluster import KafkaCluster, new_cluster_id

pytestmark = [pytest.mark.interop, pytest.mark.java]

TOPIC = "elr-topic"
BROKER_OVERRIDES = {"broker.heartbeat.interval.ms": "500",
                    "offsets.topic.replication.factor": "1"}


@dataclass
class ElrCluster:
    """Three kbroker brokers (ids 2, 3, 4) under one controller."""

    brokers: dict[int, KBroker]

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())


def _kbroker_controller(tmp_path: Path) -> Iterator[ElrCluster]:
    q = Quorum(new_cluster_id(), tmp_path)
    c = q.controllers[1] = KBroker(tmp_path / "controller-1")
    for i in (2, 3, 4):
        q.brokers[i] = KBroker(tmp_path / f"broker-{i}")
    c.overrides = {**_common(q), "process.roles": "controller", "node.id": "1",
                   "listeners": f"CONTROLLER://127.0.0.1:{c.port}", "log.dirs": str(c.log_dir),
                   "broker.session.timeout.ms": "4000"}
    _format(q, c, c.overrides)
    for i, b in q.brokers.items():
        b.overrides = {**_common(q), "process.roles": "broker", "node.id": str(i),
                       "listeners": f"PLAINTEXT://127.0.0.1:{b.port}", "log.dirs": str(b.log_dir),
                       **BROKER_OVERRIDES}
        _format(q, b, b.overrides)
    try:
        c.start(timeout=60)
        q.wait_leader()
        for b in q.brokers.values():
            b.start(timeout=60)
        yield ElrCluster(dict(q.brokers))
    finally:
        stop_nodes(list(q.brokers.values()), [c])


def _kafka_controller(tmp_path: Path) -> Iterator[ElrCluster]:
    k = KafkaCluster(tmp_path, controller_overrides={"broker.session.timeout.ms": "4000"})
    try:
        k.start_controllers()
        brokers = {i: k.kbroker(i, BROKER_OVERRIDES) for i in (2, 3, 4)}
        for b in brokers.values():
            b.start(timeout=90)
        yield ElrCluster(brokers)
    finally:
        k.stop_all()


@pytest.fixture(params=["kbroker", pytest.param("kafka", marks=pytest.mark.slow)])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ElrCluster]:
    """A kbroker controller (formatted by `kbroker storage format`), or, slow, Apache Kafka 4.3.1's
    (formatted by `kafka-storage format`): both finalize eligible.leader.replicas.version=1 by default."""
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(f"Kafka tools unavailable: {reason}")
    make = _kbroker_controller if request.param == "kbroker" else _kafka_controller
    yield from make(tmp_path)


def _describe(bootstrap: str) -> dict[str, str]:
    proc = run_java_main("kafka-topics", ["--bootstrap-server", bootstrap, "--describe", "--topic", TOPIC],
                         timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(x for x in proc.stdout.splitlines() if "Partition:" in x)
    return {k: v.strip() for k, v in re.findall(r"(\w+): ?([^\t]*)", line)}


def _state(bootstrap: str) -> tuple[int, tuple[int, ...], tuple[int, ...]] | None:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(TOPIC, timeout=10)
    t = md.topics.get(TOPIC)
    if t is None or t.error is not None or 0 not in t.partitions:
        return None
    p = t.partitions[0]
    return p.leader, tuple(p.replicas), tuple(sorted(p.isrs))


def _wait(bootstrap: str, check: object, timeout: float = 60) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = _state(bootstrap)
        if last is not None and check(last):  # type: ignore[operator]
            return last
        time.sleep(0.2)
    raise AssertionError(f"partition state never matched: last {last}")


def test_elr_member_comes_back_first_and_leads_without_data_loss(cluster: ElrCluster) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.create_topics([NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2"})])
    futures[TOPIC].result(30)
    leader, replicas, isr = _wait(cluster.bootstrap, lambda s: s[0] >= 0 and len(s[2]) == 3)
    r0, r1, r2 = replicas
    assert leader == r0

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5})
    acked: list[bytes] = []

    def report(err: object, msg: object) -> None:
        if err is None:
            acked.append(msg.value())  # type: ignore[attr-defined]

    for i in range(300):
        producer.produce(TOPIC, f"v{i}".encode(), on_delivery=report)
    assert producer.flush(60) == 0
    assert len(acked) == 300

    nodes = cluster.brokers
    # First follower out: the ISR is still at min ISR, no ELR.
    assert nodes[r1].stop(60) == 0
    _wait(nodes[r0].bootstrap, lambda s: s[2] == tuple(sorted((r0, r2))))
    # Second follower out: the ISR (r0) is below min ISR, r2 enters the ELR.
    assert nodes[r2].stop(60) == 0
    _wait(nodes[r0].bootstrap, lambda s: s[2] == (r0,))
    described = _describe(nodes[r0].bootstrap)
    assert (described["Leader"], described["Isr"], described["Elr"], described["LastKnownElr"]) == (
        str(r0), str(r0), str(r2), "")
    # The leader out: no ISR, no leader; ELR = {r0, r2}.
    assert nodes[r0].stop(60) == 0

    # r2 (in the ELR, not the last leader) restarts first, cleanly: it is elected from the ELR.
    nodes[r2].start(timeout=60)
    leader, _, isr = _wait(nodes[r2].bootstrap, lambda s: s[0] >= 0)
    assert (leader, isr) == (r2, (r2,))
    described = _describe(nodes[r2].bootstrap)
    assert (described["Leader"], described["Isr"], described["Elr"], described["LastKnownElr"]) == (
        str(r2), str(r2), str(r0), "")
    # A clean election: an unclean one would have cleared the ELR (and set leader recovery RECOVERING).
    assert "RECOVERING" not in nodes[r2].log_text()

    consumer = Consumer({"bootstrap.servers": nodes[r2].bootstrap, "group.id": "elr-check",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([TOPIC])
    seen: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(seen) < len(acked) and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            seen.append(m.value())
    consumer.close()
    assert set(acked) <= set(seen), f"lost {len(set(acked) - set(seen))} acknowledged records"
