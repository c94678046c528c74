"""`kbench produce-raw`, P7's instrument (benchmarks/native/kbench/produceraw.go), against a real kbroker
on a free port: pre-encoded Produce requests (one batch per partition, a valid CRC-32C, pipelined)
must be accepted by a broker that checks them, every acknowledged record must be in the log (the
topic's high watermarks add up to the count reported), acks=all must work, a partition error must
fail the run unless -allow-errors, and the line must carry the figures benchmarks/run.py reads for the
P7 row. Its ceiling (the same load against kbench sink) runs as cluster_rows' P7-shape ceiling."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks import cluster_rows
from benchmarks.instruments import kbench, kbench_binary
from benchmarks.targets import KBrokerTarget

# What benchmarks/run.py's P7 row, its scaling figure, the chart and docs/benchmarks.md read.
P7_FIELDS = {"records", "seconds", "records_per_s", "mb_per_s", "gen_cpu_s", "gen_cpu_util", "gen_ceiling_mb_per_s",
             "p50_latency_ms", "p99_latency_ms", "connections", "in_flight", "produce_version", "errors"}


def _high_watermarks(bootstrap: str, topic: str, partitions: int) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw-probe", "enable.auto.commit": False})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)]
    finally:
        c.close()


def _create(bootstrap: str, topic: str, partitions: int, config: dict[str, str] | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the futures resolve
    fut = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1, config=config or {})])
    for f in fut.values():
        f.result(60)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if shutil.which("go") is None:
        pytest.skip("no Go toolchain to build benchmarks/native/kbench (go >= 1.26)")
    kbench_binary()
    b = KBrokerTarget(cpus=None)
    b.start(Path(tmp_path_factory.mktemp("produce-raw")))
    try:
        yield b.bootstrap
    finally:
        b.stop()


@pytest.mark.interop
@pytest.mark.timeout(240)
def test_produce_raw_acknowledged_records_are_the_log(broker: str) -> None:
    _create(broker, "p7", 4)
    mode, load = cluster_rows.p7_load("raw")
    assert mode == "produce-raw"
    r = kbench(mode, {"bootstrap": broker, "topic": "p7", "records": 20_000, **load}, pin=False, timeout=120)
    assert P7_FIELDS <= set(r), P7_FIELDS - set(r)
    # 126 records of 1 KiB per 128 KiB batch, one batch per partition per request, one connection
    # (one leader): sending stops at the first request past 20,000 (4 x 126 = 504 records each).
    assert r["records_per_batch"] == 126 and r["connections"] == 1 and r["in_flight"] == 5
    assert r["produce_version"] == 9 and r["errors"] == 0 and r["acks"] == 1
    assert 20_000 <= r["records"] < 20_000 + 504 and r["records"] % 504 == 0
    assert r["requests"] == r["records"] / 504
    assert r["mb_per_s"] == pytest.approx(r["records_per_s"] * 1024 / 2**20)
    assert r["p99_latency_ms"] >= r["p50_latency_ms"] > 0
    hw = _high_watermarks(broker, "p7", 4)
    assert sum(hw) == r["records"], hw
    assert len(set(hw)) == 1  # every request wrote one batch to each partition

    # acks=all (-1), two connections for the one leader, Produce v12: the log grows by what was acked.
    r2 = kbench(mode, {"bootstrap": broker, "topic": "p7", "records": 5_000, **load, "acks": "all",
                       "connections": 2, "produce-version": 12}, pin=False, timeout=120)
    assert r2["acks"] == -1 and r2["connections"] == 2 and r2["errors"] == 0 and r2["produce_version"] == 12
    # Produce v13: the topic by id (from Metadata), as Kafka 4.1+ clients send it.
    r3 = kbench(mode, {"bootstrap": broker, "topic": "p7", "records": 1_000, **load, "produce-version": 13},
                pin=False, timeout=120)
    assert r3["produce_version"] == 13 and r3["errors"] == 0
    assert sum(_high_watermarks(broker, "p7", 4)) == r["records"] + r2["records"] + r3["records"]


@pytest.mark.interop
@pytest.mark.timeout(240)
def test_produce_raw_idempotent_sequences_are_accepted(broker: str) -> None:
    """-idempotent: a producer id from InitProducerId and consecutive base sequences per partition,
    patched into the pre-encoded batches with their CRC (a wrong CRC or a sequence gap would be
    refused: CORRUPT_MESSAGE, OUT_OF_ORDER_SEQUENCE_NUMBER), 5 requests in flight, two connections."""
    _create(broker, "idem", 4)
    mode, load = cluster_rows.p7_load("raw")
    r = kbench(mode, {"bootstrap": broker, "topic": "idem", "records": 30_000, **load, "acks": "all",
                      "connections": 2, "idempotent": "true"}, pin=False, timeout=120)
    assert r["idempotent"] == 1 and r["producer_id"] >= 0 and r["errors"] == 0
    assert r["requests"] > 5 * r["connections"]  # sequences past the first in-flight window
    assert sum(_high_watermarks(broker, "idem", 4)) == r["records"]
    refused = subprocess.run([kbench_binary(), "produce-raw", "-bootstrap", broker, "-topic", "idem", "-records", "1",
                              "-idempotent", "-allow-errors"], capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode == 1 and "no -allow-errors" in refused.stderr


@pytest.mark.interop
@pytest.mark.timeout(240)
def test_produce_raw_fails_on_a_partition_error_unless_allowed(broker: str) -> None:
    """128 KiB batches to a topic whose max.message.bytes is 64 KiB: every partition answers
    MESSAGE_TOO_LARGE (10), nothing is counted, and the run fails; -allow-errors counts them (and
    sends the records again until -seconds)."""
    _create(broker, "small-batches", 2, {"max.message.bytes": "65536"})
    cmd = [kbench_binary(), "produce-raw", "-bootstrap", broker, "-topic", "small-batches", "-records", "1000"]
    failed = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert failed.returncode == 1, failed
    assert "error code x count: 10 x" in failed.stderr and '"records":0' in failed.stdout
    allowed = kbench("produce-raw", {"bootstrap": broker, "topic": "small-batches", "seconds": 0.5,
                                     "allow-errors": "true"}, pin=False, timeout=120)
    assert allowed["records"] == 0 and allowed["errors"] > 0 and allowed["requests"] == allowed["errors"] / 2


@pytest.mark.timeout(240)
def test_produce_raw_against_the_sink_is_p7s_generator_ceiling() -> None:
    if shutil.which("go") is None:
        pytest.skip("no Go toolchain to build benchmarks/native/kbench (go >= 1.26)")
    mode, load = cluster_rows.p7_load("raw")
    r = cluster_rows.sink_ceiling(load, 100_000, mode=mode)
    assert r["records"] >= 100_000 and r["errors"] == 0 and r["connections"] == 1
    assert r["partitions"] == 4  # the sink's topics, as P7's
    assert r["gen_cpu_util"] > 0 and r["gen_ceiling_mb_per_s"] > r["mb_per_s"]
