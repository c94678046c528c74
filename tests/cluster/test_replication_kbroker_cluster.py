"""Three kbroker brokers replicating under an Apache Kafka 4.3.1 controller (issue 12's all-kbroker proof).

Kafka's replication system test, as its `replication_test.py` runs it: RF 3, min.insync.replicas 2,
Kafka's `VerifiableProducer` (idempotent, acks=all, retries) writing throughout while faults are
injected -- {clean shutdown, kill -9, bounce} x {the leader, a follower} of partition 0 -- then Kafka's
`VerifiableConsumer` reads everything back: zero acknowledged records lost, none twice, and each
partition's acknowledged records at increasing offsets. The controller (Kafka's) elects the leaders and
fences the dead; kbroker does everything else: follower fetch, HW, ISR changes through AlterPartition,
truncation by leader epoch on return.

Also here: a follower stopped with SIGSTOP past `replica.lag.time.max.ms` leaves the ISR and returns
after SIGCONT; acks=all with the ISR below min.insync.replicas is refused with NOT_ENOUGH_REPLICAS;
unclean leader election off (no leader while only an out-of-sync replica lives) and on (it is elected,
the others truncate to it when they return).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fault_matrix import BROKER_MATRIX, TOPIC, ReplicatedBrokers, run_matrix
from tests.support.java import run_java_main
from tests.support.kafka_cluster import KafkaCluster, cluster_unavailable_reason
from tests.support.replicated_cluster import describe, metadata_state, wait_partition

pytestmark = [pytest.mark.interop, pytest.mark.java]

IDS = (2, 3, 4)
ASSIGNMENT = "2:3:4,3:4:2,4:2:3"
BROKER_OVERRIDES = {"replica.lag.time.max.ms": "3000", "min.insync.replicas": "2",
                    "offsets.topic.replication.factor": "3", "offsets.topic.num.partitions": "3"}


class Cluster(ReplicatedBrokers):
    def __init__(self, c: KafkaCluster, workdir: Path) -> None:
        super().__init__(dict(zip(IDS, c.kbrokers, strict=True)), workdir)
        self.c = c


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    reason = cluster_unavailable_reason()
    if reason:
        pytest.skip(reason)
    workdir = tmp_path_factory.mktemp("repl-kb")
    c = KafkaCluster(workdir, controller_overrides={"broker.session.timeout.ms": "3000"})
    try:
        c.start_controllers()
        for node_id in IDS:
            c.kbroker(node_id, BROKER_OVERRIDES).start(timeout=90)
        cl = Cluster(c, workdir)
        cl.create(TOPIC, ASSIGNMENT, {"min.insync.replicas": "2"})
        cl.wait_isr(set(IDS))
        yield cl
    finally:
        c.stop_all()


MATRIX = BROKER_MATRIX


def _matrix(cl: Cluster, topic: str, cycles: list[tuple[str, str]], tmp_path: Path) -> None:
    """The matrix on a topic of its own: the VerifiableProducer numbers its values from 0, so the short
    and the long run on one topic (`make test-all`) would read each other's records as duplicates."""
    cl.create(topic, ASSIGNMENT, {"min.insync.replicas": "2"})
    cl.wait_isr(set(IDS), topic=topic)
    before, cl.topic = cl.topic, topic
    try:
        run_matrix(cl, cycles, tmp_path)
    finally:
        cl.topic = before


# The default run: each fault kind once, on the leader for the two that move leadership (kill -9, bounce)
# and on a follower for the clean shutdown; every {kind} x {role} pair is in the slow tests below.
SHORT = [("kill", "leader"), ("stop", "follower"), ("bounce", "leader")]


def test_fault_matrix_short(cluster: Cluster, tmp_path: Path) -> None:
    """One cycle of each of clean shutdown, kill -9 and bounce, leaders and a follower."""
    _matrix(cluster, f"{TOPIC}-short", SHORT, tmp_path)


@pytest.mark.slow
def test_fault_matrix_each_kind_and_role(cluster: Cluster, tmp_path: Path) -> None:
    """One cycle of each {clean shutdown, kill -9, bounce} x {leader, follower}."""
    _matrix(cluster, f"{TOPIC}-matrix", MATRIX, tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(900)  # 54 cycles took 299.5 s on a quiet machine: pytest's 300 s default is too tight
def test_fault_matrix_fifty_cycles(cluster: Cluster, tmp_path: Path) -> None:
    _matrix(cluster, f"{TOPIC}-fifty", (MATRIX * 9)[:54], tmp_path)


def test_sigstop_follower_leaves_isr_and_returns(cluster: Cluster) -> None:
    cluster.wait_isr(set(IDS))
    st = cluster.state()
    follower = next(r for r in st.isr if r != st.leader)
    kb = cluster.broker(follower)
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": ",".join(b.bootstrap for b in cluster.c.kbrokers if b is not kb),
                         "acks": "all"})
    os.kill(kb.pid, signal.SIGSTOP)
    try:
        # Broker session timeout (3 s) and replica.lag.time.max.ms (3 s): either the controller fences
        # it or its leader shrinks the ISR; it must leave the ISR of partition 0 while writes go on.
        deadline = time.monotonic() + 60
        others = [b.bootstrap for b in cluster.c.kbrokers if b is not kb]
        while follower in next(s for b in others if (s := metadata_state(b, TOPIC, 0)) is not None).isr:
            producer.produce(TOPIC, b"while-stopped", partition=0)
            producer.poll(0.2)
            assert time.monotonic() < deadline, "a stopped follower stayed in the ISR"
        assert producer.flush(60) == 0
        other = next(b.bootstrap for b in cluster.c.kbrokers if b is not kb)
        assert follower not in describe(other, [TOPIC])[(TOPIC, 0)].isr
    finally:
        os.kill(kb.pid, signal.SIGCONT)
    cluster.wait_isr(set(IDS))
    assert set(describe(cluster.live()[0], [TOPIC])[(TOPIC, 0)].isr) == set(IDS)


