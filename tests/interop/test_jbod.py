"""Several log directories (JBOD) with a real kbroker process and real clients.

- kafka-python's admin `describe_log_dirs` sees each directory with its own partitions.
- A replica moves between directories while a confluent-kafka producer keeps writing to it: with
  kafka-python's `alter_replica_log_dirs`, and with the Java Admin's `alterReplicaLogDirs` +
  `describeReplicaLogDirs` (tests/support/jbod_java/AlterReplicaLogDir.java); a consumer then reads
  every record once, in order.
- A directory removed under the running broker goes offline alone: its partition answers
  KAFKA_STORAGE_ERROR, DescribeLogDirs reports the directory with KAFKA_STORAGE_ERROR, the other
  directory's partition keeps serving, and the broker stops cleanly on SIGTERM afterwards. When every
  directory is gone the broker halts, as Kafka does. Kafka's `kafka-log-dirs` tool shows both
  directories, and the failed one with its KafkaStorageException.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from kafka import KafkaAdminClient, TopicPartitionReplica
from kafka.admin import NewTopic

from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import produce as pr
from kbroker.protocol.records import SimpleRecord, build_batch
from tests.support.broker import KBroker
from tests.support.java import REPO_ROOT, java_unavailable_reason, run_java_main
from tests.support.raw_client import RawKafkaClient

pytestmark = pytest.mark.interop

ALTER_JAVA = REPO_ROOT / "tests" / "support" / "jbod_java" / "AlterReplicaLogDir.java"


def _two_dirs(kbroker_factory: Callable[..., KBroker], tmp_path: Path, **overrides: Any) -> tuple[KBroker, Path, Path]:
    a, b = tmp_path / "dir-a", tmp_path / "dir-b"
    broker = kbroker_factory({"log.dirs": f"{a},{b}"}, **overrides)
    return broker, a, b


def _log_dirs(admin: KafkaAdminClient) -> dict[str, dict[str, Any]]:
    """kafka-python's describe_log_dirs, as {dir: {"error": code, "partitions": {(topic, p): (size, future)}}}."""
    [response] = admin.describe_log_dirs()
    out: dict[str, dict[str, Any]] = {}
    for result in response["log_dirs"] if isinstance(response, dict) else response:
        r = result if isinstance(result, dict) else result._asdict()  # pragma: no cover - shape varies by release
        parts = {}
        for t in r["topics"]:
            for p in t["partitions"]:
                parts[(t["name"], p["partition_index"])] = (p["partition_size"], p["is_future_key"])
        out[r["log_dir"]] = {"error": r["error_code"], "partitions": parts}
    return out


def _produce_in_background(bootstrap: str, topic: str, stop: threading.Event, sent: list[int]) -> threading.Thread:
    def run() -> None:
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, "enable.idempotence": True})
        i = 0
        while not stop.is_set():
            p.produce(topic, value=b"%08d" % i + b"x" * 200, partition=0,
                      on_delivery=lambda err, msg: sent.append(int(msg.value()[:8])) if err is None else None)
            p.poll(0)
            i += 1
            if i % 200 == 0:
                time.sleep(0.01)
        assert p.flush(30) == 0

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _consume_all(bootstrap: str, topic: str, expected: int) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"jbod-{topic}", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    got: list[int] = []
    deadline = time.monotonic() + 60
    while len(got) < expected and time.monotonic() < deadline:
        for m in c.consume(500, 1.0):
            assert m.error() is None, m.error()
            got.append(int(m.value()[:8]))
    c.close()
    return got


