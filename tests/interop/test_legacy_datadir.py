"""A data dir written by kbroker 0.1.0 (metadata in `__kbroker_metadata.json`) starts under the
controller and keeps its topics, topic ids, configs and records; the JSON image becomes records in
`__cluster_metadata` once, and the file is retired (tests/fixtures/legacy-0.1.0-datadir.README.md).
"""

from __future__ import annotations

import base64
import json
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from kbroker.controller.metadata_log import ClusterMetadataLog
from kbroker.protocol.metadata_records import ProducerIdsRecord
from tests.support.broker import KBroker

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is a test dependency")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402 - after the importorskip
from confluent_kafka.admin import AdminClient, ConfigResource  # noqa: E402

pytestmark = pytest.mark.interop

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "legacy-0.1.0-datadir"


def _read_all(bootstrap: str, topic: str, partition: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "legacy-check", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, partition, 0)])
        out: list[bytes] = []
        _, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        while len(out) < high:
            msg = c.poll(5)
            assert msg is not None, f"timed out at {len(out)}/{high} on {topic}-{partition}"
            assert msg.error() is None, msg.error()
            out.append(msg.value())
        return out
    finally:
        c.close()


def test_legacy_datadir_starts_and_keeps_topics_ids_configs(kbroker_factory: Callable[..., KBroker]) -> None:
    # The fixture's records carry the time they were written and "orders" has retention.ms of one
    # day, so once the fixture was a day old a retention pass at start deleted them (the test support
    # runs retention at once: log.initial.task.delay.ms=0). Retention is not what this test checks.
    broker = kbroker_factory({"log.initial.task.delay.ms": "3600000"}, start=False)
    shutil.copytree(FIXTURE, broker.log_dir)
    legacy = json.loads((FIXTURE / "__kbroker_metadata.json").read_text())
    ids = {t["name"]: uuid.UUID(t["topic_id"]) for t in legacy["topics"]}
    broker.start()
    log = broker.log_text()
    assert "Migrated 2 topics from" in log, log
    assert not (broker.log_dir / "__kbroker_metadata.json").exists()
    assert (broker.log_dir / "__kbroker_metadata.json.migrated").exists()
    assert (broker.log_dir / "__cluster_metadata-0" / "00000000000000000000.log").stat().st_size > 0

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    md = admin.list_topics(timeout=10)
    assert {"orders", "events"} <= set(md.topics)
    assert len(md.topics["orders"].partitions) == 3 and len(md.topics["events"].partitions) == 1
    described = admin.describe_topics(
        confluent_kafka.TopicCollection(["orders", "events"]))  # ids come from the image
    for name, future in described.items():
        # librdkafka prints the id in standard base64 (Kafka's tools use the URL-safe alphabet).
        assert uuid.UUID(bytes=base64.b64decode(str(future.result().topic_id) + "==")) == ids[name]
    configs = admin.describe_configs([ConfigResource("TOPIC", "orders")])
    entries = next(iter(configs.values())).result()
    assert entries["retention.ms"].value == "86400000" and entries["cleanup.policy"].value == "delete"
    broker_entries = next(iter(admin.describe_configs([ConfigResource("BROKER", "1")]).values())).result()
    assert broker_entries["log.retention.ms"].value == "604800001"
    assert broker_entries["log.cleaner.delete.retention.ms"].value == "86400001"

    # The records written by 0.1.0 are still there (recovery ran: the fixture was not shut down cleanly).
    values = [v for p in range(3) for v in _read_all(broker.bootstrap, "orders", p)]
    assert sorted(values) == sorted(b"v%d" % i for i in range(30))
    assert _read_all(broker.bootstrap, "events", 0) == [b"hello"]

    # Producer ids continue after the block 0.1.0 had reserved (0-999): none is handed out twice.
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    p.produce("events", value=b"after")
    assert p.flush(10) == 0
    migrated = broker.log_dir / "__cluster_metadata-0" / "00000000000000000000.log"
    broker.stop()
    # The migration carried the old block end over; the producer above got the next block.
    metadata_log = ClusterMetadataLog(broker.log_dir, lambda: 0)
    try:
        next_ids = [r.next_producer_id for batch in metadata_log.read_all() for r in batch.records
                    if isinstance(r, ProducerIdsRecord)]
    finally:
        metadata_log.close()
    assert next_ids == [1000, 2000]

    # A restart replays __cluster_metadata and does not migrate again.
    size = migrated.stat().st_size
    broker.start()
    assert broker.log_text().count("Migrated 2 topics from") == 0
    assert set(AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10).topics) >= {
        "orders", "events"}
    assert _read_all(broker.bootstrap, "events", 0) == [b"hello", b"after"]
    assert migrated.stat().st_size > size  # the restart registered the broker again
