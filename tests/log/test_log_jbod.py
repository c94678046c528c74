"""Several log directories (JBOD): placement, per-directory state, a failed directory taking only its
partitions offline (Kafka's LogDirFailureChannel and ReplicaManager.handleLogDirFailure), and replica
moves between directories (AlterReplicaLogDirs, KIP-113) through the broker's own wiring."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from log_test_helpers import FakeClock, make_batch, read_all, small_config

from kbroker.log import LogManager
from kbroker.log.checkpoints import read_offset_checkpoint, read_properties
from kbroker.log.errors import KafkaStorageError
from kbroker.log.manager import CLEAN_SHUTDOWN_FILE
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import alter_replica_log_dirs as arld
from kbroker.protocol.messages import delete_records as dr
from kbroker.protocol.messages import describe_log_dirs as dld
from kbroker.protocol.messages import list_offsets as lo
from tests.cluster.test_admin_apis import Stack, _create, _topic

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qk"


def manager(dirs: list[Path]) -> LogManager:
    m = LogManager(dirs, small_config(), node_id=1, cluster_id=CLUSTER, time_ms=FakeClock())
    m.startup()
    return m


# --- LogManager ------------------------------------------------------------------------------------

def test_partitions_spread_over_directories_each_with_its_own_state(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    (a / "__cluster_metadata-0").mkdir(parents=True)  # the metadata log: never a partition here
    (a / "__cluster_metadata-0" / "00000000000000000000.log").write_bytes(b"")
    m = manager([a, b])
    placed = {}
    for p in range(5):
        log = m.get_or_create_log("t", p)
        log.append_as_leader(memoryview(make_batch(3, tag=p)), 0)
        log.update_high_watermark(3)
        placed[p] = m.log_dir_of("t", p)
    # Fewest logs first, ties to the first of log.dirs; the metadata log is not counted.
    assert [placed[p] for p in range(5)] == [a, b, a, b, a]
    assert all(lg.topic != "__cluster_metadata" for lg in m.all_logs())
    m.shutdown()
    pa, pb = read_properties(a / "meta.properties"), read_properties(b / "meta.properties")
    assert pa is not None and pb is not None
    assert pa["cluster.id"] == pb["cluster.id"] == CLUSTER and pa["node.id"] == pb["node.id"] == "1"
    assert pa["directory.id"] != pb["directory.id"]
    assert read_offset_checkpoint(a / "replication-offset-checkpoint") == {("t", 0): 3, ("t", 2): 3, ("t", 4): 3}
    assert read_offset_checkpoint(b / "replication-offset-checkpoint") == {("t", 1): 3, ("t", 3): 3}
    assert (a / CLEAN_SHUTDOWN_FILE).exists() and (b / CLEAN_SHUTDOWN_FILE).exists()
    again = manager([a, b])
    assert {p: again.log_dir_of("t", p) for p in range(5)} == placed
    t3 = again.get_log("t", 3)
    assert t3 is not None and [v[:8] for _, _, v in read_all(t3)] == [bytes.fromhex("00000003") + i.to_bytes(4, "big")
                                                                   for i in range(3)]
    assert again.directory_ids[a] != again.directory_ids[b]
    again.shutdown()


def test_a_failed_directory_goes_offline_alone(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    m = manager([a, b])
    reported: list[Path] = []
    m.log_dir_failure_listener = reported.append
    la, lb = m.get_or_create_log("t", 0), m.get_or_create_log("t", 1)
    assert (la.parent_dir, lb.parent_dir) == (a, b)
    lb.append_as_leader(memoryview(make_batch(2)), 0)
    shutil.rmtree(b)  # the disk goes away under the running broker
    m.checkpoint()  # Kafka: a checkpoint that cannot be written fails the directory
    assert m.offline_dirs == [b] and m.live_log_dirs == [a] and reported == [b]
    assert lb.offline and not la.offline
    with pytest.raises(KafkaStorageError):
        lb.append_as_leader(memoryview(make_batch(1)), 0)
    la.append_as_leader(memoryview(make_batch(2)), 0)  # the other directory keeps serving
    m.checkpoint()
    assert reported == [b]  # reported once
    assert m.get_or_create_log("t", 2).parent_dir == a  # no new log in a failed directory
    with pytest.raises(KafkaStorageError, match="offline log directory"):
        m.get_or_create_log("t", 1)
    m.shutdown()
    assert (a / CLEAN_SHUTDOWN_FILE).exists() and not b.exists()


def test_a_log_going_offline_takes_its_directory_offline(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    m = manager([a, b])
    reported: list[Path] = []
    m.log_dir_failure_listener = reported.append
    la, lb, lb2 = m.get_or_create_log("t", 0), m.get_or_create_log("t", 1), m.get_or_create_log("u", 0)
    assert lb2.parent_dir == a
    lb.offline = True  # what an unrecoverable write or fsync error does
    assert reported == [b] and m.offline_dirs == [b]
    assert not la.offline and not lb2.offline
    m.shutdown()


def test_startup_with_one_unusable_directory(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    b.write_text("not a directory")
    m = manager([a, b])
    assert m.offline_dirs == [b] and m.live_log_dirs == [a]
    assert m.get_or_create_log("t", 0).parent_dir == a
    m.shutdown()
    c = tmp_path / "c"
    c.write_text("neither")
    with pytest.raises(KafkaStorageError, match="None of the specified log dirs"):
        manager([b, c])


def test_unfinished_move_is_dropped_at_startup(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    m = manager([a, b])
    log = m.get_or_create_log("t", 0)
    log.append_as_leader(memoryview(make_batch(4)), 0)
    future = m.create_future_log("t", 0, b)
    assert future is not None and future.dir.name.endswith("-future") and future.parent_dir == b
    assert m.next_log_dir() == a  # the future log counts: one each, the tie goes to the first
    m.log_dir_failure_listener = None
    # Crash: nothing is closed; the next start finds the -future directory.
    stray = future.dir
    m2 = manager([a, b])
    assert not stray.exists() and m2.log_dir_of("t", 0) == a
    assert "not finished" in caplog.text
    m2.shutdown()


# --- through the broker's wiring (ReplicaManager, the API handlers) -----------------------------

@pytest.fixture
def jbod(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(tmp_path, **{"log.dirs": f"{tmp_path / 'a'},{tmp_path / 'b'}"})
    halts: list[str] = []
    s.replica_manager.halt = halts.append
    s.halts = halts  # type: ignore[attr-defined]
    yield s
    s.shutdown()


def _describe(stack: Stack) -> dict[str, dld.DescribeLogDirsResponse.DescribeLogDirsResult]:
    resp = stack.call(35, 4, dld.DescribeLogDirsRequest(topics=None))
    return {Path(r.log_dir).name: r for r in resp.results}


def _alter(stack: Stack, path: str, topic: str, *partitions: int) -> dict[int, int]:
    d, t = arld.AlterReplicaLogDirsRequest.AlterReplicaLogDir, arld.AlterReplicaLogDirsRequest.AlterReplicaLogDirTopic
    resp = stack.call(34, 2, arld.AlterReplicaLogDirsRequest(dirs=[d(path=path, topics=[t(name=topic, partitions=list(partitions))])]))
    return {p.partition_index: p.error_code for r in resp.results for p in r.partitions}


def test_describe_log_dirs_reports_each_directory(jbod: Stack) -> None:
    _create(jbod, 7, _topic("t", 4))
    jbod.produce("t", 1, 5)
    dirs = _describe(jbod)
    assert set(dirs) == {"a", "b"}
    for result in dirs.values():
        assert result.error_code == 0 and result.total_bytes > 0 and result.usable_bytes > 0
        assert Path(result.log_dir).is_absolute()
        [topic] = result.topics
        assert topic.name == "t" and len(topic.partitions) == 2  # the metadata log is not listed
    sizes = {p.partition_index: p.partition_size for r in dirs.values() for p in r.topics[0].partitions}
    assert sizes[1] > 0 and sizes[0] == 0


def test_alter_replica_log_dirs_moves_a_replica_while_it_takes_appends(jbod: Stack, tmp_path: Path) -> None:
    _create(jbod, 7, _topic("m", 1))
    part = jbod.replica_manager.get_partition("m", 0)
    assert part is not None and part.log.parent_dir == tmp_path / "a"
    for _ in range(40):
        jbod.produce("m", 0, 20)
    before = read_all(part.log)
    mover = jbod.replica_manager.alter_log_dirs
    mover.copy_bytes_per_step = 700  # several steps
    assert _alter(jbod, str(tmp_path / "b"), "m", 0) == {0: 0}
    b = _describe(jbod)["b"]
    [future] = b.topics[0].partitions
    assert future.is_future_key and future.offset_lag == 800
    assert mover.step(("m", 0)) is False
    jbod.produce("m", 0, 7)  # appends go on during the copy, to the current log
    steps = 1
    while not mover.step(("m", 0)):
        steps += 1
        if steps == 3:
            jbod.produce("m", 0, 3)
    assert steps > 3
    moved = jbod.replica_manager.get_partition("m", 0)
    assert moved is not None and moved.log.parent_dir == tmp_path / "b"
    assert [e for e in (tmp_path / "a").iterdir() if e.name.startswith("m-0")] == []
    after = read_all(moved.log)
    assert after[:len(before)] == before and len(after) == 810 and moved.log_end_offset == 810
    assert moved.high_watermark == 810
    jbod.produce("m", 0, 1)
    assert moved.log.log_end_offset == 811
    dirs = _describe(jbod)
    assert dirs["a"].topics == [] and [p.is_future_key for p in dirs["b"].topics[0].partitions] == [False]
    # Errors as Kafka gives them.
    assert _alter(jbod, str(tmp_path / "elsewhere"), "m", 0) == {0: ErrorCode.LOG_DIR_NOT_FOUND}
    assert _alter(jbod, "b", "m", 0) == {0: ErrorCode.LOG_DIR_NOT_FOUND}
    assert _alter(jbod, str(tmp_path / "a"), "nope", 0) == {0: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert _alter(jbod, str(tmp_path / "b"), "m", 0) == {0: 0}  # already there: nothing to do
    assert jbod.log_manager.future_logs() == []


def test_a_failed_directory_takes_only_its_partitions_offline(jbod: Stack, tmp_path: Path) -> None:
    _create(jbod, 7, _topic("t", 2))
    in_a, in_b = (0, 1) if jbod.log_manager.log_dir_of("t", 0) == tmp_path / "a" else (1, 0)
    jbod.produce("t", in_b, 3)
    shutil.rmtree(tmp_path / "b")
    jbod.log_manager.checkpoint()
    rm = jbod.replica_manager
    part_b = rm.get_partition("t", in_b)
    assert ("t", in_b) in rm.offline and part_b is not None and part_b.is_offline
    results = rm.append_records(1000, 1, False, {
        ("t", in_a): memoryview(make_batch(2)), ("t", in_b): memoryview(make_batch(2))})
    assert isinstance(results, dict)
    assert results[("t", in_a)].error == ErrorCode.NONE
    assert results[("t", in_b)].error == ErrorCode.KAFKA_STORAGE_ERROR
    deleted = jbod.call(21, 2, dr.DeleteRecordsRequest(timeout_ms=1000, topics=[dr.DeleteRecordsRequest.DeleteRecordsTopic(
        name="t", partitions=[dr.DeleteRecordsRequest.DeleteRecordsPartition(partition_index=in_b, offset=1)])]))
    assert deleted.topics[0].partitions[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR
    listed = jbod.call(2, 9, lo.ListOffsetsRequest(replica_id=-1, topics=[lo.ListOffsetsRequest.ListOffsetsTopic(
        name="t", partitions=[lo.ListOffsetsRequest.ListOffsetsPartition(partition_index=in_b, timestamp=-1)])]))
    assert listed.topics[0].partitions[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR
    dirs = _describe(jbod)
    assert dirs["b"].error_code == ErrorCode.KAFKA_STORAGE_ERROR and dirs["b"].topics == []
    assert dirs["b"].total_bytes == -1 and dirs["b"].usable_bytes == -1
    assert dirs["a"].error_code == 0 and dirs["a"].topics[0].partitions[0].partition_index == in_a
    assert _alter(jbod, str(tmp_path / "b"), "t", in_a) == {in_a: ErrorCode.KAFKA_STORAGE_ERROR}
    assert jbod.halts == []  # type: ignore[attr-defined]
    # The metadata log lives in the first directory: losing it stops the broker, as in Kafka.
    jbod.log_manager.mark_dir_offline(tmp_path / "a", "test")
    assert jbod.halts and "all log dirs" in jbod.halts[0]  # type: ignore[attr-defined]


def test_losing_the_metadata_log_dir_halts(tmp_path: Path) -> None:
    s = Stack(tmp_path, **{"log.dirs": f"{tmp_path / 'a'},{tmp_path / 'b'}"})
    halts: list[str] = []
    s.replica_manager.halt = halts.append
    try:
        s.log_manager.mark_dir_offline(tmp_path / "b", "test")
        assert halts == []
        s.log_manager.mark_dir_offline(tmp_path / "a", "test")
        assert halts and "all log dirs" in halts[0]
    finally:
        s.shutdown()
    t = tmp_path / "second"
    s = Stack(t, **{"log.dirs": f"{t / 'a'},{t / 'b'}", "metadata.log.dir": str(t / "a")})
    halts = []
    s.replica_manager.halt = halts.append
    try:
        s.log_manager.mark_dir_offline(t / "a", "test")
        assert halts == [f"Shutdown broker because the metadata log dir {t / 'a'} has failed"]
    finally:
        s.shutdown()
