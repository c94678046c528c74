"""Helpers for replication tests on a KRaft cluster of Kafka's controllers with kbroker and Kafka brokers.

Owns: a background idempotent acks=all producer that records what was acknowledged (value, partition,
offset), reading a partition back in full, waiting for a partition's leader/ISR (from Metadata, as
clients see it), `kafka-topics --describe` parsed, and the record batches of a replica's on-disk log
(kbroker and Kafka both write Kafka's segment format, so a follower's batches are the leader's bytes).
"""

from __future__ import annotations

import re
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from tests.support.java import run_java_main


@dataclass(frozen=True)
class PartitionState:
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


def _ids(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def describe(bootstrap: str, topics: Iterable[str]) -> dict[tuple[str, int], PartitionState]:
    """`kafka-topics --describe`, parsed: (topic, partition) -> leader, replicas, ISR."""
    proc = run_java_main("kafka-topics", ["--bootstrap-server", bootstrap, "--describe", "--topic", ",".join(topics)],
                         timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out: dict[tuple[str, int], PartitionState] = {}
    for line in proc.stdout.splitlines():
        if "Partition:" not in line:
            continue
        fields = dict(re.findall(r"(\w+): ?([^\t]*)", line))
        leader = fields["Leader"].strip()
        out[(fields["Topic"].strip(), int(fields["Partition"]))] = PartitionState(
            int(leader) if leader.lstrip("-").isdigit() else -1, _ids(fields["Replicas"]), _ids(fields.get("Isr", "")))
    return out


def metadata_state(bootstrap: str, topic: str, partition: int = 0) -> PartitionState | None:
    from confluent_kafka.admin import AdminClient

    try:
        md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    except Exception:  # noqa: BLE001 - a broker going down mid-request: ask again
        return None
    t = md.topics.get(topic)
    if t is None or t.error is not None or partition not in t.partitions:
        return None
    p = t.partitions[partition]
    return PartitionState(p.leader, tuple(p.replicas), tuple(sorted(p.isrs)))


def wait_partition(bootstraps: Callable[[], list[str]], topic: str, check: Callable[[PartitionState], bool],
                   timeout: float = 60, what: str = "") -> PartitionState:
    deadline = time.monotonic() + timeout
    last: PartitionState | None = None
    while True:
        for b in bootstraps():
            state = metadata_state(b, topic)
            if state is not None:
                last = state
                if check(state):
                    return state
        assert time.monotonic() < deadline, f"{topic}: {what} not reached in {timeout}s, last {last}"
        time.sleep(0.5)


@dataclass
class Acked:
    topic: str
    partition: int
    offset: int
    value: bytes


@dataclass
class BackgroundProducer:
    """An idempotent acks=all producer (librdkafka) sending numbered values to partition 0 of each topic
    until stopped; every delivery report is kept (acknowledged or failed)."""

    bootstrap: str
    topics: list[str]
    interval: float = 0.01
    acked: list[Acked] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    fatal: list[str] = field(default_factory=list)
    run: str = field(default_factory=lambda: f"{time.time_ns() % 10**9:09d}")
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> BackgroundProducer:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        from confluent_kafka import KafkaError, Producer

        def on_error(err: KafkaError) -> None:
            if err.fatal():
                self.fatal.append(str(err))

        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                             "linger.ms": 5, "message.timeout.ms": 120000, "error_cb": on_error,
                             "topic.metadata.refresh.interval.ms": 1000})
        seq = 0

        def report(err: object, msg: object) -> None:
            if err is not None:
                self.failed.append(str(err))
            else:
                self.acked.append(Acked(msg.topic(), msg.partition(), msg.offset(), msg.value()))  # type: ignore[attr-defined]

        while not self._stop.is_set() and not self.fatal:
            for t in self.topics:
                producer.produce(t, value=f"{self.run}-{t}-{seq:08d}".encode(), partition=0, on_delivery=report)
            seq += 1
            producer.poll(self.interval)
        producer.flush(120)
        self.sent = seq

    def acked_count(self) -> int:
        return len(self.acked)

    def wait_acked(self, more: int, timeout: float = 60) -> None:
        target = len(self.acked) + more
        deadline = time.monotonic() + timeout
        while len(self.acked) < target:
            assert not self.fatal, self.fatal
            assert time.monotonic() < deadline, f"only {len(self.acked)} of {target} acknowledged"
            time.sleep(0.2)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(180)


def read_partition(bootstrap: str, topic: str, partition: int = 0, timeout: float = 60) -> list[tuple[int, bytes]]:
    """Every record of the partition from offset 0 up to its high watermark, as (offset, value)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_uncommitted"})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
        consumer.assign([TopicPartition(topic, partition, 0)])
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + timeout
        while (not got or got[-1][0] < high - 1) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                offset = msg.offset()
                assert offset is not None  # a record, not an event
                got.append((offset, cast(bytes, msg.value())))  # None for a tombstone: the tests write none
        return got
    finally:
        consumer.close()


@dataclass(frozen=True)
class Batch:
    base_offset: int
    leader_epoch: int
    last_offset: int
    raw: bytes


def log_batches(partition_dir: Path) -> list[Batch]:
    """The record batches of a replica's log (every segment, in order) as stored on disk."""
    batches: list[Batch] = []
    for seg in sorted(partition_dir.glob("*.log")):
        data = seg.read_bytes()
        pos = 0
        while pos + 12 <= len(data):
            base, length = struct.unpack_from(">qi", data, pos)
            if length <= 0 or pos + 12 + length > len(data):
                break
            epoch = struct.unpack_from(">i", data, pos + 12)[0]
            last_delta = struct.unpack_from(">i", data, pos + 23)[0]
            batches.append(Batch(base, epoch, base + last_delta, data[pos:pos + 12 + length]))
            pos += 12 + length
    return batches


def epoch_checkpoint(partition_dir: Path) -> list[tuple[int, int]]:
    """leader-epoch-checkpoint's (epoch, start offset) entries."""
    lines = (partition_dir / "leader-epoch-checkpoint").read_text().split("\n")
    n = int(lines[1])
    return [(int(a), int(b)) for a, b in (line.split() for line in lines[2:2 + n])]
