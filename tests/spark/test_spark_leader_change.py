"""Spark's Kafka source (spark-sql-kafka-0-10 4.2.0) reading a replicated topic through a leader change.

Three `kbroker serve` brokers under an Apache Kafka 4.3.1 controller; a topic of 2 partitions, RF 3,
min.insync.replicas 2. An idempotent acks=all producer writes throughout; a structured streaming query
(tests/spark/leader_change_job.py, `failOnDataLoss=true`) reads it; once the query has read data the
leader of partition 0 is killed -9 and the controller moves leadership. Then:

- no acknowledged record is missing from what Spark read, none is read twice, and each partition's
  records arrive in offset order;
- the per-partition offsets in every query progress (`endOffset`, `latestOffset`) never go backwards:
  a new leader whose high watermark still lags its epoch start answers ListOffsets with
  OFFSET_NOT_AVAILABLE (Kafka's rule) instead of an older "latest" (which Spark's failOnDataLoss would
  have reported as lost data);
- the query ended without an error.

About a minute and a half on a quiet machine (three JVMs start: the controller, Kafka's tools, Spark):
`slow`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.spark.spark_helpers import spark_submit
from tests.support.java import run_java_main
from tests.support.kafka_cluster import KafkaCluster, cluster_unavailable_reason
from tests.support.replicated_cluster import metadata_state, wait_partition

pytestmark = [pytest.mark.spark, pytest.mark.interop, pytest.mark.java, pytest.mark.slow]

IDS = (2, 3, 4)
TOPIC = "lc"
JOB = Path(__file__).resolve().parent / "leader_change_job.py"


@pytest.fixture
def cluster(spark_ready: None, tmp_path: Path) -> Iterator[KafkaCluster]:
    reason = cluster_unavailable_reason()
    if reason:
        pytest.skip(reason)
    c = KafkaCluster(tmp_path / "cluster", controller_overrides={"broker.session.timeout.ms": "3000"})
    try:
        c.start_controllers()
        for node_id in IDS:
            c.kbroker(node_id, {"replica.lag.time.max.ms": "3000"}).start(timeout=90)
        yield c
    finally:
        c.stop_all()


class Writer:
    """An idempotent acks=all producer writing to both partitions until stopped; keeps what was acked."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "metadata.max.age.ms": 1000})
        self.acked: list[tuple[int, int, str]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._i = 0

    def _cb(self, err: object, msg: object) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked.append((msg.partition(), msg.offset(), msg.value().decode()))  # type: ignore[attr-defined]

    def send(self, partition: int, value: str) -> None:
        self.producer.produce(TOPIC, value.encode(), partition=partition, on_delivery=self._cb)
        self.producer.poll(0)

    def _run(self) -> None:
        while not self._stop.is_set():
            for p in (0, 1):
                self.send(p, f"p{p}-{self._i}")
            self._i += 1
            time.sleep(0.02)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        for p in (0, 1):
            self.send(p, "END")
        assert self.producer.flush(120) == 0


def test_spark_reads_through_a_leader_kill(cluster: KafkaCluster, tmp_path: Path) -> None:
    kb = {n: cluster.kbrokers[IDS.index(n)] for n in IDS}

    def live() -> list[str]:
        return [b.bootstrap for b in cluster.kbrokers if b.is_running()]

    proc = run_java_main("kafka-topics", ["--bootstrap-server", kb[2].bootstrap, "--create", "--topic", TOPIC,
                                          "--replica-assignment", "2:3:4,3:4:2", "--config",
                                          "min.insync.replicas=2"], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for p in (0, 1):
        deadline = time.monotonic() + 60
        while (st := metadata_state(live()[0], TOPIC, p)) is None or len(st.isr) != 3:
            assert time.monotonic() < deadline, st
            time.sleep(0.3)
    bootstrap = ",".join(live())
    writer = Writer(bootstrap)
    writer.start()
    out = tmp_path / "out"
    result: dict[str, object] = {}

    def run_job() -> None:
        try:
            result["proc"] = spark_submit(bootstrap, str(JOB), [bootstrap, TOPIC, "2", str(out), str(tmp_path / "ckpt"),
                                                                "240"], tmp_path / "spark.log", check=False)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            result["exc"] = e

    job = threading.Thread(target=run_job, daemon=True)
    job.start()
    deadline = time.monotonic() + 240
    while not (out / "ready").exists():
        assert job.is_alive(), (tmp_path / "spark.log").read_text()[-5000:]
        assert time.monotonic() < deadline, "the query never read anything"
        time.sleep(0.5)
    leader = metadata_state(live()[0], TOPIC, 0)
    assert leader is not None and leader.leader == 2
    kb[2].kill()
    wait_partition(live, TOPIC, lambda s: s.leader in (3, 4), what="a new leader for lc-0")
    time.sleep(5)  # keep writing and reading under the new leader
    writer.stop()
    job.join(300)
    assert not job.is_alive(), "the Spark job did not finish"
    assert "exc" not in result, result.get("exc")
    log = (tmp_path / "spark.log").read_text()
    summary = json.loads((out / "result.json").read_text())
    assert summary["error"] is None and summary["ended"] == [0, 1], (summary, log[-5000:])

    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    read = [(r["partition"], r["offset"], r["value"]) for r in rows]
    assert len(read) == len(set(read)), "a record was read twice"
    missing = set(writer.acked) - set(read)
    assert not missing, f"{len(missing)} acknowledged records never read, e.g. {sorted(missing)[:5]}"
    for p in (0, 1):
        offsets = [o for (q, o, _v) in read if q == p]
        assert offsets == sorted(offsets), f"partition {p} read out of order"
    assert len(writer.acked) > 100 and not writer.errors, writer.errors[:3]

    progress = [json.loads(line) for line in (out / "progress.jsonl").read_text().splitlines()]
    # Under load a micro-batch can take a minute (Spark's admin client retrying ListOffsets while the
    # leader moves), so there may be few of them; every one is checked.
    assert len(progress) >= 2, progress
    for field in ("endOffset", "latestOffset"):
        last: dict[str, int] = {}
        for pr in sorted(progress, key=lambda x: x["batch"]):
            offsets = pr[field]
            if not offsets:
                continue
            for part, off in json.loads(offsets)[TOPIC].items() if isinstance(offsets, str) else offsets[TOPIC].items():
                assert off >= last.get(part, -1), f"{field} of {TOPIC}-{part} went back: {last[part]} -> {off}"
                last[part] = off
