"""Replication metrics fed with real values, and `num.replica.fetchers` > 1, in-process.

Three in-process brokers (`tests.support.replica_cluster.ReplicaCluster`: real services and listeners,
the harness as controller). The broker's own exposition (`BrokerObservability`, what `/metrics`
serves) is rendered and parsed as Prometheus would:

- a follower that stops fetching leaves the ISR: the leader's UnderReplicatedPartitions and
  AtMinIsrPartitionCount go to 1, IsrShrinksPerSec counts it, the per-partition gauges
  (`kafka.cluster:type=Partition`) say the same; fetching again brings the follower back
  (IsrExpandsPerSec) and the gauges to 0; the follower's MaxLag / ConsumerLag show a real lag while it
  catches up and 0 after;
- an AlterPartition the controller refuses counts in FailedIsrUpdatesPerSec;
- with `num.replica.fetchers=2` each follower runs two fetchers per leader, each partition on the one
  Kafka's rule picks (checked against Kafka's own `Utils.abs` and Java's `String.hashCode` in a JVM),
  each with its own connection and fetch session, and every record replicates.
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaProducer
from prometheus_client.parser import text_string_to_metric_families

from kbroker.observability import BrokerObservability
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.alter_partition import AlterPartitionRequest, AlterPartitionResponse
from kbroker.replica.replica_fetcher import fetcher_id, java_string_hash
from tests.support.replica_cluster import ReplicaCluster

logging.getLogger("kafka").setLevel(logging.ERROR)

LAG_MS = 1000
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(cluster: ReplicaCluster, node_id: int) -> Samples:
    """What the broker's /metrics would serve, parsed: (sample name, sorted labels) -> value."""
    node = cluster.nodes[node_id]

    def render() -> bytes:
        obs = BrokerObservability(node.config)
        obs.services, obs.server, obs.metrics = node.services, node.server, node.services.metrics
        return obs._exposition().render()

    text = cluster.call(render).decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ReplicaCluster]:
    with ReplicaCluster(tmp_path, 3, {"replica.lag.time.max.ms": str(LAG_MS), "replica.fetch.max.bytes": "1"}) as c:
        c.create_topic("t", [1, 2, 3], {"min.insync.replicas": "2"})
        yield c


def produce(cluster: ReplicaCluster, n: int, acks: int | str = 1, prefix: str = "r", topic: str = "t",
            partitions: int = 1) -> None:
    p = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks=acks, linger_ms=0, request_timeout_ms=15000)
    for i in range(n):
        p.send(topic, f"{prefix}{i}".encode(), partition=i % partitions)
        p.flush(15)  # one batch per record: a follower limited to one batch per fetch needs n fetches
    p.close()


