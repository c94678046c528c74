"""KIP-73 on three combined kbroker nodes: `kafka-reassign-partitions --throttle` (Kafka 4.3.1's tool)
sets `leader.replication.throttled.rate` / `follower.replication.throttled.rate` on the brokers and the
throttled-replica lists on the topic; the new replica then copies the partition at about the set rate,
while the same move without a throttle is much faster; `--verify` removes the throttle.

The quota windows are shortened (`replication.quota.window.num=3`, 1 s samples) so that the burst a
fresh rate lets through (the rate is measured over at least num-1 windows, as Kafka's) is small beside
the data moved. Bounds are generous: the machine is a loaded 2-core one.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cluster.test_combined_mode import CombinedNode, _nodes
from tests.support.broker import free_port
from tests.support.combined_cluster import start_all
from tests.support.java import java_unavailable_reason, run_java_main
from tests.support.kafka_cluster import new_cluster_id
from tests.support.storage_format import format_node

pytestmark = [pytest.mark.interop, pytest.mark.java]

RATE = 400_000  # bytes/s
RECORD = 10_000
RECORDS = 400  # 4 MB per topic


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, CombinedNode]]:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    work = tmp_path_factory.mktemp("repl-quotas")
    nodes = _nodes(work, (1, 2, 3), {"offsets.topic.replication.factor": "1",
                                     "replication.quota.window.num": "3",
                                     "replication.quota.window.size.seconds": "1"})
    for n in nodes.values():
        n.broker.overrides["kbroker.metrics.listener"] = f"http://127.0.0.1:{free_port()}"
    cluster_id = new_cluster_id()
    for n in nodes.values():
        format_node(n.broker, cluster_id, n.broker.overrides)
    try:
        start_all(nodes)  # the voters need each other to elect a leader: started together
        yield nodes
    finally:
        for n in nodes.values():
            n.broker.kill()


def _bootstrap(nodes: dict[int, CombinedNode]) -> str:
    return ",".join(n.bootstrap for n in nodes.values())


def _create_and_fill(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1]])])[topic].result(60)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5, "batch.size": 200_000,
                  "compression.type": "none"})
    payload = bytes(range(256)) * (RECORD // 256) + b"x" * (RECORD % 256)
    deadline = time.monotonic() + 60
    while True:  # the new topic's leader may take a moment to be known
        try:
            for _ in range(RECORDS):
                p.produce(topic, payload, partition=0)
                p.poll(0)
            break
        except BufferError:
            p.flush(10)
            assert time.monotonic() < deadline
    assert p.flush(60) == 0


def _isr(bootstrap: str, topic: str) -> list[int]:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=20)
    part = md.topics[topic].partitions.get(0)
    return sorted(part.isrs) if part is not None else []


def _byte_rate(node: CombinedNode, name: str) -> float:
    url = node.broker.overrides["kbroker.metrics.listener"] + "/metrics"
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    m = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.M)
    return float(m.group(1)) if m else -1.0


def _reassign(bootstrap: str, tmp: Path, topic: str, replicas: list[int], throttle: int | None,
              during: Callable[[], None] = lambda: None) -> float:
    """Run `kafka-reassign-partitions --execute` and return how long the new replica took to join the ISR."""
    plan = tmp / f"{topic}.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": replicas}]}))
    args = ["--bootstrap-server", bootstrap.split(",")[0], "--reassignment-json-file", str(plan), "--execute"]
    if throttle is not None:
        args += ["--throttle", str(throttle)]
    r = run_java_main("kafka-reassign-partitions", args, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    start = time.monotonic()
    while sorted(_isr(bootstrap, topic)) != sorted(replicas):
        assert time.monotonic() - start < 180, f"{topic}: reassignment to {replicas} did not finish"
        during()
        time.sleep(0.2)
    return time.monotonic() - start


def _describe(bootstrap: str, resource_type: str, name: str) -> dict[str, str]:
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(resource_type, name)
    configs = admin.describe_configs([res])[res].result(30)
    return {k: v.value for k, v in configs.items() if v.value is not None}


def test_throttled_reassignment_moves_at_about_the_rate(cluster: dict[int, CombinedNode], tmp_path: Path) -> None:
    bootstrap = _bootstrap(cluster)
    _create_and_fill(bootstrap, "fast")
    _create_and_fill(bootstrap, "slow")
    size = RECORDS * RECORD

    unthrottled = _reassign(bootstrap, tmp_path, "fast", [1, 3], None)
    rates: dict[str, float] = {"leader": 0.0, "follower": 0.0}

    def sample() -> None:  # the LeaderReplication / FollowerReplication byte-rate sensors while it moves
        rates["leader"] = max(rates["leader"], _byte_rate(cluster[1], "kafka_server_leaderreplication_byte_rate"))
        rates["follower"] = max(rates["follower"],
                                _byte_rate(cluster[2], "kafka_server_followerreplication_byte_rate"))

    throttled = _reassign(bootstrap, tmp_path, "slow", [1, 2], RATE, sample)

    # What the tool set (Kafka's keys), before --verify removes them.
    topic = _describe(bootstrap, "topic", "slow")
    assert topic.get("leader.replication.throttled.replicas") == "0:1"
    assert topic.get("follower.replication.throttled.replicas") == "0:2"
    broker = _describe(bootstrap, "broker", "2")
    assert broker.get("follower.replication.throttled.rate") == str(RATE)

    # At most (num-1) s of burst goes unthrottled; the rest at the rate (generous bounds).
    expected = (size - 2 * RATE) / RATE
    print(f"moved {size} B: unthrottled {unthrottled:.1f}s, throttled at {RATE} B/s {throttled:.1f}s "
          f"(~{size / throttled:.0f} B/s; expected ~{expected:.1f}s)")
    assert throttled >= 0.5 * expected, (throttled, expected)
    assert throttled <= 3 * expected + 10, (throttled, expected)
    assert throttled > 2 * unthrottled, (throttled, unthrottled)
    print(f"peak byte-rate while throttled: leader {rates['leader']:.0f}, follower {rates['follower']:.0f} B/s")
    assert 0 < rates["leader"] <= 2.5 * RATE and 0 < rates["follower"] <= 2.5 * RATE, rates

    r = run_java_main("kafka-reassign-partitions", [
        "--bootstrap-server", bootstrap.split(",")[0], "--reassignment-json-file", str(tmp_path / "slow.json"),
        "--verify"], timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Clearing topic-level throttles on topic slow" in r.stdout, r.stdout
    topic = _describe(bootstrap, "topic", "slow")
    assert not topic.get("leader.replication.throttled.replicas") and not topic.get(
        "follower.replication.throttled.replicas"), topic
    assert "follower.replication.throttled.rate" not in _describe(bootstrap, "broker", "2")
