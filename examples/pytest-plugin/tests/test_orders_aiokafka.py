"""aiokafka against a broker of the test's own (`fresh_kafka_broker`, configured by a marker)."""

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer


@pytest.mark.kafka_broker(topics=["audit"], num_partitions=4)
def test_fresh_broker_with_its_own_config(fresh_kafka_broker) -> None:
    bootstrap = fresh_kafka_broker.bootstrap_servers

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            for i in range(3):
                await producer.send_and_wait("audit", f"event-{i}".encode(), partition=0)
            # An auto-created topic takes this broker's num.partitions=4.
            await producer.send_and_wait("auto-created", b"x")
            partitions = await producer.partitions_for("auto-created")
            assert len(partitions) == 4
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer("audit", bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                    group_id="audit-readers")
        await consumer.start()
        try:
            values: list[bytes] = []
            while len(values) < 3:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
                for messages in batch.values():
                    values.extend(m.value for m in messages)
            return sorted(values)
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [b"event-0", b"event-1", b"event-2"]
