"""LogManager: meta.properties, checkpoint files in Kafka's text format, the clean-shutdown marker,
partition.metadata, placement across log.dirs, deletion, retention and flush passes, restart."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from log_test_helpers import FakeClock, make_batch, read_all, small_config

from kbroker.log import LogManager
from kbroker.log.checkpoints import read_properties, uuid_from_base64, uuid_to_base64
from kbroker.log.manager import CLEAN_SHUTDOWN_FILE, InconsistentMetaPropertiesError


def manager(dirs: list[Path], clock: FakeClock | None = None, **kw: object) -> LogManager:
    m = LogManager(dirs, small_config(), node_id=1, cluster_id="MkU3OEVBNTcwNTJENDM2Qk", time_ms=clock or FakeClock(), **kw)  # type: ignore[arg-type]
    m.startup()
    return m


def test_meta_properties_and_checkpoints(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    m = manager([d])
    props = read_properties(d / "meta.properties")
    assert props is not None
    assert props["version"] == "1" and props["node.id"] == "1" and props["cluster.id"] == "MkU3OEVBNTcwNTJENDM2Qk"
    assert len(props["directory.id"]) == 22
    tid = uuid.uuid4()
    log = m.get_or_create_log("orders", 3, small_config(), tid)
    assert (d / "orders-3" / "partition.metadata").read_text() == f"version: 0\ntopic_id: {uuid_to_base64(tid)}"
    assert m.topic_id_of("orders", 3) == tid
    for i in range(5):
        log.append_as_leader(memoryview(make_batch(2, tag=i)), 0)
    log.update_high_watermark(8)
    m.shutdown()
    assert (d / "replication-offset-checkpoint").read_text() == "0\n1\norders 3 8\n"
    assert (d / "recovery-point-offset-checkpoint").read_text() == "0\n1\norders 3 10\n"
    assert (d / "log-start-offset-checkpoint").read_text() == "0\n0\n"
    assert (d / CLEAN_SHUTDOWN_FILE).exists()

    m2 = manager([d])
    assert not (d / CLEAN_SHUTDOWN_FILE).exists()  # removed once loaded: a crash now means recovery
    log2 = m2.get_log("orders", 3)
    assert log2 is not None and log2.log_end_offset == 10 and log2.high_watermark == 8
    assert [r[0] for r in read_all(log2)] == list(range(10))
    m2.shutdown()


def test_uuid_base64_roundtrip() -> None:
    u = uuid.UUID("6f1c4b02-9c6b-4b8c-8e62-3c3f1f2d9a11")
    assert uuid_from_base64(uuid_to_base64(u)) == u
    assert "=" not in uuid_to_base64(u)


def test_inconsistent_node_or_cluster_id(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    manager([d]).shutdown()
    with pytest.raises(InconsistentMetaPropertiesError):
        LogManager([d], small_config(), node_id=2).startup()
    with pytest.raises(InconsistentMetaPropertiesError):
        LogManager([d], small_config(), node_id=1, cluster_id="other").startup()
    m = LogManager([d], small_config(), node_id=1)
    m.startup()
    assert m.cluster_id == "MkU3OEVBNTcwNTJENDM2Qk"


def test_placement_delete_and_log_start_checkpoint(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = manager(dirs)
    logs = [m.get_or_create_log("t", p, small_config(segment_bytes=600), uuid.uuid4()) for p in range(4)]
    assert sorted(len(list(d.glob("t-*"))) for d in dirs) == [2, 2]
    for i in range(10):
        logs[0].append_as_leader(memoryview(make_batch(1, 100, tag=i)), 0)
    logs[0].update_high_watermark(10)
    logs[0].delete_records_before(6)
    m.checkpoint()
    d0 = next(d for d in dirs if (d / "t-0").exists())
    assert "t 0 6" in (d0 / "log-start-offset-checkpoint").read_text().splitlines()
    m.delete_log("t", 1)
    assert m.get_log("t", 1) is None
    assert not [p for d in dirs for p in d.glob("t-1*")]
    m.shutdown()
    m2 = manager(dirs)
    assert sorted(lg.partition for lg in m2.all_logs()) == [0, 2, 3]
    assert m2.get_log("t", 0).log_start_offset == 6  # type: ignore[union-attr]
    m2.shutdown()


def test_cleanup_and_flush_passes(tmp_path: Path) -> None:
    clock = FakeClock()
    m = manager([tmp_path / "logs"], clock)
    log = m.get_or_create_log("t", 0, small_config(segment_bytes=600, retention_ms=5000, flush_ms=1000))
    for i in range(12):
        log.append_as_leader(memoryview(make_batch(1, 100, ts=clock.now, tag=i)), 0)
    log.update_high_watermark(log.log_end_offset)
    rp = log.recovery_point
    assert rp < log.log_end_offset  # rolls fsync the old segments; the active tail is unflushed
    clock.advance(999)
    m.flush_dirty_logs()
    assert log.recovery_point == rp
    clock.advance(1)
    m.flush_dirty_logs()
    assert log.recovery_point == log.log_end_offset
    assert m.cleanup_logs() == 0
    clock.advance(10_000)
    assert m.cleanup_logs() > 0
    assert log.log_start_offset == log.log_end_offset
    m.shutdown()


def test_flush_messages_fsyncs_inline(tmp_path: Path) -> None:
    m = manager([tmp_path / "logs"])
    log = m.get_or_create_log("t", 0, small_config(flush_messages=3))
    log.append_as_leader(memoryview(make_batch(2)), 0)
    assert log.recovery_point == 0
    log.append_as_leader(memoryview(make_batch(2)), 0)
    assert log.recovery_point == 4
    m.shutdown()


def test_recreated_topic_replaces_stray_log(tmp_path: Path) -> None:
    m = manager([tmp_path / "logs"])
    old_id, new_id = uuid.uuid4(), uuid.uuid4()
    log = m.get_or_create_log("t", 0, small_config(), old_id)
    log.append_as_leader(memoryview(make_batch(3)), 0)
    assert m.get_or_create_log("t", 0, small_config(), old_id) is log
    fresh = m.get_or_create_log("t", 0, small_config(), new_id)
    assert fresh is not log and fresh.log_end_offset == 0 and m.topic_id_of("t", 0) == new_id
    # A read-only buffer is accepted too (copied once, since offsets are patched in place).
    assert fresh.append_as_leader(memoryview(bytes(make_batch(2))), 0).last_offset == 1
    m.shutdown()


def test_roll_fsync_runs_on_the_background_executor(tmp_path: Path) -> None:
    jobs: list[object] = []
    m = LogManager([tmp_path / "logs"], small_config(), node_id=1, time_ms=FakeClock(), background_executor=jobs.append)
    m.startup()
    log = m.get_or_create_log("t", 0, small_config(segment_bytes=600))
    while log.num_segments < 3:
        log.append_as_leader(memoryview(make_batch(1, 100)), 0)
    assert len(jobs) == 2 and log.recovery_point == 0  # fsyncs handed off, recovery point waits for them
    for job in jobs:
        job()  # type: ignore[operator]
    assert log.recovery_point == log.active_segment.base_offset
    m.shutdown()


def test_background_checkpoint_writes_a_snapshot_and_never_overwrites_a_newer_one(tmp_path: Path) -> None:
    jobs: list[object] = []
    m = LogManager([tmp_path / "logs"], small_config(), node_id=1, time_ms=FakeClock(), background_executor=jobs.append)
    m.startup()
    log = m.get_or_create_log("t", 0, small_config())
    for _ in range(3):
        log.append_as_leader(memoryview(make_batch(1, 100)), 0)
    log.update_high_watermark(3)
    hw_file = tmp_path / "logs" / "replication-offset-checkpoint"

    def hw_on_disk() -> str:
        return [line for line in hw_file.read_text().splitlines() if line.startswith("t ")][0]

    jobs.clear()
    m.checkpoint(background=True)  # offsets read now (hw 3); the write waits for the executor
    stale = jobs.pop()
    assert not jobs
    log.append_as_leader(memoryview(make_batch(1, 100)), 0)
    log.update_high_watermark(4)
    m.checkpoint(background=True)
    jobs.pop()()  # type: ignore[operator]  # the newer snapshot lands first
    assert hw_on_disk() == "t 0 4"
    stale()  # type: ignore[operator]  # the older one, run late, must not go back to 3
    assert hw_on_disk() == "t 0 4"
    m.shutdown()


@pytest.mark.parametrize("content", [b"", b"garbage without any key\n", bytes(range(256)) * 3,
                                     b"version=1\ncluster.id=MkU3OEVBNTcwNTJENDM2Qk\ndirectory.id=x\n"])
def test_garbage_meta_properties_refuses_to_start_and_is_left_alone(tmp_path: Path, content: bytes) -> None:
    """Kafka refuses ("Error: node ID not found in <dir>"); rewriting it would silently re-home the dir."""
    d = tmp_path / "logs"
    manager([d]).shutdown()
    (d / "meta.properties").write_bytes(content)
    with pytest.raises(InconsistentMetaPropertiesError, match="node ID not found") as exc:
        LogManager([d], small_config(), node_id=1).startup()
    assert str(d / "meta.properties") in str(exc.value) and "\n" not in str(exc.value)
    assert (d / "meta.properties").read_bytes() == content


def test_bad_directory_id_or_node_id_refuses_with_the_file_name(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    manager([d]).shutdown()
    (d / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=MkU3OEVBNTcwNTJENDM2Qk\ndirectory.id=%%\n")
    with pytest.raises(InconsistentMetaPropertiesError, match="invalid directory.id"):
        LogManager([d], small_config(), node_id=1).startup()
    (d / "meta.properties").write_text("version=1\nnode.id=one\n")
    with pytest.raises(InconsistentMetaPropertiesError, match=r"invalid node.id 'one' in .*meta.properties"):
        LogManager([d], small_config(), node_id=1).startup()


def test_repairs_at_startup_are_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d = tmp_path / "logs"
    m = manager([d])
    m.get_or_create_log("t", 0).append_as_leader(memoryview(make_batch(2)), 0)
    m.shutdown()
    (d / "recovery-point-offset-checkpoint").write_bytes(b"\xff\xfe binary")
    (d / "meta.properties").write_text("version=0\nbroker.id=1\ncluster.id=MkU3OEVBNTcwNTJENDM2Qk\n")
    caplog.set_level("INFO")
    m = manager([d])
    assert "Error occurred while reading" in caplog.text and "recovery-point-offset-checkpoint" in caplog.text
    assert "Rewriting" in caplog.text and "adding directory.id" in caplog.text
    assert read_properties(d / "meta.properties")["node.id"] == "1"  # type: ignore[index]
    m.shutdown()
