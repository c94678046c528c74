"""The pipeline on a real Spark standalone cluster (issue 18): a master and two workers started from the
pinned pyspark's `spark-class`, each worker with 1 core and its own memory, and
`kbroker spark submit --master spark://...` shipping the job's connector jars to executors that the
workers launch as their own JVMs.

Checked independently, as on local[2]: the Parquet output is read back with pyarrow and compared with
the records produced with confluent-kafka (ids and Kafka coordinates). Spark's event log then shows
that the Kafka source's tasks ran on executors of *both* workers, i.e. each executor's own consumer
read kbroker directly.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.spark.spark_helpers import create_topic, produce, spark_submit
from tests.spark.standalone import StandaloneCluster, executor_placement

# Each test spark-submits onto the cluster (a driver and two executor JVMs besides the three daemons).
pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]
pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow reads the Parquet output independently of Spark")


@pytest.fixture(scope="module")
def cluster(spark_ready: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    c = StandaloneCluster(tmp_path_factory.mktemp("spark-standalone"), workers=2, cores=1, memory="768m")
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _cluster_conf(events: Path) -> list[str]:
    events.mkdir(parents=True, exist_ok=True)
    return [
        "spark.executor.cores=1", "spark.executor.memory=512m", "spark.cores.max=2",
        # Wait for both executors before the first job, so the read is spread over both workers.
        "spark.scheduler.minRegisteredResourcesRatio=1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime=120s",
        "spark.eventLog.enabled=true", f"spark.eventLog.dir={events.as_uri()}", "spark.eventLog.compress=false",
    ]


def _orders(n: int, first: int = 0) -> list[dict[str, Any]]:
    return [{"value": json.dumps({"id": i, "amount": i * 0.5}).encode(), "key": str(i % 5).encode()}
            for i in range(first, first + n)]


def _assert_read_on_both_workers(events: Path) -> None:
    placement = executor_placement(events)
    busy = [e for e in placement.values() if e.kafka_tasks > 0]
    assert len({e.worker for e in placement.values()}) == 2, placement  # one executor per worker
    assert len({e.worker for e in busy}) == 2, f"Kafka source tasks did not run on both workers: {placement}"


def test_batch_pipeline_on_two_workers(spark_bootstrap: str, cluster: StandaloneCluster, tmp_path: Path) -> None:
    bs = spark_bootstrap
    create_topic(bs, "cluster-orders", 3)
    produced = produce(bs, "cluster-orders", _orders(300))
    out = tmp_path / "orders"
    proc = spark_submit(
        bs, "pipeline",
        ["--subscribe", "cluster-orders", "--format", "json", "--schema", "id BIGINT, amount DOUBLE",
         "--sql", "SELECT id, amount, kafka_partition, kafka_offset, kafka_key FROM events",
         "--min-partitions", "6", "--sink", f"parquet:{out}", "--name", "cluster-batch"],
        tmp_path / "batch.log", master=cluster.master_url, conf=_cluster_conf(tmp_path / "events"),
    )
    rows = pq.read_table(str(out)).to_pylist()
    assert sorted(r["id"] for r in rows) == list(range(300))
    assert sorted((r["kafka_partition"], r["kafka_offset"]) for r in rows) == sorted(
        (r["partition"], r["offset"]) for r in produced)
    assert all(r["kafka_key"] == str(r["id"] % 5) for r in rows)
    # The range the driver resolved before the read (ListOffsets through the connector's AdminClient).
    ends = {p: sum(1 for r in produced if r["partition"] == p) for p in range(3)}  # offsets start at 0
    assert ("[kbroker.spark] cluster-batch: 300 records in range [earliest, latest) of cluster-orders: "
            + ", ".join(f"cluster-orders-{p} at 0..{ends[p]}" for p in range(3))) in proc.stdout.splitlines()
    _assert_read_on_both_workers(tmp_path / "events")


# The restarted stream on the cluster takes two Spark applications (about 2 minutes on a quiet machine);
# the default suite proves the cluster path with the batch run above, and the stream's exactly-once
# restart with `test_spark_pipelines.py` (local[2]); this one runs in the slow suite.
@pytest.mark.slow
def test_stream_pipeline_on_two_workers(spark_bootstrap: str, cluster: StandaloneCluster, tmp_path: Path) -> None:
    bs = spark_bootstrap
    create_topic(bs, "cluster-stream", 3)
    first = produce(bs, "cluster-stream", _orders(120))
    out, ckpt = tmp_path / "stream", tmp_path / "ckpt"
    args = ["--mode", "stream", "--trigger", "available-now", "--subscribe", "cluster-stream",
            "--starting-offsets", "earliest", "--format", "json", "--schema", "id BIGINT, amount DOUBLE",
            "--sql", "SELECT id, kafka_partition, kafka_offset FROM events", "--max-offsets-per-trigger", "50",
            "--sink", f"parquet:{out}", "--checkpoint", str(ckpt), "--name", "cluster-stream"]
    proc = spark_submit(bs, "pipeline", args, tmp_path / "stream1.log", master=cluster.master_url,
                        conf=_cluster_conf(tmp_path / "events1"))
    assert "query cluster-stream-parquet batch 2" in proc.stdout  # 120 records, 50 per trigger: 3 batches
    _assert_read_on_both_workers(tmp_path / "events1")
    second = produce(bs, "cluster-stream", _orders(30, first=120))
    spark_submit(bs, "pipeline", args, tmp_path / "stream2.log", master=cluster.master_url,
                 conf=_cluster_conf(tmp_path / "events2"))
    rows = pq.read_table(str(out)).to_pylist()
    assert sorted(r["id"] for r in rows) == list(range(150))  # exactly once across the restart
    assert sorted((r["kafka_partition"], r["kafka_offset"]) for r in rows) == sorted(
        (r["partition"], r["offset"]) for r in first + second)
