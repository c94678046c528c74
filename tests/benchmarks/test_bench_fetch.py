"""`kbench fetch`, P3's instrument (benchmarks/native/kbench/fetch.go), against a real kbroker on a free
port: a raw Fetch loop that walks only the record-batch headers must read exactly the records that
were produced, to the high watermark or to -records, also when the broker cuts partitions at the byte
limits (partial trailing batches, fetched again), and print the figures benchmarks/run.py reads for
the P3 row (records, bytes, mb_per_s, gen_cpu_util, fetch_responses, ...)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks import cluster_rows
from benchmarks.instruments import kbench, kbench_binary
from benchmarks.run import P3_PARTITIONS, create_topic
from benchmarks.targets import KBrokerTarget

RECORDS = 5_000
# What benchmarks/run.py's P3 row, its chart and docs/benchmarks.md read from the generator's line.
P3_FIELDS = {"records", "bytes", "seconds", "records_per_s", "mb_per_s", "clients", "partitions", "fetch_responses",
             "fetch_response_mib", "gen_cpu_s", "gen_cpu_util", "gen_ceiling_mb_per_s"}


@pytest.fixture(scope="module")
def backlog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A kbroker with topic p3: 4 partitions, RECORDS records of 1 KiB produced as P3's backlog is."""
    if shutil.which("go") is None:
        pytest.skip("no Go toolchain to build benchmarks/native/kbench (go >= 1.26)")
    kbench_binary()
    broker = KBrokerTarget(cpus=None)
    broker.start(Path(tmp_path_factory.mktemp("fetch")))
    try:
        create_topic(broker.bootstrap, "p3", P3_PARTITIONS)
        kbench("produce", {"bootstrap": broker.bootstrap, "topic": "p3", "records": RECORDS, "size": 1024,
                           "acks": "1", "linger-ms": 5, "batch-bytes": 131072}, pin=False, timeout=120)
        yield broker.bootstrap
    finally:
        broker.stop()


@pytest.mark.interop
@pytest.mark.timeout(240)
def test_fetch_reads_the_backlog_and_reports_p3_fields(backlog: str) -> None:
    r = kbench("fetch", {"bootstrap": backlog, "topic": "p3", "partitions": P3_PARTITIONS,
                         "clients": P3_PARTITIONS, "records": RECORDS}, pin=False, timeout=120)
    assert P3_FIELDS <= set(r), P3_FIELDS - set(r)
    assert r["records"] == RECORDS
    # Whole batches of 1 KiB values: the payload plus batch and record headers, nothing else.
    assert RECORDS * 1024 < r["bytes"] < RECORDS * 1024 * 1.05
    assert r["connections"] == 4 and r["fetch_version"] == 12
    assert r["fetch_responses"] >= 4 and r["fetch_response_mib"] * 2**20 >= r["bytes"]
    assert r["mb_per_s"] > 0 and r["gen_cpu_util"] > 0
    assert r["gen_ceiling_mb_per_s"] == pytest.approx(r["mb_per_s"] / r["gen_cpu_util"])


@pytest.mark.interop
@pytest.mark.timeout(240)
def test_fetch_stops_at_the_high_watermarks_under_small_byte_limits(backlog: str) -> None:
    """No -records: every partition to its high watermark. One connection for the 4 partitions and
    limits of about one and a half batches (~128 KiB each): the broker cuts the last batch of a
    partition at the byte limit (as Kafka does), and those partial batches must be ignored and
    fetched again from their base offset, or records would be lost or counted twice."""
    r = kbench("fetch", {"bootstrap": backlog, "topic": "p3", "partitions": P3_PARTITIONS, "clients": 1,
                         "partition-max-bytes": 200_000, "max-bytes": 300_000}, pin=False, timeout=120)
    assert r["records"] == RECORDS and r["connections"] == 1
    assert r["partial_batches"] > 0 and r["partial_batch_mib"] > 0  # the refetch path was taken
    assert r["fetch_responses"] >= RECORDS * 1024 / 300_000
    topic_ids = kbench("fetch", {"bootstrap": backlog, "topic": "p3", "partitions": P3_PARTITIONS,
                                 "fetch-version": 13}, pin=False, timeout=120)  # topic ids, not names
    assert topic_ids["records"] == RECORDS


@pytest.mark.timeout(240)
def test_fetch_against_the_sink_is_p3s_generator_ceiling() -> None:
    """cluster_rows' P3 ceiling runs the generator P3 runs (kbench fetch by default) against kbench
    sink, whose Fetch v12 answer is whole batches up to PartitionMaxBytes at consecutive offsets."""
    if shutil.which("go") is None:
        pytest.skip("no Go toolchain to build benchmarks/native/kbench (go >= 1.26)")
    r = cluster_rows.sink_consume_ceiling(100_000)
    assert r["records"] >= 100_000 and r["fetch_version"] == 12
    assert r["bytes"] >= 100_000 * 1024
    # 8 MiB per partition: 15 of the sink's 512-record batches per partition per response.
    assert r["fetch_responses"] <= 100_000 / (15 * 512) + 6
    assert r["gen_cpu_util"] > 0
