"""Disk error injection: ENOSPC/EIO surface as KafkaStorageError and leave a consistent log."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from log_test_helpers import make_batch, open_log, read_all, small_config

from kbroker.log import KafkaStorageError, LogOfflineError
from kbroker.log import segment as segment_mod
from kbroker.log import unified_log as unified_log_mod

real_pwrite = os.pwrite


def half_then_enospc(fd: int, data: bytes, offset: int) -> int:
    real_pwrite(fd, bytes(data)[: len(data) // 2], offset)  # the disk took half, then filled up
    raise OSError(errno.ENOSPC, "No space left on device")


def test_enospc_mid_write_rolls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(memoryview(make_batch(3, pid=5, epoch=0, seq=0)), 0)
    before = read_all(log)
    size = log.active_segment.size
    monkeypatch.setattr(segment_mod.os, "pwrite", half_then_enospc)
    with pytest.raises(KafkaStorageError) as exc:
        log.append_as_leader(memoryview(make_batch(2, pid=5, epoch=0, seq=3)), 0)
    assert exc.value.error_code == 56
    monkeypatch.setattr(segment_mod.os, "pwrite", real_pwrite)
    assert os.path.getsize(log.active_segment.log_path) == size == log.active_segment.size
    assert log.log_end_offset == 3 and read_all(log) == before and not log.offline
    # The producer state did not move: the retry is accepted as new data, not a duplicate or a gap.
    info = log.append_as_leader(memoryview(make_batch(2, pid=5, epoch=0, seq=3)), 0)
    assert (info.first_offset, info.duplicate) == (3, False)


def test_a_short_write_is_finished_by_more_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pwrite may write less than asked (a signal, a nearly full disk): the segment writes the rest."""
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(memoryview(make_batch(3, tag=0)), 0)
    calls = []

    def a_few_bytes_at_a_time(fd: int, data: bytes, offset: int) -> int:
        calls.append(len(data))
        return real_pwrite(fd, bytes(data)[:7], offset)

    monkeypatch.setattr(segment_mod.os, "pwrite", a_few_bytes_at_a_time)
    batch = make_batch(2, tag=1)
    info = log.append_as_leader(memoryview(batch), 0)
    monkeypatch.undo()
    assert len(calls) == -(-len(batch) // 7) and info.first_offset == 3
    assert os.path.getsize(log.active_segment.log_path) == log.active_segment.size
    assert [offset for offset, _, _ in read_all(log)] == [0, 1, 2, 3, 4]


def test_failed_rollback_marks_log_offline_and_recovery_repairs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "t-0"
    log = open_log(d)
    for i in range(4):
        log.append_as_leader(memoryview(make_batch(2, tag=i)), 0)
    before = read_all(log)
    monkeypatch.setattr(segment_mod.os, "pwrite", half_then_enospc)
    monkeypatch.setattr(segment_mod.os, "ftruncate", lambda fd, n: (_ for _ in ()).throw(OSError(errno.EIO, "I/O error")))
    with pytest.raises(KafkaStorageError):
        log.append_as_leader(memoryview(make_batch(2)), 0)
    monkeypatch.undo()
    assert log.offline
    with pytest.raises(LogOfflineError):
        log.append_as_leader(memoryview(make_batch(1)), 0)
    with pytest.raises(LogOfflineError):
        log.read(0, 100)
    assert os.path.getsize(log.active_segment.log_path) > log.active_segment.size  # the torn half is on disk
    for seg in log.segments:
        seg.offset_index.close_handler()
        seg.time_index.close_handler()
    log2 = open_log(d, had_clean_shutdown=False)  # recovery truncates the torn batch away
    assert read_all(log2) == before and log2.log_end_offset == 8


def test_fsync_failure_is_a_storage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(memoryview(make_batch(2)), 0)

    def eio(fd: int) -> None:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(segment_mod.os, "fsync", eio)
    with pytest.raises(KafkaStorageError):
        log.flush()
    assert log.recovery_point == 0  # not advanced: the data is not known to be durable


def test_failed_roll_keeps_the_log_usable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=1000))
    while log.active_segment.size < 700:
        log.append_as_leader(memoryview(make_batch(1, 100)), 0)
    before = read_all(log)

    def no_space(self: object, base_offset: int) -> object:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(unified_log_mod.UnifiedLog, "_new_segment", no_space)
    with pytest.raises(KafkaStorageError):
        for _ in range(5):
            log.append_as_leader(memoryview(make_batch(1, 100)), 0)
    monkeypatch.undo()
    assert read_all(log) == before  # the append that needed the roll wrote nothing
    end = log.log_end_offset
    log.append_as_leader(memoryview(make_batch(1, 100)), 0)
    assert log.log_end_offset == end + 1 and log.num_segments == 2
    assert [r[0] for r in read_all(log)] == list(range(end + 1))
