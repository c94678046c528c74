"""The generic, configurable pipeline: Kafka source -> decode -> Spark SQL -> sinks.

Owns `PipelineSpec` (everything a pipeline run needs), `build()` (the transformed DataFrame),
`run()` (batch: write each sink once; stream: one query per sink, each with its own checkpoint
`<checkpoint>/<sink>`), the command line of the `pipeline` job, and `spark_session()`, the session
set-up every kbroker job shares (progress listener, Kafka source logging, small shuffle).

    kbroker spark submit pipeline --subscribe clicks --format json \\
        --schema 'user_id STRING, page STRING, ts TIMESTAMP' \\
        --sql "SELECT page, count(*) AS views FROM events GROUP BY page" --sink console

The decoded records are the temporary view `events` (--view), with the decoded fields plus
kafka_key, kafka_topic, kafka_partition, kafka_offset, kafka_timestamp, kafka_timestamp_type
(and kafka_headers with --include-headers). Without --sql the view is written as is.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kbroker.spark import BOOTSTRAP_CONF, BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP
from kbroker.spark.ranges import EmptyRangeError
from kbroker.spark.sinks import Sink, start_stream, write_batch
from kbroker.spark.source import (
    FORMATS,
    TIMESTAMP_STRATEGIES,
    KafkaSource,
    decode,
    parse_assign,
    read,
    to_epoch_ms,
)

# A batch range with no records exits with this code (after saying so), unless --allow-empty.
EMPTY_RANGE_EXIT = 3

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery


@dataclass
class PipelineSpec:
    source: KafkaSource
    sinks: list[Sink]
    streaming: bool = False
    format: str = "raw"
    schema: str | None = None
    decode_options: dict[str, str] = field(default_factory=dict)
    strip_schema_id: bool = False  # avro: drop the 5-byte schema-registry prefix first
    view: str = "events"
    sql: str | None = None
    watermark: tuple[str, str] | None = None  # (event-time column, delay such as "2 minutes")
    # Streaming: "available-now" | "once" | "processing-time:10 seconds"
    trigger: str = "available-now"
    checkpoint: str | None = None
    output_mode: str = "append"
    timeout: float | None = None  # stop a processing-time stream after this many seconds
    save_mode: str = "append"  # batch Parquet
    name: str = "kbroker-pipeline"
    # Batch: a range holding no records raises EmptyRangeError (exit 3) unless this is set.
    allow_empty: bool = False


def trigger_kwargs(trigger: str) -> dict[str, object]:
    """`available-now` / `once` / `processing-time:10 seconds` -> DataStreamWriter.trigger(**kwargs)."""
    if trigger == "available-now":
        return {"availableNow": True}
    if trigger == "once":
        return {"once": True}
    kind, _, interval = trigger.partition(":")
    if kind == "processing-time" and interval:
        return {"processingTime": interval}
    raise ValueError(f"trigger must be available-now, once or processing-time:INTERVAL, got {trigger!r}")


def spark_session(app_name: str, *, shuffle_partitions: int | None = None, progress: bool = True) -> SparkSession:
    """The session every kbroker job uses: quiet logs, Kafka source progress, a listener."""
    from pyspark.sql import SparkSession

    from kbroker.spark.progress import OffsetProgressListener, enable_kafka_source_logging

    builder = SparkSession.builder.appName(app_name)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("KBROKER_SPARK_LOG_LEVEL", "WARN"))
    # Spark's 200 shuffle partitions are for clusters: on local[2] a small aggregation would spend
    # its time scheduling empty tasks (and a stream keeps the number in its checkpoint for good).
    if shuffle_partitions is not None:
        spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
    elif spark.conf.get("spark.sql.shuffle.partitions") == "200" and str(spark.sparkContext.master).startswith("local"):
        spark.conf.set("spark.sql.shuffle.partitions", str(max(2, spark.sparkContext.defaultParallelism)))
    if progress:
        enable_kafka_source_logging(spark)
        spark.streams.addListener(OffsetProgressListener())
    return spark


def bootstrap_servers(spark: SparkSession | None, given: str | None) -> str:
    """--bootstrap, else what `kbroker spark submit` passed (spark conf, env), else 127.0.0.1:9092."""
    if given:
        return given
    if spark is not None:
        conf = spark.conf.get(BOOTSTRAP_CONF, None)
        if conf:
            return conf
    return os.environ.get(BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP)


def build(spark: SparkSession, spec: PipelineSpec) -> DataFrame:
    """Read, decode, apply the watermark, register the view and run the SQL."""
    df = decode(read(spark, spec.source, streaming=spec.streaming), spec.format, spec.schema, spec.decode_options,
                strip_schema_id=spec.strip_schema_id)
    if spec.watermark is not None:
        df = df.withWatermark(*spec.watermark)
    if spec.sql is None:
        return df
    df.createOrReplaceTempView(spec.view)
    return spark.sql(spec.sql)


def run(spark: SparkSession, spec: PipelineSpec, df: DataFrame | None = None) -> list[StreamingQuery]:
    """Run the pipeline to completion (batch, available-now, once, or until `timeout`)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from kbroker.spark.progress import TaskProgress
    from kbroker.spark.ranges import range_line, resolve_range

    print(f"[kbroker.spark] {spec.name}: {spec.source.describe(spec.streaming)}", flush=True)
    ranges = None
    if not spec.streaming:
        ranges = resolve_range(spark, spec.source)
        if ranges is not None:
            line = f"[kbroker.spark] {spec.name}: {range_line(spec.source, ranges)}"
            if sum(r.records for r in ranges) == 0 and not spec.allow_empty:
                raise EmptyRangeError(line)
            print(line, flush=True)
    result = build(spark, spec) if df is None else df
    if not spec.streaming:
        # Counted as the rows go by (no second pass): the final summary says what was written.
        # (Not with a console sink: show() stops after a few rows, so the count would never complete.)
        written = Observation(f"{spec.name}-written") if all(s.kind != "console" for s in spec.sinks) else None
        if written is not None:
            result = result.observe(written, F.count(F.lit(1)).alias("rows"))
        if len(spec.sinks) > 1:
            result = result.cache()  # read kbroker once, write every sink from the cached rows
        started = time.monotonic()
        with TaskProgress(spark):
            for sink in spec.sinks:
                write_batch(result, sink, spec.save_mode)
        read = f"{sum(r.records for r in ranges)} records read, " if ranges is not None else ""
        targets = ", ".join(f"{s.kind} {s.target}" if s.target else s.kind for s in spec.sinks)
        rows = f"{written.get['rows']} rows " if written is not None else ""
        print(f"[kbroker.spark] {spec.name} done in {time.monotonic() - started:.1f}s: {read}"
              f"{rows}written to {targets}", flush=True)
        return []
    queries: list[StreamingQuery] = []
    names = [s.name for s in spec.sinks]
    for sink in spec.sinks:
        # Each sink is its own query with its own checkpoint, so each keeps its own guarantee.
        suffix = sink.name if names.count(sink.name) == 1 else f"{sink.name}{len(queries)}"
        checkpoint = str(Path(spec.checkpoint) / suffix) if spec.checkpoint else None
        queries.append(start_stream(
            result, sink, checkpoint=checkpoint, trigger=trigger_kwargs(spec.trigger),
            output_mode=spec.output_mode, query_name=f"{spec.name}-{suffix}",
        ))
    await_queries(queries, spec.timeout)
    return queries


