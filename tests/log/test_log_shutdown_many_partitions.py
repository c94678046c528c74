"""A clean shutdown of thousands of partitions does Kafka's amount of work (issue 13, the slow SIGTERM).

`LogManager.shutdown` used to write and fsync a producer snapshot for every log, empty or not, one log
after another: 3,000 empty partitions cost 3,000 new files and fsyncs, 30 s on a loaded machine. Kafka
(`ProducerStateManager.takeSnapshot`) writes one only when the state moved past the last snapshot, and
closes the logs on `num.recovery.threads.per.data.dir` threads per directory. These tests count the
fsyncs and files, and check that what the shutdown skipped costs nothing at the next start: the
producer state (idempotence) is whole and no log is recovered.
"""

from __future__ import annotations

import os
import threading
import uuid
from pathlib import Path

import pytest
from log_test_helpers import FakeClock, make_batch, small_config

from kbroker.log import LogManager
from kbroker.log.manager import CLEAN_SHUTDOWN_FILE
from kbroker.log.producer_state import ProducerStateManager

EMPTY = 500


def manager(dirs: list[Path], **kw: object) -> LogManager:
    m = LogManager(dirs, small_config(), node_id=1, cluster_id="MkU3OEVBNTcwNTJENDM2Qk", time_ms=FakeClock(),
                   **kw)  # type: ignore[arg-type]
    m.startup()
    return m


def produce(m: LogManager, topic: str, partition: int, seq: int, n: int = 2) -> int:
    log = m.get_log(topic, partition)
    assert log is not None
    info = log.append_as_leader(memoryview(make_batch(n, 30, pid=7, epoch=0, seq=seq)), 0)
    return info.first_offset if not info.duplicate else -1


def test_shutdown_of_hundreds_of_empty_logs_writes_no_producer_snapshot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "logs"
    m = manager([d])
    for p in range(EMPTY):
        m.get_or_create_log("empty", p, small_config(), uuid.UUID(int=1))
    m.get_or_create_log("data", 0, small_config(), uuid.UUID(int=2))
    produce(m, "data", 0, 0)
    produce(m, "data", 0, 2)

    fsyncs = 0
    threads: set[str] = set()
    real_fsync = os.fsync
    lock = threading.Lock()

    def counting_fsync(fd: int) -> None:
        nonlocal fsyncs
        with lock:
            fsyncs += 1
            threads.add(threading.current_thread().name)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    m.shutdown()
    monkeypatch.undo()

    assert (d / CLEAN_SHUTDOWN_FILE).exists()
    assert not list(d.glob("empty-*/*.snapshot")), "an empty log got a producer snapshot"
    assert [p.name for p in (d / "data-0").glob("*.snapshot")] == [f"{4:020d}.snapshot"]
    # The data log's tail, epoch checkpoint and snapshot, three checkpoint files and the marker (each
    # with its directory): a few dozen, where one snapshot per log made it more than EMPTY.
    assert fsyncs < 50, fsyncs
    assert any(t.startswith("log-closing") for t in threads), threads

    m2 = manager([d])
    assert m2.had_clean_shutdown[d]
    # The producer state came back from the snapshot: a retried batch is still a duplicate, the next one
    # appends at the end.
    assert produce(m2, "data", 0, 2) == -1
    assert produce(m2, "data", 0, 4) == 4
    assert m2.get_log("empty", EMPTY - 1) is not None
    m2.shutdown()
    assert [p.name for p in (d / "data-0").glob("*.snapshot")] == [f"{4:020d}.snapshot", f"{6:020d}.snapshot"]
    assert not list(d.glob("empty-*/*.snapshot"))


def test_shutdown_on_one_thread_closes_every_log(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    m = manager([d], recovery_threads_per_data_dir=1)
    for p in range(20):
        m.get_or_create_log("t", p, small_config(), uuid.UUID(int=1))
        produce(m, "t", p, 0)
    m.shutdown()
    assert len(list(d.glob("t-*/*.snapshot"))) == 20
    assert (d / CLEAN_SHUTDOWN_FILE).exists()


def test_a_snapshot_is_taken_only_past_the_last_one(tmp_path: Path) -> None:
    """Kafka's `lastSnapOffset`: nothing new, nothing written; a truncation below the last snapshot
    makes the next one due again."""
    ps = ProducerStateManager(tmp_path)
    assert ps.take_snapshot() is None  # offset 0, nothing there yet: as Kafka, no file
    ps.map_end_offset = 10
    assert ps.take_snapshot() == tmp_path / f"{10:020d}.snapshot"
    assert ps.take_snapshot() is None
    ps.map_end_offset = 12
    assert ps.take_snapshot() == tmp_path / f"{12:020d}.snapshot"
    ps.delete_snapshots_above(11)  # truncated to 11
    assert ps.last_snap_offset == 10
    ps.map_end_offset = 11
    assert ps.take_snapshot() == tmp_path / f"{11:020d}.snapshot"
    ps.delete_snapshots_above(-1)  # truncated fully
    assert ps.snapshot_offsets() == [] and ps.last_snap_offset == 0
    ps.map_end_offset = 5
    assert ps.take_snapshot() == tmp_path / f"{5:020d}.snapshot"

    loaded = ProducerStateManager(tmp_path)
    loaded.load(0, 5)
    assert loaded.last_snap_offset == 5 and loaded.take_snapshot() is None
    empty = ProducerStateManager(tmp_path / "other")
    empty.load(3, 3)  # no snapshot: the log start offset stands for one
    assert empty.last_snap_offset == 3 and empty.take_snapshot() is None
