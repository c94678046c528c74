"""A test job (spark-submit'ed once per test session): Spark Kafka source semantics against a broker.

Runs every scenario in one SparkSession (a JVM start costs tens of seconds on a shared 2-core
machine) and writes `{scenario: {"rows": [...]} | {"error": "..."} | {...}}` as JSON to argv[2].
argv[1] is the broker bootstrap; the test (test_source_semantics.py) prepared the topics and
asserts on the results. Uses confluent-kafka for the steps that must happen between Spark queries
(creating a topic a pattern should pick up, DeleteRecords).
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import DataFrame, SparkSession

ROW_EXPR = [
    "hex(key) AS key", "hex(value) AS value", "topic", "partition", "offset",
    "unix_millis(timestamp) AS timestamp", "timestampType",
]
HEADERS_EXPR = "transform(headers, h -> named_struct('key', h.key, 'value', hex(h.value))) AS headers"


def rows(df: DataFrame, headers: bool = False) -> list[dict[str, Any]]:
    exprs = ROW_EXPR + ([HEADERS_EXPR] if headers else [])
    out = [r.asDict(recursive=True) for r in df.selectExpr(*exprs).collect()]
    return sorted(out, key=lambda r: (r["topic"], r["partition"], r["offset"]))


def main() -> None:
    bootstrap, out_path, ckpt_dir = sys.argv[1], sys.argv[2], sys.argv[3]
    spec = json.loads(sys.argv[4])  # timestamps and names the test chose
    spark = SparkSession.builder.appName("kbroker-spark-probe").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    results: dict[str, Any] = {}
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def kafka(**opts: Any) -> DataFrame:
        return (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                .options(**{k: str(v) for k, v in opts.items()}).load())

    def scenario(name: str, fn: Callable[[], Any]) -> None:
        started = time.monotonic()
        try:
            results[name] = fn()
        except Exception as e:  # noqa: BLE001 - the test asserts on the error text
            results[name] = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-4000:]}
        results[name]["seconds"] = round(time.monotonic() - started, 1)
        print(f"probe: {name} {results[name].get('error', 'ok')[:200]} ({results[name]['seconds']}s)", flush=True)

    t0 = spec["t0"]
    ts_json = lambda t: json.dumps({"ts": {"0": t, "1": t, "2": t}})  # noqa: E731
    scenario("exact", lambda: {"rows": rows(kafka(subscribe="exact,exact-lat", includeHeaders="true"), True)})
    scenario("by_timestamp_error", lambda: {"rows": rows(kafka(
        subscribe="ts", startingOffsetsByTimestamp=ts_json(t0 + 15_000)))})
    scenario("by_timestamp_none_error", lambda: {"rows": rows(kafka(
        subscribe="ts", startingOffsetsByTimestamp=ts_json(t0 + 999_000),
        startingOffsetsByTimestampStrategy="error"))})
    scenario("by_timestamp_none_latest", lambda: {"rows": rows(kafka(
        subscribe="ts", startingOffsetsByTimestamp=ts_json(t0 + 999_000),
        startingOffsetsByTimestampStrategy="latest"))})
    scenario("timestamp_range", lambda: {"rows": rows(kafka(
        subscribe="ts", startingTimestamp=t0 + 6_000, endingTimestamp=t0 + 20_000))})
    scenario("ending_offsets", lambda: {"rows": rows(kafka(
        subscribe="ts", startingOffsets="earliest", endingOffsets=json.dumps({"ts": {"0": 3, "1": -1, "2": 5}})))})

    def min_partitions() -> dict[str, Any]:
        df = kafka(subscribe="ts", minPartitions=6)
        return {"num_partitions": df.rdd.getNumPartitions(), "rows": rows(df)}

    scenario("min_partitions", min_partitions)
    scenario("assign", lambda: {"rows": rows(kafka(assign=json.dumps({"ts": [1]})))})

    def csv_decode() -> dict[str, Any]:
        # kbroker.spark's own building blocks (read + decode), as a user's job would use them.
        from kbroker.spark.source import KafkaSource, decode, read

        src = KafkaSource(bootstrap=bootstrap, assign={"csv": [0]}, starting_offsets="earliest")
        df = decode(read(spark, src, streaming=False), "csv", "id INT, name STRING, score DOUBLE")
        got = df.select("id", "name", "score", "kafka_key", "kafka_offset").orderBy("kafka_offset").collect()
        return {"columns": df.columns, "rows": [r.asDict() for r in got]}

    scenario("csv_decode", csv_decode)

    def data_loss() -> dict[str, Any]:
        producer = Producer({"bootstrap.servers": bootstrap})

        def produce(first: int, count: int) -> None:
            for i in range(first, first + count):
                producer.produce("loss", value=f"r{i}".encode(), partition=0)
            assert producer.flush(30) == 0

        def stream(fail: str) -> tuple[list[int], str | None]:
            offsets: list[int] = []
            query = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                     .option("subscribe", "loss").option("startingOffsets", "earliest")
                     .option("failOnDataLoss", fail).load()
                     .writeStream.trigger(availableNow=True).option("checkpointLocation", f"{ckpt_dir}/loss")
                     .foreachBatch(lambda df, _id: offsets.extend(r.offset for r in df.select("offset").collect()))
                     .start())
            try:
                query.awaitTermination()
            except Exception as e:  # noqa: BLE001 - the query's failure is the result
                return sorted(offsets), f"{type(e).__name__}: {e}"
            return sorted(offsets), None

        produce(0, 10)
        first, err1 = stream("true")
        produce(10, 20)  # offsets 10..29; 10..19 are deleted before anything reads them
        deleted = admin.delete_records([TopicPartition("loss", 0, 20)])
        for fut in deleted.values():
            fut.result(30)
        failed, err_true = stream("true")
        skipped, err_false = stream("false")
        return {"first": first, "first_error": err1, "after_delete_true": failed, "error_true": err_true,
                "after_delete_false": skipped, "error_false": err_false}

    scenario("data_loss", data_loss)

    def pattern() -> dict[str, Any]:
        seen: set[str] = set()
        query = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                 .option("subscribePattern", "pat-.*").option("startingOffsets", "earliest").load()
                 .selectExpr("topic", "CAST(value AS STRING) AS value")
                 .writeStream.trigger(processingTime="1 second")
                 .option("checkpointLocation", f"{ckpt_dir}/pattern")
                 .foreachBatch(lambda df, _id: seen.update(f"{r.topic}:{r.value}" for r in df.collect()))
                 .start())
        producer = Producer({"bootstrap.servers": bootstrap})
        try:
            deadline = time.monotonic() + 90
            while "pat-a:a0" not in seen and time.monotonic() < deadline:
                time.sleep(0.5)
            before = sorted(seen)
            for fut in admin.create_topics([NewTopic("pat-b", 2, 1)]).values():
                fut.result(30)
            for i in range(4):
                producer.produce("pat-b", value=f"b{i}".encode())
            assert producer.flush(30) == 0
            while not {f"pat-b:b{i}" for i in range(4)} <= seen and time.monotonic() < deadline:
                time.sleep(0.5)
        finally:
            query.stop()
        return {"before_create": before, "seen": sorted(seen)}

    scenario("pattern", pattern)
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)
    spark.stop()


if __name__ == "__main__":
    main()
