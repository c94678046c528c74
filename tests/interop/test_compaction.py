"""Log compaction against a real kbroker process with confluent-kafka (librdkafka) clients.

- A compacted topic with 1 MiB segments (the smallest Kafka 4.x allows, KIP-1030) gets many updates
  to a few keys plus tombstones; once the cleaner has run, a consumer reading from the beginning
  sees exactly the latest value of every key (and the recent tombstones), offsets ascending, and
  the partition's files on disk are smaller.
- Committed group offsets survive a clean of ``__consumer_offsets`` and a broker restart.
- A produce of a keyless record to a compacted topic fails with INVALID_RECORD, as in Kafka.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.broker import KBroker

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is a test dependency")
Producer = confluent_kafka.Producer
Consumer = confluent_kafka.Consumer
KafkaException = confluent_kafka.KafkaException
TopicPartition = confluent_kafka.TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402 - after the importorskip

pytestmark = pytest.mark.interop

TOPIC = "compacted"
KEYS = 5
UPDATES = 400
VALUE_SIZE = 10_000  # 400 x 10 KB = 4 MB: four 1 MiB segments
CLEANER = {"log.cleaner.backoff.ms": "200", "num.partitions": "1", "offsets.topic.num.partitions": "1"}


def _log_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.glob("*.log"))


def _wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _cleaner_checkpoint(broker: KBroker) -> dict[str, int]:
    p = broker.log_dir / "cleaner-offset-checkpoint"
    if not p.exists():
        return {}
    lines = p.read_text().splitlines()[2:]
    return {f"{t}-{n}": int(o) for t, n, o in (line.split() for line in lines if line.strip())}


def _consume_all(bootstrap: str, topic: str, end: int) -> list[tuple[int, bytes | None, bytes | None]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[int, bytes | None, bytes | None]] = []
    deadline = time.monotonic() + 60
    done = False
    while not done and time.monotonic() < deadline:
        for m in c.consume(num_messages=500, timeout=0.5):
            if m.error():
                if m.error().code() == confluent_kafka.KafkaError._PARTITION_EOF and m.offset() >= end:
                    done = True
                continue
            out.append((m.offset(), m.key(), m.value()))
    c.close()
    return out


def _dir_bytes(d: Path) -> int:
    """Disk space used by every file of the partition (blocks: preallocated indexes are sparse)."""
    return sum(p.stat().st_blocks * 512 for p in d.iterdir() if p.is_file())


def test_compacted_topic_keeps_latest_value_per_key(kbroker_factory: Callable[..., KBroker]) -> None:
    # log.segment.delete.delay.ms=0: replaced segments are unlinked at once, so the directory shrinks.
    broker = kbroker_factory({**CLEANER, "log.segment.delete.delay.ms": "0"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    # segment.ms lets the test roll the last updates out of the active segment (which is never cleaned).
    # min.compaction.lag.ms: no segment is cleaned before the test has looked at the uncleaned log (on a
    # loaded machine the producer can take longer than the cleaner's 200 ms backoff).
    fut = admin.create_topics([NewTopic(TOPIC, 1, 1, config={"cleanup.policy": "compact", "segment.ms": "3000",
                                                             "segment.bytes": "1048576",
                                                             "min.compaction.lag.ms": "8000"})])[TOPIC]
    fut.result(30)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "enable.idempotence": True})
    latest: dict[bytes, tuple[int, bytes | None]] = {}

    def on_delivery(err: object, msg: object) -> None:
        assert err is None, err
        latest[msg.key()] = (msg.offset(), msg.value())  # type: ignore[attr-defined]

    for i in range(UPDATES):
        key = b"key-%d" % (i % KEYS)
        p.produce(TOPIC, key=key, value=(b"%06d" % i) * (VALUE_SIZE // 6), on_delivery=on_delivery)
        p.poll(0)
    p.produce(TOPIC, key=b"key-0", value=None, on_delivery=on_delivery)  # a tombstone
    p.produce(TOPIC, key=b"key-1", value=b"after", on_delivery=on_delivery)
    assert p.flush(60) == 0
    time.sleep(3.2)  # past segment.ms: the next record rolls a new active segment
    p.produce(TOPIC, key=b"roller", value=b"r", on_delivery=on_delivery)
    assert p.flush(60) == 0
    roll_offset = latest[b"roller"][0]
    end = roll_offset + 1
    d = broker.log_dir / f"{TOPIC}-0"
    before = _log_bytes(d)
    dir_before = _dir_bytes(d)
    assert len(list(d.glob("*.log"))) >= 4
    _wait_for(lambda: _cleaner_checkpoint(broker).get(f"{TOPIC}-0", 0) == roll_offset, 60,
              "the cleaner to clean everything below the active segment")
    _wait_for(lambda: _log_bytes(d) < before // 2, 30, "the cleaned segments to replace the old ones")
    got = _consume_all(broker.bootstrap, TOPIC, end)
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    # Exactly the latest record of every key remains, key-0's being its recent tombstone.
    assert len(got) == KEYS + 1
    by_key = {k: (o, v) for o, k, v in got}
    assert by_key == latest
    assert by_key[b"key-0"][1] is None and by_key[b"key-1"][1] == b"after"
    cp = _cleaner_checkpoint(broker)[f"{TOPIC}-0"]
    after = _log_bytes(d)
    assert after < before // 2, (before, after)
    assert not list(d.glob("*.deleted")) and _dir_bytes(d) < dir_before // 2

    # Restart: the cleaned log reads the same, and the cleaner checkpoint survives.
    assert broker.stop() == 0
    broker.start()
    assert _consume_all(broker.bootstrap, TOPIC, end) == got
    assert _cleaner_checkpoint(broker)[f"{TOPIC}-0"] >= cp


def test_keyless_record_refused_by_compacted_topic(kbroker_factory: Callable[..., KBroker]) -> None:
    broker = kbroker_factory(CLEANER)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("nokeys", 1, 1, config={"cleanup.policy": "compact"})])["nokeys"].result(30)
    p = Producer({"bootstrap.servers": broker.bootstrap, "retries": 0})
    errors: list[object] = []
    p.produce("nokeys", value=b"no key", on_delivery=lambda err, msg: errors.append(err))
    p.flush(30)
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() == confluent_kafka.KafkaError.INVALID_RECORD  # type: ignore[attr-defined]


def _committed(bootstrap: str) -> TopicPartition:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "g1", "enable.auto.commit": False})
    try:
        return c.committed([TopicPartition("input", 0)], timeout=30)[0]
    finally:
        c.close()


def test_committed_offsets_survive_consumer_offsets_cleaning(kbroker_factory: Callable[..., KBroker]) -> None:
    """Many commits with large metadata fill __consumer_offsets past 1 MiB segments while the cleaner
    is off; restarted with it on, the cleaner compacts the partition, and the group's committed
    offset (and metadata) is the last one committed, before and after another restart."""
    broker = kbroker_factory({**CLEANER, "offsets.topic.segment.bytes": "1048576", "log.cleaner.enable": "false"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("input", 1, 1)])["input"].result(30)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g1", "enable.auto.commit": False})
    meta = "m" * 4000  # offset.metadata.max.bytes is 4096: each commit record is ~4 KB
    commits = 700
    for i in range(commits):
        c.commit(offsets=[TopicPartition("input", 0, i + 1, meta)], asynchronous=False)
    c.close()
    d = broker.log_dir / "__consumer_offsets-0"
    before = _log_bytes(d)
    assert before > 2 * 1048576
    assert broker.stop() == 0
    assert _cleaner_checkpoint(broker) == {}  # disabled: nothing cleaned

    broker.overrides["log.cleaner.enable"] = "true"
    broker.start()
    _wait_for(lambda: _cleaner_checkpoint(broker).get("__consumer_offsets-0", 0) > 0, 60,
              "the cleaner to compact __consumer_offsets")
    _wait_for(lambda: _log_bytes(d) < before // 2, 30, "the cleaned __consumer_offsets segments")
    after = _log_bytes(d)
    print(f"__consumer_offsets-0: {before} bytes in .log files before cleaning, {after} after")
    tp = _committed(broker.bootstrap)
    assert (tp.offset, tp.metadata) == (commits, meta)
    assert broker.stop() == 0
    broker.start()
    tp = _committed(broker.bootstrap)
    assert (tp.offset, tp.metadata) == (commits, meta)
