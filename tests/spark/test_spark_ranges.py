"""A batch range that holds no records says "0 records in range [from, to)" with the offsets it found, and
exits 3 without writing (issue 18); `--allow-empty` makes it exit 0. The offsets in the line are the
ones the broker assigned to the records produced here (confluent-kafka), not constants.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kbroker.spark.pipeline import EMPTY_RANGE_EXIT, build_parser, spec_from_args
from kbroker.spark.ranges import PartitionRange, iso, range_line, resolvable
from kbroker.spark.source import KafkaSource, to_epoch_ms


def test_range_line_names_bounds_and_offsets() -> None:
    source = KafkaSource(bootstrap="b:9092", subscribe=["clicks"], starting_timestamp=to_epoch_ms("2025-01-01T00:00:00Z"),
                         ending_timestamp=to_epoch_ms("2025-01-01T01:00:00.250Z"))
    ranges = [PartitionRange("clicks", 0, 7, 7), PartitionRange("clicks", 1, 3, 5)]
    assert range_line(source, ranges) == (
        "2 records in range [2025-01-01T00:00:00Z, 2025-01-01T01:00:00.250Z) of clicks: clicks-0 at 7..7, clicks-1 at 3..5")
    assert iso(0) == "1970-01-01T00:00:00Z"


def test_which_ranges_are_resolved() -> None:
    assert resolvable(KafkaSource(bootstrap="b", subscribe=["t"])) == ("earliest", "latest")
    assert resolvable(KafkaSource(bootstrap="b", assign={"t": [0]}, starting_offsets="latest")) == ("latest", "latest")
    assert resolvable(KafkaSource(bootstrap="b", subscribe=["t"], starting_offsets='{"t":{"0":5}}')) is None
    assert resolvable(KafkaSource(bootstrap="b", subscribe_pattern="t.*")) is None


def test_allow_empty_flag() -> None:
    args = build_parser().parse_args(["--subscribe", "t", "--sink", "console", "--allow-empty"])
    assert spec_from_args(args, "b:9092").allow_empty
    args = build_parser().parse_args(["--subscribe", "t", "--sink", "console"])
    assert not spec_from_args(args, "b:9092").allow_empty


@pytest.mark.spark
def test_backfill_of_an_empty_range_says_so_and_exits_3(spark_bootstrap: str, tmp_path: Path) -> None:
    from kbroker.spark.generators import clickstream_events, produce_clickstream
    from tests.spark.spark_helpers import create_topic, spark_submit

    bs = spark_bootstrap
    create_topic(bs, "clicks-empty-range", 3)
    events = produce_clickstream(bs, "clicks-empty-range", clickstream_events(
        events=60, start_ms=to_epoch_ms("2026-11-25T08:30:00Z"), minutes=30, seed=3))
    out = tmp_path / "out"
    # A day after the data: no record at or after --from, so every partition's range is latest..latest.
    proc = spark_submit(bs, "backfill", ["--topic", "clicks-empty-range", "--from", "2026-11-26T00:00:00Z",
                                         "--to", "2026-11-27T00:00:00Z", "--path", str(out)],
                        tmp_path / "empty.log", check=False)
    ends = {p: sum(1 for e in events if e["partition"] == p) for p in range(3)}  # offsets start at 0
    expected = ("[kbroker.spark] backfill: 0 records in range [2026-11-26T00:00:00Z, 2026-11-27T00:00:00Z) of "
                "clicks-empty-range: " + ", ".join(f"clicks-empty-range-{p} at {ends[p]}..{ends[p]}" for p in range(3)))
    assert proc.returncode == EMPTY_RANGE_EXIT, proc.stderr[-3000:]
    # spark-submit's PythonRunner merges the job's stderr into its stdout.
    assert expected in (proc.stdout + proc.stderr).splitlines()
    assert not out.exists()