def await_queries(queries: Sequence[StreamingQuery], timeout: float | None) -> None:
    deadline = None if timeout is None else time.monotonic() + timeout
    for q in queries:
        if deadline is None:
            q.awaitTermination()
        else:
            if not q.awaitTermination(max(0, math.ceil(deadline - time.monotonic()))):
                q.processAllAvailable()
                q.stop()
        error = q.exception()
        if error is not None:
            raise RuntimeError(f"query {q.name} failed: {error}")


def _kv(items: Sequence[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"expected KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def add_source_arguments(p: argparse.ArgumentParser) -> None:
    """The Kafka source options every kbroker job accepts (Spark's names in the help)."""
    g = p.add_argument_group("Kafka source (Spark's format('kafka') options)")
    g.add_argument("--bootstrap", help="kafka.bootstrap.servers (default: from `kbroker spark submit`, else 127.0.0.1:9092)")
    g.add_argument("--subscribe", help="comma-separated topics (subscribe)")
    g.add_argument("--subscribe-pattern", help="topic regex (subscribePattern); picks up topics created later")
    g.add_argument("--assign", help="TOPIC:P,P;TOPIC2:P or Spark's JSON (assign)")
    g.add_argument("--starting-offsets", help="earliest | latest | JSON {\"t\":{\"0\":5}} (startingOffsets)")
    g.add_argument("--ending-offsets", help="latest | JSON (endingOffsets; batch)")
    g.add_argument("--starting-timestamp", help="ISO-8601 or epoch ms for every partition (startingTimestamp)")
    g.add_argument("--ending-timestamp", help="ISO-8601 or epoch ms (endingTimestamp; batch)")
    g.add_argument("--starting-offsets-by-timestamp", help="JSON {\"t\":{\"0\":ms}} (startingOffsetsByTimestamp)")
    g.add_argument("--ending-offsets-by-timestamp", help="JSON (endingOffsetsByTimestamp; batch)")
    g.add_argument("--timestamp-strategy", choices=TIMESTAMP_STRATEGIES,
                   help="no record at/after the starting timestamp: error (default) or latest")
    g.add_argument("--fail-on-data-loss", choices=["true", "false"], help="failOnDataLoss (default true)")
    g.add_argument("--max-offsets-per-trigger", type=int, help="maxOffsetsPerTrigger (streaming)")
    g.add_argument("--min-partitions", type=int, help="minPartitions: split offset ranges into at least N tasks")
    g.add_argument("--include-headers", action="store_true", help="includeHeaders")
    g.add_argument("--source-option", action="append", metavar="K=V", help="any other source option, e.g. kafka.isolation.level=read_committed")


def source_from_args(args: argparse.Namespace, bootstrap: str) -> KafkaSource:
    ts = args.starting_timestamp
    te = args.ending_timestamp
    return KafkaSource(
        bootstrap=bootstrap,
        subscribe=[t for t in (args.subscribe or "").split(",") if t],
        subscribe_pattern=args.subscribe_pattern,
        assign=parse_assign(args.assign) if args.assign else None,
        starting_offsets=args.starting_offsets,
        ending_offsets=args.ending_offsets,
        starting_timestamp=to_epoch_ms(ts) if ts is not None else None,
        ending_timestamp=to_epoch_ms(te) if te is not None else None,
        starting_offsets_by_timestamp=args.starting_offsets_by_timestamp,
        ending_offsets_by_timestamp=args.ending_offsets_by_timestamp,
        starting_timestamp_strategy=args.timestamp_strategy,
        fail_on_data_loss=None if args.fail_on_data_loss is None else args.fail_on_data_loss == "true",
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        min_partitions=args.min_partitions,
        include_headers=args.include_headers,
        options=_kv(args.source_option),
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pipeline", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_source_arguments(p)
    d = p.add_argument_group("decoding and transformation")
    d.add_argument("--format", choices=FORMATS, default="raw", help="value encoding (default raw bytes)")
    d.add_argument("--schema", help="DDL schema for json/csv, e.g. 'user_id STRING, ts TIMESTAMP' (avro: the schema's JSON)")
    d.add_argument("--avro-schema-file", help="avro: read the Avro schema (JSON, .avsc) from this file")
    d.add_argument("--strip-schema-id", action="store_true",
                   help="avro: values carry the schema-registry prefix (magic byte 0 + 4-byte schema id): drop it")
    d.add_argument("--decode-option", action="append", metavar="K=V", help="from_json/from_csv option")
    d.add_argument("--view", default="events", help="name of the decoded view the SQL reads (default events)")
    d.add_argument("--sql", help="Spark SQL over the view")
    d.add_argument("--sql-file", help="read the SQL from a file")
    d.add_argument("--watermark", metavar="COLUMN=DELAY", help="event-time watermark, e.g. 'ts=2 minutes'")
    o = p.add_argument_group("output")
    o.add_argument("--sink", action="append", required=True, help="kafka:TOPIC | parquet:PATH | console (repeatable)")
    o.add_argument("--partition-by", help="comma-separated columns to partition Parquet output by")
    o.add_argument("--key-column", help="Kafka sink: column to use as the record key")
    o.add_argument("--sink-option", action="append", metavar="K=V", help="sink option, e.g. kafka.linger.ms=5")
    o.add_argument("--save-mode", default="append", choices=["append", "overwrite", "error", "ignore"], help="batch Parquet")
    m = p.add_argument_group("execution")
    m.add_argument("--mode", choices=["batch", "stream"], default="batch")
    m.add_argument("--trigger", default="available-now", help="available-now | once | processing-time:INTERVAL")
    m.add_argument("--checkpoint", help="checkpoint directory (streaming; one subdirectory per sink)")
    m.add_argument("--output-mode", default="append", choices=["append", "update", "complete"])
    m.add_argument("--timeout", type=float, help="stop a processing-time stream after N seconds")
    m.add_argument("--shuffle-partitions", type=int, help="spark.sql.shuffle.partitions")
    m.add_argument("--name", default="kbroker-pipeline", help="application and query name")
    m.add_argument("--allow-empty", action="store_true",
                   help="batch: a range with no records exits 0 (default: it exits 3, writing nothing)")
    return p


def spec_from_args(args: argparse.Namespace, bootstrap: str) -> PipelineSpec:
    sql = Path(args.sql_file).read_text() if args.sql_file else args.sql
    schema = Path(args.avro_schema_file).read_text() if args.avro_schema_file else args.schema
    if args.avro_schema_file and args.format != "avro":
        raise ValueError("--avro-schema-file goes with --format avro")
    watermark = None
    if args.watermark:
        column, sep, delay = args.watermark.partition("=")
        if not sep:
            raise ValueError("--watermark expects COLUMN=DELAY, e.g. 'ts=2 minutes'")
        watermark = (column, delay)
    sink_kwargs = {
        "bootstrap": bootstrap,
        "partition_by": [c for c in (args.partition_by or "").split(",") if c],
        "key_column": args.key_column,
        "options": _kv(args.sink_option),
    }
    return PipelineSpec(
        source=source_from_args(args, bootstrap),
        sinks=[Sink.parse(s, **sink_kwargs) for s in args.sink],
        streaming=args.mode == "stream",
        format=args.format,
        schema=schema,
        decode_options=_kv(args.decode_option),
        strip_schema_id=args.strip_schema_id,
        view=args.view,
        sql=sql,
        watermark=watermark,
        trigger=args.trigger,
        checkpoint=args.checkpoint,
        output_mode=args.output_mode,
        timeout=args.timeout,
        save_mode=args.save_mode,
        name=args.name,
        allow_empty=args.allow_empty,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    spark = spark_session(args.name, shuffle_partitions=args.shuffle_partitions)
    try:
        spec = spec_from_args(args, bootstrap_servers(spark, args.bootstrap))
        run(spark, spec)
    except ValueError as e:
        print(f"pipeline: error: {e}", file=sys.stderr)
        return 2
    except EmptyRangeError as e:
        print(e, file=sys.stderr, flush=True)
        return EMPTY_RANGE_EXIT
    finally:
        spark.stop()
    return 0
