"""Segment rolls under produce load, with their fsyncs on the broker's background executor.

With the smallest segment.bytes Kafka 4.x allows (1 MiB, KIP-1030) and 10 KB records, the log
rolls about thirty segments, and each roll's fsync runs on a worker
thread (never on the event loop). Every record must stay readable, and after a clean restart the
recovery-point checkpoint must cover the rolled segments.
"""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support.broker import KBroker

N = 3000


def _value(i: int) -> bytes:
    return f"record-{i:05d}".encode() * 800  # 9.6 KB


def _consume_all(bootstrap: str, topic: str) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    for _ in range(200):
        for m in c.consume(num_messages=1000, timeout=0.5):
            if not m.error():
                values.append(m.value())
        if len(values) >= N:
            break
    c.close()
    return values


def test_many_rolls_keep_every_record(kbroker_factory: Callable[..., KBroker]) -> None:
    broker = kbroker_factory({"log.segment.bytes": "1048576", "num.partitions": "1"})
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1, "batch.size": 4096})
    for i in range(N):
        p.produce("rolls", _value(i))
        p.poll(0)
    assert p.flush(60) == 0
    segments = sorted((broker.log_dir / "rolls-0").glob("*.log"))
    assert len(segments) > 10, "1 MiB segments should have rolled many times"
    expected = [_value(i) for i in range(N)]
    assert _consume_all(broker.bootstrap, "rolls") == expected

    assert broker.stop() == 0
    checkpoint = (broker.log_dir / "recovery-point-offset-checkpoint").read_text().split("\n")
    points = {line.split()[0]: int(line.split()[2]) for line in checkpoint[2:] if line.strip()}
    assert points["rolls"] == N  # clean shutdown flushes everything
    broker.start()
    assert _consume_all(broker.bootstrap, "rolls") == expected
