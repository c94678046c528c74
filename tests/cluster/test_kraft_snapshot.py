"""A kbroker broker that joins after the Kafka controller has trimmed its metadata log loads the
controller's snapshot (FetchSnapshot), as a Kafka observer does, and keeps it across a restart.

Slow: Kafka's controller deletes metadata log segments behind a snapshot on its own cleaning
schedule (about a minute after start here, even with second-long retention settings).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.kafka_cluster import KafkaCluster, cluster_unavailable_reason

pytestmark = [pytest.mark.interop, pytest.mark.java, pytest.mark.slow]

# Snapshot after every record, roll and expire metadata segments after a second.
TRIMMING_CONTROLLER = {
    "metadata.log.max.snapshot.interval.ms": "1000",
    "metadata.log.max.record.bytes.between.snapshots": "1",
    "metadata.log.segment.ms": "1000",
    "metadata.max.retention.ms": "1000",
}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[KafkaCluster]:
    reason = cluster_unavailable_reason()
    if reason:
        pytest.skip(reason)
    c = KafkaCluster(tmp_path, controller_overrides=TRIMMING_CONTROLLER)
    try:
        c.start_controllers()
        yield c
    finally:
        c.stop_all()


def test_a_late_broker_loads_the_controllers_snapshot(cluster: KafkaCluster) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    first = cluster.kbroker(3).start(timeout=90)
    admin = AdminClient({"bootstrap.servers": first.bootstrap})
    for f in admin.create_topics([NewTopic("before-snapshot", num_partitions=3, replication_factor=1)]).values():
        f.result(30)
    assert first.stop() == 0

    # Wait until the controller's log no longer starts at 0: a fresh observer cannot fetch from there.
    log_dir = cluster.controllers[0].data / "__cluster_metadata-0"
    deadline = time.monotonic() + 150
    while "00000000000000000000.log" in {p.name for p in log_dir.glob("*.log")}:
        assert time.monotonic() < deadline, "the controller never trimmed its metadata log"
        time.sleep(1)

    late = cluster.kbroker(4).start(timeout=90)
    assert "Installed metadata snapshot" in late.log_text()
    md = AdminClient({"bootstrap.servers": late.bootstrap}).list_topics(timeout=20)
    assert "before-snapshot" in md.topics
    assert len(md.topics["before-snapshot"].partitions) == 3
    assert sorted(md.brokers) == [4]
    snapshots = list((late.log_dir / "__cluster_metadata-0").glob("*.checkpoint"))
    assert len(snapshots) == 1

    # Restarted, it starts from its own snapshot and log, and still knows the topic.
    assert late.stop() == 0
    late.start(timeout=90)
    assert "Loaded metadata snapshot" in late.log_text()
    md = AdminClient({"bootstrap.servers": late.bootstrap}).list_topics(timeout=20)
    assert "before-snapshot" in md.topics
