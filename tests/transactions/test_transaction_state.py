"""The transaction coordinator's state machine (TransactionStateShard), sans-IO on a fake clock:
records written and replayed, epoch bumps and fencing, EndTxn's Prepare -> markers -> Complete,
timed-out aborts, and the reload of half-done transactions."""

from __future__ import annotations

from kbroker.coord.transaction_state import (
    Record,
    TopicPartition,
    TransactionMetadata,
    TransactionState,
    TransactionStateShard,
)
from kbroker.protocol.errors import ErrorCode


class Harness:
    def __init__(self) -> None:
        self.now = 1_000
        self.log: list[Record] = []
        self.markers: list[tuple[int, int, bool, tuple[TopicPartition, ...]]] = []
        self.next_pid = 100
        # The marker sender acknowledges every marker at once unless a test holds them.
        self.auto_ack = True
        self.held: list[tuple[TransactionStateShard, TransactionMetadata, bool]] = []
        self.shard = self.new_shard()

    def new_shard(self) -> TransactionStateShard:
        holder: list[TransactionStateShard] = []
        shard = TransactionStateShard(0, self.append, lambda m, commit: self.send_markers(holder[0], m, commit),
                                      lambda: self.now, coordinator_epoch=3)
        holder.append(shard)
        return shard

    def append(self, records: list[Record]) -> ErrorCode:
        self.log.extend(records)
        return ErrorCode.NONE

    def send_markers(self, shard: TransactionStateShard, m: TransactionMetadata, commit: bool) -> None:
        assert shard.coordinator_epoch == 3
        self.markers.append((m.producer_id, m.producer_epoch, commit, tuple(sorted(m.partitions))))
        if self.auto_ack:
            assert shard.complete_transaction(m.transactional_id, m.producer_id, m.producer_epoch,
                                              commit) == ErrorCode.NONE
        else:
            self.held.append((shard, m, commit))

    def pid(self) -> int:
        self.next_pid += 1
        return self.next_pid

    def reloaded(self) -> TransactionStateShard:
        shard = self.new_shard()
        for offset, (k, v) in enumerate(self.log):
            shard.replay(offset, k, v)
        return shard


def test_init_add_commit_and_replay() -> None:
    h = Harness()
    r = h.shard.init_producer_id("t", 60_000, -1, -1, h.pid)
    assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.NONE, 101, 0)
    assert h.shard.add_partitions("t", 101, 0, {("a", 0), ("b", 1)}) == ErrorCode.NONE
    assert h.shard.txns["t"].state == TransactionState.ONGOING
    assert h.shard.end_transaction("t", 101, 0, commit=True) == ErrorCode.NONE
    assert h.markers == [(101, 0, True, (("a", 0), ("b", 1)))]
    assert h.shard.txns["t"].state == TransactionState.COMPLETE_COMMIT
    # A retried EndTxn(commit) is answered without new markers; abort now is a state error.
    assert h.shard.end_transaction("t", 101, 0, commit=True) == ErrorCode.NONE
    assert h.shard.end_transaction("t", 101, 0, commit=False) == ErrorCode.INVALID_TXN_STATE
    assert len(h.markers) == 1
    again = h.reloaded().txns["t"]
    assert (again.producer_id, again.producer_epoch, again.state, again.partitions) == (
        101, 0, TransactionState.COMPLETE_COMMIT, set())


def test_new_incarnation_bumps_epoch_and_aborts_open_transaction() -> None:
    h = Harness()
    h.shard.init_producer_id("t", 60_000, -1, -1, h.pid)
    h.shard.add_partitions("t", 101, 0, {("a", 0)})
    r = h.shard.init_producer_id("t", 60_000, -1, -1, h.pid)
    assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.NONE, 101, 1)
    assert h.markers == [(101, 1, False, (("a", 0),))]  # aborted with the new epoch
    # The zombie (epoch 0) is fenced everywhere.
    assert h.shard.add_partitions("t", 101, 0, {("a", 1)}) == ErrorCode.PRODUCER_FENCED
    assert h.shard.end_transaction("t", 101, 0, commit=True) == ErrorCode.PRODUCER_FENCED
    assert h.shard.add_partitions("t", 999, 1, {("a", 1)}) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    # KIP-360: re-initialising with a stale id/epoch is fenced.
    assert h.shard.init_producer_id("t", 60_000, 101, 0, h.pid).error == ErrorCode.PRODUCER_FENCED
    assert h.shard.init_producer_id("t", 60_000, 101, 1, h.pid).producer_epoch == 2
    # A retry of that bump (its answer was lost) gets epoch 2 again, not 3.
    assert h.shard.init_producer_id("t", 60_000, 101, 1, h.pid).producer_epoch == 2


def test_exhausted_epoch_moves_to_a_new_producer_id() -> None:
    h = Harness()
    h.shard.init_producer_id("t", 60_000, -1, -1, h.pid)
    h.shard.txns["t"].producer_epoch = 32766
    r = h.shard.init_producer_id("t", 60_000, -1, -1, h.pid)
    assert (r.producer_id, r.producer_epoch) == (102, 0)


