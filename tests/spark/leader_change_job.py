"""A streaming job (spark-submit'ed by test_spark_leader_change.py): Spark's Kafka source reading a
replicated topic while the test kills a partition leader.

argv: bootstrap, topic, partitions, out_dir, checkpoint_dir, timeout_s. A structured streaming query
(`startingOffsets=earliest`, `failOnDataLoss=true`: Spark's own check that offsets never go backwards
and nothing is skipped, 500 ms triggers) writes each micro-batch's rows to out_dir/rows.jsonl and every
query progress's per-partition `startOffset`, `endOffset` and `latestOffset` to out_dir/progress.jsonl. It
stops once it has read an `END` record in every partition (the test writes them last), or at the timeout.
A line `leader-change-job: ready` marks the first batch with data: the test kills the leader after it.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession


def main() -> None:
    bootstrap, topic, partitions, out_dir, ckpt = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
    timeout = float(sys.argv[6])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows_file = (out / "rows.jsonl").open("a")
    progress_file = (out / "progress.jsonl").open("a")
    ready = out / "ready"
    ended: set[int] = set()
    spark = SparkSession.builder.appName("kbroker-leader-change").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    df = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).option("startingOffsets", "earliest").option("failOnDataLoss", "true")
          .option("kafka.metadata.max.age.ms", "1000").load())

    def batch(frame: DataFrame, batch_id: int) -> None:
        got = frame.selectExpr("partition", "offset", "CAST(value AS STRING) AS value").collect()
        for r in sorted(got, key=lambda r: (r["partition"], r["offset"])):
            rows_file.write(json.dumps({"batch": batch_id, "partition": r["partition"], "offset": r["offset"],
                                        "value": r["value"]}) + "\n")
            if r["value"] == "END":
                ended.add(r["partition"])
        rows_file.flush()
        if got and not ready.exists():
            ready.write_text(str(batch_id))
            print("leader-change-job: ready", flush=True)

    query = (df.writeStream.foreachBatch(batch).option("checkpointLocation", ckpt)
             .trigger(processingTime="500 milliseconds").start())
    seen: set[int] = set()

    def record_progress() -> None:
        for p in query.recentProgress:
            if p["batchId"] in seen or not p["sources"]:
                continue
            seen.add(p["batchId"])
            src: dict[str, Any] = p["sources"][0]
            progress_file.write(json.dumps({k: src.get(k) for k in ("startOffset", "endOffset", "latestOffset")}
                                           | {"batch": p["batchId"]}) + "\n")
            progress_file.flush()

    deadline = time.monotonic() + timeout
    try:
        while len(ended) < partitions and time.monotonic() < deadline:
            if query.exception() is not None:
                break
            record_progress()
            time.sleep(0.2)
        # Let the batch that read the END records report its progress, and one more trigger run.
        settle = time.monotonic() + 5
        while time.monotonic() < settle and query.exception() is None:
            record_progress()
            time.sleep(0.2)
        record_progress()
    finally:
        error = query.exception()
        query.stop()
        result = {"ended": sorted(ended), "error": None if error is None else str(error)}
        (out / "result.json").write_text(json.dumps(result))
        print(f"leader-change-job: {result}", flush=True)
        spark.stop()


if __name__ == "__main__":
    main()
