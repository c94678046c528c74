"""Transactions version 2 (KIP-890 part 2) in the coordinator's state machine, sans-IO on a fake clock:
the epoch bump of every EndTxn (markers at the bumped epoch), Kafka's retry table, the implicit add
that opens the next transaction, the epoch overflow that rotates the producer id, the coordinator's own
aborts bumping twice, and TransactionLogValue v1 (PreviousProducerId, NextProducerId,
ClientTransactionVersion) surviving a reload."""

from __future__ import annotations

from kbroker.coord.transaction_state import (
    MAX_EPOCH,
    TransactionMetadata,
    TransactionState,
    TransactionStateShard,
)
from kbroker.protocol.coordinator_records import Coordinator
from kbroker.protocol.coordinator_records.serde import decode_coordinator_value
from kbroker.protocol.coordinator_records.transaction_log import TransactionLogValue
from kbroker.protocol.errors import ErrorCode as E
from tests.transactions.test_transaction_state import Harness


class TV2Harness(Harness):
    def new_shard(self) -> TransactionStateShard:
        holder: list[TransactionStateShard] = []
        shard = TransactionStateShard(0, self.append, lambda m, commit: self.send_markers(holder[0], m, commit),
                                      lambda: self.now, coordinator_epoch=3, transaction_version=lambda: 2)
        holder.append(shard)
        return shard


def _start(h: Harness) -> int:
    r = h.shard.init_producer_id("t", 60_000, -1, -1, h.pid)
    assert (r.error, r.producer_epoch) == (E.NONE, 0)
    return r.producer_id


def _end(h: Harness, pid: int, epoch: int, commit: bool) -> tuple[E, int, int]:
    r = h.shard.end_transaction_v2("t", pid, epoch, commit, h.pid)
    return r.error, r.producer_id, r.producer_epoch


def test_every_end_bumps_the_epoch_and_the_markers_carry_it() -> None:
    h = TV2Harness()
    pid = _start(h)
    assert h.shard.add_partitions("t", pid, 0, {("a", 0)}, client_transaction_version=2) == E.NONE
    assert _end(h, pid, 0, True) == (E.NONE, pid, 1)
    assert h.markers == [(pid, 1, True, (("a", 0),))]
    m = h.shard.txns["t"]
    assert (m.state, m.producer_epoch, m.last_producer_epoch) == (TransactionState.COMPLETE_COMMIT, 1, 0)
    # The implicit add of the next transaction, at the epoch EndTxn returned; the old epoch is fenced.
    assert h.shard.add_partitions("t", pid, 0, {("a", 0)}, client_transaction_version=2) == E.PRODUCER_FENCED
    assert h.shard.add_partitions("t", pid, 1, {("a", 1)}, client_transaction_version=2) == E.NONE
    assert h.shard.txns["t"].partitions == {("a", 1)}
    assert _end(h, pid, 1, False) == (E.NONE, pid, 2)
    assert h.markers[-1] == (pid, 2, False, (("a", 1),))


def test_kafka_retry_table() -> None:
    """TransactionCoordinator's TV2 table: Retry = the epoch one below the current one."""
    h = TV2Harness()
    pid = _start(h)
    # Empty: abort at the current epoch bumps (an empty abort), commit is INVALID_TXN_STATE.
    assert _end(h, pid, 0, True) == (E.INVALID_TXN_STATE, -1, -1)
    assert _end(h, pid, 0, False) == (E.NONE, pid, 1)
    # CompleteAbort: retry abort NONE (no new markers), retry commit ITS, current abort bumps, commit ITS.
    markers = len(h.markers)
    assert _end(h, pid, 0, False) == (E.NONE, pid, 1)
    assert len(h.markers) == markers
    assert _end(h, pid, 0, True) == (E.INVALID_TXN_STATE, -1, -1)
    assert _end(h, pid, 1, True) == (E.INVALID_TXN_STATE, -1, -1)
    assert _end(h, pid, 1, False) == (E.NONE, pid, 2)
    # CompleteCommit: retry commit NONE, retry abort ITS, current commit ITS, current abort bumps.
    assert h.shard.add_partitions("t", pid, 2, {("a", 0)}, client_transaction_version=2) == E.NONE
    assert _end(h, pid, 2, True) == (E.NONE, pid, 3)
    assert _end(h, pid, 2, True) == (E.NONE, pid, 3)
    assert _end(h, pid, 2, False) == (E.INVALID_TXN_STATE, -1, -1)
    assert _end(h, pid, 3, True) == (E.INVALID_TXN_STATE, -1, -1)
    assert _end(h, pid, 3, False) == (E.NONE, pid, 4)
    # Older epochs and other producer ids.
    assert _end(h, pid, 1, False) == (E.PRODUCER_FENCED, -1, -1)
    assert _end(h, pid + 50, 4, False) == (E.INVALID_PRODUCER_ID_MAPPING, -1, -1)


