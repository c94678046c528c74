"""Crash and restart: kill -9 a kbroker under produce load, restart it on the same data, and read back
every acknowledged record at the offset it was acknowledged with (confluent-kafka, acks=all).

Also: a clean SIGTERM restart keeps everything and leaves the clean-shutdown marker Kafka writes, and
the broker's periodic tasks (retention, offset checkpoints) run on their configured intervals.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from tests.support.broker import KBroker

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is a test dependency")
Producer = confluent_kafka.Producer
Consumer = confluent_kafka.Consumer
TopicPartition = confluent_kafka.TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402 - after the importorskip

pytestmark = pytest.mark.interop

TOPIC = "crash-test"
PARTITIONS = 3


class LoadProducer:
    """Produces numbered records as fast as it can and remembers every acknowledged (partition, offset)."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 60000,
                "reconnect.backoff.max.ms": 500,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        self.acked: dict[tuple[int, int], bytes] = {}
        self.failed = 0
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err: object, msg: object) -> None:
        if err is not None:
            self.failed += 1
            return
        key = (msg.partition(), msg.offset())  # type: ignore[attr-defined]
        assert key not in self.acked, f"offset {key} acknowledged twice"
        self.acked[key] = msg.value()  # type: ignore[attr-defined]

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.producer.produce(
                    TOPIC,
                    value=b"record-%d" % self.sent,
                    partition=self.sent % PARTITIONS,
                    on_delivery=self._on_delivery,
                )
                self.sent += 1
            except BufferError:
                pass
            self.producer.poll(0.001 if self.sent % 100 == 0 else 0)

    def start(self) -> None:
        self._thread.start()

    def stop(self, flush_timeout: float) -> None:
        self._stop.set()
        self._thread.join(30)
        self.producer.flush(flush_timeout)


def _read_partition(bootstrap: str, partition: int, end_offset: int) -> dict[int, bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "restart-check",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(TOPIC, partition, 0)])
    records: dict[int, bytes] = {}
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            for msg in consumer.consume(1000, 1.0):
                if msg.error():
                    if msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                        if msg.offset() >= end_offset:
                            return records
                        continue
                    raise AssertionError(f"consume error: {msg.error()}")
                records[msg.offset()] = msg.value()
    finally:
        consumer.close()
    raise AssertionError(f"partition {partition}: read only up to {max(records, default=-1)} of {end_offset}")


def _create_topic(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC]
    fut.result(30)


def _check_all_acked_readable(bootstrap: str, acked: dict[tuple[int, int], bytes]) -> None:
    for p in range(PARTITIONS):
        offsets = [o for (pp, o) in acked if pp == p]
        if not offsets:
            continue
        records = _read_partition(bootstrap, p, max(offsets) + 1)
        missing = [o for o in offsets if records.get(o) != acked[(p, o)]]
        assert not missing, (
            f"partition {p}: {len(missing)} acknowledged records not readable, e.g. {missing[:5]}"
        )


def test_kill_9_under_produce_load_loses_no_acknowledged_record(
    kbroker_factory: Callable[..., KBroker],
) -> None:
    broker = kbroker_factory()
    _create_topic(broker.bootstrap)
    load = LoadProducer(broker.bootstrap)
    load.start()
    deadline = time.monotonic() + 30
    while len(load.acked) < 3000 and time.monotonic() < deadline:
        time.sleep(0.05)
    acked_before_kill = len(load.acked)
    assert acked_before_kill > 0, "no record was acknowledged before the crash"
    broker.kill()  # SIGKILL mid-load: nothing flushed, no checkpoints, no clean-shutdown marker
    time.sleep(0.5)
    broker.start()
    time.sleep(1.0)  # the producer reconnects and delivers what it still holds
    load.stop(flush_timeout=60)
    assert len(load.acked) >= acked_before_kill
    print(
        f"acknowledged before kill -9: {acked_before_kill}, in total: {len(load.acked)}, "
        f"sent: {load.sent}, delivery failures: {load.failed}"
    )
    _check_all_acked_readable(broker.bootstrap, load.acked)
    # Recovery happened (no clean-shutdown marker after a kill -9) and the new run serves appends.
    assert "kbroker started" in broker.log_text()


def test_clean_restart_keeps_every_record(kbroker_factory: Callable[..., KBroker]) -> None:
    broker = kbroker_factory()
    _create_topic(broker.bootstrap)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    acked: dict[tuple[int, int], bytes] = {}

    def on_delivery(err: object, msg: object) -> None:
        assert err is None, err
        acked[(msg.partition(), msg.offset())] = msg.value()  # type: ignore[attr-defined]

    for i in range(2000):
        producer.produce(TOPIC, value=b"v%d" % i, partition=i % PARTITIONS, on_delivery=on_delivery)
    producer.flush(30)
    assert len(acked) == 2000
    assert broker.stop() == 0
    assert (broker.log_dir / ".kafka_cleanshutdown").exists()
    broker.start()
    _check_all_acked_readable(broker.bootstrap, acked)


def test_periodic_retention_and_checkpoints_run(kbroker_factory: Callable[..., KBroker]) -> None:
    # The broker's timers: retention every log.retention.check.interval.ms, checkpoints every
    # log.flush.offset.checkpoint.interval.ms (the fixture sets log.initial.task.delay.ms=0).
    broker = kbroker_factory(
        {"log.retention.check.interval.ms": "200", "log.flush.offset.checkpoint.interval.ms": "200"}
    )
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("short-lived", 1, 1, config={"retention.ms": "500", "segment.ms": "100"})])[
        "short-lived"
    ].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for i in range(3):  # three segments: segment.ms rolls the active segment on the next append
        producer.produce("short-lived", value=b"r%d" % i, partition=0)
        producer.flush(30)
        time.sleep(0.3)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "wm"})
    try:
        deadline = time.monotonic() + 30
        low, high = consumer.get_watermark_offsets(TopicPartition("short-lived", 0), timeout=10)
        while low == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
            low, high = consumer.get_watermark_offsets(TopicPartition("short-lived", 0), timeout=10)
        assert high == 3 and low > 0, f"retention did not run: low={low} high={high}"
    finally:
        consumer.close()
    checkpoint = (broker.log_dir / "recovery-point-offset-checkpoint").read_text()
    assert "short-lived 0 " in checkpoint, checkpoint
