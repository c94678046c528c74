"""A real kbroker process that snapshots its metadata restarts from the snapshot with everything
intact: topics and their data, configs, a consumer group's committed offsets (confluent-kafka).
"""

from __future__ import annotations

import os

import pytest

from kbroker.controller.metadata_log import CLUSTER_METADATA_DIR
from kbroker.snapshot import parse_snapshot_path
from tests.support.broker import KBroker

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is a test dependency")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic  # noqa: E402

pytestmark = pytest.mark.interop


def test_restart_from_a_snapshot_keeps_topics_data_configs_and_offsets(tmp_path) -> None:  # type: ignore[no-untyped-def]
    broker = KBroker(tmp_path, overrides={"metadata.log.max.record.bytes.between.snapshots": "2000"})
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        names = [f"snap-{i}" for i in range(12)]
        for f in admin.create_topics([NewTopic(n, 2, 1, config={"retention.ms": "7777777"}) for n in names]).values():
            f.result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        for n in names:
            for i in range(5):
                producer.produce(n, value=f"{n}-{i}".encode(), partition=i % 2)
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g1", "enable.auto.commit": False})
        consumer.commit(offsets=[TopicPartition(names[0], 0, 3), TopicPartition(names[1], 1, 2)], asynchronous=False)
        consumer.close()
    finally:
        broker.stop()
    meta = broker.log_dir / CLUSTER_METADATA_DIR
    snapshots = [sp for p in meta.iterdir() if (sp := parse_snapshot_path(p)) and not sp.partial and not sp.deleted]
    assert snapshots, sorted(os.listdir(meta))

    broker.start()
    try:
        # The default node is a one-voter quorum: its Raft client loads the newest snapshot.
        assert "Loaded metadata snapshot" in broker.log_text()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topics = admin.list_topics(timeout=30).topics
        assert set(names) <= set(topics) and all(len(topics[n].partitions) == 2 for n in names)
        configs = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, names[3])])
        described = next(iter(configs.values())).result(30)
        assert described["retention.ms"].value == "7777777"
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g1", "enable.auto.commit": False,
                             "auto.offset.reset": "earliest"})
        committed = consumer.committed([TopicPartition(names[0], 0), TopicPartition(names[1], 1)], timeout=30)
        assert [(tp.topic, tp.partition, tp.offset) for tp in committed] == [(names[0], 0, 3), (names[1], 1, 2)]
        consumer.assign([TopicPartition(names[5], 1, 0)])
        got = []
        while len(got) < 2:
            msg = consumer.poll(10)
            assert msg is not None and msg.error() is None
            got.append(msg.value())
        consumer.close()
        assert got == [f"{names[5]}-1".encode(), f"{names[5]}-3".encode()]
    finally:
        broker.stop()
