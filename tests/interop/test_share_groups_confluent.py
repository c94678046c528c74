"""Share groups (KIP-932) with confluent-kafka's `ShareConsumer` (librdkafka 2.16) against a real kbroker.

- Three share consumers on a 1-partition topic (each polling in its own thread): every record is
  delivered exactly once, at delivery count 1, when all acknowledge (implicit mode).
- Explicit acknowledgement: RELEASE redelivers a record with delivery count 2, REJECT never again.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.broker import KBroker

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KBroker]:
    # As in Kafka, a share-partition is assigned only once the group coordinator initialized it, at the
    # member's next heartbeat: a 1 s interval (instead of 5 s) lets the warm-up see it assigned.
    b = KBroker(tmp_path_factory.mktemp("share-ck"), {"group.share.min.heartbeat.interval.ms": "500",
                                                      "group.share.heartbeat.interval.ms": "1000"})
    b.start()
    try:
        yield b
    finally:
        b.stop()


def _topic(broker: KBroker) -> str:
    name = f"share-ck-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    return name


def _produce(broker: KBroker, topic: str, n: int) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(n):
        producer.produce(topic, value=b"v%d" % i)
    producer.flush(10)


def _warm_up(consumers: list[ShareConsumer], seconds: float = 3.0) -> None:
    """share.auto.offset.reset=latest: the share-partition starts where the log ends at the first fetch
    (after the heartbeat that assigned it, about one heartbeat interval after joining)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for c in consumers:
            assert not list(c.poll(0.1))


def test_three_share_consumers_each_record_once(broker: KBroker) -> None:
    topic, group, records = _topic(broker), f"g-{uuid.uuid4().hex[:6]}", 90
    consumers = [ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group}) for _ in range(3)]
    for c in consumers:
        c.subscribe([topic])
    _warm_up(consumers)
    got: list[tuple[int, int, int | None]] = []
    lock = threading.Lock()
    stop = threading.Event()

    def run(i: int, c: ShareConsumer) -> None:
        while not stop.is_set():
            for m in c.poll(0.2):
                assert m.error() is None, m.error()
                with lock:
                    got.append((i, m.offset(), m.delivery_count()))
                time.sleep(0.005)

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(consumers)]
    for t in threads:
        t.start()
    try:
        _produce(broker, topic, records)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len({o for _, o, _ in got}) < records:
            time.sleep(0.1)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        for c in consumers:
            c.close()
    offsets = Counter(o for _, o, _ in got)
    assert sorted(offsets) == list(range(records))
    assert [o for o, n in offsets.items() if n > 1] == []
    assert {d for _, _, d in got} == {1}


def test_explicit_release_and_reject(broker: KBroker) -> None:
    topic, group = _topic(broker), f"g-{uuid.uuid4().hex[:6]}"
    c = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit"})
    try:
        c.subscribe([topic])
        _warm_up([c])
        _produce(broker, topic, 5)
        events: list[tuple[int, int | None, str]] = []
        accepted: set[int] = set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(accepted) < 4:
            for m in c.poll(0.2):
                assert m.error() is None, m.error()
                if m.offset() == 0 and m.delivery_count() == 1:
                    c.acknowledge(m, AcknowledgeType.RELEASE)
                    events.append((m.offset(), m.delivery_count(), "release"))
                elif m.offset() == 1:
                    c.acknowledge(m, AcknowledgeType.REJECT)
                    events.append((m.offset(), m.delivery_count(), "reject"))
                else:
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
                    events.append((m.offset(), m.delivery_count(), "accept"))
                    accepted.add(m.offset())
            c.commit_sync()
        assert accepted == {0, 2, 3, 4}, events
        assert (0, 1, "release") in events and (0, 2, "accept") in events
        assert [e for e in events if e[0] == 1] == [(1, 1, "reject")]
    finally:
        c.close()
