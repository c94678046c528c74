"""The RaftLog contract, on the in-memory log and on KafkaMetadataLog (UnifiedLog on disk)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kbroker.protocol.records import RecordBatch, SimpleRecord, build_batch, iter_batches
from kbroker.raft.metadata_log import KafkaMetadataLog, snapshot_filename
from kbroker.raft.quorum_state_store import FileQuorumStateStore
from kbroker.raft.raft_log import (
    MemoryRaftLog,
    OffsetAndEpoch,
    RaftLog,
    truncate_to_end_offset,
    validate_offset_and_epoch,
)
from tests.raft.harness import LocalCluster


def batch(base: int, epoch: int, n: int = 1) -> bytes:
    return bytes(build_batch([SimpleRecord(value=f"v{base + i}".encode()) for i in range(n)], base_offset=base,
                             partition_leader_epoch=epoch, now_ms=1000))


def fill(log: RaftLog, epochs: list[int]) -> None:
    """One two-record batch per entry of `epochs`."""
    for e in epochs:
        log.append(batch(log.end_offset(), e, 2))


@pytest.fixture(params=["memory", "disk"])
def make_log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], RaftLog]]:
    opened: list[KafkaMetadataLog] = []

    def make() -> RaftLog:
        if request.param == "memory":
            return MemoryRaftLog()
        log = KafkaMetadataLog(tmp_path)
        opened.append(log)
        return log
    yield make
    for log in opened:
        log.close()


def test_append_read_and_epochs(make_log: Callable[[], RaftLog]) -> None:
    log = make_log()
    assert (log.end_offset(), log.start_offset(), log.last_fetched_epoch()) == (0, 0, 0)
    fill(log, [1, 1, 3, 3, 4])  # offsets 0-9; epoch 1: 0-3, epoch 3: 4-7, epoch 4: 8-9
    assert log.end_offset() == 10 and log.last_fetched_epoch() == 4
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(4, 1)
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(4, 1)  # largest epoch <= 2 is 1
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(8, 3)
    assert log.end_offset_for_epoch(9) == OffsetAndEpoch(10, 4)
    assert log.end_offset_for_epoch(0) == OffsetAndEpoch(0, 0)
    data = log.read(4, 1 << 20)
    assert [b.base_offset for b in iter_batches(memoryview(data))] == [4, 6, 8]
    one = log.read(5, 1)  # inside a batch: that whole batch, at least one
    assert [b.base_offset for b in iter_batches(memoryview(one))] == [4]


def test_truncate_and_flush(make_log: Callable[[], RaftLog]) -> None:
    log = make_log()
    fill(log, [1, 2, 2])
    log.flush()
    assert log.flushed_end_offset() == 6
    log.truncate_to(2)
    assert log.end_offset() == 2 and log.last_fetched_epoch() == 1 and log.flushed_end_offset() <= 2
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(2, 1)
    fill(log, [5])
    assert log.last_fetched_epoch() == 5 and log.end_offset_for_epoch(4) == OffsetAndEpoch(2, 1)


@pytest.mark.parametrize(("offset", "epoch", "kind", "answer"), [
    (0, 0, "valid", (0, 0)),
    (6, 2, "valid", (6, 2)),
    (4, 2, "valid", (4, 2)),
    (10, 4, "valid", (10, 4)),
    (7, 3, "diverging", (8, 2)),   # no epoch 3 here: epoch 2 is the largest <= 3, it ends at 8
    (9, 2, "diverging", (8, 2)),
    (3, 0, "diverging", (0, 0)),   # an epoch older than anything here
    (11, 4, "diverging", (10, 4)),
])
def test_validate_offset_and_epoch(make_log: Callable[[], RaftLog], offset: int, epoch: int, kind: str,
                                   answer: tuple[int, int]) -> None:
    log = make_log()
    fill(log, [2, 2, 2, 2, 4])  # epoch 2: 0-7, epoch 4: 8-9
    got = validate_offset_and_epoch(log, offset, epoch)
    assert got.kind == kind and tuple(got.offset_and_epoch) == answer


def test_truncate_to_end_offset(make_log: Callable[[], RaftLog]) -> None:
    follower = make_log()
    fill(follower, [1, 1, 3, 3])  # epoch 1: 0-3, epoch 3: 4-7
    # The leader says the follower's largest epoch <= 3 there is 2, ending at 5: the follower has no
    # epoch 2, so it cuts where its own largest epoch <= 2 (epoch 1) ends.
    assert truncate_to_end_offset(follower, OffsetAndEpoch(5, 2)) == 4
    fill(follower, [3])
    assert truncate_to_end_offset(follower, OffsetAndEpoch(5, 3)) == 4  # whole batches


def test_snapshots(make_log: Callable[[], RaftLog]) -> None:
    log = make_log()
    fill(log, [1, 1, 2, 2])
    sid = OffsetAndEpoch(6, 2)
    log.create_snapshot(sid, b"state")
    assert log.latest_snapshot_id() == sid and log.read_snapshot(sid) == b"state"
    # FetchSnapshot's chunks: the size and a slice at a position (the file is read in place, not whole).
    assert log.read_snapshot_slice(sid, 0, 2) == (5, b"st")
    assert log.read_snapshot_slice(sid, 3, 100) == (5, b"te")
    assert log.read_snapshot_slice(sid, 5, 100) == (5, b"")
    assert log.read_snapshot_slice(OffsetAndEpoch(7, 2), 0, 1) is None
    assert log.delete_before_snapshot(sid)
    assert log.start_offset() == 6 and log.end_offset() == 8 and log.last_fetched_epoch() == 2
    assert validate_offset_and_epoch(log, 2, 1).kind == "snapshot"
    assert validate_offset_and_epoch(log, 6, 1).kind == "snapshot"
    assert validate_offset_and_epoch(log, 6, 2).kind == "valid"
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(8, 2)
    follower = make_log() if isinstance(log, MemoryRaftLog) else MemoryRaftLog()
    fill(follower, [1])
    follower.install_snapshot(OffsetAndEpoch(20, 7), b"leader-state")
    assert (follower.start_offset(), follower.end_offset(), follower.last_fetched_epoch()) == (20, 20, 7)
    assert follower.end_offset_for_epoch(7) == OffsetAndEpoch(20, 7)


def test_memory_log_crash_keeps_what_was_flushed() -> None:
    log = MemoryRaftLog()
    fill(log, [1, 1])
    log.flush()
    fill(log, [1, 1, 1])
    ends = {log.crash(random.Random(s)).end_offset() for s in range(30)}
    assert min(ends) == 4 and max(ends) == 10  # flushed always; the unflushed tail: any prefix


def test_metadata_log_files_and_reopen(tmp_path: Path) -> None:
    log = KafkaMetadataLog(tmp_path)
    fill(log, [1, 3])
    log.flush()
    sid = OffsetAndEpoch(2, 1)
    log.create_snapshot(sid, b"snap")
    log.close()
    d = tmp_path / "__cluster_metadata-0"
    assert (d / "00000000000000000000.log").exists() and (d / snapshot_filename(sid)).exists()
    assert snapshot_filename(sid) == "00000000000000000002-0000000001.checkpoint"
    assert (d / "leader-epoch-checkpoint").read_text().splitlines()[2:] == ["1 0", "3 2"]
    again = KafkaMetadataLog(tmp_path)
    assert again.end_offset() == 4 and again.last_fetched_epoch() == 3 and again.latest_snapshot_id() == sid
    b = RecordBatch(memoryview(again.read(2, 1 << 20)))
    assert b.partition_leader_epoch == 3 and b.base_offset == 2
    again.close()


def test_a_cluster_on_disk_survives_a_full_restart(tmp_path: Path) -> None:
    """Three voters on KafkaMetadataLog + FileQuorumStateStore: elect, commit, stop all, start again."""
    def make_log(n: int) -> KafkaMetadataLog:
        return KafkaMetadataLog(tmp_path / f"node{n}")

    def make_store(n: int) -> FileQuorumStateStore:
        return FileQuorumStateStore(tmp_path / f"node{n}" / "__cluster_metadata-0", voters=[1, 2, 3])

    c = LocalCluster(3, make_log=make_log, make_store=make_store)
    leader = c.elect()
    last = c.clients[leader].append([b"a", b"b"], c.now)
    c.run_until(lambda: all(cl.high_watermark() > last for cl in c.clients.values()))
    epoch = c.clients[leader].epoch
    text = (tmp_path / f"node{leader}" / "__cluster_metadata-0" / "quorum-state").read_text()
    assert text == (f'{{"clusterId":"","leaderId":{leader},"leaderEpoch":{epoch},"votedId":{leader},'
                    '"appliedOffset":0,"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}')
    for n in (1, 2, 3):
        log = c.logs[n]
        assert isinstance(log, KafkaMetadataLog)
        log.close()
    for n in (1, 2, 3):
        c.start(n, log=make_log(n), store=make_store(n))
    c.run_until(lambda: all(cl.high_watermark() > last for cl in c.clients.values()))
    new = c.leader()
    assert c.clients[new].epoch > epoch
    for n in (1, 2, 3):
        assert c.listeners[n].values() == [b"a", b"b"]
        log = c.logs[n]
        assert isinstance(log, KafkaMetadataLog)
        log.close()