def test_acks_all_below_min_insync_is_refused(cluster: Cluster) -> None:
    from confluent_kafka import KafkaError, Producer

    cluster.create("strict", "2:3:4", {"min.insync.replicas": "3"})
    cluster.wait_isr(set(IDS), topic="strict", partitions=1)
    st = cluster.state("strict")
    follower = next(r for r in st.isr if r != st.leader)
    kb = cluster.broker(follower)
    kb.kill()
    try:
        wait_partition(cluster.live, "strict", lambda s: follower not in s.isr, what="ISR shrink")
        errors: list[KafkaError] = []
        producer = Producer({"bootstrap.servers": ",".join(cluster.live()), "acks": "all", "retries": 0,
                             "message.timeout.ms": 10000})
        producer.produce("strict", b"x", on_delivery=lambda e, m: errors.append(e))
        producer.flush(30)
        assert errors and errors[0] is not None and errors[0].code() == KafkaError.NOT_ENOUGH_REPLICAS, errors
        # acks=1 is not bound by min.insync.replicas.
        ok: list[KafkaError | None] = []
        p1 = Producer({"bootstrap.servers": ",".join(cluster.live()), "acks": 1})
        p1.produce("strict", b"y", on_delivery=lambda e, m: ok.append(e))
        p1.flush(30)
        assert ok == [None], ok
    finally:
        kb.start(timeout=90)
    cluster.wait_isr(set(IDS), topic="strict", partitions=1)


