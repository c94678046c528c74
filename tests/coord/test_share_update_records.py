"""ShareUpdate deltas (Kafka's ShareCoordinatorShard.generateShareStateRecord) without sockets: the share
coordinator writes a ShareSnapshot first and every `share.coordinator.snapshot.update.records.per.snapshot`
writes, ShareUpdate records between; a shard that replays the written log (snapshots and updates) has the
same states, epochs and snapshot offsets; the redundant offset (what pruning deletes before) is the
lowest latest-snapshot offset."""

from __future__ import annotations

import random
import uuid

from kbroker.coord.share_coordinator import ShareCoordinatorShard, SharePartitionState, StateBatch
from kbroker.coord.share_partition import AcknowledgementBatch, SharePartition, SharePartitionConfig
from kbroker.protocol.coordinator_records import Coordinator
from kbroker.protocol.coordinator_records.serde import decode_coordinator_key
from kbroker.protocol.errors import ErrorCode

TID = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
SNAPSHOT, UPDATE = 0, 1


class Log:
    """The appended records with their offsets (what the coordinator runtime's writer does)."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []

    def append(self, records: list[tuple[bytes, bytes | None]], producer: object = None) -> ErrorCode:
        self.records.extend(records)
        return ErrorCode.NONE

    def end(self) -> int:
        return len(self.records)

    def types(self) -> list[int]:
        return [decode_coordinator_key(Coordinator.SHARE, k)[0] for k, _v in self.records]

    def replayed(self, updates_per_snapshot: int, start: int = 0) -> ShareCoordinatorShard:
        shard = ShareCoordinatorShard(self.append, lambda: 0, updates_per_snapshot)
        for offset, (k, v) in enumerate(self.records[start:], start):
            shard.replay(offset, k, v)
        return shard


def _shard(log: Log, per_snapshot: int) -> ShareCoordinatorShard:
    return ShareCoordinatorShard(log.append, lambda: 7, per_snapshot, log.end)


def _state(sp: SharePartition, leader_epoch: int = 0) -> SharePartitionState:
    return SharePartitionState(sp.start_offset, leader_epoch, 0, 0, [StateBatch(*b) for b in sp.state_batches()])


def test_snapshot_then_updates_then_snapshot_every_n() -> None:
    log = Log()
    shard = _shard(log, 3)
    key = ("g", TID, 0)
    for i in range(9):
        assert shard.write_state(key, SharePartitionState(i, 1, 0, 0, [])) == ErrorCode.NONE
    # first write a snapshot, then 3 updates, a snapshot, 3 updates, a snapshot (Kafka's cadence)
    assert log.types() == [SNAPSHOT, UPDATE, UPDATE, UPDATE, SNAPSHOT, UPDATE, UPDATE, UPDATE, SNAPSHOT]
    assert shard.states[key].snapshot_epoch == 2
    assert shard.snapshot_offsets[key] == 8
    assert (shard.snapshots_written, shard.updates_written) == (3, 6)


def test_zero_per_snapshot_writes_only_snapshots() -> None:
    log = Log()
    shard = _shard(log, 0)
    for i in range(4):
        shard.write_state(("g", TID, 0), SharePartitionState(i))
    assert log.types() == [SNAPSHOT] * 4


def test_initialization_and_a_new_state_epoch_are_snapshots() -> None:
    log = Log()
    shard = _shard(log, 500)
    key = ("g", TID, 1)
    assert shard.initialize(key, 0, 10, True).error == ErrorCode.NONE
    assert shard.write(key, 0, 0, 12, 3, [StateBatch(12, 14, 0, 1)], True).error == ErrorCode.NONE
    assert shard.initialize(key, 1, 20, True).error == ErrorCode.NONE
    assert log.types() == [SNAPSHOT, UPDATE, SNAPSHOT]
    loaded = log.replayed(500)
    assert loaded.states[key] == shard.states[key]
    assert loaded.state_epochs[key] == 1


def test_replaying_updates_gives_the_written_states() -> None:
    """A share-partition driven through acquisitions, acknowledgements, releases and lock expiries; each
    state written through the shard; a replay of the log (from the start, and from the last snapshot
    only, as after pruning) gives the same state at every step."""
    rng = random.Random(932)
    log = Log()
    shard = _shard(log, 5)
    key = ("g", TID, 2)
    sp = SharePartition(0, SharePartitionConfig(record_lock_duration_ms=100, delivery_count_limit=3,
                                                max_in_flight_records=50))
    now, end = 0, 0
    for step in range(200):
        now += rng.randint(0, 60)
        end += rng.randint(0, 4)
        member = rng.choice("ab")
        sp.acquire(member, sp.next_fetch_offset(), end - 1, rng.randint(1, 6), now)
        sp.expire_locks(now)
        acquired = [o for o in range(sp.start_offset, sp.next_offset) if sp.records.get(o) is not None
                    and sp.records[o].member_id == member and sp.state_of(o).name == "ACQUIRED"]
        if acquired:
            o = rng.choice(acquired)
            sp.acknowledge(member, [AcknowledgementBatch(o, o, (rng.choice((1, 2, 3)),))], now)
        assert shard.write_state(key, _state(sp, step // 50)) == ErrorCode.NONE
        got = shard.states[key]
        assert (got.start_offset, got.batches) == (sp.start_offset, [StateBatch(*b) for b in sp.state_batches()]) \
            or (got.start_offset, got.batches) == (
                sp.start_offset, _coalesced([StateBatch(*b) for b in sp.state_batches()], sp.start_offset))
        loaded = log.replayed(5)
        assert loaded.states[key] == got, step
        assert loaded.leader_epochs[key] == step // 50
        pruned = log.replayed(5, start=shard.redundant_offset() or 0)
        assert pruned.states[key] == got, step
    types = log.types()
    assert types.count(UPDATE) > types.count(SNAPSHOT) > 1


def _coalesced(batches: list[StateBatch], start: int) -> list[StateBatch]:
    from kbroker.coord.share_coordinator import combine_state_batches
    return combine_state_batches([], batches, start)


def test_redundant_offset_is_the_lowest_latest_snapshot() -> None:
    log = Log()
    shard = _shard(log, 2)
    a, b = ("g", TID, 0), ("g", TID, 1)
    shard.write_state(a, SharePartitionState(0))  # 0: snapshot a
    shard.write_state(b, SharePartitionState(0))  # 1: snapshot b
    for i in range(1, 4):
        shard.write_state(a, SharePartitionState(i))  # 2, 3 updates; 4 snapshot of a
    assert log.types()[4] == SNAPSHOT
    assert shard.redundant_offset() == 1
    shard.delete_state(b)  # tombstone: b no longer holds anything back
    assert shard.redundant_offset() == 4
    loaded = log.replayed(2)
    assert loaded.redundant_offset() == 4 and b not in loaded.states
