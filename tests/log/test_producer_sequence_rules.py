"""The sequence rules of a client's batch against the producer state of one partition, case by case
as Kafka's ProducerAppendInfo.checkSequence has them (storage/.../ProducerAppendInfo.java, 4.3), and
the KIP-890 verification states (VerificationStateEntry) that tighten them for transactions.

The first case is the one ci28 caught with a stock Java client in a mixed cluster: a transactions-
version-2 marker bumps the producer's epoch and clears its batches, and kbroker then took a batch at
the new epoch with sequence 3, after which every batch of the producer was out of order.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from log_test_helpers import NOW, open_log

from kbroker.log import OutOfOrderSequenceError
from kbroker.log.producer_state import ProducerStateManager
from kbroker.log.unified_log import UnifiedLog
from kbroker.protocol.records import SimpleRecord, build_batch

PID = 7001


def batch(seq: int, epoch: int, n: int = 1, transactional: bool = False, pid: int = PID) -> bytearray:
    return build_batch([SimpleRecord(b"v%d" % i, None, NOW + i) for i in range(n)], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, is_transactional=transactional)


def append(log: UnifiedLog, *batches: bytearray) -> int:
    data = bytearray()
    for b in batches:
        data += b
    return log.append_as_leader(memoryview(data), 0).first_offset


def transaction_then_tv2_marker(log: UnifiedLog) -> None:
    """Transaction 1 at epoch 0 (sequences 0-2), committed by a marker at the bumped epoch 1."""
    append(log, batch(0, 0, n=3, transactional=True))
    log.append_txn_marker(PID, 1, 0, True, 0)
    entry = log.producer_state.producers[PID]
    assert entry.producer_epoch == 1 and not entry.batches


@pytest.mark.parametrize("seq, accepted", [(0, True), (3, False), (1, False), (2**31 - 1, False)])
def test_after_a_tv2_marker_only_sequence_0_follows_at_the_bumped_epoch(tmp_path: Path, seq: int,
                                                                         accepted: bool) -> None:
    log = open_log(tmp_path / "t-0")
    transaction_then_tv2_marker(log)
    if accepted:
        assert append(log, batch(seq, 1, transactional=True)) == 4
    else:
        with pytest.raises(OutOfOrderSequenceError, match="-1 \\(current end sequence number\\)"):
            append(log, batch(seq, 1, transactional=True))
        assert log.log_end_offset == 4


def test_the_rule_holds_after_a_restart_from_the_snapshot(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    transaction_then_tv2_marker(log)
    log.close()
    log = open_log(tmp_path / "t-0")
    with pytest.raises(OutOfOrderSequenceError):
        append(log, batch(3, 1, transactional=True))
    assert append(log, batch(0, 1, transactional=True)) == 4


def test_a_producer_with_no_epoch_here_may_start_anywhere_even_within_one_request(tmp_path: Path) -> None:
    """KIP-360: the producer's data is gone (retention, DeleteRecords): currentEntry has no epoch, and
    Kafka accepts every batch of the request whatever its sequence."""
    log = open_log(tmp_path / "t-0")
    assert append(log, batch(5, 0), batch(9, 0)) == 0
    with pytest.raises(OutOfOrderSequenceError):
        append(log, batch(12, 0))  # now it is known: 9 is its last sequence
    assert append(log, batch(10, 0)) == 2


def test_a_known_producer_follows_its_last_sequence_within_a_request(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    append(log, batch(0, 0))
    with pytest.raises(OutOfOrderSequenceError):
        append(log, batch(1, 0), batch(3, 0))
    assert log.log_end_offset == 1
    assert append(log, batch(1, 0), batch(2, 0)) == 1


def test_a_new_epoch_starts_at_0_unless_the_producer_had_none(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    append(log, batch(0, 0))
    with pytest.raises(OutOfOrderSequenceError, match="new epoch"):
        append(log, batch(1, 1))
    assert append(log, batch(0, 1)) == 1


# --- KIP-890 verification states --------------------------------------------------------------------


def verify(log: UnifiedLog, seq: int, epoch: int, tv2: bool = True, now: int = NOW) -> None:
    log.producer_state.maybe_start_transaction_verification(PID, seq, epoch, tv2, now)


def test_tv2_verification_wants_sequence_0_from_a_producer_new_to_the_partition(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    verify(log, 3, 0)
    with pytest.raises(OutOfOrderSequenceError, match="Expected sequence 0 for transactions v2"):
        append(log, batch(3, 0, transactional=True))
    assert log.log_end_offset == 0
    assert PID in log.producer_state.verification_states  # a failed append leaves it
    verify(log, 0, 0)
    assert append(log, batch(0, 0, transactional=True)) == 0
    assert PID not in log.producer_state.verification_states  # the transaction has its first offset


def test_tv1_verification_keeps_the_kip360_rule_for_a_new_producer(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    verify(log, 3, 0, tv2=False)
    assert append(log, batch(3, 0, transactional=True)) == 0


def test_an_append_above_the_lowest_verified_sequence_is_out_of_order(tmp_path: Path) -> None:
    """Two produces of one transaction verified out of order: the later one (sequence 2) must not
    be written before the first (sequence 0)."""
    log = open_log(tmp_path / "t-0")
    verify(log, 0, 0, tv2=False)
    verify(log, 2, 0, tv2=False)
    assert log.producer_state.verification_states[PID].lowest_sequence == 0
    with pytest.raises(OutOfOrderSequenceError, match="0 \\(earliest seen sequence\\)"):
        append(log, batch(2, 0, n=2, transactional=True))
    assert append(log, batch(0, 0, n=2, transactional=True)) == 0
    assert append(log, batch(2, 0, n=2, transactional=True)) == 2


def test_no_verification_state_while_the_transaction_is_open_at_that_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    append(log, batch(0, 0, transactional=True))
    verify(log, 1, 0)
    assert not log.producer_state.verification_states
    verify(log, 0, 1)  # another epoch: the open transaction is not this one
    assert log.producer_state.verification_states[PID].epoch == 1


def test_a_newer_epoch_restarts_the_lowest_sequence() -> None:
    sm = ProducerStateManager(Path("/nonexistent"))
    sm.maybe_start_transaction_verification(PID, 4, 0, False, NOW)
    sm.maybe_start_transaction_verification(PID, 9, 1, True, NOW)
    v = sm.verification_states[PID]
    assert (v.epoch, v.lowest_sequence, v.supports_epoch_bump) == (1, 9, True)
    sm.maybe_start_transaction_verification(PID, 2, 0, True, NOW)  # an older epoch changes nothing
    assert (v.epoch, v.lowest_sequence) == (1, 9)


@pytest.mark.parametrize("tv2, verified_epoch, kept", [
    (True, 1, True),    # the next TV2 transaction, verified before this marker: it survives
    (True, 0, False),   # a verification of the epoch the marker ends
    (False, 1, False),  # TV1: every marker ends it
])
def test_a_marker_ends_the_verification_unless_it_is_the_next_tv2_transactions(
        tmp_path: Path, tv2: bool, verified_epoch: int, kept: bool) -> None:
    log = open_log(tmp_path / "t-0")
    append(log, batch(0, 0, transactional=True))
    verify(log, 0, verified_epoch, tv2=tv2)
    log.append_txn_marker(PID, 1, 0, False, 0)
    assert (PID in log.producer_state.verification_states) is kept


def test_verification_states_expire_with_producer_ids(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    verify(log, 0, 0, now=NOW)
    log.producer_state.remove_expired(NOW + 999, 1000)
    assert PID in log.producer_state.verification_states
    log.producer_state.remove_expired(NOW + 1000, 1000)
    assert PID not in log.producer_state.verification_states


# --- KIP-1228: the epoch of a marker, by its transaction version -------------------------------------


@pytest.mark.parametrize("open_txn, marker_epoch, tv, accepted", [
    (True, 0, 2, False),   # TV2: the open transaction's own epoch: a late marker of the previous one
    (True, 1, 2, True),    # TV2: the coordinator bumped the epoch for this marker
    (True, 0, 0, True),    # TV0/1 markers share the data's epoch
    (False, 0, 2, True),   # TV2, nothing open at epoch 0: a retry of a marker already written (KAFKA-19999)
    (False, 0, 1, True),
])
def test_a_markers_epoch_is_checked_by_its_transaction_version(tmp_path: Path, open_txn: bool, marker_epoch: int,
                                                              tv: int, accepted: bool) -> None:
    from kbroker.log import InvalidProducerEpochError

    log = open_log(tmp_path / "t-0")
    append(log, batch(0, 0, transactional=open_txn))
    end = log.log_end_offset
    if accepted:
        log.append_txn_marker(PID, marker_epoch, 0, False, 0, transaction_version=tv)
        assert log.log_end_offset == end + 1
    else:
        with pytest.raises(InvalidProducerEpochError, match=f"<= the last seen epoch 0 \\(TV{tv}\\)"):
            log.append_txn_marker(PID, marker_epoch, 0, False, 0, transaction_version=tv)
        assert log.log_end_offset == end
        assert log.producer_state.producers[PID].current_txn_first_offset == 0  # still open


def test_an_older_markers_epoch_is_refused_whatever_its_version(tmp_path: Path) -> None:
    from kbroker.log import InvalidProducerEpochError

    log = open_log(tmp_path / "t-0")
    append(log, batch(0, 3))
    for tv in (0, 2):
        with pytest.raises(InvalidProducerEpochError):
            log.append_txn_marker(PID, 2, 0, False, 0, transaction_version=tv)


def test_a_plain_batch_while_the_producers_transaction_is_open_is_invalid_txn_state(tmp_path: Path) -> None:
    from kbroker.log.errors import InvalidTxnStateError

    log = open_log(tmp_path / "t-0")
    append(log, batch(0, 0, transactional=True))
    with pytest.raises(OutOfOrderSequenceError):  # the sequence is checked first, as Kafka's appendDataBatch
        append(log, batch(5, 0))
    with pytest.raises(InvalidTxnStateError, match="Expected transactional write from producer"):
        append(log, batch(1, 0))
    assert log.log_end_offset == 1
    log.append_txn_marker(PID, 0, 0, True, 0)
    assert append(log, batch(1, 0)) == 2  # once it is over, the producer may write plain batches
