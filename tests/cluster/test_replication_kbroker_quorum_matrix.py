"""Kafka's replication fault matrix on an all-kbroker cluster, controller faults included (issues 12 and 13).

The matrix of `test_replication_kbroker_cluster.py` (there under Apache Kafka's controller) rerun under
kbroker's OWN controller quorum: three kbroker controllers (a static Raft quorum) and three kbroker
brokers, topic `verified` with 3 partitions, RF 3, min.insync.replicas 2. Kafka's `VerifiableProducer`
(idempotent, acks=all, retries) writes throughout while faults are injected and healed one per cycle:
{clean shutdown, kill -9, bounce} x {partition 0's leader, a follower} (brokers) interleaved with
{clean shutdown, kill -9, bounce} x {the active controller (found with DescribeQuorum), a follower
controller}; then `VerifiableConsumer` reads everything back.

Checked: zero acknowledged records lost, none twice, each partition in the producer's order; the
brokers keep acknowledging acks=all writes while a controller is down (100 more acknowledgements with
each fault in place); after a fault on the active controller a surviving voter answers DescribeQuorum as
the leader of a newer epoch within `FAILOVER_BOUND_S` (the follower's fetch timeout plus ten election
timeouts: room for split votes on a loaded machine); after each heal every voter has caught up, every
broker lists every broker (none left fenced by the controller change) and the ISRs are whole again.

The default test runs a few interleaved cycles; `-m slow` runs 60 (five rounds of all 12 faults).
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain
from pathlib import Path

import pytest

from tests.support.fault_matrix import BROKER_MATRIX, TOPIC, run_matrix
from tests.support.java import java_unavailable_reason
from tests.support.kbroker_quorum_cluster import CONTROLLER_MATRIX, KbrokerQuorumCluster

pytestmark = [pytest.mark.interop, pytest.mark.java]

BROKER_IDS = (4, 5, 6)
ASSIGNMENT = [[4, 5, 6], [5, 6, 4], [6, 4, 5]]
BROKER_OVERRIDES = {"replica.lag.time.max.ms": "3000", "min.insync.replicas": "2",
                    "offsets.topic.replication.factor": "3", "offsets.topic.num.partitions": "3"}
FETCH_TIMEOUT_MS = 2000  # Kafka's defaults, given explicitly: the bound below is computed from them
ELECTION_TIMEOUT_MS = 1000
CONTROLLER_OVERRIDES = {"broker.session.timeout.ms": "3000",
                        "controller.quorum.fetch.timeout.ms": str(FETCH_TIMEOUT_MS),
                        "controller.quorum.election.timeout.ms": str(ELECTION_TIMEOUT_MS)}
FAILOVER_BOUND_S = (FETCH_TIMEOUT_MS + 10 * ELECTION_TIMEOUT_MS) / 1000

# Broker and controller faults alternate: every fault lands on a cluster that healed from the other kind.
FULL_ROUND = list(chain.from_iterable(zip(BROKER_MATRIX, CONTROLLER_MATRIX, strict=True)))
# The default suite's few cycles: both ways the active controller goes (crash, clean stop), a broker
# crash the NEW controller must fence, a follower controller's bounce (~95 s at load 12 on 2 cores).
SHORT = [("kill", "active-controller"), ("kill", "leader"), ("stop", "active-controller"),
         ("bounce", "follower-controller")]


def _create_topic(cl: KbrokerQuorumCluster, topic: str) -> None:
    """CreateTopics with a replica assignment, through a broker (forwarded to the active controller);
    the matrix then runs on it."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cl.bootstrap})  # kept alive until the result arrives
    futures = admin.create_topics([NewTopic(topic, num_partitions=len(ASSIGNMENT), replica_assignment=ASSIGNMENT,
                                            config={"min.insync.replicas": "2"})])
    futures[topic].result(60)
    cl.topic = topic
    cl.wait_isr(set(BROKER_IDS))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KbrokerQuorumCluster]:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(f"Kafka tools unavailable: {reason}")
    cl = KbrokerQuorumCluster(tmp_path_factory.mktemp("kq-matrix"), BROKER_IDS, BROKER_OVERRIDES,
                              CONTROLLER_OVERRIDES, FAILOVER_BOUND_S)
    try:
        cl.start()
        yield cl
    finally:
        cl.stop_all()


def _run(cl: KbrokerQuorumCluster, topic: str, cycles: list[tuple[str, str]], tmp_path: Path) -> None:
    _create_topic(cl, topic)  # each test its own topic (the producer's values start at 0 every run)
    before = len(cl.failovers)
    vp = run_matrix(cl, cycles, tmp_path, inject=cl.inject)
    failovers = cl.failovers[before:]
    active_faults = sum(1 for _, role in cycles if role == "active-controller")
    assert len(failovers) == active_faults, failovers
    assert all(f.new_leader != f.old_leader for f in failovers)
    print(f"{len(cycles)} cycles, {len(vp.acked)} records acknowledged and read back; failovers (s): "
          + ", ".join(f"{f.kind} {f.seconds:.2f}" for f in failovers))


def test_fault_matrix_with_controller_faults_short(cluster: KbrokerQuorumCluster, tmp_path: Path) -> None:
    _run(cluster, f"{TOPIC}-short", SHORT, tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_fault_matrix_with_controller_faults_sixty_cycles(cluster: KbrokerQuorumCluster, tmp_path: Path) -> None:
    _run(cluster, f"{TOPIC}-sixty", FULL_ROUND * 5, tmp_path)
