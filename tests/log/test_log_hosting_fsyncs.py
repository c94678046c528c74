"""Hosting many new partitions does not fsync ``partition.metadata`` one by one on the caller's
thread (the event loop): the files are written, then one background job fsyncs them all (issue 12,
Kafka's ``PartitionMetadataFile.record`` / ``maybeFlush``)."""
from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from kbroker.log.config import LogConfig
from kbroker.log.manager import LogManager

N = 500


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """os.fsync calls counted by thread name."""
    counts: dict[str, int] = {}
    real = os.fsync

    def counting(fd: int) -> None:
        name = threading.current_thread().name
        counts[name] = counts.get(name, 0) + 1
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    return counts


def test_hosting_many_partitions_batches_partition_metadata_fsyncs(tmp_path: Path, fsyncs: dict[str, int]) -> None:
    jobs: list[Callable[[], None]] = []
    lm = LogManager([tmp_path], LogConfig(), node_id=1, background_executor=jobs.append)
    topic_id = uuid.uuid4()
    for p in range(N):
        lm.get_or_create_log("t", p, topic_id=topic_id)
    caller = threading.current_thread().name
    # The old path paid two fsyncs per partition (the file and its directory) right here.
    assert fsyncs.get(caller, 0) <= 2, fsyncs
    assert len(jobs) == 1  # one flush job for the whole batch, not one per partition
    assert lm.topic_id_of("t", 0) == topic_id  # readable before the flush (page cache)
    worker = threading.Thread(target=jobs[0], name="flusher")
    worker.start()
    worker.join()
    # one fsync per file, one per partition directory, one for the log dir
    assert fsyncs["flusher"] == 2 * N + 1
    # the next partition schedules a new job
    lm.get_or_create_log("t", N, topic_id=topic_id)
    assert len(jobs) == 2
    lm.shutdown()  # flushes what the job has not
    assert (tmp_path / f"t-{N}" / "partition.metadata").exists()


def test_without_executor_partition_metadata_is_fsynced_at_once(tmp_path: Path, fsyncs: dict[str, int]) -> None:
    lm = LogManager([tmp_path], LogConfig(), node_id=1)
    lm.get_or_create_log("t", 0, topic_id=uuid.uuid4())
    assert fsyncs.get(threading.current_thread().name, 0) >= 2  # file + directory, as before
    lm.shutdown()


def test_deleted_log_before_flush_is_skipped(tmp_path: Path, fsyncs: dict[str, int]) -> None:
    jobs: list[Callable[[], None]] = []
    lm = LogManager([tmp_path], LogConfig(), node_id=1, background_executor=jobs.append)
    topic_id = uuid.uuid4()
    lm.get_or_create_log("t", 0, topic_id=topic_id)
    lm.get_or_create_log("t", 1, topic_id=topic_id)
    lm.delete_log("t", 0)
    jobs[0]()  # no error for the deleted file
    assert lm.topic_id_of("t", 1) == topic_id
    lm.shutdown()


def test_failed_partition_metadata_fsync_takes_the_log_dir_offline(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # Kafka's PartitionMetadataFile.maybeFlush hands the IOException to maybeAddOfflineLogDir: the
    # topic id the broker already serves may be lost, so the directory goes offline (its partitions
    # answer KAFKA_STORAGE_ERROR), rather than a line in the log.
    good, bad = tmp_path / "good", tmp_path / "bad"
    jobs: list[Callable[[], None]] = []
    lm = LogManager([good, bad], LogConfig(), node_id=1, background_executor=jobs.append)
    failed: list[Path] = []
    lm.log_dir_failure_listener = failed.append
    topic_id = uuid.uuid4()
    logs = [lm.get_or_create_log("t", p, topic_id=topic_id) for p in range(4)]
    assert {log.parent_dir for log in logs} == {good, bad}
    real = os.fsync

    def failing(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(bad) + "/"):
            raise OSError(5, "Input/output error")
        real(fd)

    monkeypatch.setattr(os, "fsync", failing)
    jobs[0]()
    assert failed == [bad]
    assert lm.offline_dirs == [bad]
    assert all(log.offline == (log.parent_dir == bad) for log in logs)
    monkeypatch.setattr(os, "fsync", real)
    lm.shutdown()
