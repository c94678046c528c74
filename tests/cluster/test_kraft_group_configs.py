"""Group configs (the GROUP config resource) on a kbroker broker of a KRaft cluster run by an Apache Kafka
4.3.1 controller.

`kafka-configs --entity-type groups` sent to kbroker is forwarded to Kafka's controller, which validates
the group config (Kafka's own `GroupConfig.validate`, its message comes back through kbroker) and
writes a `ConfigRecord` with resource type GROUP; kbroker's metadata image replays it, DescribeConfigs
on kbroker shows it, and kbroker's share-partition manager honours it: `share.auto.offset.reset=earliest`
makes a new share group read records produced before it existed.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from kbroker.protocol.messages.find_coordinator import FindCoordinatorRequest
from kbroker.protocol.messages.metadata import MetadataRequest
from kbroker.protocol.messages.share_fetch import ShareFetchRequest as F
from kbroker.protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest as H
from tests.support.java import run_java_main
from tests.support.kafka_cluster import KafkaCluster, cluster_unavailable_reason
from tests.support.raw_client import RawKafkaClient

pytestmark = [pytest.mark.interop, pytest.mark.java]

KB_ID = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    reason = cluster_unavailable_reason()
    if reason:
        pytest.fail(reason)
    c = KafkaCluster(tmp_path_factory.mktemp("kraft-group-configs"))
    try:
        c.start_controllers()
        c.kbroker(KB_ID, {"share.coordinator.state.topic.replication.factor": "1",
                          "share.coordinator.state.topic.min.isr": "1"}).start(timeout=90)
        yield c
    finally:
        c.stop_all()


def _configs(bootstrap: str, *args: str) -> str:
    done = run_java_main("kafka-configs", ["--bootstrap-server", bootstrap, "--entity-type", "groups", *args],
                         timeout=90)
    return f"rc={done.returncode}\n{done.stdout}{done.stderr}"


def test_group_configs_are_forwarded_validated_by_the_controller_and_honoured(cluster: KafkaCluster) -> None:
    from confluent_kafka import Producer

    kb = cluster.kbrokers[0]
    topic, group = f"early-{uuid.uuid4().hex[:6]}", f"kraft-{uuid.uuid4().hex[:6]}"
    created = run_java_main("kafka-topics", ["--bootstrap-server", kb.bootstrap, "--create", "--topic", topic,
                                             "--partitions", "1", "--replication-factor", "1"], timeout=90)
    assert created.returncode == 0, created.stdout + created.stderr
    producer = Producer({"bootstrap.servers": kb.bootstrap, "linger.ms": 0})
    for i in range(5):
        producer.produce(topic, value=b"v%d" % i)
    assert producer.flush(30) == 0

    out = _configs(kb.bootstrap, "--entity-name", group, "--alter", "--add-config", "share.auto.offset.reset=earliest")
    assert out.startswith("rc=0"), out
    out = _configs(kb.bootstrap, "--entity-name", group, "--describe")
    assert "share.auto.offset.reset=earliest" in out, out
    refused = _configs(kb.bootstrap, "--entity-name", group, "--alter", "--add-config", "share.delivery.count.limit=1")
    assert "Invalid value 1 for configuration share.delivery.count.limit: Value must be at least 2" in refused, refused

    with RawKafkaClient(kb.bootstrap) as c:
        tid = c.request(3, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)])).topics[0].topic_id
        member = "kraft-member-00000000"
        deadline = time.monotonic() + 60
        while True:  # __consumer_offsets is created through the controller by the first FindCoordinator
            c.request(10, 6, FindCoordinatorRequest(key_type=0, coordinator_keys=[group]))
            hb = c.request(76, 1, H(group_id=group, member_id=member, member_epoch=0, subscribed_topic_names=[topic]))
            if hb.error_code == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert hb.error_code == 0
        acquired: list[tuple[int, int]] = []
        epoch, deadline = 0, time.monotonic() + 60
        while not acquired and time.monotonic() < deadline:  # __share_group_state is created the same way
            r = c.request(78, 1, F(group_id=group, member_id=member, share_session_epoch=epoch, max_wait_ms=300,
                                   min_bytes=1, max_bytes=1 << 20, max_records=100, batch_size=100,
                                   topics=[F.FetchTopic(topic_id=tid, partitions=[F.FetchPartition(partition_index=0)])]))
            epoch += 1
            acquired = [(a.first_offset, a.last_offset) for t in r.responses for p in t.partitions
                        for a in p.acquired_records]
        assert acquired == [(0, 4)]
