"""Kafka's own tools against replicating kbroker brokers: `kafka-topics --describe` (DescribeTopicPartitions)
shows the leader, replicas and ISR the metadata holds, through an ISR shrink and a leader failover."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaProducer

from tests.support.java import java_unavailable_reason, run_java_main
from tests.support.replica_cluster import ReplicaCluster

pytestmark = [pytest.mark.java]


@pytest.fixture(autouse=True)
def _need_java() -> None:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(f"Kafka's Java tools are unavailable: {reason}")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ReplicaCluster]:
    with ReplicaCluster(tmp_path, 3, {"replica.lag.time.max.ms": "1000"}) as c:
        c.create_topic("t", [1, 2, 3], {"min.insync.replicas": "2"})
        yield c


def describe(cluster: ReplicaCluster) -> tuple[int, str, str]:
    proc = run_java_main("kafka-topics", ["--bootstrap-server", cluster.bootstrap, "--describe", "--topic", "t"],
                         timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    m = re.search(r"Partition: 0\s+Leader: (\d+)\s+Replicas: ([\d,]+)\s+Isr: ([\d,]+)", proc.stdout)
    assert m, proc.stdout
    return int(m.group(1)), m.group(2), m.group(3)


def test_kafka_topics_describe_follows_isr_and_leader_changes(cluster: ReplicaCluster) -> None:
    cluster.pause_fetchers(3)
    # A stopped follower leaves the ISR only once the leader has something it lacks (a follower at the
    # leader's log end is in sync however long ago it fetched: Kafka's isCaughtUp).
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks=1)
    producer.send("t", b"x").get(15)
    producer.close()
    cluster.wait_for(lambda: cluster.registration("t").isr == (1, 2), what="ISR [1, 2]")
    assert describe(cluster) == (1, "1,2,3", "1,2")
    cluster.resume_fetchers(3)
    cluster.wait_for(lambda: cluster.registration("t").isr == (1, 2, 3), what="ISR [1, 2, 3]")
    cluster.fail_broker(1)
    time.sleep(0.2)
    assert describe(cluster) == (2, "1,2,3", "2,3")
