"""Worked pipeline 1: per-minute event counts and distinct users by key from a JSON clickstream.

Reads the clickstream topic (JSON page views keyed by page, see generators.py), windows events by
event time (1 minute, tumbling) per record key, and streams each finished window, once, into an
output topic (Spark's Kafka sink; key = page, value = JSON) and into Parquet. A window is finished
when the watermark (max event time seen minus --lateness) passes its end; events later than that
are dropped by Spark, as for any event-time aggregation in append mode.

    kbroker spark generate clickstream --topic clicks --events 5000
    kbroker spark submit clickstream --input clicks --output clicks-per-minute \\
        --parquet out/clicks-per-minute --checkpoint out/checkpoints/clickstream

Run it again later (same --checkpoint) and it continues where it stopped. Distinct users are exact
(`size(collect_set(user_id))`): Spark does not allow COUNT(DISTINCT) in a streaming aggregation,
and approx_count_distinct would not be exact.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from kbroker.spark.pipeline import PipelineSpec, bootstrap_servers, run, spark_session
from kbroker.spark.sinks import Sink
from kbroker.spark.source import KafkaSource

SCHEMA = "event_id BIGINT, user_id STRING, page STRING, action STRING, ts TIMESTAMP"
SQL = """
SELECT window.start AS window_start,
       window.end AS window_end,
       kafka_key AS key,
       count(*) AS events,
       size(collect_set(user_id)) AS users
FROM events
GROUP BY window(ts, '1 minute'), kafka_key
"""


def spec(args: argparse.Namespace, bootstrap: str) -> PipelineSpec:
    sinks = []
    if args.output:
        sinks.append(Sink("kafka", args.output, bootstrap=bootstrap, key_column="key"))
    if args.parquet:
        sinks.append(Sink("parquet", args.parquet))
    if args.console or not sinks:
        sinks.append(Sink("console"))
    return PipelineSpec(
        source=KafkaSource(bootstrap=bootstrap, subscribe=[args.input], starting_offsets=args.starting_offsets,
                           max_offsets_per_trigger=args.max_offsets_per_trigger),
        sinks=sinks,
        streaming=True,
        format="json",
        schema=SCHEMA,
        sql=SQL,
        watermark=("ts", args.lateness),
        trigger=args.trigger,
        checkpoint=args.checkpoint,
        output_mode="append",
        timeout=args.timeout,
        name="clickstream",
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="clickstream", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap")
    p.add_argument("--input", default="clicks", help="clickstream topic (default clicks)")
    p.add_argument("--output", help="topic for the per-minute aggregates (Spark's Kafka sink)")
    p.add_argument("--parquet", help="directory for the per-minute aggregates as Parquet")
    p.add_argument("--console", action="store_true", help="also print each batch")
    p.add_argument("--checkpoint", required=True, help="checkpoint directory (one subdirectory per sink)")
    p.add_argument("--lateness", default="2 minutes", help="watermark delay (default 2 minutes)")
    p.add_argument("--trigger", default="available-now", help="available-now | processing-time:INTERVAL")
    p.add_argument("--timeout", type=float, help="stop a processing-time stream after N seconds")
    p.add_argument("--starting-offsets", default="earliest")
    p.add_argument("--max-offsets-per-trigger", type=int)
    args = p.parse_args(argv)
    spark = spark_session("clickstream")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    try:
        run(spark, spec(args, bootstrap_servers(spark, args.bootstrap)))
    finally:
        spark.stop()
    return 0
