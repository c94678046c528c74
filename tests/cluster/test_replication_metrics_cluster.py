"""Replication metrics and `num.replica.fetchers=2` in a real cluster: an Apache Kafka 4.3.1 controller and
three `kbroker serve` processes, each serving `/metrics` on its HTTP listener.

- A follower stopped with SIGSTOP: its leader's `/metrics` shows UnderReplicatedPartitions 1 (and the
  partition's `kafka_cluster_partition_underreplicated` 1, an ISR shrink counted) once the ISR
  shrinks; after SIGCONT the follower rejoins and the gauge is back to 0, an expansion counted.
- `num.replica.fetchers=2`: every follower holds two connections to each leader it follows (seen in
  /proc: established TCP connections from the follower's process to the leader's port), its fetchers
  are Kafka's `ReplicaFetcherThread-<n>-<leader>` (FetcherLagMetrics series), and every acknowledged
  record of a 6-partition RF 3 topic is on every replica.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.metrics.scrape import http_get, samples
from tests.support.broker import KBroker, free_port
from tests.support.java import run_java_main
from tests.support.kafka_cluster import KafkaCluster, cluster_unavailable_reason
from tests.support.replicated_cluster import metadata_state, read_partition, wait_partition

pytestmark = [pytest.mark.interop, pytest.mark.java]

IDS = (2, 3, 4)
OVERRIDES = {"replica.lag.time.max.ms": "3000", "min.insync.replicas": "2", "num.replica.fetchers": "2"}


class Cluster:
    def __init__(self, c: KafkaCluster, http: dict[int, str]) -> None:
        self.c = c
        self.http = http

    def broker(self, node_id: int) -> KBroker:
        return self.c.kbrokers[IDS.index(node_id)]

    def live(self) -> list[str]:
        return [kb.bootstrap for kb in self.c.kbrokers if kb.is_running()]

    @property
    def bootstrap(self) -> str:
        return ",".join(kb.bootstrap for kb in self.c.kbrokers)

    def scrape(self, node_id: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        status, body = http_get(self.http[node_id] + "/metrics")
        assert status == 200, body
        return samples(body)

    def metric(self, node_id: int, name: str, **labels: str) -> float:
        return self.scrape(node_id)[(name, tuple(sorted(labels.items())))]

    def create(self, topic: str, partitions: int, assignment: str) -> None:
        proc = run_java_main("kafka-topics", ["--bootstrap-server", self.live()[0], "--create", "--topic", topic,
                                              "--replica-assignment", assignment,
                                              # Kafka 4.3's controller writes a cluster-wide dynamic
                                              # min.insync.replicas (ELR), which beats a broker's static one.
                                              "--config", "min.insync.replicas=2"], timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        for p in range(partitions):
            deadline = time.monotonic() + 60
            while True:
                st = metadata_state(self.live()[0], topic, p)
                if st is not None and len(st.isr) == 3:
                    break
                assert time.monotonic() < deadline, f"{topic}-{p}: {st}"
                time.sleep(0.3)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    reason = cluster_unavailable_reason()
    if reason:
        pytest.skip(reason)
    workdir = tmp_path_factory.mktemp("repl-metrics")
    c = KafkaCluster(workdir, controller_overrides={"broker.session.timeout.ms": "3000"})
    http: dict[int, str] = {}
    try:
        c.start_controllers()
        for node_id in IDS:
            http[node_id] = f"http://127.0.0.1:{free_port()}"
            c.kbroker(node_id, {**OVERRIDES, "kbroker.metrics.listener": http[node_id]}).start(timeout=90)
        yield Cluster(c, http)
    finally:
        c.stop_all()


def test_sigstop_follower_moves_under_replicated_partitions(cluster: Cluster) -> None:
    from confluent_kafka import Producer

    cluster.create("urp", 1, "2:3:4")
    assert cluster.metric(2, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert cluster.metric(2, "kafka_server_replicamanager_leadercount") == 1
    shrinks = cluster.metric(2, "kafka_server_replicamanager_isrshrinks_total")
    expands = cluster.metric(2, "kafka_server_replicamanager_isrexpands_total")
    follower = cluster.broker(4)
    producer = Producer({"bootstrap.servers": cluster.broker(2).bootstrap, "acks": "all"})
    os.kill(follower.pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 60
        while cluster.metric(2, "kafka_server_replicamanager_underreplicatedpartitions") != 1:
            producer.produce("urp", b"while-stopped")  # a follower at the leader's end never lags
            producer.poll(0.3)
            assert time.monotonic() < deadline, "UnderReplicatedPartitions never reached 1"
        s = cluster.scrape(2)
        assert s[("kafka_cluster_partition_underreplicated", (("partition", "0"), ("topic", "urp")))] == 1
        assert s[("kafka_cluster_partition_insyncreplicascount", (("partition", "0"), ("topic", "urp")))] == 2
        assert s[("kafka_server_replicamanager_atminisrpartitioncount", ())] == 1
        assert producer.flush(30) == 0
    finally:
        os.kill(follower.pid, signal.SIGCONT)
    wait_partition(cluster.live, "urp", lambda st: len(st.isr) == 3, what="ISR back to 3")
    deadline = time.monotonic() + 60
    while cluster.metric(2, "kafka_server_replicamanager_underreplicatedpartitions") != 0:
        assert time.monotonic() < deadline, "UnderReplicatedPartitions never went back to 0"
        time.sleep(0.3)
    s = cluster.scrape(2)
    # Either the leader shrank the ISR (replica.lag.time.max.ms) or the controller fenced the stopped
    # broker (broker.session.timeout.ms) first; the return is always the leader's expansion.
    assert s[("kafka_server_replicamanager_isrshrinks_total", ())] >= shrinks
    assert s[("kafka_server_replicamanager_isrexpands_total", ())] == expands + 1
    assert s[("kafka_cluster_partition_underreplicated", (("partition", "0"), ("topic", "urp")))] == 0
    # The returned follower caught up: its lag is 0.
    assert cluster.metric(4, "kafka_server_replicafetchermanager_maxlag", clientId="Replica") == 0


def _established(pid: int, remote_port: int) -> int:
    """Established TCP connections of process `pid` to 127.0.0.1:`remote_port` (from /proc)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not Path(table).exists():
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "01" and int(f[2].rsplit(":", 1)[1], 16) == remote_port and f[9] in inodes:
                n += 1
    return n