def test_isr_metrics_follow_a_stopped_follower(cluster: ReplicaCluster) -> None:
    produce(cluster, 5, acks="all")
    s = scrape(cluster, 1)
    assert value(s, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(s, "kafka_server_replicamanager_atminisrpartitioncount") == 0
    assert value(s, "kafka_server_replicamanager_leadercount") == 1
    assert value(s, "kafka_server_replicamanager_partitioncount") == 1
    assert value(s, "kafka_cluster_partition_insyncreplicascount", topic="t", partition="0") == 3
    assert value(s, "kafka_cluster_partition_replicascount", topic="t", partition="0") == 3
    shrinks = value(s, "kafka_server_replicamanager_isrshrinks_total")
    expands = value(s, "kafka_server_replicamanager_isrexpands_total")
    # A follower reports 0 for the leader-only gauges, and its fetcher's lag.
    f = scrape(cluster, 3)
    assert value(f, "kafka_server_replicamanager_leadercount") == 0
    assert value(f, "kafka_server_replicamanager_partitioncount") == 1
    assert value(f, "kafka_cluster_partition_replicascount", topic="t", partition="0") == 0
    assert value(f, "kafka_server_fetcherlagmetrics_consumerlag", clientId="ReplicaFetcherThread-0-1", topic="t",
                 partition="0") == 0

    cluster.pause_fetchers(3)
    produce(cluster, 40, acks=1, prefix="while-stopped")  # a follower at the leader's end never lags
    cluster.wait_for(lambda: 3 not in cluster.partition(1, "t").isr, what="ISR shrink")  # type: ignore[union-attr]
    s = scrape(cluster, 1)
    assert value(s, "kafka_server_replicamanager_underreplicatedpartitions") == 1
    assert value(s, "kafka_server_replicamanager_atminisrpartitioncount") == 1
    assert value(s, "kafka_server_replicamanager_underminisrpartitioncount") == 0
    assert value(s, "kafka_server_replicamanager_isrshrinks_total") == shrinks + 1
    assert value(s, "kafka_cluster_partition_underreplicated", topic="t", partition="0") == 1
    assert value(s, "kafka_cluster_partition_atminisr", topic="t", partition="0") == 1
    assert value(s, "kafka_cluster_partition_insyncreplicascount", topic="t", partition="0") == 2

    # Catching up one batch per fetch: the follower's lag is seen above 0, then back to 0.
    manager = cluster.nodes[3].services.replica_manager.replica_fetcher_manager
    cluster.resume_fetchers(3)
    seen = [cluster.call(lambda: manager.max_lag)]
    deadline = time.monotonic() + 20
    while cluster.call(lambda: cluster.partition(3, "t").log_end_offset) < 45:  # type: ignore[union-attr]
        seen.append(cluster.call(lambda: manager.max_lag))
        assert time.monotonic() < deadline, "the follower did not catch up"
    assert max(seen) > 0, seen
    cluster.wait_for(lambda: 3 in cluster.partition(1, "t").isr, what="ISR expand")  # type: ignore[union-attr]
    cluster.wait_for(lambda: manager.max_lag == 0, what="lag 0")
    s = scrape(cluster, 1)
    assert value(s, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(s, "kafka_server_replicamanager_isrexpands_total") == expands + 1
    assert value(s, "kafka_cluster_partition_underreplicated", topic="t", partition="0") == 0
    f = scrape(cluster, 3)
    assert value(f, "kafka_server_replicafetchermanager_maxlag", clientId="Replica") == 0
    # Replication bytes: what the followers appended is what the leader sent them.
    sent = value(s, "kafka_server_brokertopicmetrics_replicationbytesout_total")
    got = value(f, "kafka_server_brokertopicmetrics_replicationbytesin_total") + value(
        scrape(cluster, 2), "kafka_server_brokertopicmetrics_replicationbytesin_total")
    leader_bytes = cluster.call(lambda: cluster.partition(1, "t").log.size_in_bytes)  # type: ignore[union-attr]
    assert got == sent and got >= 2 * leader_bytes > 0, (got, sent, leader_bytes)


def test_under_min_isr_and_failed_isr_updates(cluster: ReplicaCluster) -> None:
    produce(cluster, 3, acks="all")
    before = value(scrape(cluster, 1), "kafka_server_replicamanager_failedisrupdates_total")
    real = cluster.alter_partition

    def refuse(request: AlterPartitionRequest) -> AlterPartitionResponse:
        """A controller that refuses every change (as for a stale partition epoch), committing nothing."""
        return AlterPartitionResponse(topics=[AlterPartitionResponse.TopicData(topic_id=t.topic_id, partitions=[
            AlterPartitionResponse.PartitionData(partition_index=p.partition_index,
                                                 error_code=ErrorCode.INVALID_UPDATE_VERSION, isr=[])
            for p in t.partitions]) for t in request.topics])

    cluster.alter_partition = refuse  # type: ignore[method-assign]
    cluster.pause_fetchers(2)
    cluster.pause_fetchers(3)
    produce(cluster, 3, acks=1, prefix="alone")
    cluster.wait_for(lambda: value(scrape(cluster, 1), "kafka_server_replicamanager_failedisrupdates_total") > before,
                     what="a failed ISR update counted")
    cluster.alter_partition = real  # type: ignore[method-assign]
    # The refused answer leaves the proposal pending until the metadata moves: elect again with ISR [1].
    cluster.elect_leader("t", 0, 1, isr=[1])
    cluster.wait_for(lambda: cluster.partition(1, "t").isr == {1}, what="ISR [1]")  # type: ignore[union-attr]
    s = scrape(cluster, 1)
    assert value(s, "kafka_server_replicamanager_underminisrpartitioncount") == 1
    assert value(s, "kafka_cluster_partition_underminisr", topic="t", partition="0") == 1
    cluster.resume_fetchers(2)
    cluster.resume_fetchers(3)


# -- num.replica.fetchers ------------------------------------------------------------------------------

TOPICS = ["t", "", "hello", "Aa", "BB", "polygenelubricants", "orders.eu-west-1", "caf\u00e9", "\U0001f600x"]

JAVA_SOURCE = """
import org.apache.kafka.common.utils.Utils;
public class FetcherIds {
    public static void main(String[] args) throws Exception {
        java.io.BufferedReader in = new java.io.BufferedReader(new java.io.InputStreamReader(System.in, "UTF-8"));
        String line;
        while ((line = in.readLine()) != null) {
            String[] f = line.split("\\t", -1);
            String topic = f[0];
            int p = Integer.parseInt(f[1]);
            int n = Integer.parseInt(f[2]);
            // AbstractFetcherManager.getFetcherId
            System.out.println(topic.hashCode() + "\\t" + (Utils.abs(31 * topic.hashCode() + p) % n));
        }
    }
}
"""


@pytest.mark.java
def test_fetcher_id_is_kafkas(tmp_path: Path) -> None:
    """The partition -> fetcher rule, against Kafka's own Utils.abs and Java's String.hashCode."""
    from tests.support.java import java_classpath, java_executable, java_unavailable_reason

    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    java = java_executable()
    assert java is not None
    cases = [(t, p, n) for t in TOPICS for p in (0, 1, 7, 2**31 - 1) for n in (1, 2, 3, 5)]
    source = tmp_path / "FetcherIds.java"
    source.write_text(JAVA_SOURCE)
    proc = subprocess.run([java, "-cp", java_classpath(), str(source)], input="".join(
        f"{t}\t{p}\t{n}\n" for t, p, n in cases), capture_output=True, text=True, encoding="utf-8", timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == len(cases)
    for (t, p, n), line in zip(cases, lines, strict=True):
        h, fid = (int(x) for x in line.split("\t"))
        assert java_string_hash(t) == h, t
        assert fetcher_id(t, p, n) == fid, (t, p, n)


def test_two_fetchers_per_leader(tmp_path: Path) -> None:
    with ReplicaCluster(tmp_path, 3, {"num.replica.fetchers": "2", "replica.lag.time.max.ms": str(LAG_MS)}) as c:
        c.create_topic("multi", [1, 2, 3], {"min.insync.replicas": "2"}, partitions=6)
        produce(c, 60, acks="all", topic="multi", partitions=6)

        def fetchers(node_id: int) -> dict[tuple[int, int], tuple[int, set[tuple[str, int]]]]:
            m = c.nodes[node_id].services.replica_manager.replica_fetcher_manager
            return {k: (f.session_id, set(f.partitions)) for k, f in m.fetchers.items()}

        for node in (1, 2, 3):
            fs = c.call(lambda node=node: fetchers(node))  # type: ignore[misc]
            followed = {(t, p): leader for (leader, _n), (_s, parts) in fs.items() for t, p in parts}
            # Each followed partition is on the fetcher Kafka's rule picks, of its leader.
            for (leader, n), (_session, parts) in fs.items():
                assert leader != node and parts
                assert all(fetcher_id(t, p, 2) == n for t, p in parts)
            assert len(followed) == 4  # 6 partitions, led round-robin by 1, 2, 3: 4 followed here
            # Two leaders to follow, two fetchers each: each its own fetch session.
            assert len(fs) == 4, fs
            sessions = [s for s, _ in fs.values()]
            assert all(sessions) and len(set(sessions)) == 4
        # On each leader, one connection per fetcher of each follower (client id broker-<id>-fetcher-<n>).
        for leader in (1, 2, 3):
            ids = c.call(lambda leader=leader: sorted(  # type: ignore[misc]
                conn.ctx.client_id for conn in c.nodes[leader].server.connections  # type: ignore[union-attr]
                if str(conn.ctx.client_id).startswith("broker-")))
            others = [n for n in (1, 2, 3) if n != leader]
            assert ids == sorted(f"broker-{o}-fetcher-{i}" for o in others for i in (0, 1)), ids
        for p in range(6):
            c.wait_for(lambda p=p: len({c.partition(n, "multi", p).log_end_offset  # type: ignore[union-attr, misc]
                                        for n in (1, 2, 3)}) == 1, what=f"multi-{p} replicated")
            assert c.call(lambda p=p: c.partition(1, "multi", p).log_end_offset) == 10  # type: ignore[union-attr, misc]


def test_num_replica_fetchers_is_dynamic(tmp_path: Path) -> None:
    """A cluster-wide dynamic `num.replica.fetchers=2` (a broker ConfigRecord, as `kafka-configs --alter
    --entity-type brokers --entity-default` writes) resizes every broker's fetcher pool; replication
    goes on from where each partition was."""
    from kbroker.protocol.metadata_records.config_record import ConfigRecord

    with ReplicaCluster(tmp_path, 3, {"replica.lag.time.max.ms": str(LAG_MS)}) as c:
        c.create_topic("dyn", [1, 2, 3], {}, partitions=6)
        produce(c, 30, acks="all", topic="dyn", partitions=6)

        def counts() -> list[int]:
            return [len(c.nodes[n].services.replica_manager.replica_fetcher_manager.fetchers) for n in (1, 2, 3)]

        assert c.call(counts) == [2, 2, 2]  # one fetcher per leader followed
        c.publish([ConfigRecord(resource_type=4, resource_name="", name="num.replica.fetchers", value="2")])
        c.wait_for(lambda: counts() == [4, 4, 4], what="two fetchers per leader")
        produce(c, 30, acks="all", topic="dyn", partitions=6, prefix="after")
        for p in range(6):
            c.wait_for(lambda p=p: [c.partition(n, "dyn", p).log_end_offset  # type: ignore[union-attr, misc]
                                    for n in (1, 2, 3)] == [10, 10, 10], what=f"dyn-{p} replicated")
