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

import pytest

from tests.support.elr_cluster import (
    ElrCluster,
    elr_cluster_fixture,
)
from tests.support.java import run_java_main

pytestmark = [pytest.mark.interop, pytest.mark.java]

TOPIC = "elr-topic"
# A kbroker controller (formatted by `kbroker storage format`), or, slow, Apache Kafka 4.3.1's
# (formatted by `kafka-storage format`): both finalize eligible.leader.replicas.version=1 by default.
cluster = elr_cluster_fixture({"broker.session.timeout.ms": "4000"})


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
