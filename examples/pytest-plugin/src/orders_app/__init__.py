"""A small Kafka application: publishes orders as JSON, keyed by customer, and totals them back."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from confluent_kafka import Consumer, Producer, TopicPartition


@dataclass(frozen=True)
class Order:
    customer: str
    amount_cents: int


def publish_orders(bootstrap_servers: str, topic: str, orders: Iterable[Order]) -> int:
    """Produce every order (acks=all, idempotent); returns how many were acknowledged."""
    acked = 0

    def on_delivery(err: object, _msg: object) -> None:
        nonlocal acked
        if err is None:
            acked += 1

    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True})
    for order in orders:
        producer.produce(topic, json.dumps(asdict(order)).encode(), key=order.customer.encode(),
                         on_delivery=on_delivery)
    producer.flush(30)
    return acked


def totals_by_customer(bootstrap_servers: str, topic: str, count: int, timeout_s: float = 30.0) -> dict[str, int]:
    """Read `count` orders from the start of partition 0 and total them per customer."""
    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": "orders-totals",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    totals: dict[str, int] = {}
    seen = 0
    try:
        while seen < count:
            messages = consumer.consume(count - seen, timeout=timeout_s)
            if not messages:
                raise TimeoutError(f"read {seen} of {count} orders")
            for m in messages:
                if m.error():
                    raise RuntimeError(m.error())
                order = json.loads(m.value())
                totals[order["customer"]] = totals.get(order["customer"], 0) + order["amount_cents"]
                seen += 1
    finally:
        consumer.close()
    return totals
