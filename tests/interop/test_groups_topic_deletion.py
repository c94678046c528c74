"""Deleting a topic removes the groups' committed offsets for it, as Kafka does.

Kafka's group coordinator drops the offsets of deleted partitions (onPartitionsDeleted); a group
that later re-creates a topic of the same name must not resume from stale offsets.
"""

from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.broker import KBroker


def test_deleted_topic_offsets_are_forgotten(kbroker: KBroker) -> None:
    admin = AdminClient({"bootstrap.servers": kbroker.bootstrap})
    for f in admin.create_topics([NewTopic("doomed", num_partitions=1, replication_factor=1)]).values():
        f.result(30)
    c = Consumer({"bootstrap.servers": kbroker.bootstrap, "group.id": "g-doomed", "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition("doomed", 0, 42)], asynchronous=False)
    assert c.committed([TopicPartition("doomed", 0)], timeout=30)[0].offset == 42

    for f in admin.delete_topics(["doomed"]).values():
        f.result(30)
    for f in admin.create_topics([NewTopic("doomed", num_partitions=1, replication_factor=1)]).values():
        f.result(30)
    # No committed offset any more: librdkafka reports OFFSET_INVALID (-1001).
    assert c.committed([TopicPartition("doomed", 0)], timeout=30)[0].offset == -1001
    c.close()
