"""Progress for a person watching a Spark job read kbroker: which offsets, how far along.

Owns three reporters, all printing plain lines (to stdout, or a given stream):
- `OffsetProgressListener`: a StreamingQueryListener; for each micro-batch it prints the offset
  range read per topic-partition, the rows and rates, and how many records the query is behind
  the latest offsets Spark saw (`latestOffset`), i.e. how far along it is.
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


class OffsetProgressListener(StreamingQueryListener):
    """Prints one block per micro-batch: offsets read, rows, rates, and the backlog left."""

    def __init__(self, out: IO[str] | None = None) -> None:
        self.out = out or sys.stdout

    def _print(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's callback names
        self._print(f"[kbroker.spark] query {event.name or event.id} started (run {event.runId})")

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        p = event.progress
        name = p.name or p.id
        head = (f"[kbroker.spark] query {name} batch {p.batchId}: {p.numInputRows} rows, "
                f"{p.inputRowsPerSecond:.0f} rows/s in, {p.processedRowsPerSecond:.0f} rows/s processed")
        lines = [head]
        for src in p.sources:
            ranges, behind = describe_ranges(src.startOffset, src.endOffset, src.latestOffset)
            lines += [f"    {r}" for r in ranges]
            if _offsets(src.latestOffset):
                lines.append(f"    behind latest offsets by {behind} records")
        if p.eventTime and p.eventTime.get("watermark"):
            lines.append(f"    watermark {p.eventTime['watermark']}")
        self._print("\n".join(lines))

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        how = f"failed: {event.exception}" if event.exception else "finished"
        self._print(f"[kbroker.spark] query {event.id} {how}")


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
