"""`metadata.max.retention.bytes` on kbroker controllers and brokers (real processes): the metadata log is trimmed
behind snapshots as Kafka's `KafkaMetadataLog.maybeClean` does.

Three kbroker controllers with small `metadata.log.segment.bytes` (2 KiB), a snapshot every ~1000 bytes
of records and `metadata.max.retention.bytes` of 12 KiB, and a kbroker broker. Creating topics makes
every voter write snapshots; the early segments and snapshots are deleted once the log and snapshots
pass the limit (segment 0 and the first snapshots go), the latest snapshot always stays and the log
start offset never passes it. The broker writes snapshots of its own image into its copy of the log and
keeps it the same way (as Kafka's brokers). Then every node is stopped and started again (each loads its
latest snapshot and the log after it) and a new broker joins (its fetch from offset 0 is below the leader's log
start: it loads the leader's snapshot) and sees every topic.
"""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.cluster.test_kbroker_quorum import Quorum, _common, _format, stop_nodes
from tests.cluster.test_kbroker_quorum_snapshot import _create_topics, _topic_names, _wait_serving
from tests.support.broker import KBroker
from tests.support.kafka_cluster import new_cluster_id

pytestmark = [pytest.mark.interop]

WROTE = re.compile(r"Wrote KRaft snapshot (\d{20})-(\d{10})\.checkpoint")
RETENTION = 12 * 1024


def _meta(node: KBroker) -> Path:
    return node.log_dir / "__cluster_metadata-0"


def _segments(node: KBroker) -> list[int]:
    return sorted(int(p.name[:-4]) for p in _meta(node).glob("*.log"))


def _snapshots(node: KBroker) -> list[int]:
    return sorted(int(p.name[:20]) for p in _meta(node).glob("*.checkpoint") if not p.name.startswith("0" * 20))


def _written(node: KBroker) -> list[int]:
    return sorted({int(m.group(1)) for m in WROTE.finditer(node.log_text())})


def test_metadata_retention_deletes_old_segments_and_snapshots(tmp_path: Path) -> None:
    q = Quorum(new_cluster_id(), tmp_path)
    for i in (1, 2, 3):
        q.controllers[i] = KBroker(tmp_path / f"controller-{i}")
    q.brokers[4] = KBroker(tmp_path / "broker-4")
    late = KBroker(tmp_path / "broker-5")
    for i, c in q.controllers.items():
        c.overrides = {**_common(q), "process.roles": "controller", "node.id": str(i),
                       "listeners": f"CONTROLLER://127.0.0.1:{c.port}", "log.dirs": str(c.log_dir),
                       "broker.session.timeout.ms": "4000",
                       "metadata.log.max.record.bytes.between.snapshots": "1000",
                       "metadata.log.segment.min.bytes": "1024", "metadata.log.segment.bytes": "2048",
                       "metadata.max.retention.bytes": str(RETENTION)}
    for i, b in [(4, q.brokers[4]), (5, late)]:
        b.overrides = {**_common(q), "process.roles": "broker", "node.id": str(i),
                       "listeners": f"PLAINTEXT://127.0.0.1:{b.port}", "log.dirs": str(b.log_dir),
                       "broker.heartbeat.interval.ms": "500", "offsets.topic.replication.factor": "1",
                       # The broker's own copy of the log: its snapshots and the same retention (Kafka's too).
                       "metadata.log.max.record.bytes.between.snapshots": "1000",
                       "metadata.log.segment.min.bytes": "1024", "metadata.log.segment.bytes": "2048",
                       "metadata.max.retention.bytes": str(RETENTION)}
    try:
        with ThreadPoolExecutor(5) as pool:
            list(pool.map(lambda n: _format(q, n, n.overrides), [*q.controllers.values(), q.brokers[4], late]))
            list(pool.map(lambda c: c.start(timeout=60), q.controllers.values()))
        q.wait_leader()
        q.brokers[4].start(timeout=60)
        _wait_serving(q.brokers[4])
        names = [f"retained-{i:03d}" for i in range(48)]
        for k in range(0, len(names), 12):
            _create_topics(q, names[k:k + 12])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(_segments(c) and _segments(c)[0] > 0
                                                      for c in q.controllers.values()):
            time.sleep(0.5)
        for i, c in q.controllers.items():
            segments, kept, written = _segments(c), _snapshots(c), _written(c)
            size = sum(p.stat().st_size for p in _meta(c).iterdir() if p.suffix in (".log", ".checkpoint"))
            print(f"controller {i}: wrote {len(written)} snapshots, keeps {kept}; segments {segments}; "
                  f"{size} bytes of segments and snapshots")
            assert len(written) >= 3, (i, written)
            assert segments[0] > 0, (i, segments)  # the first segments were deleted ...
            assert kept and kept[-1] == written[-1], (i, kept, written)  # ... never the latest snapshot
            assert kept[0] > written[0], (i, kept, written)  # the oldest snapshots went with them
            assert segments[0] <= kept[-1], (i, segments, kept)  # the log start never passes the latest one

        # The broker writes snapshots of its own image and keeps its copy of the log the same way.
        b = q.brokers[4]
        segments, kept, written = _segments(b), _snapshots(b), _written(b)
        print(f"broker 4: wrote {len(written)} snapshots, keeps {kept}; segments {segments}")
        # (with a 12 KiB limit the leader may trim past the broker's fetch offset: then the broker's latest
        # snapshot is one it fetched from the leader, newer than its own)
        assert len(written) >= 3 and segments[0] > 0 and kept and kept[-1] >= written[-1], (segments, kept, written)
        assert kept[0] > written[0] and segments[0] <= kept[-1], (segments, kept, written)

        # Every node restarts from its trimmed log (latest snapshot, then the log after it).
        stop_nodes([b], list(q.controllers.values()))
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(lambda c: c.start(timeout=60), q.controllers.values()))
        b.start(timeout=90)
        _wait_serving(b)
        assert "Loaded metadata snapshot" in b.log_text()
        _create_topics(q, ["after-restart"])
        assert set(names) | {"after-restart"} <= _topic_names(q.brokers[4].bootstrap)

        # A new broker fetches from offset 0, below every voter's log start: it loads a snapshot.
        late.start(timeout=90)
        _wait_serving(late)
        assert set(names) | {"after-restart"} <= _topic_names(late.bootstrap)
        assert "Loaded metadata snapshot" in late.log_text()
    finally:
        stop_nodes([q.brokers[4], late], list(q.controllers.values()))
