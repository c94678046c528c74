"""kafka-python 3.0.12 and aiokafka 0.14.0 against a real kbroker process.

Both speak older, non-flexible versions (aiokafka: Fetch <= v11, Metadata <= v5, Produce <= v8),
so this exercises the other half of every codec. Round trip with keys, null values, headers and
explicit timestamps for every compression codec; offsets by time; idempotent producer.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

pytestmark = pytest.mark.interop

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]
BASE_TS = 1_700_000_000_000
N = 120


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def records() -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int]]:
    return [
        # Null keys and null values, never both (kafka-python refuses a record with neither).
        (None if i % 4 == 0 and i % 9 else b"k%d" % i, b"value-%d" % i * (i % 3 + 1) if i % 9 else None,
         [("h", b"%d" % i)] if i % 2 else [], BASE_TS + i)
        for i in range(N)
    ]


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_round_trip(kbroker: Any, codec: str | None) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = unique(f"kp-{codec}")
    producer = KafkaProducer(bootstrap_servers=kbroker.bootstrap, compression_type=codec, linger_ms=5)
    futures = [producer.send(topic, key=k, value=v, headers=h, timestamp_ms=ts, partition=0)
               for k, v, h, ts in records()]
    producer.flush(30)
    offsets = [f.get(timeout=30).offset for f in futures]
    producer.close()
    assert offsets == list(range(N))

    consumer = KafkaConsumer(bootstrap_servers=kbroker.bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=10_000)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = []
    for m in consumer:
        got.append((m.key, m.value, list(m.headers), m.timestamp))
        if len(got) == N:
            break
    assert got == records()
    assert consumer.end_offsets([tp])[tp] == N
    assert consumer.beginning_offsets([tp])[tp] == 0
    found = consumer.offsets_for_times({tp: BASE_TS + 50})[tp]
    assert found is not None and found.offset == 50 and found.timestamp == BASE_TS + 50
    assert consumer.offsets_for_times({tp: BASE_TS + 10_000})[tp] is None
    consumer.close()


def test_kafka_python_idempotent_producer(kbroker: Any) -> None:
    from kafka import KafkaProducer

    topic = unique("kp-idem")
    producer = KafkaProducer(bootstrap_servers=kbroker.bootstrap, enable_idempotence=True, acks="all")
    futures = [producer.send(topic, value=b"%d" % i, partition=0) for i in range(200)]
    producer.flush(30)
    assert sorted(f.get(timeout=30).offset for f in futures) == list(range(200))
    producer.close()


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_round_trip(kbroker: Any, codec: str | None) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    topic = unique(f"aio-{codec}")

    async def main() -> list[Any]:
        producer = AIOKafkaProducer(bootstrap_servers=kbroker.bootstrap, compression_type=codec, linger_ms=5)
        await producer.start()
        try:
            futs = [await producer.send(topic, key=k, value=v, headers=h, timestamp_ms=ts, partition=0)
                    for k, v, h, ts in records()]
            metas = await asyncio.gather(*futs)
            assert [m.offset for m in metas] == list(range(N))
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=kbroker.bootstrap, enable_auto_commit=False,
                                    auto_offset_reset="earliest")
        await consumer.start()
        tp = TopicPartition(topic, 0)
        try:
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got: list[Any] = []
            while len(got) < N:
                batch = await asyncio.wait_for(consumer.getmany(tp, timeout_ms=1000), 20)
                for m in batch.get(tp, []):
                    got.append((m.key, m.value, list(m.headers), m.timestamp))
            assert (await consumer.end_offsets([tp]))[tp] == N
            found = (await consumer.offsets_for_times({tp: BASE_TS + 7}))[tp]
            assert found is not None and found.offset == 7
            return got
        finally:
            await consumer.stop()

    got = asyncio.run(main())
    assert [(k, v, [(hk, bytes(hv)) for hk, hv in h], ts) for k, v, h, ts in got] == records()


def test_aiokafka_idempotent_producer(kbroker: Any) -> None:
    from aiokafka import AIOKafkaProducer

    topic = unique("aio-idem")

    async def main() -> list[int]:
        producer = AIOKafkaProducer(bootstrap_servers=kbroker.bootstrap, enable_idempotence=True)
        await producer.start()
        try:
            futs = [await producer.send(topic, value=b"%d" % i, partition=0) for i in range(200)]
            return [m.offset for m in await asyncio.gather(*futs)]
        finally:
            await producer.stop()

    assert sorted(asyncio.run(main())) == list(range(200))
