"""confluent-kafka (librdkafka) against the plugin's session broker and a per-test topic."""

from confluent_kafka.admin import AdminClient

from orders_app import Order, publish_orders, totals_by_customer


def test_orders_round_trip(kafka_bootstrap_servers: str, kafka_topic: str) -> None:
    orders = [Order("ada", 1200), Order("bob", 500), Order("ada", 300)]
    assert publish_orders(kafka_bootstrap_servers, kafka_topic, orders) == 3
    assert totals_by_customer(kafka_bootstrap_servers, kafka_topic, 3) == {"ada": 1500, "bob": 500}


def test_each_test_gets_its_own_empty_topic(kafka_bootstrap_servers: str, kafka_topic: str) -> None:
    # The previous test's orders are not here: this topic is new.
    assert publish_orders(kafka_bootstrap_servers, kafka_topic, [Order("cy", 1)]) == 1
    assert totals_by_customer(kafka_bootstrap_servers, kafka_topic, 1) == {"cy": 1}
    topics = AdminClient({"bootstrap.servers": kafka_bootstrap_servers}).list_topics(timeout=10).topics
    assert kafka_topic in topics and len(topics[kafka_topic].partitions) == 1
