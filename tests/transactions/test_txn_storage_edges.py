"""Transactions at the storage edges: the log cleaner removes transaction markers once nothing of
their transaction remains and `delete.retention.ms` has passed (Kafka's CleanedTransactionMetadata and
KIP-534 delete horizon), and a segment's `.txnindex` goes with the segment (retention, DeleteRecords,
truncation, the cleaner's swap)."""

from __future__ import annotations

from pathlib import Path

from kbroker.log.config import LogConfig
from kbroker.log.unified_log import UnifiedLog
from kbroker.protocol.records import SimpleRecord, build_batch
from tests.log.cleaner_helpers import Env, batches, compact_config, records

DELETE_RETENTION_MS = 60_000


def _txn(env: Env, pid: int, pairs: list[tuple[bytes, bytes]], seq: int = 0) -> None:
    batch = build_batch([SimpleRecord(v, k, env.clock.now) for k, v in pairs], producer_id=pid, producer_epoch=0,
                        base_sequence=seq, is_transactional=True, now_ms=env.clock.now)
    env.log.append_as_leader(memoryview(batch), 0)


def _marker(env: Env, pid: int, commit: bool) -> int:
    info = env.log.append_txn_marker(pid, 0, 1, commit=commit, leader_epoch=0)
    env.log.update_high_watermark(env.log.log_end_offset)
    return info.first_offset


def _fill(env: Env, n: int = 40, tag: int = 0) -> None:
    """Roll segments with overwritten keys so the section before is cleanable (dirty ratio high)."""
    for i in range(n):
        env.append([(b"filler-%d" % (i % 3), b"%d-" % tag + b"v" * 60)])


def _markers(env: Env) -> dict[int, bool]:
    """Offset of each control batch -> whether it carries a delete horizon."""
    return {b.base_offset: b.has_delete_horizon for b in batches(env.log) if b.is_control}


