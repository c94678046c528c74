"""Spark's Kafka source (spark-sql-kafka-0-10 4.2.0) with `kafka.isolation.level=read_committed` over
a kbroker topic holding committed and aborted transactions (confluent-kafka's transactional producer).

The topic (2 partitions) gets: plain records, a committed transaction, an aborted one, another
committed one, and last an aborted one, so each partition ends with an ABORT marker after aborted
data. One spark-submit of tests/spark/read_committed_job.py does a batch read and a streaming read
(Trigger.AvailableNow) in one session, `failOnDataLoss=true`. Both must return exactly the plain and
committed records, once each; the streaming query must end by itself (not stall on the control
batches or the offsets they and the aborted data take), its end offsets being each partition's log
end (the LSO equals the high watermark: no transaction is open).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.spark.spark_helpers import create_topic, produce, spark_submit

pytestmark = [pytest.mark.spark, pytest.mark.interop]

JOB = Path(__file__).resolve().parent / "read_committed_job.py"


def _transaction(producer: Producer, topic: str, prefix: str, n: int, commit: bool) -> list[tuple[int, str]]:
    producer.begin_transaction()
    rows = [(i % 2, f"{prefix}-{i}") for i in range(n)]
    for partition, value in rows:
        producer.produce(topic, value.encode(), partition=partition)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.flush(30)
        producer.abort_transaction(30)
    return rows


def test_spark_read_committed_batch_and_available_now(spark_bootstrap: str, tmp_path: Path) -> None:
    bs = spark_bootstrap
    topic = f"rc-{uuid.uuid4().hex[:6]}"
    create_topic(bs, topic, 2)
    expected = [(r["partition"], r["value"].decode()) for r in
                produce(bs, topic, [{"value": f"plain-{i}".encode(), "partition": i % 2} for i in range(4)])]
    txn = Producer({"bootstrap.servers": bs, "transactional.id": f"spark-rc-{topic}", "linger.ms": 5})
    txn.init_transactions(30)
    expected += _transaction(txn, topic, "c1", 6, True)
    _transaction(txn, topic, "a1", 4, False)
    expected += _transaction(txn, topic, "c2", 4, True)
    _transaction(txn, topic, "a2", 4, False)
    # Each partition's high watermark: the LSO equals it (nothing is open), and it is past the last marker.
    probe = Consumer({"bootstrap.servers": bs, "group.id": "rc-probe", "isolation.level": "read_committed"})
    ends = {p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in (0, 1)}
    probe.close()
    assert all(end == 2 + 3 + 2 + 2 + 2 + 4 for end in ends.values()), ends  # 11 records and 4 markers a partition

    proc = spark_submit(bs, str(JOB), [bs, topic, str(tmp_path / "out"), str(tmp_path / "ckpt"), "240"],
                        tmp_path / "spark.log")
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    want = sorted(expected)
    for read in ("batch", "stream"):
        got = [(p, v) for p, _, v in result[read]]
        assert sorted(got) == want, (read, got, proc.stdout[-2000:])
        assert len({(p, o) for p, o, _ in result[read]}) == len(got)
    assert result["error"] is None and result["terminated"], result
    assert {int(p): o for p, o in result["stream_end_offsets"][topic].items()} == ends, result