def test_timed_out_transaction_is_aborted_with_a_bumped_epoch() -> None:
    h = Harness()
    h.shard.init_producer_id("t", 5_000, -1, -1, h.pid)
    h.shard.add_partitions("t", 101, 0, {("a", 0)})
    h.now += 4_999
    assert h.shard.abort_timed_out(h.now) == []
    h.now += 1
    assert h.shard.abort_timed_out(h.now) == ["t"]
    assert h.markers == [(101, 1, False, (("a", 0),))]
    assert h.shard.txns["t"].state == TransactionState.COMPLETE_ABORT
    assert h.shard.end_transaction("t", 101, 0, commit=True) == ErrorCode.PRODUCER_FENCED


def test_reload_completes_a_prepared_transaction() -> None:
    h = Harness()
    h.shard.init_producer_id("t", 60_000, -1, -1, h.pid)
    h.shard.add_partitions("t", 101, 0, {("a", 0)})
    # Crash between PrepareCommit and the markers: only the PrepareCommit record is in the log.
    prepared = h.shard.txns["t"].copy()
    prepared.state = TransactionState.PREPARE_COMMIT
    from kbroker.coord.transaction_state import record_of
    h.log.append(record_of(prepared))
    shard = h.reloaded()
    assert shard.txns["t"].state == TransactionState.PREPARE_COMMIT
    shard.on_loaded()
    assert h.markers == [(101, 0, True, (("a", 0),))]
    assert shard.txns["t"].state == TransactionState.COMPLETE_COMMIT


def test_concurrent_and_invalid_states() -> None:
    h = Harness()
    h.shard.init_producer_id("t", 60_000, -1, -1, h.pid)
    assert h.shard.end_transaction("t", 101, 0, commit=True) == ErrorCode.INVALID_TXN_STATE  # nothing open
    assert h.shard.end_transaction("t", 101, 0, commit=False) == ErrorCode.NONE
    h.shard.txns["t"].state = TransactionState.PREPARE_ABORT
    assert h.shard.add_partitions("t", 101, 0, {("a", 0)}) == ErrorCode.CONCURRENT_TRANSACTIONS
    assert h.shard.init_producer_id("t", 60_000, -1, -1, h.pid).error == ErrorCode.CONCURRENT_TRANSACTIONS


def test_idle_transactional_ids_expire_with_a_tombstone() -> None:
    h = Harness()
    h.shard.init_producer_id("idle", 60_000, -1, -1, h.pid)
    h.shard.init_producer_id("busy", 60_000, -1, -1, h.pid)
    h.shard.add_partitions("busy", 102, 0, {("a", 0)})
    h.now += 10_000
    assert h.shard.expire_transactional_ids(h.now, 20_000) == []
    h.now += 10_000
    assert h.shard.expire_transactional_ids(h.now, 20_000) == ["idle"]  # "busy" has an open transaction
    assert set(h.shard.txns) == {"busy"}
    assert h.log[-1][1] is None
    assert set(h.reloaded().txns) == {"busy"}


def test_completes_only_when_the_markers_are_acknowledged() -> None:
    """Markers to other brokers: PrepareCommit stays until the sender reports every marker written;
    meanwhile the producer gets CONCURRENT_TRANSACTIONS; a late completion of an older epoch is ignored."""
    h = Harness()
    h.auto_ack = False
    h.shard.init_producer_id("t", 60_000, -1, -1, h.pid)
    h.shard.add_partitions("t", 101, 0, {("a", 0), ("b", 0)})
    assert h.shard.end_transaction("t", 101, 0, commit=True) == ErrorCode.NONE
    assert h.shard.txns["t"].state == TransactionState.PREPARE_COMMIT
    assert h.shard.add_partitions("t", 101, 0, {("a", 0)}) == ErrorCode.CONCURRENT_TRANSACTIONS
    assert h.shard.end_transaction("t", 101, 0, commit=True) == ErrorCode.CONCURRENT_TRANSACTIONS
    # A reload while markers are in flight sends them again (the new coordinator's duty).
    again = h.reloaded()
    again.on_loaded()
    assert len(h.held) == 2 and h.held[1][1].state == TransactionState.PREPARE_COMMIT
    # A completion for another epoch changes nothing; the right one completes.
    shard, m, commit = h.held[0]
    assert shard.complete_transaction("t", 101, 7, True) == ErrorCode.NONE
    assert shard.txns["t"].state == TransactionState.PREPARE_COMMIT
    assert shard.complete_transaction("t", 101, 0, False) == ErrorCode.NONE  # wrong outcome: ignored
    assert shard.txns["t"].state == TransactionState.PREPARE_COMMIT
    assert shard.complete_transaction(m.transactional_id, m.producer_id, m.producer_epoch, commit) == ErrorCode.NONE
    assert shard.txns["t"].state == TransactionState.COMPLETE_COMMIT and shard.txns["t"].partitions == set()
    assert h.reloaded().txns["t"].state == TransactionState.COMPLETE_COMMIT