def test_markers_are_removed_after_their_data_and_the_delete_horizon(tmp_path: Path) -> None:
    env = Env(tmp_path, compact_config(delete_retention_ms=DELETE_RETENTION_MS))
    _txn(env, 7, [(b"a", b"aborted")])
    abort_at = _marker(env, 7, commit=False)
    _txn(env, 8, [(b"c", b"committed")])
    commit_at = _marker(env, 8, commit=True)
    env.append([(b"c", b"newer")])  # the committed record will be compacted away
    _fill(env, tag=1)

    # Round 1: the aborted data goes; both markers stay (their transactions had batches in this round),
    # and the aborted transaction stays indexed (its marker is kept).
    assert env.cleaner.clean_once() is not None
    kept = {(k, v) for _o, k, v in records(env.log)}
    assert (b"a", b"aborted") not in kept and (b"c", b"committed") not in kept and (b"c", b"newer") in kept
    assert _markers(env) == {abort_at: False, commit_at: False}
    assert [e.last_offset for e in env.log.aborted_txns.entries()] == [abort_at]

    # While a producer is active its last data batch stays as an empty batch (Kafka's RETAIN_EMPTY:
    # it holds the producer's last sequence), so its transaction's marker stays too.
    _fill(env, tag=2)
    assert env.cleaner.clean_once() is not None
    assert _markers(env) == {abort_at: False, commit_at: False}
    # The producers expire (producer.id.expiration.ms): their empty batches go in the next round.
    env.log.producer_state.remove_expired(env.clock.now + 1, 0)
    _fill(env, tag=5)
    assert env.cleaner.clean_once() is not None
    # Round 3: nothing of either transaction is left: the markers are stamped with a delete horizon,
    # not removed yet (a consumer that read the data still has delete.retention.ms to see them).
    _fill(env, tag=6)
    assert env.cleaner.clean_once() is not None
    assert _markers(env) == {abort_at: True, commit_at: True}
    assert env.log.aborted_txns.entries() == []  # no aborted data left to filter

    # Round 3, before the horizon: still there. Round 4, after it: gone.
    env.clock.advance(DELETE_RETENTION_MS // 2)
    _fill(env, tag=3)
    assert env.cleaner.clean_once() is not None
    assert set(_markers(env)) == {abort_at, commit_at}
    env.clock.advance(DELETE_RETENTION_MS)
    _fill(env, tag=4)
    assert env.cleaner.clean_once() is not None
    assert _markers(env) == {}
    assert (b"c", b"newer") in {(k, v) for _o, k, v in records(env.log)}
    # Nothing is left open: the LSO is the high watermark.
    assert env.log.last_stable_offset == env.log.high_watermark
    env.lm.shutdown()


def test_marker_of_aborted_transaction_stays_while_its_data_does(tmp_path: Path) -> None:
    """An ABORT marker whose transaction still has batches in the round is kept, horizon or not, and a
    COMMIT marker whose data survives compaction is never removed."""
    env = Env(tmp_path, compact_config(delete_retention_ms=0))
    _txn(env, 9, [(b"keep", b"committed-forever")])
    commit_at = _marker(env, 9, commit=True)
    _fill(env, tag=1)
    for tag in range(2, 5):
        assert env.cleaner.clean_once() is not None
        env.clock.advance(1000)
        _fill(env, tag=tag)
    assert commit_at in _markers(env)
    assert (b"keep", b"committed-forever") in {(k, v) for _o, k, v in records(env.log)}
    env.lm.shutdown()


def _txn_log(d: Path, **config: object) -> UnifiedLog:
    base: dict[str, object] = dict(segment_bytes=300, file_delete_delay_ms=0)
    base.update(config)
    return UnifiedLog(d / "t-0", LogConfig(**base), time_ms=lambda: 1000)  # type: ignore[arg-type]


def _aborted_txn(log: UnifiedLog, pid: int) -> int:
    batch = build_batch([SimpleRecord(b"x" * 50, None, 1000)], producer_id=pid, producer_epoch=0, base_sequence=0,
                        is_transactional=True, now_ms=1000)
    log.append_as_leader(memoryview(batch), 0)
    info = log.append_txn_marker(pid, 0, 1, commit=False, leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    return info.first_offset


def _txnindex_files(log: UnifiedLog) -> list[str]:
    return sorted(p.name for p in log.dir.iterdir() if ".txnindex" in p.name)


def test_txnindex_deleted_with_its_segment_by_retention(tmp_path: Path) -> None:
    log = _txn_log(tmp_path)
    first_marker = _aborted_txn(log, 1)
    first_base = log.segments[-1].base_offset
    log.roll()
    for pid in range(2, 6):
        _aborted_txn(log, pid)
        log.roll()
    assert f"{first_base:020d}.txnindex" in _txnindex_files(log)
    assert len(log.aborted_txns) == 5
    # DeleteRecords past the first segment: its .txnindex goes with it, and its entry is forgotten.
    log.delete_records_before(log.segments[1].base_offset)
    log.delete_old_segments()
    assert f"{first_base:020d}.txnindex" not in _txnindex_files(log)
    assert not any(n.endswith(".deleted") for n in _txnindex_files(log))  # file.delete.delay.ms = 0
    assert first_marker not in [e.last_offset for e in log.aborted_txns.entries()]
    assert len(log.aborted_txns) == 4
    log.close()
    # Reopened: the deleted segment's entry does not come back.
    again = _txn_log(tmp_path)
    assert len(again.aborted_txns) == 4
    again.close()


def test_txnindex_deleted_with_truncated_segments(tmp_path: Path) -> None:
    log = _txn_log(tmp_path)
    _aborted_txn(log, 1)
    log.roll()
    keep_to = log.log_end_offset
    _aborted_txn(log, 2)
    log.roll()
    _aborted_txn(log, 3)
    assert len(_txnindex_files(log)) == 3
    log.truncate_to(keep_to)
    assert len(_txnindex_files(log)) == 1 and len(log.aborted_txns) == 1
    log.truncate_fully_and_start_at(100)
    assert _txnindex_files(log) == [] and len(log.aborted_txns) == 0
    log.close()
    again = _txn_log(tmp_path)
    assert len(again.aborted_txns) == 0
    again.close()
