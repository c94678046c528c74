"""Transactions end to end with librdkafka (confluent-kafka) against a real kbroker process:
committed records visible to a read_committed consumer, aborted ones not (but visible to
read_uncommitted), consume-transform-produce with send_offsets_to_transaction, a zombie fenced by a
new incarnation, the coordinator aborting a timed-out transaction, and a restart mid-transaction."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.broker import KBroker, running_kbroker

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def kbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KBroker]:
    """One broker for the tests that neither restart it nor change its settings: each uses topics
    (uuid-named), transactional ids and groups of its own."""
    with running_kbroker(tmp_path_factory.mktemp("txn-confluent")) as b:
        yield b


def _topic(bootstrap: str, partitions: int = 1) -> str:
    name = f"txn-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)
    return name


def _producer(bootstrap: str, tid: str, **extra: object) -> Producer:
    conf: dict[str, object] = {"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5}
    conf.update(extra)
    return Producer(conf)


def _consume_all(bootstrap: str, topic: str, isolation: str, expect_end: bool = True,
                 timeout: float = 15.0) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                  "auto.offset.reset": "earliest", "isolation.level": isolation, "enable.partition.eof": True,
                  "enable.auto.commit": False})
    c.subscribe([topic])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    eof = False
    while time.monotonic() < deadline and not eof:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                eof = True
                continue
            raise KafkaException(m.error())
        out.append(m.value())
    c.close()
    assert eof or not expect_end, "the consumer never reached the end of the partition"
    return out


def test_commit_visible_abort_invisible(kbroker: KBroker) -> None:
    topic = _topic(kbroker.bootstrap)
    p = _producer(kbroker.bootstrap, "t-basic")
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, b"c1-%d" % i)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, b"a-%d" % i)
    p.flush(10)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, b"c2-0")
    p.commit_transaction(30)
    committed = _consume_all(kbroker.bootstrap, topic, "read_committed")
    assert committed == [b"c1-0", b"c1-1", b"c1-2", b"c1-3", b"c1-4", b"c2-0"]
    everything = _consume_all(kbroker.bootstrap, topic, "read_uncommitted")
    assert everything == [b"c1-0", b"c1-1", b"c1-2", b"c1-3", b"c1-4", b"a-0", b"a-1", b"a-2", b"c2-0"]


def test_open_transaction_holds_back_read_committed(kbroker: KBroker) -> None:
    topic = _topic(kbroker.bootstrap)
    plain = Producer({"bootstrap.servers": kbroker.bootstrap})
    plain.produce(topic, b"before")
    plain.flush(10)
    p = _producer(kbroker.bootstrap, "t-open")
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"open")
    p.flush(10)
    plain.produce(topic, b"after")
    plain.flush(10)
    # The LSO stops at the open transaction: "after" is not readable yet under read_committed.
    # ListOffsets latest answers the LSO under read_committed, the high watermark otherwise.
    for isolation, end in (("read_committed", 1), ("read_uncommitted", 3)):
        c = Consumer({"bootstrap.servers": kbroker.bootstrap, "group.id": "g-lso", "isolation.level": isolation})
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1] == end
        c.close()
    assert _consume_all(kbroker.bootstrap, topic, "read_committed") == [b"before"]
    p.commit_transaction(30)
    assert _consume_all(kbroker.bootstrap, topic, "read_committed") == [b"before", b"open", b"after"]


def test_consume_transform_produce_exactly_once(kbroker: KBroker) -> None:
    src = _topic(kbroker.bootstrap)
    dst = _topic(kbroker.bootstrap)
    plain = Producer({"bootstrap.servers": kbroker.bootstrap})
    for i in range(20):
        plain.produce(src, b"%d" % i)
    plain.flush(10)
    group = "ctp"

    def run(batch: int, commit: bool) -> int:
        c = Consumer({"bootstrap.servers": kbroker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                      "enable.auto.commit": False, "isolation.level": "read_committed"})
        c.subscribe([src])
        p = _producer(kbroker.bootstrap, "t-ctp")
        p.init_transactions(30)
        msgs = []
        deadline = time.monotonic() + 20
        while len(msgs) < batch and time.monotonic() < deadline:
            msgs += [m for m in c.consume(batch - len(msgs), 1.0) if not m.error()]
        p.begin_transaction()
        for m in msgs:
            p.produce(dst, m.value() + b"!")
        p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 30)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
        c.close()
        return len(msgs)

    assert run(10, True) == 10
    assert run(10, False) == 10  # aborted: its output and its offsets are dropped
    assert run(10, True) == 10   # so the same 10 are read again
    out = _consume_all(kbroker.bootstrap, dst, "read_committed")
    assert out == [b"%d!" % i for i in range(20)]


def test_new_incarnation_fences_the_zombie(kbroker: KBroker) -> None:
    topic = _topic(kbroker.bootstrap)
    zombie = _producer(kbroker.bootstrap, "t-zombie")
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie")
    zombie.flush(10)
    fresh = _producer(kbroker.bootstrap, "t-zombie")
    fresh.init_transactions(30)  # aborts the zombie's open transaction
    fresh.begin_transaction()
    fresh.produce(topic, b"fresh")
    fresh.commit_transaction(30)
    with pytest.raises(KafkaException) as raised:
        zombie.produce(topic, b"late")
        zombie.commit_transaction(30)
    assert raised.value.args[0].fatal() or raised.value.args[0].code() in (
        KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
    assert _consume_all(kbroker.bootstrap, topic, "read_committed") == [b"fresh"]


def test_coordinator_aborts_a_timed_out_transaction(kbroker_factory: object) -> None:
    broker = kbroker_factory(transaction_abort_timed_out_transaction_cleanup_interval_ms=200)  # type: ignore[operator]
    topic = _topic(broker.bootstrap)
    p = _producer(broker.bootstrap, "t-timeout", **{"transaction.timeout.ms": 1000})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"abandoned")
    p.flush(10)
    time.sleep(2.5)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic, b"later")
    plain.flush(10)
    # The coordinator aborted it: the LSO moved on, the record is invisible.
    assert _consume_all(broker.bootstrap, topic, "read_committed") == [b"later"]


def test_restart_mid_transaction_keeps_lso_and_state(kbroker_factory: Callable[..., KBroker]) -> None:
    kbroker = kbroker_factory()  # a broker of its own: this test restarts it
    topic = _topic(kbroker.bootstrap)
    p = _producer(kbroker.bootstrap, "t-restart")
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"committed")
    p.commit_transaction(30)
    p.begin_transaction()
    p.produce(topic, b"pending")
    p.flush(10)
    assert kbroker.stop() == 0
    kbroker.start()
    # Still open after the restart: read_committed stops before it.
    assert _consume_all(kbroker.bootstrap, topic, "read_committed") == [b"committed"]
    # A new incarnation aborts it (the coordinator reloaded the Ongoing state from __transaction_state).
    p2 = _producer(kbroker.bootstrap, "t-restart")
    p2.init_transactions(30)
    p2.begin_transaction()
    p2.produce(topic, b"after")
    p2.commit_transaction(30)
    assert _consume_all(kbroker.bootstrap, topic, "read_committed") == [b"committed", b"after"]
