"""A single node writes KRaft snapshots of its image, restarts from the newest one, and trims its
metadata log behind them, with Kafka's keys (metadata.log.max.record.bytes.between.snapshots,
metadata.log.max.snapshot.interval.ms, metadata.max.retention.bytes/ms) on a fake clock.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kbroker.config import KafkaConfig
from kbroker.controller.metadata_log import CLUSTER_METADATA_DIR
from kbroker.metadata.image_writer import image_records
from kbroker.services import build_services, shutdown_services
from kbroker.snapshot import OffsetAndEpoch, parse_snapshot_path, read_snapshot_file
from tests.support.sync import SyncAdmin


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_800_000_000_000

    def __call__(self) -> int:
        return self.now


def _config(root: Path, **extra: str) -> KafkaConfig:
    props = {"log.dirs": str(root / "data"), "node.id": "1",
             # Small segments (Kafka's internal floor lowered, as its own tests do) and snapshots every ~4 KB.
             "metadata.log.segment.min.bytes": "1024", "metadata.log.segment.bytes": "4096",
             "metadata.log.max.record.bytes.between.snapshots": "4000"}
    props.update(extra)
    return KafkaConfig(props)


def _meta_dir(root: Path) -> Path:
    return root / "data" / CLUSTER_METADATA_DIR


def _snapshot_ids(root: Path) -> list[OffsetAndEpoch]:
    out = []
    for name in sorted(os.listdir(_meta_dir(root))):
        sp = parse_snapshot_path(_meta_dir(root) / name)
        if sp is not None and not sp.partial and not sp.deleted:
            out.append(sp.snapshot_id)
    return out


def _segments(root: Path) -> list[int]:
    return sorted(int(n[:-4]) for n in os.listdir(_meta_dir(root)) if n.endswith(".log"))


def _churn(admin: SyncAdmin, rounds: int, prefix: str = "t") -> None:
    for i in range(rounds):
        admin.create_topic(f"{prefix}{i}", 3, configs={"retention.ms": str(1000 + i)})
        admin.incremental_alter_topic_configs(f"{prefix}{i}", [("cleanup.policy", 0, "compact")])
        if i % 3 == 0:
            admin.delete_topic(f"{prefix}{i}")


def test_snapshots_restart_and_trim(tmp_path: Path) -> None:
    clock = FakeClock()
    config = _config(tmp_path, **{"metadata.max.retention.bytes": "1"})
    s = build_services(config, time_ms=clock)
    admin = SyncAdmin(s.controller, s.configs)
    for _ in range(4):
        _churn(admin, 10, prefix=f"t{clock.now}-")
        clock.now += 61_000  # past KafkaRaftClient's 60 s cleaner interval
    log = s.controller.metadata_log  # type: ignore[attr-defined]
    written = sorted(set(_snapshot_ids(tmp_path)) | set(log.snapshots.snapshot_ids))
    assert len(written) >= 2, written
    # One more commit after the cleaner interval: retention (1 byte: always breached) keeps only the
    # newest snapshot, and the log start offset moves up to it.
    admin.alter_broker_configs(False, {"log.retention.ms": "5000"})
    ids = _snapshot_ids(tmp_path)
    assert ids == log.snapshots.snapshot_ids and len(ids) == 1, ids
    assert log.start_offset == ids[0].offset > 0
    segs = _segments(tmp_path)
    assert segs and segs[0] > 0, segs  # segment 0 (the bootstrap records) is gone
    # Every segment left ends after the log start offset (the ones wholly below it were deleted).
    assert all(nxt > log.start_offset for nxt in segs[1:]) and segs[0] <= log.start_offset
    # The snapshot holds exactly the image as of its offset: a header, the image's records, a footer.
    contents = read_snapshot_file(_meta_dir(tmp_path) / f"{ids[-1].offset:020d}-{ids[-1].epoch:010d}.checkpoint")
    assert contents.header.last_contained_log_timestamp > 0
    before = s.metadata.image
    end_before = log.end_offset
    shutdown_services(s)

    s2 = build_services(config, time_ms=clock)
    try:
        after = s2.metadata.image
        assert image_records(after) == image_records(before)
        assert after.provenance.last_contained_offset == before.provenance.last_contained_offset
        assert s2.controller.metadata_log.end_offset == end_before  # type: ignore[attr-defined]
        # The publishers saw the snapshot's image: every partition of every topic is hosted again.
        topics = after.topics.topics_by_name
        assert topics
        for name, topic in topics.items():
            for index in topic.partitions:
                assert s2.replica_manager.get_partition(name, index) is not None, (name, index)
        # Segments wholly below the log start offset are gone from disk.
        start = s2.controller.metadata_log.start_offset  # type: ignore[attr-defined]
        assert start > 0
        segs = _segments(tmp_path)
        assert segs[0] <= start and all(b <= start for b in segs[:1])
        assert not any(n.endswith(".deleted") for n in os.listdir(_meta_dir(tmp_path)))
    finally:
        shutdown_services(s2)


def test_a_corrupt_latest_snapshot_stops_the_start_with_its_name(tmp_path: Path) -> None:
    config = _config(tmp_path)
    s = build_services(config)
    _churn(SyncAdmin(s.controller, s.configs), 25)
    shutdown_services(s)
    ids = _snapshot_ids(tmp_path)
    assert ids
    path = _meta_dir(tmp_path) / f"{ids[-1].offset:020d}-{ids[-1].epoch:010d}.checkpoint"
    os.chmod(path, 0o600)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # a flipped bit: the batch CRC no longer matches
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=str(path.name)):
        build_services(config)


def test_snapshots_carry_the_standalone_voter_set_forward(tmp_path: Path) -> None:
    """A node formatted with --standalone keeps its KIP-853 voter set (the 0-0 checkpoint's
    KRaftVersionRecord + VotersRecord) in every snapshot it writes, so retention, which deletes the
    0-0 checkpoint, never drops the only copy."""
    from kbroker.storage_tool import FormatRequest, format_storage

    clock = FakeClock()
    config = _config(tmp_path, **{
        "metadata.max.retention.bytes": "1", "controller.quorum.bootstrap.servers": "127.0.0.1:9093",
        "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"})
    import io
    assert format_storage(config, FormatRequest(cluster_id="MkU3OEVBNTcwNTJENDM2Qk", standalone=True), io.StringIO()) == 0
    formatted = read_snapshot_file(_meta_dir(tmp_path) / "00000000000000000000-0000000000.checkpoint")
    # Served by kbroker's embedded single node (LocalController, no controller listener): with its
    # CONTROLLER listener the formatting config is a combined node, a Raft voter (docs/cluster.md).
    s = build_services(_config(tmp_path, **{"metadata.max.retention.bytes": "1"}), time_ms=clock)
    try:
        admin = SyncAdmin(s.controller, s.configs)
        for _ in range(3):
            _churn(admin, 10, prefix=f"v{clock.now}-")
            clock.now += 61_000
        admin.alter_broker_configs(False, {"log.retention.ms": "5000"})
        ids = _snapshot_ids(tmp_path)
        assert len(ids) == 1 and ids[0].offset > 0  # the 0-0 checkpoint was retired by retention
        latest = read_snapshot_file(_meta_dir(tmp_path) / f"{ids[0].offset:020d}-{ids[0].epoch:010d}.checkpoint")
        assert latest.kraft_version == 1 and latest.voters == formatted.voters
        assert s.cluster_id == "MkU3OEVBNTcwNTJENDM2Qk"
    finally:
        shutdown_services(s)