def test_two_fetchers_two_connections_per_leader(cluster: Cluster) -> None:
    from confluent_kafka import Producer

    # Each leader leads two consecutive partitions: Kafka's rule puts p and p + 1 on different fetchers
    # (31 * hash + p alternates parity), so every follower needs both fetchers of every leader.
    cluster.create("spread", 6, "2:3:4,2:4:3,3:4:2,3:2:4,4:2:3,4:3:2")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    acked: list[tuple[int, int]] = []
    for i in range(600):
        producer.produce("spread", f"v{i}".encode(), partition=i % 6,
                         on_delivery=lambda e, m: acked.append((m.partition(), m.offset())) if e is None else None)
    assert producer.flush(60) == 0
    assert len(acked) == 600
    for node in IDS:
        others = [o for o in IDS if o != node]
        for leader in others:
            port = int(cluster.broker(leader).bootstrap.rsplit(":", 1)[1])
            assert _established(cluster.broker(node).pid, port) == 2, (node, leader)
        lag = [dict(labels) for (name, labels) in cluster.scrape(node)
               if name == "kafka_server_fetcherlagmetrics_consumerlag" and dict(labels)["topic"] == "spread"]
        assert len(lag) == 4, lag  # 6 partitions, 2 led here, 4 followed
        assert {x["clientId"] for x in lag} == {f"ReplicaFetcherThread-{n}-{o}" for n in (0, 1) for o in others}
        assert cluster.metric(node, "kbroker_replica_fetcher_count") == 4
    for p in range(6):
        values = [v for _, v in read_partition(cluster.broker(2).bootstrap, "spread", p)]
        assert values == [f"v{i}".encode() for i in range(p, 600, 6)]
    from tests.support.replicated_cluster import log_batches

    for p in range(6):
        logs = [log_batches(cluster.broker(n).log_dir / f"spread-{p}") for n in IDS]
        assert logs[0] == logs[1] == logs[2], p
