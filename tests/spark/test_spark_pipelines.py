"""The pipelines of kbroker/spark, spark-submitted with `kbroker spark submit` against kbroker:

- the generic `pipeline` job streaming (availableNow) into Parquet, then more data and a restart
  from the checkpoint: every record lands exactly once;
- the clickstream pipeline: its per-minute aggregates, written back to kbroker with Spark's Kafka
  sink (read here with confluent-kafka) and to Parquet, equal aggregates computed here in Python;
- the backfill pipeline: a time range by timestamp into Parquet partitioned by dt/hour.
Parquet output is read with pyarrow, independently of Spark.
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from kbroker.spark.generators import clickstream_events, produce_clickstream
from kbroker.spark.source import to_epoch_ms
from tests.spark.spark_helpers import consume_all, create_topic, produce, spark_submit

pytestmark = pytest.mark.spark
pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow reads the Parquet output independently of Spark")


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pq.read_table(str(path)).to_pylist()
    return rows


def _ms(value: Any) -> int:
    if isinstance(value, datetime):
        # Spark writes Parquet timestamps as INT96, which pyarrow reads as naive UTC datetimes.
        aware = value if value.tzinfo else value.replace(tzinfo=UTC)
        return int(aware.timestamp() * 1000)
    return to_epoch_ms(str(value))


def test_stream_available_now_parquet_restart_exactly_once(spark_bootstrap: str, tmp_path: Path) -> None:
    bs = spark_bootstrap
    create_topic(bs, "orders", 3)
    first = produce(bs, "orders", [{"value": json.dumps({"id": i, "amount": i * 1.5}).encode(),
                                     "key": str(i % 7).encode()} for i in range(60)])
    out, ckpt = tmp_path / "orders-parquet", tmp_path / "ckpt"
    args = ["--mode", "stream", "--trigger", "available-now", "--subscribe", "orders", "--starting-offsets", "earliest",
            "--format", "json", "--schema", "id BIGINT, amount DOUBLE",
            "--sql", "SELECT id, amount, kafka_partition, kafka_offset, kafka_key FROM events",
            "--max-offsets-per-trigger", "25", "--sink", f"parquet:{out}", "--checkpoint", str(ckpt),
            "--name", "orders"]
    run1 = spark_submit(bs, "pipeline", args, tmp_path / "run1.log")
    rows1 = _read_parquet(out)
    assert sorted(r["id"] for r in rows1) == list(range(60))
    # Progress for a person: per micro-batch offset ranges and the backlog.
    assert "[kbroker.spark] query orders-parquet batch 0" in run1.stdout
    assert "orders-0:" in run1.stdout and "records behind" in run1.stdout
    second = produce(bs, "orders", [{"value": json.dumps({"id": i, "amount": i * 1.5}).encode()}
                                    for i in range(60, 100)])
    spark_submit(bs, "pipeline", args, tmp_path / "run2.log")
    rows = _read_parquet(out)
    assert sorted(r["id"] for r in rows) == list(range(100))
    coordinates = sorted((r["kafka_partition"], r["kafka_offset"]) for r in rows)
    assert coordinates == sorted((r["partition"], r["offset"]) for r in first + second)
    by_id = {r["id"]: r for r in rows}
    assert by_id[3]["kafka_key"] == "3" and by_id[70]["kafka_key"] is None and by_id[9]["amount"] == 13.5


def _expected_windows(events: list[dict[str, Any]], lateness_ms: int) -> dict[tuple[int, str], tuple[int, int]]:
    """Per (minute window start, page): (events, distinct users), for the windows the watermark closed."""
    counts: dict[tuple[int, str], int] = defaultdict(int)
    users: dict[tuple[int, str], set[str]] = defaultdict(set)
    for e in events:
        key = (e["ts_ms"] - e["ts_ms"] % 60_000, e["page"])
        counts[key] += 1
        users[key].add(e["user_id"])
    watermark = max(e["ts_ms"] for e in events) - lateness_ms
    return {k: (counts[k], len(users[k])) for k in counts if k[0] + 60_000 <= watermark}


def test_clickstream_pipeline_matches_python(spark_bootstrap: str, tmp_path: Path) -> None:
    bs = spark_bootstrap
    create_topic(bs, "clicks", 3)
    create_topic(bs, "clicks-per-minute", 2)
    events = clickstream_events(events=900, start_ms=to_epoch_ms("2026-11-25T10:00:00Z"), minutes=8,
                                users=40, pages=5, seed=11)
    produce_clickstream(bs, "clicks", events)
    out = tmp_path / "clicks-per-minute"
    spark_submit(bs, "clickstream", ["--input", "clicks", "--output", "clicks-per-minute",
                                     "--parquet", str(out), "--checkpoint", str(tmp_path / "ckpt"),
                                     "--lateness", "1 minute"], tmp_path / "clickstream.log")
    expected = _expected_windows(events, 60_000)
    assert len(expected) >= 30  # 7 closed minutes x 5 pages: the comparison below means something

    parquet = {(_ms(r["window_start"]), r["key"]): (r["events"], r["users"]) for r in _read_parquet(out)}
    assert len(parquet) == len(_read_parquet(out))  # each window once
    assert parquet == expected

    # Spark's Kafka sink (idempotent producer) wrote the same rows back to kbroker.
    messages = consume_all(bs, "clicks-per-minute", 2, len(expected))
    from_kafka = {}
    for m in messages:
        value = json.loads(m.value())
        assert m.key().decode() == value["key"]
        from_kafka[(_ms(value["window_start"]), value["key"])] = (value["events"], value["users"])
    assert len(messages) == len(expected)
    assert from_kafka == expected


def test_backfill_time_range_into_partitioned_parquet(spark_bootstrap: str, tmp_path: Path) -> None:
    bs = spark_bootstrap
    create_topic(bs, "clicks-history", 3)
    events = clickstream_events(events=360, start_ms=to_epoch_ms("2026-11-25T08:30:00Z"), minutes=180, seed=5)
    produce_clickstream(bs, "clicks-history", events)
    start, stop = to_epoch_ms("2026-11-25T09:40:00Z"), to_epoch_ms("2026-11-25T11:10:00Z")
    out = tmp_path / "backfill"
    spark_submit(bs, "backfill", ["--topic", "clicks-history", "--from", "2026-11-25T09:40:00Z",
                                  "--to", "2026-11-25T11:10:00Z", "--path", str(out), "--format", "json",
                                  "--schema", "event_id BIGINT, user_id STRING, page STRING, ts TIMESTAMP",
                                  "--min-partitions", "6"], tmp_path / "backfill.log")
    # Record timestamps rise within each partition, so "offsets from the first timestamp >= from to
    # the first >= to" is exactly the events with from <= ts < to.
    wanted = sorted(e["event_id"] for e in events if start <= e["ts_ms"] < stop)
    assert wanted
    partitions = sorted(p.relative_to(out).as_posix() for p in out.glob("dt=*/hour=*"))
    assert partitions == ["dt=2026-11-25/hour=10", "dt=2026-11-25/hour=11", "dt=2026-11-25/hour=9"]
    rows = []
    for part in out.glob("dt=*/hour=*"):
        hour = int(part.name.split("=")[1])
        for r in pq.read_table(str(part)).to_pylist():
            assert datetime.fromtimestamp(_ms(r["kafka_timestamp"]) / 1000, tz=UTC).hour == hour
            rows.append(r)
    assert sorted(r["event_id"] for r in rows) == wanted
    by_id = {e["event_id"]: e for e in events}
    for r in rows:
        assert _ms(r["ts"]) == by_id[r["event_id"]]["ts_ms"] == _ms(r["kafka_timestamp"])
        assert r["kafka_key"] == by_id[r["event_id"]]["page"]