def _move_under_load(broker: KBroker, src: Path, dst: Path, topic: str, move: Callable[[], None]) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
        before = _log_dirs(admin)
        assert (topic, 0) in before[str(src)]["partitions"]
        # Enough data that the copy takes several steps (1 MiB each).
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        for i in range(20000):
            p.produce(topic, value=b"%08d" % i + b"x" * 200, partition=0)
            if i % 1000 == 0:
                p.poll(0)
        assert p.flush(30) == 0
        stop = threading.Event()
        sent_live: list[int] = []
        worker = _produce_in_background(broker.bootstrap, topic, stop, sent_live)
        time.sleep(0.3)
        move()
        time.sleep(0.3)
        stop.set()
        worker.join(60)
        after = _log_dirs(admin)
        assert (topic, 0) in after[str(dst)]["partitions"] and (topic, 0) not in after[str(src)]["partitions"]
        assert not any(fut for d in after.values() for fut in (v[1] for v in d["partitions"].values()))
        assert not [e for e in src.iterdir() if e.name.startswith(f"{topic}-0")]
    finally:
        admin.close()
    assert sent_live, "the producer delivered nothing during the move"
    got = _consume_all(broker.bootstrap, topic, 20000 + len(sent_live))
    # Every acknowledged record once, in order (the live producer numbers from 0 again: rebase it).
    assert got[:20000] == list(range(20000))
    assert got[20000:] == sorted(sent_live) == list(range(len(sent_live)))


def test_describe_log_dirs_per_directory_kafka_python(kbroker_factory: Callable[..., KBroker], tmp_path: Path) -> None:
    broker, a, b = _two_dirs(kbroker_factory, tmp_path)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic("spread", 4, 1)])
        p = Producer({"bootstrap.servers": broker.bootstrap})
        p.produce("spread", b"v" * 100, partition=3)
        assert p.flush(10) == 0
        dirs = _log_dirs(admin)
    finally:
        admin.close()
    assert set(dirs) == {str(a), str(b)}
    assert [dirs[str(d)]["error"] for d in (a, b)] == [0, 0]
    by_dir = {d: sorted(p for _, p in dirs[str(d)]["partitions"]) for d in (a, b)}
    assert sorted(by_dir[a] + by_dir[b]) == [0, 1, 2, 3] and len(by_dir[a]) == len(by_dir[b]) == 2
    sizes = {tp[1]: size for d in dirs.values() for tp, (size, _) in d["partitions"].items()}
    assert sizes[3] > 0 and sizes[0] == 0
    # Each directory has its own meta.properties (same cluster, own directory id) and checkpoints.
    pa, pb = (a / "meta.properties").read_text(), (b / "meta.properties").read_text()
    cluster = [line for line in pa.splitlines() if line.startswith("cluster.id=")]
    assert cluster and cluster[0] in pb.splitlines()
    ids = {[line for line in t.splitlines() if line.startswith("directory.id=")][0] for t in (pa, pb)}
    assert len(ids) == 2
    assert (a / "__cluster_metadata-0").is_dir() and not (b / "__cluster_metadata-0").exists()


def test_move_with_kafka_python_under_load(kbroker_factory: Callable[..., KBroker], tmp_path: Path) -> None:
    broker, a, b = _two_dirs(kbroker_factory, tmp_path)

    def move() -> None:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            result = admin.alter_replica_log_dirs({TopicPartitionReplica("moving", 0, 1): str(b)})
            assert [e.errno for e in result.values()] == [0]
            deadline = time.monotonic() + 60
            while True:
                d = _log_dirs(admin)
                if ("moving", 0) in d[str(b)]["partitions"] and not d[str(b)]["partitions"][("moving", 0)][1] \
                        and ("moving", 0) not in d[str(a)]["partitions"]:
                    return
                assert time.monotonic() < deadline, d
                time.sleep(0.05)
        finally:
            admin.close()

    _move_under_load(broker, a, b, "moving", move)
    # The metadata log stays where it was.
    assert (a / "__cluster_metadata-0").is_dir()


def test_move_with_the_java_admin(kbroker_factory: Callable[..., KBroker], tmp_path: Path) -> None:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    broker, a, b = _two_dirs(kbroker_factory, tmp_path)

    def move() -> None:
        proc = run_java_main(str(ALTER_JAVA), [broker.bootstrap, "javamove", "0", "1", str(b)], timeout=120)
        lines = proc.stdout.splitlines()
        assert proc.returncode == 0 and lines[0] == "ALTERED", proc.stdout + proc.stderr
        assert lines[-1] == f"CURRENT {b}", proc.stdout

    _move_under_load(broker, a, b, "javamove", move)


def _pull(d: Path) -> None:
    """The disk goes away under the running broker (one atomic rename: the broker may be writing)."""
    d.rename(d.with_name(d.name + "-pulled"))


