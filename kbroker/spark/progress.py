"""Progress for a person watching a Spark job read kbroker: which offsets, how far along.

Owns three reporters, all printing plain lines (to stdout, or a given stream):
- `OffsetProgressListener`: a StreamingQueryListener; for each micro-batch it prints, naming the
  query, the rows in and out, the rate, how many records the query is behind the latest offsets
  Spark saw (`latestOffset`, i.e. its lag), and the offset range read per topic-partition; when a
  query ends, one line with its batches, rows in/out and time (`progress_lines`, `completion_line`).
- `TaskProgress`: a background thread that polls Spark's status tracker and prints
  "job 3 stage 4: 2/3 tasks" while a batch job runs (one Kafka source task reads one offset range).
- `enable_kafka_source_logging`: turns Spark's own Kafka source logging to INFO, so the driver
  logs the offset ranges it plans (`KafkaRelation: GetBatch generating RDD of offset range`) and
  each task logs how many records it read from which partition (`KafkaDataConsumer`).
Spark's web UI (port 4040) is untouched.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from pyspark.sql.streaming import StreamingQueryListener

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _offsets(text: Any) -> dict[str, dict[str, int]]:
    """A Kafka source offset JSON (`{"topic":{"0":12}}`) -> dict; anything else -> {}."""
    if not text:
        return {}
    try:
        raw = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return {}
    if not isinstance(raw, dict):
        return {}
    out: dict[str, dict[str, int]] = {}
    for topic, parts in raw.items():
        if isinstance(parts, dict):
            out[str(topic)] = {str(p): int(o) for p, o in parts.items()}
    return out


def describe_ranges(start: Any, end: Any, latest: Any) -> tuple[list[str], int]:
    """Lines `topic-p: a -> b (n records)` and the total records between end and latest."""
    s, e, lt = _offsets(start), _offsets(end), _offsets(latest)
    lines: list[str] = []
    behind = 0
    for topic in sorted(e):
        for part in sorted(e[topic], key=int):
            stop = e[topic][part]
            begin = s.get(topic, {}).get(part)
            if begin is None:
                lines.append(f"{topic}-{part}: up to {stop}")
            elif begin != stop:
                lines.append(f"{topic}-{part}: {begin} -> {stop} ({stop - begin} records)")
            latest_offset = lt.get(topic, {}).get(part)
            if latest_offset is not None and latest_offset > stop:
                behind += latest_offset - stop
    return lines, behind


@dataclass
class QueryTotals:
    """What one streaming query did, for its completion line."""

    name: str
    started: float
    batches: int = 0
    rows_in: int = 0
    rows_out: int = 0
    rows_out_known: bool = True


def progress_lines(name: str, batch_id: int, rows_in: int, rows_out: int, rows_per_s: float,
                   sources: list[tuple[Any, Any, Any]], watermark: str | None = None) -> list[str]:
    """One micro-batch, as printed: a head line (rows in/out, rate, lag) and one line per partition read.

        [kbroker.spark] query orders-parquet batch 1: 25 rows in, 25 out, 30 rows/s, 10 records behind
            orders-1: 25 -> 42 (17 records)

    `sources` holds (startOffset, endOffset, latestOffset) per source; rows_out < 0 means the sink
    does not report it. Lag is the records between the batch's end and the latest offsets Spark saw.
    """
    ranges: list[str] = []
    behind: int | None = None
    for start, end, latest in sources:
        lines, lag = describe_ranges(start, end, latest)
        ranges += lines
        if _offsets(latest):
            behind = (behind or 0) + lag
    out = f", {rows_out} out" if rows_out >= 0 else ""
    head = f"[kbroker.spark] query {name} batch {batch_id}: {rows_in} rows in{out}, {rows_per_s:.0f} rows/s"
    if behind is not None:
        head += ", caught up" if behind == 0 else f", {behind} records behind"
    if watermark:
        head += f", watermark {watermark}"
    return [head] + [f"    {r}" for r in ranges]


def completion_line(totals: QueryTotals, now: float, error: str | None = None) -> str:
    """`[kbroker.spark] query NAME finished: 3 batches, 6000 rows in, 6000 rows out in 12.3s`"""
    how = f"failed: {error}" if error else "finished"
    out = f", {totals.rows_out} rows out" if totals.rows_out_known else ""
    return (f"[kbroker.spark] query {totals.name} {how}: {totals.batches} batches, {totals.rows_in} rows in"
            f"{out} in {now - totals.started:.1f}s")


class OffsetProgressListener(StreamingQueryListener):
    """Prints one block per micro-batch (offsets read per partition, rows in/out, rate, lag) and a
    completion line per query (batches, rows, time), all naming the query."""

    def __init__(self, out: IO[str] | None = None) -> None:
        self.out = out or sys.stdout
        self.queries: dict[str, QueryTotals] = {}

    def _print(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's callback names
        name = event.name or str(event.id)
        self.queries[str(event.id)] = QueryTotals(name, time.monotonic())
        self._print(f"[kbroker.spark] query {name} started")

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        p = event.progress
        totals = self.queries.setdefault(str(p.id), QueryTotals(p.name or str(p.id), time.monotonic()))
        rows_out = p.sink.numOutputRows if p.sink is not None else -1
        totals.batches += 1
        totals.rows_in += p.numInputRows
        if rows_out < 0:
            totals.rows_out_known = False
        else:
            totals.rows_out += rows_out
        watermark = p.eventTime.get("watermark") if p.eventTime else None
        sources = [(src.startOffset, src.endOffset, src.latestOffset) for src in p.sources]
        self._print("\n".join(progress_lines(totals.name, p.batchId, p.numInputRows, rows_out,
                                             p.processedRowsPerSecond, sources, watermark)))

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        totals = self.queries.get(str(event.id), QueryTotals(str(event.id), time.monotonic()))
        self._print(completion_line(totals, time.monotonic(), event.exception))


class TaskProgress:
    """Context manager: print Spark job/stage task progress every `interval` seconds while it runs."""

    def __init__(self, spark: SparkSession, interval: float = 5.0, out: IO[str] | None = None) -> None:
        self.spark = spark
        self.interval = interval
        self.out = out or sys.stdout
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kbroker-spark-progress", daemon=True)
        self._last: dict[int, tuple[int, int]] = {}

    def _run(self) -> None:
        tracker = self.spark.sparkContext.statusTracker()
        while not self._stop.wait(self.interval):
            try:
                for stage_id in tracker.getActiveStageIds():
                    info = tracker.getStageInfo(stage_id)
                    if info is None:
                        continue
                    state = (info.numCompletedTasks, info.numTasks)
                    if self._last.get(stage_id) != state:
                        self._last[stage_id] = state
                        print(f"[kbroker.spark] stage {stage_id} ({info.name}): "
                              f"{info.numCompletedTasks}/{info.numTasks} tasks done, "
                              f"{info.numActiveTasks} running", file=self.out, flush=True)
            except Exception:  # noqa: BLE001 - the session is shutting down; progress is best effort
                return

    def __enter__(self) -> TaskProgress:
        self._started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval + 1)


def enable_kafka_source_logging(spark: SparkSession) -> None:
    """Spark's Kafka source logs its planned offset ranges and per-task reads at INFO."""
    jvm = spark.sparkContext._jvm  # classic (non-Connect) sessions only, which spark-submit gives
    if jvm is None:
        return
    level = jvm.org.apache.logging.log4j.Level.INFO
    configurator = jvm.org.apache.logging.log4j.core.config.Configurator
    for logger in ("org.apache.spark.sql.kafka010.KafkaRelation",
                   "org.apache.spark.sql.kafka010.KafkaDataConsumer",
                   "org.apache.spark.sql.kafka010.KafkaMicroBatchStream"):
        configurator.setLevel(logger, level)
