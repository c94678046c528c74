"""A job (spark-submit'ed by test_spark_read_committed.py): Spark's Kafka source with
`kafka.isolation.level=read_committed` over a topic holding committed and aborted transactions.

argv: bootstrap, topic, out_dir, checkpoint_dir, timeout_s. In one Spark session: a batch read
(`startingOffsets=earliest`, `endingOffsets=latest`) and a streaming read (Trigger.AvailableNow,
foreachBatch); both with Spark's default `failOnDataLoss=true`, so an offset gap Spark could not explain
would fail the job. Writes out_dir/result.json: the (partition, offset, value) rows of each read, the
streaming query's last per-partition endOffset, whether it terminated by itself, and any error.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession


def main() -> None:
    bootstrap, topic, out_dir, ckpt, timeout = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4], float(sys.argv[5])
    out_dir.mkdir(parents=True, exist_ok=True)
    spark = SparkSession.builder.appName("kbroker-read-committed").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    common = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest",
              "kafka.isolation.level": "read_committed"}
    result: dict[str, Any] = {}
    batch_rows = (spark.read.format("kafka").options(**common).option("endingOffsets", "latest").load()
                  .selectExpr("partition", "offset", "CAST(value AS STRING) AS value").collect())
    result["batch"] = sorted([r["partition"], r["offset"], r["value"]] for r in batch_rows)

    stream_rows: list[list[Any]] = []

    def on_batch(frame: DataFrame, batch_id: int) -> None:
        stream_rows.extend([r["partition"], r["offset"], r["value"]] for r in
                           frame.selectExpr("partition", "offset", "CAST(value AS STRING) AS value").collect())

    query = (spark.readStream.format("kafka").options(**common).load().writeStream.foreachBatch(on_batch)
             .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
    try:
        result["terminated"] = bool(query.awaitTermination(timeout))
        error = query.exception()
        result["error"] = None if error is None else str(error)
        ends = [p["sources"][0].get("endOffset") for p in query.recentProgress if p["sources"]]
        result["stream_end_offsets"] = json.loads(ends[-1]) if ends and isinstance(ends[-1], str) else \
            (ends[-1] if ends else None)
    finally:
        query.stop()
    result["stream"] = sorted(stream_rows)
    (out_dir / "result.json").write_text(json.dumps(result))
    print(f"read-committed-job: {len(result['batch'])} batch rows, {len(stream_rows)} stream rows", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
