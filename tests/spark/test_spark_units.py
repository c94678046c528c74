"""Fast checks of kbroker.spark's pure-Python parts (no JVM): option mapping and validation, sink and
trigger parsing, progress formatting, and the spark-submit command `kbroker spark submit` builds."""

from __future__ import annotations

import importlib.util
import json

import pytest

from kbroker.spark import BOOTSTRAP_CONF, CONNECTOR_PACKAGE
from kbroker.spark.sinks import Sink
from kbroker.spark.source import KafkaSource, parse_assign, to_epoch_ms


def test_to_epoch_ms() -> None:
    assert to_epoch_ms("2026-11-25T10:00:00Z") == 1795600800000
    assert to_epoch_ms("2026-11-25T10:00:00") == 1795600800000  # no zone: UTC
    assert to_epoch_ms("2026-11-25T11:00:00+01:00") == 1795600800000
    assert to_epoch_ms("1795600800123") == 1795600800123
    assert to_epoch_ms(5) == 5


def test_parse_assign() -> None:
    assert parse_assign("a:0,1;b.c:2") == {"a": [0, 1], "b.c": [2]}
    assert parse_assign('{"a":[3]}') == {"a": [3]}
    with pytest.raises(ValueError):
        parse_assign("nocolon")


def test_spark_options_are_sparks_names() -> None:
    src = KafkaSource(bootstrap="h:1", subscribe=["a", "b"], starting_offsets_by_timestamp='{"a":{"0":5}}',
                      starting_timestamp_strategy="latest", ending_offsets="latest", fail_on_data_loss=False,
                      min_partitions=4, include_headers=True, options={"kafka.isolation.level": "read_committed"})
    assert src.spark_options(streaming=False) == {
        "kafka.bootstrap.servers": "h:1", "subscribe": "a,b",
        "startingOffsetsByTimestamp": '{"a":{"0":5}}', "startingOffsetsByTimestampStrategy": "latest",
        "endingOffsets": "latest", "failOnDataLoss": "false", "minPartitions": "4", "includeHeaders": "true",
        "kafka.isolation.level": "read_committed",
    }
    assign = KafkaSource(bootstrap="h:1", assign={"t": [0, 2]}, max_offsets_per_trigger=10)
    opts = assign.spark_options(streaming=True)
    assert json.loads(opts["assign"]) == {"t": [0, 2]} and opts["maxOffsetsPerTrigger"] == "10"


@pytest.mark.parametrize(
    ("kwargs", "streaming", "message"),
    [
        ({}, False, "exactly one"),
        ({"subscribe": ["a"], "subscribe_pattern": "a.*"}, False, "exactly one"),
        ({"subscribe": ["a"], "ending_offsets": "latest"}, True, "batch"),
        ({"subscribe": ["a"], "ending_timestamp": 5}, True, "batch"),
        ({"subscribe": ["a"], "max_offsets_per_trigger": 5}, False, "streaming"),
        ({"subscribe": ["a"], "starting_offsets": "earliest", "starting_timestamp": 5}, False, "at most one"),
        ({"subscribe": ["a"], "starting_timestamp_strategy": "nearest"}, False, "strategy"),
    ],
)
def test_invalid_source_combinations(kwargs: dict[str, object], streaming: bool, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        KafkaSource(bootstrap="h:1", **kwargs).spark_options(streaming)  # type: ignore[arg-type]


def test_sink_parse() -> None:
    assert Sink.parse("kafka:out").target == "out"
    assert Sink.parse("parquet:/tmp/x", partition_by=["dt"]).partition_by == ["dt"]
    assert Sink.parse("console").target is None
    for bad in ("kafka", "parquet:", "jdbc:x"):
        with pytest.raises(ValueError):
            Sink.parse(bad)


needs_pyspark = pytest.mark.skipif(importlib.util.find_spec("pyspark") is None,
                                   reason="pyspark is not installed (pip install -e '.[spark]')")


@needs_pyspark
def test_trigger_kwargs() -> None:
    from kbroker.spark.pipeline import trigger_kwargs

    assert trigger_kwargs("available-now") == {"availableNow": True}
    assert trigger_kwargs("once") == {"once": True}
    assert trigger_kwargs("processing-time:10 seconds") == {"processingTime": "10 seconds"}
    with pytest.raises(ValueError):
        trigger_kwargs("continuous")


@needs_pyspark
def test_progress_ranges_and_backlog() -> None:
    from kbroker.spark.progress import describe_ranges

    lines, behind = describe_ranges('{"t":{"0":5,"1":0}}', '{"t":{"0":25,"1":0}}', '{"t":{"0":30,"1":4}}')
    assert lines == ["t-0: 5 -> 25 (20 records)"]
    assert behind == 9
    first, _ = describe_ranges(None, '{"t":{"0":3}}', None)
    assert first == ["t-0: up to 3"]


@needs_pyspark
def test_submit_command(monkeypatch: pytest.MonkeyPatch) -> None:
    from kbroker.spark import submit

    monkeypatch.setattr(submit, "connector_jars", lambda: None)  # as if Maven were missing
    cmd, env = submit.build_command("backfill", ["--topic", "t"], bootstrap="h:9", master="local[1]")
    assert cmd[0].endswith("bin/spark-submit") and cmd[1:3] == ["--master", "local[1]"]
    assert cmd[cmd.index("--packages") + 1] == CONNECTOR_PACKAGE
    assert f"{BOOTSTRAP_CONF}=h:9" in cmd and env["KBROKER_BOOTSTRAP"] == "h:9"
    assert cmd[-3:] == [str(submit.BUILTIN_JOBS["backfill"]), "--topic", "t"]
    with pytest.raises(submit.SparkSetupError):
        submit.build_command("no-such-job.py", [])


def test_artifact_id() -> None:
    from kbroker.spark.submit import _artifact_id

    assert _artifact_id("spark-sql-kafka-0-10_2.13-4.2.0.jar") == "spark-sql-kafka-0-10_2.13"
    assert _artifact_id("kafka-clients-3.9.2.jar") == "kafka-clients"
