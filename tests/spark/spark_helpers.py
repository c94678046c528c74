"""Helpers for the Spark suite: run `kbroker spark submit`, create topics, produce and consume with
confluent-kafka (the independent side every Spark result is compared with)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.support.broker import REPO_ROOT

SUBMIT_TIMEOUT = 600


def spark_submit(
    bootstrap: str, job: str, args: Sequence[str], log: Path, *, check: bool = True,
    master: str = "local[2]", conf: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """`kbroker spark submit JOB ARGS` on `master` (UI off: nobody looks at it in CI); output in `log`."""
    extra = [a for item in conf for a in ("--conf", item)]
    cmd = [
        sys.executable, "-m", "kbroker.spark.submit", "submit", "--bootstrap", bootstrap,
        "--master", master, "--conf", "spark.ui.enabled=false",
        "--conf", "spark.sql.shuffle.partitions=2", *extra, job, *args,
    ]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=SUBMIT_TIMEOUT, env=env, cwd=REPO_ROOT)
    log.write_text(f"$ {' '.join(cmd)}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
    if check and proc.returncode != 0:
        interesting = [ln for ln in proc.stderr.splitlines() if " INFO " not in ln]
        raise AssertionError(
            f"spark-submit {job} exited {proc.returncode} (full log: {log})\n{proc.stdout[-3000:]}\n"
            + "\n".join(interesting[-60:])
        )
    return proc


def create_topic(bootstrap: str, name: str, partitions: int, configs: dict[str, str] | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=configs or {})])[name].result(30)


def produce(bootstrap: str, topic: str, records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Produce records ({value, key?, partition?, timestamp?, headers?}) with an idempotent producer
    and return them with the partition/offset/timestamp the broker assigned."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    done: list[dict[str, Any]] = []
    errors: list[str] = []
    for rec in records:
        kwargs = {k: rec[k] for k in ("key", "partition", "timestamp", "headers") if k in rec}

        def cb(err: Any, msg: Any, rec: dict[str, Any] = rec) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                done.append({**rec, "topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset()})

        producer.produce(topic, value=rec["value"], on_delivery=cb, **kwargs)
    assert producer.flush(60) == 0 and not errors, errors
    return done


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 60) -> list[Any]:
    """Every record of `topic` read with a confluent-kafka consumer (assign mode, from the start)."""
    import time

    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"spark-test-{topic}",
                         "enable.auto.commit": False, "enable.partition.eof": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                out.append(msg)
        # A moment more, so a test sees extra (duplicate) records too.
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                out.append(msg)
    finally:
        consumer.close()
    return out
