"""Kafka's `kafka-transactions.sh find-hanging` and `abort` (Java tool 4.3.1) against kbroker.

A hanging transaction is an open transactional batch in a partition whose transaction coordinator
never learns of it (KIP-664). With `transaction.partition.verification.enable=false` (KIP-890 part 1
off, as on brokers before 3.6) a raw Produce writes a transactional batch from an idempotent producer
id (InitProducerId without a transactional id) under a transactional id the coordinator has never
seen. Its timestamp is an hour old, so the tool (which ages a transaction from the producer's
`lastTimestamp`, the batch's max timestamp) finds it past the default 15-minute
`--max-transaction-timeout`. find-hanging must list it (DescribeProducers, then ListTransactions
filtered by the producer id finds no transactional id); abort (DescribeProducers to find the
producer at the start offset, then WriteTxnMarkers ABORT to the leader) must end it, after which the
last stable offset reaches the high watermark and a read_committed consumer reads past it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.protocol.messages.find_coordinator import FindCoordinatorRequest
from kbroker.protocol.messages.init_producer_id import InitProducerIdRequest
from kbroker.protocol.messages.produce import ProduceRequest as P
from kbroker.protocol.records import SimpleRecord, build_batch
from tests.support.broker import KBroker
from tests.support.java import java_unavailable_reason, run_java_main
from tests.support.raw_client import RawKafkaClient

pytestmark = [pytest.mark.interop, pytest.mark.java]

HOUR_MS = 3_600_000


def _plain(bootstrap: str, topic: str, value: bytes) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False})
    p.produce(topic, value)
    assert p.flush(15) == 0


def _write_hanging_batch(bootstrap: str, topic: str, timestamp_ms: int, expect_error: int = 0,
                         tid: str = "ghost") -> tuple[int, int, int]:
    """(producer id, epoch, base offset) of a transactional batch no coordinator knows about."""
    with RawKafkaClient(bootstrap) as c:
        deadline = time.monotonic() + 30
        while expect_error:  # the coordinator must be there to say it does not know the id
            fc = c.request(10, 4, FindCoordinatorRequest(key_type=1, coordinator_keys=[tid]))
            if fc.coordinators[0].error_code == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        while True:  # COORDINATOR_LOAD_IN_PROGRESS (14) until the first producer id block is there, as Kafka
            init = c.request(22, 4, InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000,
                                                          producer_id=-1, producer_epoch=-1))
            if init.error_code != 14 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert init.error_code == 0, init
        batch = build_batch([SimpleRecord(b"hanging-%d" % i, None, timestamp_ms) for i in range(3)],
                            producer_id=init.producer_id, producer_epoch=init.producer_epoch, base_sequence=0,
                            is_transactional=True)
        r = c.request(0, 9, P(transactional_id=tid, acks=-1, timeout_ms=30000,
                              topic_data=[P.TopicProduceData(name=topic, partition_data=[
                                  P.PartitionProduceData(index=0, records=bytes(batch))])]))
        part = r.responses[0].partition_responses[0]
        assert part.error_code == expect_error, r
        return init.producer_id, init.producer_epoch, part.base_offset


def _offsets(bootstrap: str, topic: str, isolation: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "g-offsets", "isolation.level": isolation})
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        c.close()


def _read_committed(bootstrap: str, topic: str) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                  "enable.partition.eof": True, "enable.auto.commit": False})
    c.subscribe([topic])
    out: list[bytes] = []
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    return out
                raise AssertionError(m.error())
            out.append(m.value())
    finally:
        c.close()
    raise AssertionError(f"read_committed never reached the end of {topic}; read {out}")


def _tool(bootstrap: str, *args: str) -> str:
    proc = run_java_main("kafka-transactions", ["--bootstrap-server", bootstrap, *args], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_find_hanging_and_abort(kbroker_factory: Callable[..., KBroker]) -> None:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    broker = kbroker_factory(transaction_partition_verification_enable=False)
    bootstrap = broker.bootstrap
    topic = f"hanging-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    _plain(bootstrap, topic, b"before")
    stamp = int(time.time() * 1000) - HOUR_MS
    pid, epoch, start = _write_hanging_batch(bootstrap, topic, stamp)
    assert start == 1
    _plain(bootstrap, topic, b"after")
    # The open batch holds the LSO at its first offset.
    assert _offsets(bootstrap, topic, "read_committed") == 1
    assert _offsets(bootstrap, topic, "read_uncommitted") == 5
    assert _read_committed(bootstrap, topic) == [b"before"]

    out = _tool(bootstrap, "find-hanging", "--broker-id", "1")
    rows = [line.split() for line in out.strip().splitlines()]
    assert rows[0] == ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                       "LastTimestamp", "Duration(min)"], out
    assert len(rows) == 2, out
    topic_col, partition, producer, p_epoch, coord_epoch, start_offset, last_ts, minutes = rows[1]
    assert (topic_col, int(partition), int(producer), int(p_epoch), int(coord_epoch), int(start_offset),
            int(last_ts)) == (topic, 0, pid, epoch, -1, start, stamp), out
    assert 59 <= int(minutes) <= 61, out
    # A narrower scope finds the same one; a larger --max-transaction-timeout none.
    assert _tool(bootstrap, "find-hanging", "--topic", topic, "--partition", "0").strip().splitlines()[1:] == \
        out.strip().splitlines()[1:]
    assert len(_tool(bootstrap, "find-hanging", "--broker-id", "1", "--max-transaction-timeout", "120")
               .strip().splitlines()) == 1

    _tool(bootstrap, "abort", "--topic", topic, "--partition", "0", "--start-offset", str(start))
    # The ABORT marker is offset 5: the LSO reaches the high watermark (6).
    deadline = time.monotonic() + 15
    while _offsets(bootstrap, topic, "read_committed") != 6 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _offsets(bootstrap, topic, "read_committed") == 6
    assert _offsets(bootstrap, topic, "read_uncommitted") == 6
    assert _read_committed(bootstrap, topic) == [b"before", b"after"]
    assert len(_tool(bootstrap, "find-hanging", "--broker-id", "1").strip().splitlines()) == 1
    producers = _tool(bootstrap, "describe-producers", "--topic", topic, "--partition", "0")
    table = [line.split() for line in producers.strip().splitlines()]
    column = table[0].index("CurrentTransactionStartOffset")
    # Tool 4.3.1 prints "None" for no open transaction; the abort marker's coordinator epoch (0: the
    # producer had none) is now the producer's.
    assert [(int(r[0]), r[column], int(r[table[0].index("LatestCoordinatorEpoch")])) for r in table[1:]] == \
        [(pid, "None", 0)], producers


def test_verification_refuses_the_hanging_batch(kbroker: KBroker) -> None:
    """With `transaction.partition.verification.enable` at its default (true) the same batch is refused
    (the coordinator has no such transactional id: INVALID_PRODUCER_ID_MAPPING) and nothing is written."""
    topic = f"verified-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": kbroker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    _write_hanging_batch(kbroker.bootstrap, topic, int(time.time() * 1000), expect_error=49)
    assert _offsets(kbroker.bootstrap, topic, "read_uncommitted") == 0