def _raw_produce(bootstrap: str, topic: str, partition: int) -> int:
    batch = bytes(build_batch([SimpleRecord(b"x")]))
    with RawKafkaClient(bootstrap) as c:
        resp = c.request(0, 9, pr.ProduceRequest(acks=1, timeout_ms=5000, topic_data=[
            pr.ProduceRequest.TopicProduceData(name=topic, partition_data=[
                pr.ProduceRequest.PartitionProduceData(index=partition, records=batch)])]))
    return int(resp.responses[0].partition_responses[0].error_code)


def test_a_removed_directory_takes_only_its_partitions_offline(kbroker_factory: Callable[..., KBroker],
                                                              tmp_path: Path) -> None:
    broker, a, b = _two_dirs(kbroker_factory, tmp_path, log_flush_offset_checkpoint_interval_ms=200)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic("split", 2, 1)])
        dirs = _log_dirs(admin)
        in_b = next(p for (_, p) in dirs[str(b)]["partitions"])
        in_a = 1 - in_b
        assert _raw_produce(broker.bootstrap, "split", in_b) == 0
        _pull(b)
        # Appends to the open (now unlinked) segment still succeed until the broker notices: the
        # periodic checkpoint write fails and takes the directory offline (Kafka's detection too).
        deadline = time.monotonic() + 30
        while _raw_produce(broker.bootstrap, "split", in_b) != ErrorCode.KAFKA_STORAGE_ERROR:
            assert time.monotonic() < deadline, "the removed directory never went offline"
            time.sleep(0.1)
        dirs = _log_dirs(admin)
        assert dirs[str(b)]["error"] == ErrorCode.KAFKA_STORAGE_ERROR
        assert dirs[str(b)]["partitions"] == {} and dirs[str(a)]["error"] == 0
        assert _raw_produce(broker.bootstrap, "split", in_a) == 0
        p = Producer({"bootstrap.servers": broker.bootstrap})
        p.produce("split", b"still-here", partition=in_a)
        assert p.flush(10) == 0
    finally:
        admin.close()
    assert broker.is_running()
    assert f"Partitions split-{in_b} are offline due to the failure of log directory {b}" in broker.log_text()
    # The SIGTERM at teardown must give exit 0 (the fixture checks).


def test_all_directories_failing_halts_the_broker(kbroker_factory: Callable[..., KBroker], tmp_path: Path) -> None:
    broker, a, b = _two_dirs(kbroker_factory, tmp_path, log_flush_offset_checkpoint_interval_ms=200)
    _pull(b)
    _pull(a)
    assert broker.proc is not None
    code = broker.proc.wait(30)
    assert code == 1
    assert "Shutdown broker because" in broker.log_text()


def test_kafka_log_dirs_tool_sees_both_dirs_and_the_failed_one(kbroker_factory: Callable[..., KBroker],
                                                               tmp_path: Path) -> None:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    broker, a, b = _two_dirs(kbroker_factory, tmp_path, log_flush_offset_checkpoint_interval_ms=200)

    def describe() -> dict[str, Any]:
        proc = run_java_main("kafka-log-dirs", ["--bootstrap-server", broker.bootstrap, "--describe"], timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        [only] = json.loads(proc.stdout.strip().splitlines()[-1])["brokers"]
        return {d["logDir"]: d for d in only["logDirs"]}

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic("tool", 2, 1)])
    finally:
        admin.close()
    before = describe()
    assert set(before) == {str(a), str(b)} and [before[str(d)]["error"] for d in (a, b)] == [None, None]
    assert sorted(p["partition"] for d in before.values() for p in d["partitions"]) == ["tool-0", "tool-1"]
    in_b = int(before[str(b)]["partitions"][0]["partition"].rsplit("-", 1)[1])
    _pull(b)
    deadline = time.monotonic() + 30
    while _raw_produce(broker.bootstrap, "tool", in_b) != ErrorCode.KAFKA_STORAGE_ERROR:
        assert time.monotonic() < deadline, "the removed directory never went offline"
        time.sleep(0.1)
    after = describe()
    assert "KafkaStorageException" in str(after[str(b)]["error"]) and after[str(b)]["partitions"] == []
    assert after[str(a)]["error"] is None and [p["partition"] for p in after[str(a)]["partitions"]] == [f"tool-{1 - in_b}"]
