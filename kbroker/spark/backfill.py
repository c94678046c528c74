"""Worked pipeline 2: backfill a time range of a topic into Parquet partitioned by date and hour.

A batch job: Spark's Kafka source finds, per partition, the first offset whose timestamp is at or
after --from (startingTimestamp) and the first at or after --to (endingTimestamp, exclusive), reads
exactly that range, and writes Parquet partitioned by `dt` (yyyy-MM-dd) and `hour` of the record
timestamp, in UTC. Re-running the same range replaces those partitions (dynamic partition
overwrite) rather than adding duplicates. If no record is at or after --from the result is empty
(startingOffsetsByTimestampStrategy=latest).

    kbroker spark submit backfill --topic clicks --from 2026-11-25T10:00:00Z --to 2026-11-25T12:00:00Z \\
        --path out/clicks-backfill --format json --schema 'user_id STRING, page STRING, ts TIMESTAMP'
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kbroker.spark.pipeline import EMPTY_RANGE_EXIT, PipelineSpec, bootstrap_servers, run, spark_session
from kbroker.spark.ranges import EmptyRangeError
from kbroker.spark.sinks import Sink
from kbroker.spark.source import FORMATS, KafkaSource, to_epoch_ms

PARTITION_SQL = """
SELECT *, date_format(kafka_timestamp, 'yyyy-MM-dd') AS dt, hour(kafka_timestamp) AS hour
FROM events
"""


def spec(args: argparse.Namespace, bootstrap: str) -> PipelineSpec:
    return PipelineSpec(
        source=KafkaSource(
            bootstrap=bootstrap, subscribe=args.topic.split(","),
            starting_timestamp=to_epoch_ms(args.from_), ending_timestamp=to_epoch_ms(args.to),
            starting_timestamp_strategy="latest", min_partitions=args.min_partitions,
        ),
        sinks=[Sink("parquet", args.path, partition_by=["dt", "hour"])],
        streaming=False,
        format=args.format,
        schema=args.schema,
        sql=PARTITION_SQL,
        save_mode="overwrite",
        name="backfill",
        allow_empty=args.allow_empty,
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="backfill", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap")
    p.add_argument("--topic", required=True, help="topic(s) to read, comma-separated")
    p.add_argument("--from", dest="from_", required=True, help="start time, inclusive (ISO-8601 or epoch ms)")
    p.add_argument("--to", required=True, help="end time, exclusive (ISO-8601 or epoch ms)")
    p.add_argument("--path", required=True, help="Parquet output directory")
    p.add_argument("--format", choices=FORMATS, default="raw")
    p.add_argument("--schema", help="DDL schema for json/csv values")
    p.add_argument("--min-partitions", type=int, help="split the read into at least N tasks")
    p.add_argument("--allow-empty", action="store_true",
                   help="a range with no records exits 0 (default: it says so and exits 3)")
    args = p.parse_args(argv)
    spark = spark_session("backfill")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    # Overwrite only the dt/hour partitions this run writes: a re-run replaces, never duplicates.
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    try:
        run(spark, spec(args, bootstrap_servers(spark, args.bootstrap)))
    except EmptyRangeError as e:
        print(e, file=sys.stderr, flush=True)
        return EMPTY_RANGE_EXIT
    finally:
        spark.stop()
    return 0