def test_a_retry_while_the_markers_are_out_is_concurrent_transactions() -> None:
    h = TV2Harness()
    pid = _start(h)
    h.auto_ack = False
    assert h.shard.add_partitions("t", pid, 0, {("a", 0)}, client_transaction_version=2) == E.NONE
    assert _end(h, pid, 0, True) == (E.NONE, pid, 1)
    assert h.shard.txns["t"].state == TransactionState.PREPARE_COMMIT
    assert _end(h, pid, 0, True) == (E.CONCURRENT_TRANSACTIONS, -1, -1)
    assert _end(h, pid, 1, True) == (E.PRODUCER_FENCED, -1, -1)  # the bumped epoch is not a retry
    # The implicit add of the next transaction waits for the completion.
    assert h.shard.add_partitions("t", pid, 1, {("a", 0)}, client_transaction_version=2) == E.CONCURRENT_TRANSACTIONS
    shard, m, commit = h.held.pop()
    assert shard.complete_transaction(m.transactional_id, m.producer_id, m.producer_epoch, commit) == E.NONE
    assert h.shard.add_partitions("t", pid, 1, {("a", 0)}, client_transaction_version=2) == E.NONE


def test_epoch_overflow_rotates_the_producer_id() -> None:
    """The bump from Short.MaxValue - 1 writes PrepareX at Short.MaxValue with the next producer id; the
    client goes on with that id at epoch 0, and a retry with the old id and epoch is recognised."""
    h = TV2Harness()
    pid = _start(h)
    m = h.shard.txns["t"]
    m.producer_epoch = MAX_EPOCH - 1
    assert h.shard.add_partitions("t", pid, MAX_EPOCH - 1, {("a", 0)}, client_transaction_version=2) == E.NONE
    error, new_pid, epoch = _end(h, pid, MAX_EPOCH - 1, True)
    assert (error, epoch) == (E.NONE, 0) and new_pid != pid
    assert h.markers[-1] == (pid, MAX_EPOCH, True, (("a", 0),))  # the markers at Short.MaxValue, old id
    done = h.shard.txns["t"]
    assert (done.producer_id, done.producer_epoch, done.previous_producer_id) == (new_pid, 0, pid)
    assert _end(h, pid, MAX_EPOCH - 1, True) == (E.NONE, new_pid, 0)  # a retry across the rotation
    assert h.shard.add_partitions("t", new_pid, 0, {("a", 0)}, client_transaction_version=2) == E.NONE
    assert _end(h, new_pid, 0, True) == (E.NONE, new_pid, 1)


def test_the_coordinators_own_aborts_bump_twice() -> None:
    """A timed-out transaction or a new incarnation's InitProducerId: the fence bump, then the bump of
    the TV2 abort (the markers carry epoch + 2); the old incarnation is fenced."""
    h = TV2Harness()
    pid = _start(h)
    assert h.shard.add_partitions("t", pid, 0, {("a", 0)}, client_transaction_version=2) == E.NONE
    h.now += 61_000
    assert h.shard.abort_timed_out(h.now) == ["t"]
    assert h.markers[-1] == (pid, 2, False, (("a", 0),))
    assert _end(h, pid, 0, True) == (E.PRODUCER_FENCED, -1, -1)
    # A new incarnation while a transaction is open.
    r = h.shard.init_producer_id("t", 60_000, -1, -1, h.pid)
    assert (r.error, r.producer_epoch) == (E.NONE, 3)
    assert h.shard.add_partitions("t", pid, 3, {("b", 0)}, client_transaction_version=2) == E.NONE
    r = h.shard.init_producer_id("t", 60_000, -1, -1, h.pid)
    assert (r.error, r.producer_id, r.producer_epoch) == (E.NONE, pid, 5)
    assert h.markers[-1] == (pid, 5, False, (("b", 0),))


def test_log_value_v1_round_trips_through_a_reload() -> None:
    h = TV2Harness()
    pid = _start(h)
    h.shard.txns["t"].producer_epoch = MAX_EPOCH - 1
    assert h.shard.add_partitions("t", pid, MAX_EPOCH - 1, {("a", 0)}, client_transaction_version=2) == E.NONE
    h.auto_ack = False
    _error, new_pid, _epoch = _end(h, pid, MAX_EPOCH - 1, True)
    version = int.from_bytes(h.log[-1][1][:2], "big")  # type: ignore[index]
    value, _ = decode_coordinator_value(Coordinator.TRANSACTION, 0, h.log[-1][1])  # type: ignore[arg-type]
    assert version == 1 and isinstance(value, TransactionLogValue)
    assert (value.next_producer_id, value.client_transaction_version, value.producer_epoch) == (new_pid, 2, MAX_EPOCH)
    reloaded = h.reloaded()
    m: TransactionMetadata = reloaded.txns["t"]
    assert (m.state, m.next_producer_id, m.client_transaction_version) == (TransactionState.PREPARE_COMMIT, new_pid, 2)
    # The reload completes the prepared transaction with the rotation.
    h.auto_ack = True
    reloaded.on_loaded()
    done = reloaded.txns["t"]
    assert (done.state, done.producer_id, done.producer_epoch, done.previous_producer_id) == (
        TransactionState.COMPLETE_COMMIT, new_pid, 0, pid)


def test_transaction_version_1_keeps_value_v0_and_the_epoch() -> None:
    h = Harness()  # transaction.version 0: the coordinator's own aborts bump once, values stay v0
    pid = _start(h)
    assert h.shard.add_partitions("t", pid, 0, {("a", 0)}) == E.NONE
    assert h.shard.end_transaction("t", pid, 0, commit=True) == E.NONE
    assert h.markers[-1] == (pid, 0, True, (("a", 0),))
    assert all(int.from_bytes(v[:2], "big") == 0 for _k, v in h.log if v is not None)
