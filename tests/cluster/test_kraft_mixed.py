"""A mixed KRaft cluster: an Apache Kafka 4.3.1 controller, an Apache Kafka broker (node 2) and a kbroker
broker (node 3). Topics with one replica are placed on each kind (explicit assignments); clients
bootstrapped on either broker see both brokers in Metadata, find each partition's leader, and produce
to and consume from both. Replication between the kinds (RF > 1) is the replication issue's; here
each side only has to agree on the metadata (brokers, endpoints, leaders) and route clients.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from tests.support.java import run_java_main
from tests.support.kafka_cluster import KafkaCluster, KafkaNode, cluster_unavailable_reason

pytestmark = [pytest.mark.interop, pytest.mark.java]

KAFKA_ID = 2
KB_ID = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    reason = cluster_unavailable_reason()
    if reason:
        pytest.skip(reason)
    c = KafkaCluster(tmp_path_factory.mktemp("mixed"))
    try:
        c.start_controllers()
        c.add_kafka_broker(KAFKA_ID).start()
        # This broker finds the quorum through controller.quorum.bootstrap.servers (KIP-853), the
        # one in test_kraft_broker.py through controller.quorum.voters.
        c.kbroker(KB_ID, {"controller.quorum.voters": "",
                          "controller.quorum.bootstrap.servers": c.bootstrap_controllers}).start(timeout=90)
        yield c
    finally:
        c.stop_all()


def _kafka(cluster: KafkaCluster) -> KafkaNode:
    return cluster.kafka_brokers[0]


def _wait_brokers(bootstrap: str, expected: list[int], timeout: float = 30) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while True:
        brokers = sorted(admin.list_topics(timeout=20).brokers)
        if brokers == expected:
            return
        assert time.monotonic() < deadline, f"{bootstrap} lists brokers {brokers}, expected {expected}"
        time.sleep(0.5)


def _partition_view(bootstrap: str, api: str, topics: list[str]) -> dict[str, list[tuple[int, ...]]]:
    """(partition, leader, leader epoch, replicas..., '|', isr...) per topic, from one broker, by a raw request."""
    from kbroker.client import NodeConnection
    from kbroker.protocol.messages.describe_topic_partitions import (
        DescribeTopicPartitionsRequest,
        DescribeTopicPartitionsResponse,
    )
    from kbroker.protocol.messages.metadata import MetadataRequest, MetadataResponse

    host, port = bootstrap.rsplit(":", 1)

    async def ask() -> dict[str, list[tuple[int, ...]]]:
        conn = NodeConnection(host, int(port))
        await conn.connect()
        try:
            if api == "metadata":
                md = await conn.request(3, MetadataRequest(
                    topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
                    allow_auto_topic_creation=False), MetadataResponse, version=12)
                result = md.topics
            else:
                dtp = await conn.request(75, DescribeTopicPartitionsRequest(
                    topics=[DescribeTopicPartitionsRequest.TopicRequest(name=t) for t in topics],
                    response_partition_limit=2000), DescribeTopicPartitionsResponse, version=0)
                result = dtp.topics
            return {t.name: sorted((p.partition_index, p.leader_id, p.leader_epoch, *p.replica_nodes, -1,
                                    *p.isr_nodes, -1, *p.offline_replicas) for p in t.partitions)
                    for t in result}
        finally:
            await conn.close()

    return asyncio.run(ask())


def test_both_brokers_list_each_other(cluster: KafkaCluster) -> None:
    from confluent_kafka.admin import AdminClient

    kb = cluster.kbrokers[0]
    for bootstrap in (_kafka(cluster).bootstrap, kb.bootstrap):
        _wait_brokers(bootstrap, [KAFKA_ID, KB_ID])
        md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=20)
        assert md.brokers[KB_ID].port == kb.port
        assert md.brokers[KAFKA_ID].port == _kafka(cluster).port
        assert md.cluster_id == cluster.cluster_id
        # DescribeCluster (the Java admin's describeCluster) too.
        admin = AdminClient({"bootstrap.servers": bootstrap})
        described = admin.describe_cluster().result(30)
        assert sorted(n.id for n in described.nodes) == [KAFKA_ID, KB_ID]
        assert described.cluster_id == cluster.cluster_id
        assert described.controller.id in (KAFKA_ID, KB_ID)


def test_leaders_on_each_kind_serve_clients_bootstrapped_on_either(cluster: KafkaCluster) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    kb = cluster.kbrokers[0]
    kafka = _kafka(cluster)
    # Created through kbroker (forwarded to the controller) and through the Kafka broker.
    for via, topic, where in ((kb.bootstrap, "on-kafka", KAFKA_ID), (kafka.bootstrap, "on-kbroker", KB_ID)):
        proc = run_java_main("kafka-topics", ["--bootstrap-server", via, "--create", "--topic", topic,
                                              "--replica-assignment", f"{where},{where}"], timeout=90)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    # kafka-topics --describe through kbroker shows each topic's leader on its broker.
    described = run_java_main("kafka-topics", ["--bootstrap-server", kb.bootstrap, "--describe",
                                               "--topic", "on-kafka,on-kbroker"], timeout=90)
    assert described.returncode == 0, described.stderr
    for line in described.stdout.splitlines():
        if "Partition:" in line:
            where = KAFKA_ID if "on-kafka" in line.split()[1] else KB_ID
            assert f"Leader: {where}" in line and f"Replicas: {where}" in line, described.stdout

    # Differential: kbroker's Metadata and DescribeTopicPartitions answers equal the Kafka broker's.
    for api in ("metadata", "describe_topic_partitions"):
        ours = _partition_view(kb.bootstrap, api, ["on-kafka", "on-kbroker"])
        theirs = _partition_view(kafka.bootstrap, api, ["on-kafka", "on-kbroker"])
        assert ours == theirs, (api, ours, theirs)
        assert {t: {p[1] for p in parts} for t, parts in ours.items()} == {"on-kafka": {KAFKA_ID},
                                                                           "on-kbroker": {KB_ID}}

    for producer_bootstrap, consumer_bootstrap in ((kafka.bootstrap, kb.bootstrap), (kb.bootstrap, kafka.bootstrap)):
        producer = Producer({"bootstrap.servers": producer_bootstrap, "enable.idempotence": True, "acks": "all"})
        sent: dict[str, list[bytes]] = {}
        for topic in ("on-kafka", "on-kbroker"):
            sent[topic] = [f"{topic}-{producer_bootstrap}-{i}".encode() for i in range(100)]
            for i, value in enumerate(sent[topic]):
                producer.produce(topic, value=value, partition=i % 2)
        assert producer.flush(30) == 0
        for topic in ("on-kafka", "on-kbroker"):
            consumer = Consumer({"bootstrap.servers": consumer_bootstrap, "group.id": f"g-{topic}-{consumer_bootstrap}",
                                 "auto.offset.reset": "earliest", "enable.auto.commit": False})
            consumer.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
            got: list[bytes] = []
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not set(sent[topic]) <= set(got):
                msg = consumer.poll(1.0)
                if msg is not None and msg.error() is None:
                    got.append(msg.value())
            consumer.close()
            assert set(sent[topic]) <= set(got), f"{topic} via {consumer_bootstrap}: {len(got)} records"


def _java_string_hash(s: str) -> int:
    h = 0
    for ch in s:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _groups_on_each_broker(cluster: KafkaCluster, per_broker: int) -> list[str]:
    """Group ids whose __consumer_offsets partition (Kafka's `abs(groupId.hashCode()) % partitions`) is
    led by each broker, `per_broker` of each: which broker coordinates a group depends on where the
    controller placed that partition, so fixed names would land on one kind of broker in some runs."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": cluster.kbrokers[0].bootstrap})
    # FindCoordinator creates __consumer_offsets on first use.
    admin.describe_consumer_groups(["warm-up"])["warm-up"].exception(30)
    deadline = time.monotonic() + 60
    while True:
        md = admin.list_topics("__consumer_offsets", timeout=20).topics.get("__consumer_offsets")
        leaders = {p: pm.leader for p, pm in (md.partitions if md is not None and md.error is None else {}).items()}
        if leaders and all(leader >= 0 for leader in leaders.values()):
            break
        assert time.monotonic() < deadline, f"__consumer_offsets has no leaders yet: {leaders}"
        time.sleep(0.5)
    assert set(leaders.values()) == {KAFKA_ID, KB_ID}, f"__consumer_offsets placed on one broker only: {leaders}"
    chosen: dict[int, list[str]] = {KAFKA_ID: [], KB_ID: []}
    for i in range(1000):
        group = f"group-{i}"
        leader = leaders[abs(_java_string_hash(group)) % len(leaders)]
        if len(chosen[leader]) < per_broker:
            chosen[leader].append(group)
    return chosen[KAFKA_ID] + chosen[KB_ID]


