"""Idempotent producers: duplicates get their original offsets, gaps and stale epochs are rejected,
and the state survives clean and unclean restarts (snapshots in Kafka's format + log replay)."""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import pytest
from log_test_helpers import NOW, make_batch, open_log, small_config

from kbroker.log import InvalidProducerEpochError, OutOfOrderSequenceError
from kbroker.log.unified_log import UnifiedLog

PID = 4242


def produce(log: UnifiedLog, seq: int, n: int = 2, epoch: int = 0, pid: int = PID):  # type: ignore[no-untyped-def]
    return log.append_as_leader(memoryview(make_batch(n, 30, pid=pid, epoch=epoch, seq=seq)), 0)


def test_duplicates_within_last_five_batches(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    infos = [produce(log, seq) for seq in range(0, 12, 2)]  # six batches: seq 0..11
    end = log.log_end_offset
    for i in range(1, 6):  # the last five are remembered
        dup = produce(log, 2 * i)
        assert dup.duplicate and (dup.first_offset, dup.last_offset) == (infos[i].first_offset, infos[i].last_offset)
    assert log.log_end_offset == end
    with pytest.raises(OutOfOrderSequenceError):
        produce(log, 0)  # the oldest fell out of the window: looks like a gap now
    with pytest.raises(OutOfOrderSequenceError):
        produce(log, 13)  # gap after last sequence 11
    assert produce(log, 12).first_offset == end


def test_epochs(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    produce(log, 0, epoch=3)
    with pytest.raises(InvalidProducerEpochError):
        produce(log, 2, epoch=2)
    with pytest.raises(OutOfOrderSequenceError):
        produce(log, 5, epoch=4)  # a new epoch must start at sequence 0
    produce(log, 0, epoch=4)
    produce(log, 2, epoch=4)
    # Unknown producers are accepted at any sequence (KIP-360).
    assert produce(log, 77, pid=999).first_offset == 6


def test_sequence_wraps_at_int32_max(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    produce(log, 2**31 - 2, n=1)
    produce(log, 2**31 - 1, n=1)
    assert not produce(log, 0, n=1).duplicate


@pytest.mark.parametrize("clean", [True, False])
def test_state_survives_restart(tmp_path: Path, clean: bool) -> None:
    cfg = small_config(segment_bytes=1024)
    log = open_log(tmp_path / "t-0", cfg)
    infos = [produce(log, seq) for seq in range(0, 40, 2)]
    assert log.num_segments > 2
    if clean:
        log.close()
    else:  # simulate a crash: drop the object without closing (no final snapshot, untrimmed indexes)
        for seg in log.segments:
            seg.offset_index.close_handler()
            seg.time_index.close_handler()
    snaps = sorted((tmp_path / "t-0").glob("*.snapshot"))
    assert snaps, "snapshots are taken at every roll"
    log2 = open_log(tmp_path / "t-0", cfg, had_clean_shutdown=clean)
    dup = produce(log2, 38)
    assert dup.duplicate and dup.first_offset == infos[-1].first_offset
    with pytest.raises(OutOfOrderSequenceError):
        produce(log2, 41)
    assert not produce(log2, 40).duplicate


def test_snapshot_file_format(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    produce(log, 0, n=3, epoch=2)
    produce(log, 5, n=1, epoch=0, pid=7)
    log.close()
    path = tmp_path / "t-0" / f"{log.log_end_offset:020d}.snapshot"
    data = path.read_bytes()
    version, crc, count = struct.unpack_from(">hIi", data, 0)
    assert version == 1 and count == 2 and crc == crc32c.crc32c(data[6:])
    entries = {}
    for i in range(count):
        pid, epoch, last_seq, last_off, delta, ts, coord, txn = struct.unpack_from(">qhiqiqiq", data, 10 + 46 * i)
        entries[pid] = (epoch, last_seq, last_off, delta, coord, txn)
    assert entries[PID] == (2, 2, 2, 2, -1, -1)
    assert entries[7] == (0, 5, 3, 0, -1, -1)


def test_idle_producers_expire(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    produce(log, 0)  # batch timestamps are NOW (+ record index)
    produce(log, 0, pid=8)
    assert log.producer_state.remove_expired(NOW + 1000, 86_400_000) == 0
    assert log.producer_state.remove_expired(NOW + 86_400_001, 86_400_000) == 2
    assert not produce(log, 2).duplicate  # unknown again: any sequence is accepted
