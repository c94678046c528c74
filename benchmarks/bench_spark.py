"""Spark batch read throughput: records/s for `spark.read.format("kafka")` over a 1 KiB-record topic.

    .venv/bin/python benchmarks/bench_spark.py --target kbroker   [--records 1000000] [--size 1024]
    .venv/bin/python benchmarks/bench_spark.py --target kafka      (the reference Apache Kafka 4.3.1)
    .venv/bin/python benchmarks/bench_spark.py --bootstrap H:P --topic T   (an already-loaded broker)

Starts a fresh broker (benchmarks/targets.py: kbroker or the reference Kafka, broker pinned to
core 0), creates a 3-partition topic, loads it with confluent-kafka (untimed), then spark-submits
this file as the job (`kbroker spark submit`, master local[2]). The job warms the session up with
a small read, then times one batch read of the whole topic that touches every value
(`sum(length(value))`), so Spark really fetches and materialises every record. Prints one JSON line.
Measure once per broker: the machine is shared and a run moves ~1 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def spark_job(bootstrap: str, topic: str) -> None:
    """Runs inside spark-submit."""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("kbroker-bench-spark").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")

    def read(ending: str = "latest"):  # type: ignore[no-untyped-def]
        return (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
                .option("startingOffsets", "earliest").option("endingOffsets", ending).load())

    warm = json.dumps({topic: {"0": 1000, "1": 1000, "2": 1000}})
    read(warm).selectExpr("sum(length(value))").collect()  # class loading, consumer pool
    started = time.monotonic()
    row = read().selectExpr("count(*) AS n", "sum(length(value)) AS bytes").collect()[0]
    elapsed = time.monotonic() - started
    print("BENCH " + json.dumps({"records": row.n, "bytes": row.bytes, "seconds": round(elapsed, 2),
                                 "records_per_s": round(row.n / elapsed), "mib_per_s": round(row.bytes / elapsed / 2**20, 1)}),
          flush=True)
    spark.stop()


def load(bootstrap: str, topic: str, records: int, size: int) -> float:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "queue.buffering.max.kbytes": 512_000, "acks": 1, "enable.idempotence": False})
    payload = os.urandom(size)
    started = time.monotonic()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=payload, partition=i % 3)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(600) == 0
    return time.monotonic() - started


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", choices=["kbroker", "kafka"], default="kbroker")
    p.add_argument("--bootstrap", help="use this running broker (topic must be loaded, or pass --records to load)")
    p.add_argument("--topic", default="spark-bench")
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--skip-load", action="store_true")
    p.add_argument("--spark-job", nargs=2, metavar=("BOOTSTRAP", "TOPIC"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.spark_job:
        spark_job(*args.spark_job)
        return 0
    sys.path.insert(0, str(ROOT))
    from benchmarks.targets import KafkaTarget, KBrokerTarget

    target = None
    with tempfile.TemporaryDirectory(prefix="bench-spark-") as tmp:
        try:
            if args.bootstrap:
                bootstrap = args.bootstrap
            else:
                target = KBrokerTarget() if args.target == "kbroker" else KafkaTarget()
                target.start(Path(tmp))
                bootstrap = target.bootstrap
            load_s = None if args.skip_load else load(bootstrap, args.topic, args.records, args.size)
            cmd = [sys.executable, "-m", "kbroker.spark.submit", "submit", "--bootstrap", bootstrap,
                   "--conf", "spark.ui.enabled=false", __file__, "--spark-job", bootstrap, args.topic]
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH ")), None)
            if proc.returncode != 0 or line is None:
                print(proc.stdout[-3000:], proc.stderr[-5000:], file=sys.stderr)
                return 1
            result = json.loads(line[len("BENCH "):])
            result.update({"broker": args.bootstrap or args.target, "load_seconds": load_s and round(load_s, 1)})
            print(json.dumps(result))
        finally:
            if target is not None:
                target.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
