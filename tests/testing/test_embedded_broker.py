"""kbroker.testing: the embedded broker API, driven with real clients (confluent-kafka, kafka-python)."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from kbroker.testing import BrokerStartError, KafkaBroker, TopicSpec, start_broker

REPO_ROOT = Path(__file__).resolve().parents[2]


def _partitions(bootstrap: str) -> dict[str, int]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return {name: len(t.partitions) for name, t in md.topics.items()}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # the process may be reaped between the signal and the read
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in status


def test_topics_created_up_front_and_overrides_as_keywords() -> None:
    with start_broker(["orders", TopicSpec("events", partitions=3, configs={"cleanup.policy": "compact"})],
                      num_partitions=2, auto_create_topics_enable=True) as broker:
        assert broker.bootstrap_servers.startswith("127.0.0.1:") and broker.port > 0
        topics = _partitions(broker.bootstrap_servers)
        assert topics["orders"] == 2 and topics["events"] == 3  # orders took num.partitions=2
        broker.create_topics("later", TopicSpec("later4", 4))
        topics = _partitions(broker.bootstrap_servers)
        assert topics["later"] == 2 and topics["later4"] == 4
        p = Producer({"bootstrap.servers": broker.bootstrap_servers})
        p.produce("orders", b"v", partition=1)
        assert p.flush(20) == 0
        c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "g"})
        c.assign([TopicPartition("orders", 1, 0)])
        msgs = c.consume(1, timeout=20)
        c.close()
        assert [m.value() for m in msgs] == [b"v"]
        workdir = broker.workdir
        assert (workdir / "data" / "meta.properties").exists()
    assert not workdir.exists()  # its temporary data dir is gone after stop


def test_bad_config_is_a_clear_error() -> None:
    with pytest.raises(BrokerStartError, match="Invalid value zero for configuration num.partitions"):
        KafkaBroker(num_partitions="zero").start()
    with pytest.raises(BrokerStartError, match="cannot create topics"):
        KafkaBroker([TopicSpec("bad/name")]).start()


def test_kill_and_restart_on_the_same_data_dir(tmp_path: Path) -> None:
    broker = KafkaBroker(["t"], data_dir=tmp_path)
    broker.start()
    try:
        p = Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all"})
        for i in range(5):
            p.produce("t", str(i).encode())
        assert p.flush(20) == 0
        broker.kill()
        broker.start()  # a new port, the same data: the log recovered
        c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "g"})
        c.assign([TopicPartition("t", 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < 5 and time.monotonic() < deadline:
            got += [m.value() for m in c.consume(5, timeout=1) if not m.error()]
        c.close()
        assert got == [str(i).encode() for i in range(5)]
    finally:
        broker.stop()
    assert "Embedded kbroker" in (tmp_path / "kbroker.log").read_text()  # a given data_dir is kept


def test_sigterm_is_a_clean_shutdown(tmp_path: Path) -> None:
    broker = KafkaBroker(data_dir=tmp_path).start()
    pid = broker.pid
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)
    broker.stop()  # the broker is gone already: stop() only closes its side
    assert "shut down cleanly" in (tmp_path / "kbroker.log").read_text()
    assert (tmp_path / "data" / ".kafka_cleanshutdown").exists()


def test_json_logs_and_log_level(tmp_path: Path) -> None:
    with start_broker(data_dir=tmp_path, json_logs=True, log_level="WARN", log_retention_hour=1):
        pass
    lines = [json.loads(x) for x in (tmp_path / "kbroker.log").read_text().splitlines() if x.strip()]
    assert lines and all(x["log.level"] in ("WARN", "ERROR") for x in lines)
    assert any("did you mean 'log.retention.hours'" in x["message"] for x in lines)


def test_broker_stops_when_the_test_process_dies(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import sys, time
        from kbroker.testing import KafkaBroker
        b = KafkaBroker(data_dir=sys.argv[1]).start()
        print(b.pid, flush=True)
        time.sleep(60)
        """
    )
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                            env=env)
    try:
        assert proc.stdout is not None
        pid = int(proc.stdout.readline())
        assert _alive(pid)
        proc.send_signal(signal.SIGKILL)  # no clean-up code of the test process runs
        proc.wait()
        deadline = time.monotonic() + 20
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid)
        assert "shut down cleanly" in (tmp_path / "kbroker.log").read_text()
    finally:
        proc.kill()
        proc.wait()


def test_start_time_median_of_20() -> None:
    KafkaBroker().start().stop()  # the zygote is up (the first broker of a session pays its imports)
    times = []
    for _ in range(20):
        t = time.perf_counter()
        broker = KafkaBroker(["t"]).start()
        times.append(time.perf_counter() - t)
        broker.stop()
    median = statistics.median(times)
    print(f"kbroker.testing start (broker serving, topic created): median of 20 = {median * 1000:.0f} ms, "
          f"max {max(times) * 1000:.0f} ms")
    assert median < 0.8  # "well under a second"; about 0.07 s on an idle 2-core machine
