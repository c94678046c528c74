"""The log side of transactions: LSO from open transactions, the .txnindex aborted index (Kafka's
34-byte entries), markers, and recovery of both after a restart."""

from __future__ import annotations

import struct
from pathlib import Path

from kbroker.log.config import LogConfig
from kbroker.log.unified_log import UnifiedLog
from kbroker.protocol.records import SimpleRecord, build_batch


def _txn_batch(pid: int, seq: int, n: int = 2, epoch: int = 0) -> memoryview:
    return memoryview(build_batch([SimpleRecord(b"v%d" % i, None, 1000) for i in range(n)], producer_id=pid,
                                  producer_epoch=epoch, base_sequence=seq, is_transactional=True, now_ms=1000))


def _log(d: Path) -> UnifiedLog:
    return UnifiedLog(d / "t-0", LogConfig(), time_ms=lambda: 1000)


def test_lso_follows_open_transactions_and_abort_is_indexed(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append_as_leader(memoryview(build_batch([SimpleRecord(b"plain", None, 1000)], now_ms=1000)), 0)  # 0
    log.append_as_leader(_txn_batch(7, 0), 0)  # 1-2
    log.append_as_leader(_txn_batch(8, 0), 0)  # 3-4
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 1
    log.append_txn_marker(7, 0, 3, commit=False, leader_epoch=0)  # 5
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 3  # producer 8 still open
    log.append_txn_marker(8, 0, 3, commit=True, leader_epoch=0)  # 6
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 7
    assert log.collect_aborted_transactions(0, 7) == [(7, 1)]
    assert log.collect_aborted_transactions(6, 7) == []
    raw = (tmp_path / "t-0" / f"{0:020d}.txnindex").read_bytes()
    assert len(raw) == 34
    assert struct.unpack(">hqqqq", raw) == (0, 7, 1, 5, 3)
    log.close()


def test_restart_rebuilds_open_transaction_and_index(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append_as_leader(_txn_batch(7, 0), 0)  # 0-1
    log.append_txn_marker(7, 0, 1, commit=False, leader_epoch=0)  # 2
    log.append_as_leader(_txn_batch(9, 0), 0)  # 3-4 open
    log.close()
    again = _log(tmp_path)
    again.update_high_watermark(again.log_end_offset)
    assert again.last_stable_offset == 3
    assert again.collect_aborted_transactions(0, 5) == [(7, 0)]
    again.close()
    # An unclean restart replays the log after the newest snapshot (no snapshot here).
    for snap in (tmp_path / "t-0").glob("*.snapshot"):
        snap.unlink()
    third = UnifiedLog(tmp_path / "t-0", LogConfig(), time_ms=lambda: 1000, had_clean_shutdown=False)
    third.update_high_watermark(third.log_end_offset)
    assert third.last_stable_offset == 3
    assert third.collect_aborted_transactions(0, 5) == [(7, 0)]
    assert len(third.aborted_txns) == 1


def test_truncation_drops_index_entries(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append_as_leader(_txn_batch(7, 0), 0)  # 0-1
    log.append_txn_marker(7, 0, 1, commit=False, leader_epoch=0)  # 2
    log.truncate_to(2)
    log.update_high_watermark(log.log_end_offset)
    assert log.collect_aborted_transactions(0, 10) == []
    assert log.last_stable_offset == 0  # the transaction is open again


def test_marker_with_older_epoch_is_refused(tmp_path: Path) -> None:
    import pytest

    from kbroker.log.errors import InvalidProducerEpochError
    log = _log(tmp_path)
    log.append_as_leader(_txn_batch(7, 0, epoch=3), 0)
    with pytest.raises(InvalidProducerEpochError):
        log.append_txn_marker(7, 2, 1, commit=True, leader_epoch=0)


def test_compaction_drops_aborted_records_and_keeps_committed(tmp_path: Path) -> None:
    """An aborted write of a key neither survives compaction nor shadows the committed value
    (Kafka's CleanedTransactionMetadata)."""
    from tests.log.cleaner_helpers import Env, compact_config, records

    env = Env(tmp_path, compact_config())
    env.append([(b"k", b"committed"), (b"j", b"1")])
    aborted = build_batch([SimpleRecord(b"aborted", b"k", 1000), SimpleRecord(b"gone", b"x", 1000)],
                          producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True, now_ms=1000)
    env.log.append_as_leader(memoryview(aborted), 0)
    env.log.append_txn_marker(7, 0, 1, commit=False, leader_epoch=0)
    for i in range(40):  # roll segments so the transaction lies in the cleanable section
        env.append([(b"filler-%d" % (i % 3), b"v" * 60)])
    assert env.cleaner.clean_once() is not None
    kept = {(k, v) for _o, k, v in records(env.log)}
    assert (b"k", b"committed") in kept
    assert (b"k", b"aborted") not in kept and (b"x", b"gone") not in kept
    env.lm.shutdown()


def test_lso_never_falls_below_the_log_start_offset(tmp_path: Path) -> None:
    """DeleteRecords past the first batch of an open transaction: Kafka counts the transaction from the
    log start (maybeIncrementFirstUnstableOffset), so read_committed consumers are not sent below it.
    Found by the producer-state walk against Kafka 4.3.1 (tests/differential/test_producer_state_vs_kafka.py)."""
    log = _log(tmp_path)
    log.append_as_leader(_txn_batch(7, 0), 0)  # 0-1, open
    log.append_as_leader(memoryview(build_batch([SimpleRecord(b"plain", None, 1000)], now_ms=1000)), 0)  # 2
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 0
    log.delete_records_before(2)
    assert (log.log_start_offset, log.last_stable_offset) == (2, 2)
    log.append_txn_marker(7, 0, 3, commit=True, leader_epoch=0)  # 3
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 4
