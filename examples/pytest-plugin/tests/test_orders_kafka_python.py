"""kafka-python against the session broker: a topic made with the factory, a consumer group."""

import json

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

from orders_app import Order, publish_orders


def test_consumer_group_reads_every_partition(kafka_bootstrap_servers: str, kafka_topic_factory) -> None:
    topic = kafka_topic_factory(partitions=3)
    customers = ["ada", "bob", "cy", "dee", "eve", "fay"]
    assert publish_orders(kafka_bootstrap_servers, topic, [Order(c, 100) for c in customers]) == 6
    consumer = KafkaConsumer(topic, bootstrap_servers=kafka_bootstrap_servers, group_id="audit",
                             auto_offset_reset="earliest", consumer_timeout_ms=20_000)
    try:
        seen = []
        for message in consumer:
            seen.append(json.loads(message.value)["customer"])
            if len(seen) == len(customers):
                break
        consumer.commit()
    finally:
        consumer.close()
    assert sorted(seen) == customers


@pytest.mark.kafka_topic(partitions=2, configs={"cleanup.policy": "compact"})
def test_topic_marker_sets_partitions_and_configs(kafka_bootstrap_servers: str, kafka_topic: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap_servers)
    try:
        (described,) = admin.describe_topics([kafka_topic])
        assert len(described["partitions"]) == 2
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap_servers)
    producer.send(kafka_topic, key=b"k", value=b"v").get(timeout=20)
    producer.close()