def test_kafka_leader_election_through_a_kbroker_broker(cluster: Cluster) -> None:
    """ElectLeaders on a kbroker broker is forwarded to Kafka's controller: `kafka-leader-election`
    moves leadership back to the preferred replica after a bounce moved it away."""
    cluster.create("preferred", "2:3:4", {})
    cluster.wait_isr(set(IDS), topic="preferred", partitions=1)
    kb = cluster.broker(2)
    assert kb.stop(60) == 0
    kb.start(timeout=90)
    cluster.wait_isr(set(IDS), topic="preferred", partitions=1)
    assert cluster.state("preferred").leader != 2
    proc = run_java_main("kafka-leader-election", ["--bootstrap-server", cluster.broker(3).bootstrap,
                                                   "--election-type", "PREFERRED", "--topic", "preferred",
                                                   "--partition", "0"], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Successfully completed leader election (PREFERRED)" in proc.stdout, proc.stdout
    wait_partition(cluster.live, "preferred", lambda s: s.leader == 2, what="preferred leader 2")
    assert describe(cluster.broker(4).bootstrap, ["preferred"])[("preferred", 0)].leader == 2


def test_kafka_reassign_partitions_through_a_kbroker_broker(cluster: Cluster, tmp_path: Path) -> None:
    """AlterPartitionReassignments / ListPartitionReassignments forwarded: `kafka-reassign-partitions`
    moves a partition from brokers 2,3 to 3,4 (4 catches up as a new follower before 2 is removed)."""
    from confluent_kafka import Producer

    cluster.create("moving", "2:3", {})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(500):
        producer.produce("moving", f"m{i}".encode())
    assert producer.flush(30) == 0
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "moving", "partition": 0, "replicas": [3, 4]}]}))
    bootstrap = cluster.broker(2).bootstrap
    proc = run_java_main("kafka-reassign-partitions", ["--bootstrap-server", bootstrap, "--reassignment-json-file",
                                                       str(plan), "--execute"], timeout=120)
    assert proc.returncode == 0 and "Successfully started partition reassignment" in proc.stdout, \
        proc.stdout + proc.stderr
    deadline = time.monotonic() + 90
    while True:
        proc = run_java_main("kafka-reassign-partitions", ["--bootstrap-server", bootstrap,
                                                           "--reassignment-json-file", str(plan), "--verify"],
                             timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        if "Reassignment of partition moving-0 is completed" in proc.stdout:
            break
        assert time.monotonic() < deadline, proc.stdout
        time.sleep(1)
    st = describe(cluster.broker(3).bootstrap, ["moving"])[("moving", 0)]
    assert st.replicas == (3, 4) and set(st.isr) == {3, 4}, st
    from tests.support.replicated_cluster import read_partition

    assert [v for _, v in read_partition(cluster.broker(4).bootstrap, "moving")] == \
        [f"m{i}".encode() for i in range(500)]


def test_unclean_leader_election_off_then_on(cluster: Cluster) -> None:
    """Only an out-of-sync replica alive: no leader while unclean election is off; `kafka-leader-election
    --election-type UNCLEAN` (forwarded) elects it, records only the old leader had are lost, and the
    old leader, back, truncates to the new leader's log by leader epoch (the logs end up identical)."""
    from confluent_kafka import Producer

    from tests.support.replicated_cluster import log_batches, read_partition

    cluster.create("unclean", "2:3:4", {"min.insync.replicas": "1", "unclean.leader.election.enable": "false"})
    cluster.wait_isr(set(IDS), topic="unclean", partitions=1)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(100):
        producer.produce("unclean", f"replicated-{i}".encode())
    assert producer.flush(30) == 0
    for node in (3, 4):
        cluster.broker(node).kill()
    wait_partition(cluster.live, "unclean", lambda s: set(s.isr) == {2}, what="ISR [2]")
    p2 = Producer({"bootstrap.servers": cluster.broker(2).bootstrap, "acks": "all"})
    for i in range(50):
        p2.produce("unclean", f"leader-only-{i}".encode())
    assert p2.flush(30) == 0
    cluster.broker(2).kill()
    cluster.broker(3).start(timeout=90)
    time.sleep(5)
    st = metadata_state(cluster.broker(3).bootstrap, "unclean")
    assert st is not None and st.leader == -1 and 3 not in st.isr, st
    proc = run_java_main("kafka-leader-election", ["--bootstrap-server", cluster.broker(3).bootstrap,
                                                   "--election-type", "UNCLEAN", "--topic", "unclean",
                                                   "--partition", "0"], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wait_partition(cluster.live, "unclean", lambda s: s.leader == 3, what="unclean leader 3")
    p3 = Producer({"bootstrap.servers": cluster.broker(3).bootstrap, "acks": "all", "message.timeout.ms": 20000})
    errors: list[object] = []
    for i in range(20):
        p3.produce("unclean", f"after-{i}".encode(), on_delivery=lambda e, m: errors.append(e) if e else None)
    assert p3.flush(30) == 0 and not errors, (errors[:3], metadata_state(cluster.broker(3).bootstrap, "unclean"))
    cluster.broker(2).start(timeout=90)
    cluster.broker(4).start(timeout=90)
    cluster.wait_isr(set(IDS), topic="unclean", partitions=1)
    values = [v for _, v in read_partition(cluster.broker(3).bootstrap, "unclean")]
    assert values == [f"replicated-{i}".encode() for i in range(100)] + [f"after-{i}".encode() for i in range(20)]
    logs = {n: log_batches(cluster.broker(n).log_dir / "unclean-0") for n in IDS}
    assert logs[2] == logs[3] == logs[4]


def test_consumer_group_survives_its_coordinators_broker_dying(cluster: Cluster) -> None:
    """__consumer_offsets is created through the controller with offsets.topic.replication.factor 3; the
    coordinator moves with its partition's leadership (the new leader loads the group from its replica)
    and the offsets committed before are still there."""
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient

    cluster.wait_isr(set(IDS))
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(30):
        producer.produce("verified", f"g{i}".encode(), partition=1)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "survivor", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition("verified", 1, 0)])
    msgs = []
    deadline = time.monotonic() + 60
    while len(msgs) < 10 and time.monotonic() < deadline:
        m = consumer.poll(1.0)
        if m is not None and m.error() is None:
            msgs.append(m)
    assert len(msgs) == 10
    consumer.commit(message=msgs[-1], asynchronous=False)
    committed = msgs[-1].offset() + 1
    consumer.close()
    offsets_state = describe(cluster.live()[0], ["__consumer_offsets"])
    assert {len(s.replicas) for s in offsets_state.values()} == {3}, offsets_state
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    coordinator = admin.describe_consumer_groups(["survivor"])["survivor"].result(30).coordinator.id
    cluster.broker(coordinator).kill()
    try:
        live = ",".join(cluster.live())
        deadline = time.monotonic() + 90
        while True:
            try:
                admin = AdminClient({"bootstrap.servers": live})
                got = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(
                    "survivor", [TopicPartition("verified", 1)])])["survivor"].result(15)
                new_coordinator = admin.describe_consumer_groups(["survivor"])["survivor"].result(15).coordinator.id
                if new_coordinator != coordinator:
                    break
            except Exception:  # noqa: BLE001 - COORDINATOR_NOT_AVAILABLE / LOAD_IN_PROGRESS while it moves
                pass
            assert time.monotonic() < deadline, "the group never found a new coordinator"
            time.sleep(1)
        assert got.topic_partitions[0].offset == committed, got
    finally:
        cluster.broker(coordinator).start(timeout=90)
    cluster.wait_isr(set(IDS))
