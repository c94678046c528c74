"""Spark batch read throughput: records/s for `spark.read.format("kafka")` over a 1 KiB-record topic.

    .venv/bin/python benchmarks/bench_spark.py --target kbroker   [--records 1000000] [--size 1024]
    .venv/bin/python benchmarks/bench_spark.py --target kafka      (the reference Apache Kafka 4.3.1)
    .venv/bin/python benchmarks/bench_spark.py --bootstrap H:P --topic T   (an already-loaded broker)
    .venv/bin/python benchmarks/bench_spark.py --target kbroker --masters local[2],standalone

`--masters` runs the same read on each Spark master in turn against the one loaded broker:
`local[2]` (one JVM, two task threads) and/or `standalone` (a Spark standalone cluster started
here from pyspark's spark-class: a master and two workers of 1 core and 768 MiB each, one executor
per worker; tests/spark/standalone.py). Each result line also carries the Spark executors' CPU time
for the timed read (Executor CPU Time summed over its tasks, from Spark's event log), the broker
process's CPU time during it (/proc), and the machine's load average, since the machine is shared.

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
TIMED_JOB = "kbroker-bench-timed-read"


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
    spark.sparkContext.setJobDescription(TIMED_JOB)  # executor_cpu() finds the timed read's jobs by it
    started = time.monotonic()
    row = read().selectExpr("count(*) AS n", "sum(length(value)) AS bytes").collect()[0]
    elapsed = time.monotonic() - started
    print("BENCH " + json.dumps({"records": row.n, "bytes": row.bytes, "seconds": round(elapsed, 2),
                                 "records_per_s": round(row.n / elapsed), "mib_per_s": round(row.bytes / elapsed / 2**20, 1)}),
          flush=True)
    spark.stop()


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds (0 if it is not ours to read)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def executor_cpu(event_log_dir: Path) -> dict[str, float]:
    """CPU and run time of the executors' tasks in the timed read's jobs (by job description)."""
    files = sorted(p for p in event_log_dir.rglob("*") if p.is_file() and p.name.startswith(("events_", "app-", "local-")))
    events = [json.loads(line) for f in files for line in f.read_text().splitlines() if line.strip()]
    stages = {stage for e in events if e.get("Event") == "SparkListenerJobStart"
              and (e.get("Properties") or {}).get("spark.job.description") == TIMED_JOB for stage in e["Stage IDs"]}
    cpu_ns = run_ms = tasks = 0
    for e in events:
        if e.get("Event") == "SparkListenerTaskEnd" and e["Stage ID"] in stages:
            metrics = e.get("Task Metrics") or {}
            cpu_ns += metrics.get("Executor CPU Time", 0)
            run_ms += metrics.get("Executor Run Time", 0)
            tasks += 1
    return {"executor_cpu_s": round(cpu_ns / 1e9, 1), "executor_run_s": round(run_ms / 1000, 1), "tasks": tasks}


def run_read(bootstrap: str, topic: str, master: str, workdir: Path, broker_pid: int) -> dict[str, object] | None:
    """spark-submit the timed read on `master` ("local[2]" or "standalone"); one result dict."""
    events = workdir / f"events-{master.replace('[', '').replace(']', '')}"
    events.mkdir()
    conf = ["spark.eventLog.enabled=true", f"spark.eventLog.dir={events.as_uri()}", "spark.eventLog.compress=false",
            "spark.ui.enabled=false"]
    cluster = None
    spark_master = master
    if master == "standalone":
        from tests.spark.standalone import StandaloneCluster

        cluster = StandaloneCluster(workdir / "cluster", workers=2, cores=1, memory="768m").start()
        spark_master = cluster.master_url
        conf += ["spark.executor.cores=1", "spark.executor.memory=512m", "spark.cores.max=2",
                 "spark.scheduler.minRegisteredResourcesRatio=1.0"]
    try:
        cmd = [sys.executable, "-m", "kbroker.spark.submit", "submit", "--bootstrap", bootstrap, "--master", spark_master]
        for c in conf:
            cmd += ["--conf", c]
        cmd += [__file__, "--spark-job", bootstrap, topic]
        broker_cpu = _cpu_seconds(broker_pid)
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        broker_cpu = _cpu_seconds(broker_pid) - broker_cpu
    finally:
        if cluster is not None:
            cluster.stop()
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH ")), None)
    if proc.returncode != 0 or line is None:
        print(proc.stdout[-3000:], proc.stderr[-5000:], file=sys.stderr)
        return None
    result: dict[str, object] = {"master": master, **json.loads(line[len("BENCH "):]), **executor_cpu(events)}
    if broker_pid:
        result["broker_cpu_s_whole_job"] = round(broker_cpu, 1)
    result["loadavg_1m"] = os.getloadavg()[0]
    return result


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
    p.add_argument("--masters", default="local[2]", help="comma-separated: local[2] and/or standalone")
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
            for master in args.masters.split(","):
                result = run_read(bootstrap, args.topic, master, Path(tmp), target.pid if target else 0)
                if result is None:
                    return 1
                result.update({"broker": args.bootstrap or args.target, "load_seconds": load_s and round(load_s, 1)})
                print(json.dumps(result), flush=True)
        finally:
            if target is not None:
                target.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
