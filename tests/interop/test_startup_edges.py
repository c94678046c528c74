"""Start-up edges with real kbroker processes (issue 19, findings 5, 6, 8, 9).

- A bad start-up input (a broker `log.*` key a topic rule rejects, a binary properties file, a truncated
  `__kbroker_metadata.json`, a garbage `meta.properties`) stops the broker with exit code 1 and one
  line naming the key or the file: no traceback, nothing written (no data dir created, the file left
  as it was). `log.retention.ms=-5` means "forever", as in Kafka (KafkaConfig.logRetentionTimeMillis).
- Recovery after kill -9 needs one descriptor per partition, like a clean start: N partitions come back
  under an RLIMIT_NOFILE that three descriptors per partition (the code before) exceeded.
- A full disk (a real, small tmpfs): produce answers KAFKA_STORAGE_ERROR and the broker says so once;
  creating `__consumer_offsets` there does not kill it (it did: SIGBUS on a preallocated index); after
  kill -9 it does not start on the still-full disk (a KRaft node writes its quorum state and metadata log
  before it serves, as Kafka's does: one error line, exit code 1); once there is room it starts with
  every acknowledged record and takes appends again.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.broker import KBroker, KBrokerError
from tests.support.tmpfs import fill, small_tmpfs, tmpfs_unavailable_reason

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is a test dependency")
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

LEGACY_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "legacy-0.1.0-datadir"

pytestmark = pytest.mark.interop


def failed_start(broker: KBroker) -> tuple[int, str]:
    """Run the broker command expecting it to refuse: (exit code, stderr)."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.run(broker.command(), cwd=broker.workdir, capture_output=True, text=True, timeout=60, env=env)
    return proc.returncode, proc.stderr


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("kbroker: error:")]


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=120, request_timeout=120).values():
        f.result()


def produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0, **conf: object) -> list[object]:
    """Produce and return each record's delivery error (None when acknowledged)."""
    errors: list[object] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **conf})
    for v in values:
        p.produce(topic, v, partition=partition, on_delivery=lambda err, _msg: errors.append(err))
    p.flush(60)
    return errors


def consume_all(bootstrap: str, topic: str, partition: int = 0, expect: int = 0, timeout: float = 30) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, partition, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < expect and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    return got


# --- configuration: one line naming the key, before anything is written ------------------------------

@pytest.mark.parametrize(("override", "key", "words"), [
    ("log.retention.ms=0", "log.retention.ms", "must be unlimited (-1) or, greater than or equal to 1"),
    ("log.segment.bytes=10", "log.segment.bytes", "Value must be at least 1048576"),
    ("log.roll.hours=0", "log.roll.hours", "Value must be at least 1"),
    ("log.retention.minutes=0", "log.retention.minutes", "must be unlimited (-1) or, greater than or equal to 1"),
])
def test_bad_log_key_is_named_and_nothing_is_written(tmp_path: Path, override: str, key: str, words: str) -> None:
    k, v = override.split("=")
    broker = KBroker(tmp_path, {k: v})
    code, err = failed_start(broker)
    assert code == 1
    lines = error_lines(err)
    assert len(lines) == 1 and f"configuration {key}:" in lines[0] and words in lines[0], err
    assert "Traceback" not in err
    assert not broker.log_dir.exists()  # refused before the data dir was created


@pytest.mark.parametrize("key", ["log.retention.ms", "log.retention.hours"])
def test_negative_log_retention_means_forever_as_in_kafka(tmp_path: Path, key: str) -> None:
    with KBroker(tmp_path, {key: "-5"}) as broker:
        create_topic(broker.bootstrap, "keep", 1)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        from confluent_kafka.admin import ConfigResource

        res = ConfigResource(ConfigResource.Type.TOPIC, "keep")
        entries = admin.describe_configs([res])[res].result()
        assert entries["retention.ms"].value == "-1"


