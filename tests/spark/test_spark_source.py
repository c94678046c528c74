"""Spark's own Kafka source (spark-sql-kafka-0-10 4.2.0) against kbroker: exact columns, offsets by
timestamp (both strategies), endingOffsets, minPartitions, failOnDataLoss after DeleteRecords, and
subscribePattern picking up a topic created later.

All scenarios run in one spark-submit of tests/spark/probe_job.py (one JVM start); the topics are
prepared here with confluent-kafka, and each test checks one scenario against what was produced.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.spark.spark_helpers import consume_all, create_topic, produce, spark_submit

pytestmark = pytest.mark.spark

PROBE = Path(__file__).resolve().parent / "probe_job.py"
T0 = 1_764_000_000_000  # 2025-11-24T16:00:00Z: record timestamps of topic "ts" are T0 + i s


def _hex(b: bytes | None) -> str | None:
    return None if b is None else b.hex().upper()


@pytest.fixture(scope="module")
def probe(spark_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    bs = spark_bootstrap
    work = tmp_path_factory.mktemp("probe")
    create_topic(bs, "exact", 3)
    create_topic(bs, "exact-lat", 1, {"message.timestamp.type": "LogAppendTime"})
    create_topic(bs, "ts", 3)
    create_topic(bs, "loss", 1)
    create_topic(bs, "pat-a", 1)
    create_topic(bs, "csv", 1)
    produce(bs, "csv", [{"value": b"1,alice,2.5", "key": b"a"}, {"value": b"2,bob,"},
                        {"value": b'3,"c, d",1e3', "key": b"c"}])
    exact = []
    for i in range(24):
        rec: dict[str, Any] = {
            "value": None if i == 5 else bytes((i * 7 + j) % 256 for j in range(i * 11)),
            "partition": i % 3,
            # Out of order on purpose: the record keeps the producer's CreateTime.
            "timestamp": T0 - 3_600_000 + (i * 7919) % 50_000,
        }
        if i % 4:
            rec["key"] = f"key-{i}".encode() if i % 4 != 3 else bytes([0, 255, i])
        if i % 3 == 1:
            rec["headers"] = [("h1", b"a"), ("dup", b"1"), ("dup", b"2"), ("nullv", None)]
        elif i % 3 == 2:
            rec["headers"] = [("only", bytes([i, 0, 200]))]
        exact.append(rec)
    produced_exact = produce(bs, "exact", exact)
    produce(bs, "exact-lat", [{"value": f"lat{i}".encode(), "key": b"k"} for i in range(5)])
    lat = consume_all(bs, "exact-lat", 1, 5)
    produce(bs, "ts", [{"value": f"v{i}".encode(), "partition": i % 3, "timestamp": T0 + i * 1000} for i in range(30)])
    produce(bs, "pat-a", [{"value": b"a0"}])
    out = work / "probe.json"
    spark_submit(bs, str(PROBE), [bs, str(out), str(work / "ckpt"), json.dumps({"t0": T0})], work / "probe.log")
    results: dict[str, Any] = json.loads(out.read_text())
    results["_produced_exact"] = produced_exact
    results["_lat"] = [(m.partition(), m.offset(), m.key(), m.value(), m.timestamp()) for m in lat]
    return results


def _ok(result: dict[str, Any]) -> dict[str, Any]:
    assert "error" not in result, result.get("trace") or result["error"]
    return result


def test_batch_read_columns_exact(probe: dict[str, Any]) -> None:
    got = _ok(probe["exact"])["rows"]
    expected = []
    for rec in probe["_produced_exact"]:
        headers = rec.get("headers")
        expected.append({
            "key": _hex(rec.get("key")), "value": _hex(rec["value"]), "topic": "exact",
            "partition": rec["partition"], "offset": rec["offset"], "timestamp": rec["timestamp"],
            "timestampType": 0,  # CreateTime
            # Spark gives null (not an empty array) for a record without headers.
            "headers": [{"key": k, "value": _hex(v)} for k, v in headers] if headers else None,
        })
    # LogAppendTime topic: the broker's timestamp, as a Kafka consumer sees it; timestampType 1.
    for partition, offset, key, value, (ts_type, ts) in probe["_lat"]:
        assert ts_type == 2  # confluent_kafka.TIMESTAMP_LOG_APPEND_TIME
        expected.append({"key": _hex(key), "value": _hex(value), "topic": "exact-lat", "partition": partition,
                         "offset": offset, "timestamp": ts, "timestampType": 1, "headers": None})
    expected.sort(key=lambda r: (r["topic"], r["partition"], r["offset"]))
    assert len(got) == len(expected) == 29
    assert got == expected


def _offsets(rows: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return [(r["partition"], r["offset"]) for r in rows]


def _ts_records(first: int, stop: int) -> list[tuple[int, int]]:
    """(partition, offset) of topic "ts" records i in [first, stop): record i is at (i % 3, i // 3)."""
    return sorted((i % 3, i // 3) for i in range(first, stop))


def test_starting_offsets_by_timestamp(probe: dict[str, Any]) -> None:
    rows = _ok(probe["by_timestamp_error"])["rows"]
    assert _offsets(rows) == _ts_records(15, 30)
    assert all(r["timestamp"] >= T0 + 15_000 for r in rows)


def test_starting_timestamp_after_last_record_strategies(probe: dict[str, Any]) -> None:
    # strategy=error (Spark's default): no offset at/after the timestamp fails the query.
    error = probe["by_timestamp_none_error"].get("error")
    assert error is not None, probe["by_timestamp_none_error"]
    assert "timestamp" in error.lower() or "offset" in error.lower(), error
    # strategy=latest: start at the end, read nothing.
    assert _ok(probe["by_timestamp_none_latest"])["rows"] == []


def test_timestamp_range(probe: dict[str, Any]) -> None:
    assert _offsets(_ok(probe["timestamp_range"])["rows"]) == _ts_records(6, 20)


def test_ending_offsets(probe: dict[str, Any]) -> None:
    got = _offsets(_ok(probe["ending_offsets"])["rows"])
    assert got == [(0, o) for o in range(3)] + [(1, o) for o in range(10)] + [(2, o) for o in range(5)]


def test_min_partitions_splits_offset_ranges(probe: dict[str, Any]) -> None:
    result = _ok(probe["min_partitions"])
    # Spark gives each topic-partition round(size / total * minPartitions) tasks: 3 x round(2.0).
    assert result["num_partitions"] == 6
    assert _offsets(result["rows"]) == _ts_records(0, 30)


def test_fail_on_data_loss_after_delete_records(probe: dict[str, Any]) -> None:
    r = _ok(probe["data_loss"])
    assert r["first"] == list(range(10)) and r["first_error"] is None
    # Offsets 10..19 were deleted unread: failOnDataLoss=true stops the query and says why.
    assert r["error_true"] is not None and "failOnDataLoss" in r["error_true"], r
    assert "Some data may have been lost" in r["error_true"]
    assert r["after_delete_true"] == []
    # failOnDataLoss=false skips the lost range and carries on from the log start offset.
    assert r["error_false"] is None, r["error_false"]
    assert r["after_delete_false"] == list(range(20, 30))


def test_subscribe_pattern_picks_up_new_topic(probe: dict[str, Any]) -> None:
    r = _ok(probe["pattern"])
    assert r["before_create"] == ["pat-a:a0"]
    assert r["seen"] == ["pat-a:a0"] + [f"pat-b:b{i}" for i in range(4)]


def test_assign(probe: dict[str, Any]) -> None:
    assert _offsets(_ok(probe["assign"])["rows"]) == [(1, o) for o in range(10)]


def test_csv_decode_keeps_kafka_coordinates(probe: dict[str, Any]) -> None:
    r = _ok(probe["csv_decode"])
    assert r["columns"] == ["id", "name", "score", "kafka_key", "kafka_topic", "kafka_partition", "kafka_offset",
                            "kafka_timestamp", "kafka_timestamp_type"]
    assert r["rows"] == [
        {"id": 1, "name": "alice", "score": 2.5, "kafka_key": "a", "kafka_offset": 0},
        {"id": 2, "name": "bob", "score": None, "kafka_key": None, "kafka_offset": 1},
        {"id": 3, "name": "c, d", "score": 1000.0, "kafka_key": "c", "kafka_offset": 2},
    ]