def test_a_group_coordinated_on_either_broker_commits_offsets(cluster: KafkaCluster) -> None:
    """__consumer_offsets is spread over both brokers: FindCoordinator on kbroker names whichever broker
    leads the group's partition, and the consumer commits there."""
    from confluent_kafka import Consumer, Producer

    kb = cluster.kbrokers[0]
    producer = Producer({"bootstrap.servers": kb.bootstrap})
    for i in range(20):
        producer.produce("on-kbroker", value=f"g{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    groups = _groups_on_each_broker(cluster, per_broker=4)
    positions: dict[str, tuple[int, int]] = {}
    for group in groups:
        consumer = Consumer({"bootstrap.servers": kb.bootstrap, "group.id": group,
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe(["on-kbroker"])
        msg = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                break
        assert msg is not None and msg.error() is None, f"group {group} got nothing"
        committed = consumer.commit(message=msg, asynchronous=False)
        assert committed is not None and committed[0].error is None
        positions[group] = (msg.partition(), msg.offset() + 1)
        consumer.close()
    from confluent_kafka.admin import AdminClient

    # Described through the Kafka broker: the groups live on both kinds of coordinator.
    admin = AdminClient({"bootstrap.servers": _kafka(cluster).bootstrap})
    coordinators = {g: f.result(30).coordinator.id for g, f in admin.describe_consumer_groups(groups).items()}
    assert set(coordinators.values()) == {KAFKA_ID, KB_ID}, coordinators
    offsets = admin.list_consumer_group_offsets
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    for g in groups:
        partition, offset = positions[g]
        res = offsets([ConsumerGroupTopicPartitions(g, [TopicPartition("on-kbroker", partition)])])[g].result(30)
        assert res.topic_partitions[0].offset == offset, (g, coordinators[g])


def test_stopping_kbroker_removes_it_from_the_kafka_brokers_metadata(cluster: KafkaCluster) -> None:
    kb = cluster.kbrokers[0]
    assert kb.stop() == 0
    _wait_brokers(_kafka(cluster).bootstrap, [KAFKA_ID])
