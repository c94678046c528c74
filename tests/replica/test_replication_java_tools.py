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


def test_verifiable_producer_through_a_leader_failover(cluster: ReplicaCluster, tmp_path: Path) -> None:
    """Kafka's VerifiableProducer (idempotent, acks=all) writes through a leader failure: every record it
    was told is acknowledged is in the new leader's log, once, in order."""
    import json
    import subprocess

    from kafka import KafkaConsumer, TopicPartition

    from tests.support.java import start_java_main

    # VerifiableProducer sets retries=0 unless told otherwise; Kafka's replication system tests run it
    # idempotent with retries, as here.
    config = tmp_path / "producer.properties"
    config.write_text("enable.idempotence=true\nretries=2147483647\ndelivery.timeout.ms=60000\n")
    proc = start_java_main("kafka-verifiable-producer", [
        "--bootstrap-server", cluster.bootstrap, "--topic", "t", "--max-messages", "1500", "--throughput", "250",
        "--acks", "-1", "--producer.config", str(config)], stderr=subprocess.DEVNULL)
    acked: list[str] = []
    errors = 0
    failed_over = False
    assert proc.stdout is not None
    deadline = time.monotonic() + 90
    for line in proc.stdout:
        if time.monotonic() > deadline:
            proc.kill()
            break
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("name") == "producer_send_success":
            acked.append(event["value"])
        elif event.get("name") == "producer_send_error":
            errors += 1
        if not failed_over and len(acked) >= 300:
            cluster.fail_broker(1)
            failed_over = True
    assert proc.wait(30) == 0
    assert failed_over and len(acked) == 1500 and errors == 0
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, enable_auto_commit=False)
    tp = TopicPartition("t", 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    logged: list[str] = []
    end = time.monotonic() + 30
    while len(logged) < len(acked) and time.monotonic() < end:
        for records in consumer.poll(timeout_ms=500).values():
            logged.extend(r.value.decode() for r in records)
    consumer.close()
    assert logged == acked  # no loss, no duplicate, in order
    assert cluster.registration("t").leader == 2