def test_binary_properties_file_names_the_file(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_bytes(b"\x00\xff\xfe\x80binary\x01" * 10)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.run([sys.executable, "-m", "kbroker", "serve", str(props)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env=env)
    assert proc.returncode == 1
    lines = error_lines(proc.stderr)
    assert len(lines) == 1 and str(props) in lines[0] and "not a text properties file" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "data").exists()


def test_truncated_metadata_file_is_one_line_and_left_alone(tmp_path: Path) -> None:
    """A kbroker 0.1 data dir (its metadata still in `__kbroker_metadata.json`, migrated on the first
    start of this release) whose file was truncated: one line naming the file, nothing rewritten."""
    broker = KBroker(tmp_path)
    shutil.copytree(LEGACY_FIXTURE, broker.log_dir)
    meta = broker.log_dir / "__kbroker_metadata.json"
    whole = meta.read_bytes()
    meta.write_bytes(whole[: len(whole) // 2])
    code, err = failed_start(broker)
    assert code == 1
    lines = error_lines(err)
    assert len(lines) == 1 and str(meta) in lines[0] and "not valid JSON" in lines[0], err
    assert "Traceback" not in err
    assert meta.read_bytes() == whole[: len(whole) // 2]
    assert not (broker.log_dir / "__cluster_metadata-0").exists()  # nothing written
    meta.write_bytes(whole)  # restored from a backup: the topics are back
    with broker:
        md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=30)
        assert len(md.topics["orders"].partitions) == 3


def test_garbage_meta_properties_refuses_like_kafka(tmp_path: Path) -> None:
    broker = KBroker(tmp_path)
    broker.start()
    broker.stop()
    meta = broker.log_dir / "meta.properties"
    garbage = bytes(range(256)) * 4
    meta.write_bytes(garbage)
    code, err = failed_start(broker)
    assert code == 1
    lines = error_lines(err)
    assert len(lines) == 1 and "node ID not found" in lines[0] and str(meta) in lines[0], err
    assert "Traceback" not in err and meta.read_bytes() == garbage  # not rewritten behind the operator's back


# --- descriptors: recovery after kill -9 needs what a clean start needs ------------------------------

PARTITIONS = 300
NOFILE = 512  # 300 partitions at three descriptors each (the code before) do not fit; at one they do


def open_files(pid: int, log_dir: Path) -> dict[str, int]:
    """The broker's descriptors by kind: segment .log files, index files, everything else."""
    kinds = {"log": 0, "index": 0, "other": 0}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        in_data = target.startswith(str(log_dir))
        kind = "log" if in_data and target.endswith(".log") else "index" if target.endswith(("index", ".timeindex")) else "other"
        kinds[kind] += 1
    return kinds


class LimitedKBroker(KBroker):
    """The broker with RLIMIT_NOFILE set in the child (preexec_fn), as a production box would have it."""

    nofile: int | None = None

    def start(self, timeout: float = 30.0) -> KBroker:
        if self.nofile is None:
            return super().start(timeout)
        real_popen = subprocess.Popen
        limit = self.nofile

        def popen(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
            import resource

            kwargs["preexec_fn"] = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
            return real_popen(*args, **kwargs)  # type: ignore[call-overload,no-any-return]

        subprocess.Popen = popen  # type: ignore[assignment,misc]
        try:
            return super().start(timeout)
        finally:
            subprocess.Popen = real_popen  # type: ignore[misc]


def test_recovery_after_kill_needs_one_descriptor_per_partition(tmp_path: Path) -> None:
    broker = LimitedKBroker(tmp_path)
    broker.start()
    try:
        create_topic(broker.bootstrap, "many", PARTITIONS)
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
        for i in range(PARTITIONS):
            p.produce("many", b"v%d" % i, partition=i)
        assert p.flush(60) == 0
        broker.kill()
        broker.nofile = NOFILE
        broker.start(120)
        fds = open_files(broker.pid, broker.log_dir)
        # One .log descriptor per partition, plus the controller's __cluster_metadata-0 segment.
        assert fds["log"] == PARTITIONS + 1 and fds["index"] == 0 and fds["other"] < 64, fds
        assert consume_all(broker.bootstrap, "many", PARTITIONS - 1, expect=1) == [b"v%d" % (PARTITIONS - 1)]
        # Appends map the indexes again: still no descriptor per mapping.
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
        for i in range(PARTITIONS):
            p.produce("many", b"w%d" % i, partition=i)
        assert p.flush(60) == 0
        fds = open_files(broker.pid, broker.log_dir)
        partitions = sum(1 for d in broker.log_dir.iterdir() if d.is_dir())  # plus __consumer_offsets now
        assert fds["log"] == partitions and fds["index"] == 0, fds
    finally:
        broker.stop()


# --- a full disk ------------------------------------------------------------------------------------

@pytest.mark.skipif(tmpfs_unavailable_reason() is not None, reason=str(tmpfs_unavailable_reason()))
def test_full_disk_storage_error_no_crash_and_restart(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "mnt", 24 * 1024 * 1024) as mnt:
        broker = KBroker(tmp_path / "work", {"log.dirs": str(mnt / "data"), "offsets.topic.num.partitions": "5"})
        broker.start()
        try:
            create_topic(broker.bootstrap, "t", 1)
            values = [b"record-%d" % i for i in range(10)]
            assert produce(broker.bootstrap, "t", values) == [None] * 10
            filler = fill(mnt)
            errs = produce(broker.bootstrap, "t", [b"x" * 2000] * 20, retries=0, **{"message.timeout.ms": 10000})
            codes = {e.code() for e in errs if e is not None}  # type: ignore[attr-defined]
            assert KafkaError.KAFKA_STORAGE_ERROR in codes, errs
            # A consumer group creates __consumer_offsets on the full disk (the SIGBUS of issue 19).
            c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g", "session.timeout.ms": 6000})
            c.subscribe(["t"])
            deadline = time.monotonic() + 8
            while time.monotonic() < deadline:
                c.poll(0.5)
            c.close()
            assert broker.is_running(), broker.log_text()
            log = broker.log_text()
            assert log.count("Error while appending records to t-0") == 1, log
            assert consume_all(broker.bootstrap, "t", expect=10) == values

            broker.kill()
            # On the still-full disk the node cannot start, as Kafka's cannot: a KRaft node writes its
            # quorum-state (a new epoch) before it serves, and Kafka 4.3's FileQuorumStateStore turns the
            # IOException into a fatal start-up error. kbroker says so in one line and writes nothing.
            with pytest.raises(KBrokerError):
                broker.start(60)
            failed = broker.log_text()
            assert "kbroker: error: Cannot start: writing" in failed and "No space left on device" in failed, failed
            assert "quorum-state" in failed and "Traceback" not in failed, failed
            assert not (mnt / "data" / "__cluster_metadata-0" / "quorum-state.tmp").exists()
            os.unlink(filler)
            broker.start(60)  # room again: every acknowledged record is there
            assert consume_all(broker.bootstrap, "t", expect=10) == values
            assert produce(broker.bootstrap, "t", [b"after"]) == [None]
            assert consume_all(broker.bootstrap, "t", expect=11)[-1] == b"after"
        except KBrokerError:
            raise
        finally:
            broker.stop()
            print(json.dumps({"log": broker.log_text()[-3000:]}))
