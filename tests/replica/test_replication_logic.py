"""The decisions of replication, without sockets: high watermark, ISR shrink/expand (KIP-497 states
and AlterPartition answers), acks=all vs min.insync.replicas, truncation by leader epoch
(KIP-101/KIP-279/KIP-595), and the seed scenario of docs/replication.md.

Partitions run over real `UnifiedLog`s in a temp dir with a fake clock.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from kbroker.log.config import LogConfig
from kbroker.log.leader_epoch import LeaderEpochFileCache
from kbroker.log.unified_log import UnifiedLog
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.records import SimpleRecord, build_batch
from kbroker.replica.partition import (
    AlterPartitionResult,
    IsrChange,
    Partition,
    ReplicaState,
    compute_high_watermark,
    follower_in_sync,
    out_of_sync_replicas,
)
from kbroker.replica.truncation import diverging_epoch, offset_truncation_state

LAG = 30_000
TID = uuid.UUID(int=7)


class Clock:
    """Milliseconds that only move when a test moves them (starting at wall time: record timestamps
    are checked against it)."""

    def __init__(self) -> None:
        self.now = int(time.time() * 1000)

    def __call__(self) -> int:
        return self.now


def batch(n: int = 1) -> memoryview:
    return memoryview(bytearray(build_batch([SimpleRecord(b"v", b"k", -1) for _ in range(n)])))


def new_log(root: Path, name: str, clock: Clock, props: dict[str, str] | None = None) -> UnifiedLog:
    return UnifiedLog(root / f"{name}-0", LogConfig.from_props(props or {}), topic=name, partition=0, time_ms=clock)


def leader(root: Path, clock: Clock, *, isr: tuple[int, ...] = (1, 2, 3), min_isr: int = 1,
           eligible: Callable[[int, int], bool] | None = None) -> Partition:
    plog = new_log(root, "t", clock, {"min.insync.replicas": str(min_isr)})
    part = Partition("t", 0, TID, plog, local_id=1, replicas=(1, 2, 3), time_ms=clock, replica_lag_time_max_ms=LAG,
                     is_replica_eligible=eligible, local_broker_epoch=lambda: 50)
    part.make_leader(0, 0, (1, 2, 3), isr)
    return part


# -- the follower's caught-up time (Kafka's Replica.updateFetchStateOrThrow, KAFKA-7027) --------------


def test_caught_up_when_fetching_the_leader_end_or_the_previous_one() -> None:
    r = ReplicaState(2)
    r.update_fetch_state(fetch_offset=10, log_start_offset=0, fetch_time_ms=100, leader_end_offset=10, broker_epoch=5)
    assert r.last_caught_up_time_ms == 100 and r.broker_epoch == 5
    # Behind the leader's current end (15) but past where the leader was at the previous fetch (10):
    # caught up as of that previous fetch.
    r.update_fetch_state(fetch_offset=12, log_start_offset=0, fetch_time_ms=200, leader_end_offset=15, broker_epoch=5)
    assert r.last_caught_up_time_ms == 100
    r.update_fetch_state(fetch_offset=15, log_start_offset=0, fetch_time_ms=300, leader_end_offset=20, broker_epoch=5)
    assert r.last_caught_up_time_ms == 200
    # Falling behind what the leader had one fetch ago: no progress.
    r.update_fetch_state(fetch_offset=16, log_start_offset=0, fetch_time_ms=400, leader_end_offset=30, broker_epoch=5)
    assert r.last_caught_up_time_ms == 200
    assert r.is_caught_up(30, 200 + LAG, LAG) and not r.is_caught_up(30, 201 + LAG, LAG)
    assert r.is_caught_up(16, 10**9, LAG)  # at the leader's end: always caught up


# -- the high watermark --------------------------------------------------------------------------------


def test_high_watermark_is_the_smallest_end_offset_of_the_maximal_isr() -> None:
    now = 10**6
    remote = {2: ReplicaState(2, log_end_offset=6, last_caught_up_time_ms=now),
              3: ReplicaState(3, log_end_offset=4, last_caught_up_time_ms=0)}
    always: Callable[[int], bool] = lambda _b: True  # noqa: E731
    assert compute_high_watermark(8, remote, frozenset({1, 2, 3}), now, LAG, always) == 4
    # 3 out of the ISR and not caught up: it does not hold the HW back.
    assert compute_high_watermark(8, remote, frozenset({1, 2}), now, LAG, always) == 6
    # 3 out of the ISR but caught up and eligible: about to join, so the HW waits for it.
    remote[3].last_caught_up_time_ms = now
    assert compute_high_watermark(8, remote, frozenset({1, 2}), now, LAG, always) == 4
    assert compute_high_watermark(8, remote, frozenset({1, 2}), now, LAG, lambda b: b != 3) == 6
    # An unknown LEO (a new leader before the first fetch) holds the candidate below any HW.
    remote[2].log_end_offset = -1
    assert compute_high_watermark(8, remote, frozenset({1, 2}), now, LAG, always) == -1


def test_leader_high_watermark_moves_with_follower_fetches(tmp_path: Path) -> None:
    clock = Clock()
    part = leader(tmp_path, clock)
    part.append_records_to_leader(batch(8), required_acks=1)
    assert part.high_watermark == 0  # followers unknown since the leader was elected
    assert not part.update_follower_fetch_state(2, 6)
    assert part.update_follower_fetch_state(3, 4) and part.high_watermark == 4
    assert part.update_follower_fetch_state(3, 8) and part.high_watermark == 6
    assert part.update_follower_fetch_state(2, 8) and part.high_watermark == 8
    assert not part.update_follower_fetch_state(9, 8)  # not a replica: ignored


# -- ISR shrink and expand (KIP-497) ----------------------------------------------------------------------


def test_out_of_sync_replicas_after_the_lag_time() -> None:
    remote = {2: ReplicaState(2, log_end_offset=5, last_caught_up_time_ms=0),
              3: ReplicaState(3, log_end_offset=8, last_caught_up_time_ms=0)}
    assert out_of_sync_replicas(frozenset({1, 2, 3}), 1, remote, 8, LAG, LAG) == set()
    assert out_of_sync_replicas(frozenset({1, 2, 3}), 1, remote, 8, LAG + 1, LAG) == {2}  # 3 is at the end
    assert follower_in_sync(6, 6, 6) and not follower_in_sync(6, 7, 0) and not follower_in_sync(6, 6, 7)


def test_shrink_waits_for_the_controller_then_moves_the_high_watermark(tmp_path: Path) -> None:
    clock = Clock()
    part = leader(tmp_path, clock, min_isr=2)
    part.append_records_to_leader(batch(4), required_acks=-1)
    part.update_follower_fetch_state(2, 4)
    part.update_follower_fetch_state(3, 2)
    assert part.high_watermark == 2
    assert part.maybe_shrink_isr() is None  # 3 is behind but within replica.lag.time.max.ms
    clock.now += LAG + 1
    part.update_follower_fetch_state(2, 4)  # 2 keeps fetching at the end
    item = part.maybe_shrink_isr()
    assert item is not None and item.change == IsrChange.SHRINK and item.new_isr == (1, 2)
    assert item.new_isr_with_epochs == ((1, 50), (2, -1)) and (item.leader_epoch, item.partition_epoch) == (0, 0)
    # In flight: the ISR is still {1,2,3} for min.insync and the HW (maximal ISR), nothing else proposed.
    assert part.isr == {1, 2, 3} and part.maximal_isr == {1, 2, 3} and part.high_watermark == 2
    assert part.maybe_shrink_isr() is None and part.maybe_expand_isr(3) is None
    assert part.check_enough_replicas_reach_offset(4) == (False, ErrorCode.NONE)
    # Committed: the HW passes the removed replica, and acks=all up to 4 is done.
    assert not part.handle_alter_partition_response(item, AlterPartitionResult(ErrorCode.NONE, 1, 0, (1, 2), 1))
    assert part.isr == {1, 2} and part.partition_epoch == 1 and not part.isr_state.is_inflight
    assert part.maybe_increment_high_watermark() and part.high_watermark == 4
    assert part.check_enough_replicas_reach_offset(4) == (True, ErrorCode.NONE)


def test_shrink_below_min_isr_fails_waiting_and_new_acks_all(tmp_path: Path) -> None:
    clock = Clock()
    part = leader(tmp_path, clock, min_isr=2)
    part.append_records_to_leader(batch(3), required_acks=-1)
    clock.now += LAG + 1
    item = part.maybe_shrink_isr()
    assert item is not None and item.new_isr == (1,)
    part.handle_alter_partition_response(item, AlterPartitionResult(ErrorCode.NONE, 1, 0, (1,), 1))
    # Kafka 4.3 (KAFKA-15583): under min ISR the HW does not advance, so the batch waiting for acks=all
    # keeps waiting (it times out unless the ISR grows back) and nothing new is exposed.
    assert not part.maybe_increment_high_watermark() and part.high_watermark == 0
    assert part.check_enough_replicas_reach_offset(3) == (False, ErrorCode.NONE)
    with pytest.raises(KafkaError) as e:
        part.append_records_to_leader(batch(1), required_acks=-1)
    assert e.value.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert part.append_records_to_leader(batch(1), required_acks=1).first_offset == 3
    assert part.high_watermark == 0
    # A follower back at the leader's end: the ISR grows to min ISR, the HW moves, acks=all is done.
    part.update_follower_fetch_state(2, 4, 0, -1)
    item = part.maybe_expand_isr(2)
    assert item is not None and item.new_isr == (1, 2)
    part.handle_alter_partition_response(item, AlterPartitionResult(ErrorCode.NONE, 1, 0, (1, 2), 2))
    assert part.maybe_increment_high_watermark() and part.high_watermark == 4
    assert part.check_enough_replicas_reach_offset(3) == (True, ErrorCode.NONE)


def test_after_append_when_the_maximal_isr_fell_below_min_isr(tmp_path: Path) -> None:
    """NOT_ENOUGH_REPLICAS_AFTER_APPEND: the HW passed the batch while the ISR was at min ISR, but by
    the time the waiting produce is checked the maximal ISR is below it (Kafka 4.3's rule)."""
    clock = Clock()
    part = leader(tmp_path, clock, isr=(1, 2), min_isr=2)
    part.append_records_to_leader(batch(3), required_acks=-1)
    part.update_follower_fetch_state(2, 3, 0, -1)
    assert part.high_watermark == 3
    part.make_leader(0, 1, (1, 2, 3), (1,))  # the metadata brings a committed shrink
    assert part.check_enough_replicas_reach_offset(3) == (True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)


def test_min_isr_above_the_replica_count_is_capped(tmp_path: Path) -> None:
    """Kafka's effective min ISR: min(min.insync.replicas, replicas). min.insync.replicas=5 on three
    replicas behaves as 3: acks=all works with the full ISR, the HW moves."""
    clock = Clock()
    part = leader(tmp_path, clock, min_isr=5)
    assert part.effective_min_isr == 3 and not part.is_under_min_isr and part.is_at_min_isr
    part.append_records_to_leader(batch(2), required_acks=-1)
    part.update_follower_fetch_state(2, 2, 0, -1)
    part.update_follower_fetch_state(3, 2, 0, -1)
    assert part.high_watermark == 2


def test_expand_when_the_follower_reaches_the_high_watermark(tmp_path: Path) -> None:
    clock = Clock()
    epochs = {2: 20, 3: 30}
    part = leader(tmp_path, clock, isr=(1, 2), eligible=lambda b, e: e in (-1, epochs[b]))
    part.append_records_to_leader(batch(5), required_acks=1)
    part.update_follower_fetch_state(2, 5, broker_epoch=20)
    assert part.high_watermark == 5
    part.update_follower_fetch_state(3, 3, broker_epoch=30)
    assert part.maybe_expand_isr(3) is None  # below the HW
    part.update_follower_fetch_state(3, 5, broker_epoch=29)
    assert part.maybe_expand_isr(3) is None  # a stale incarnation (KIP-903): not eligible
    part.update_follower_fetch_state(3, 5, broker_epoch=30)
    item = part.maybe_expand_isr(3)
    assert item is not None and item.new_isr == (1, 2, 3) and item.new_isr_with_epochs == ((1, 50), (2, 20), (3, 30))
    # The maximal ISR counts 3 at once (the HW waits for it); min.insync still uses the committed ISR.
    assert part.maximal_isr == {1, 2, 3} and part.isr == {1, 2}
    # INELIGIBLE_REPLICA: back to the committed ISR, proposed again by a later fetch.
    assert not part.handle_alter_partition_response(item, AlterPartitionResult(ErrorCode.INELIGIBLE_REPLICA))
    assert not part.isr_state.is_inflight and part.maximal_isr == {1, 2}
    item = part.maybe_expand_isr(3)
    assert item is not None
    assert not part.handle_alter_partition_response(item, AlterPartitionResult(ErrorCode.NONE, 1, 0, (1, 2, 3), 1))
    assert part.isr == {1, 2, 3}


def test_alter_partition_answers_are_fenced(tmp_path: Path) -> None:
    clock = Clock()
    part = leader(tmp_path, clock)
    clock.now += LAG + 1
    item = part.maybe_shrink_isr()
    assert item is not None
    # Another leader epoch or an older partition epoch: ignored, still pending (the metadata decides).
    assert not part.handle_alter_partition_response(item, AlterPartitionResult(ErrorCode.NONE, 1, 1, (1,), 5))
    assert not part.handle_alter_partition_response(item, AlterPartitionResult(ErrorCode.NONE, 1, 0, (1,), -1))
    assert part.isr_state.pending is item and part.isr == {1, 2, 3}
    for error in (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.INVALID_UPDATE_VERSION, ErrorCode.NEW_LEADER_ELECTED,
                  ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
        assert not part.handle_alter_partition_response(item, AlterPartitionResult(error))
        assert part.isr_state.pending is item
    assert part.handle_alter_partition_response(item, AlterPartitionResult(ErrorCode.UNKNOWN_SERVER_ERROR))  # retry
    # A newer registration (the metadata) clears the proposal; its late answer is then ignored.
    part.make_leader(0, 1, (1, 2, 3), (1, 2))
    assert not part.isr_state.is_inflight and part.isr == {1, 2}
    assert not part.handle_alter_partition_response(item, AlterPartitionResult(ErrorCode.NONE, 1, 0, (1,), 1))
    assert part.isr == {1, 2}
    # An older registration than what the leader applied is skipped.
    part.make_leader(0, 0, (1, 2, 3), (1, 2, 3))
    assert part.isr == {1, 2}


def test_new_leader_records_where_its_epoch_starts(tmp_path: Path) -> None:
    clock = Clock()
    plog = new_log(tmp_path, "t", clock)
    plog.append_as_leader(batch(3), leader_epoch=0)
    part = Partition("t", 0, TID, plog, local_id=2, replicas=(1, 2, 3), time_ms=clock)
    assert part.make_follower(1, 0, 0, (1, 2, 3), (1, 2, 3))
    assert not part.is_leader and part.append_records_to_follower(memoryview(b""), 2, 0).first_offset == -1
    assert part.high_watermark == 2  # min(leader HW, own LEO)
    with pytest.raises(KafkaError) as e:
        part.append_records_to_leader(batch(1), required_acks=1)
    assert e.value.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert part.make_leader(1, 1, (1, 2, 3), (2, 3))
    assert plog.leader_epoch_cache.entries() == [(0, 0), (1, 3)] and part.leader_epoch_start_offset == 3
    # Followers are unknown to a new leader: the HW stays where the follower had it.
    assert part.high_watermark == 2 and all(r.log_end_offset == -1 for r in part.remote_replicas.values())


# -- truncation by leader epoch ---------------------------------------------------------------------------


def cache(*entries: tuple[int, int]) -> LeaderEpochFileCache:
    c = LeaderEpochFileCache(None)
    for epoch, start in entries:
        c.assign(epoch, start, flush=False)
    return c


def lookup(c: LeaderEpochFileCache, leo: int) -> Callable[[int], tuple[int, int] | None]:
    def find(epoch: int) -> tuple[int, int] | None:
        found = c.end_offset_for(epoch, leo)
        return None if found[0] < 0 else found

    return find


def test_truncation_point_by_leader_epoch() -> None:
    follower = cache((0, 0), (1, 5))
    # Same epoch known to both: the smaller end.
    ts = offset_truncation_state(1, 7, lookup(follower, 9), 9, 3)
    assert (ts.offset, ts.truncation_completed) == (7, True)
    ts = offset_truncation_state(1, 12, lookup(follower, 9), 9, 3)
    assert (ts.offset, ts.truncation_completed) == (9, True)  # never above our own LEO
    # KIP-279: the leader answers epoch 2, which we never had: cut to the end of our largest older
    # epoch (our epoch 1 ends at our LEO 9) and ask again.
    follower2 = cache((0, 0), (1, 5), (3, 8))
    ts = offset_truncation_state(2, 6, lookup(follower2, 10), 10, 3)
    assert (ts.offset, ts.truncation_completed) == (8, False)
    # A leader without epochs: the HW is all that is known to be safe (the only HW truncation).
    assert offset_truncation_state(-1, -1, lookup(follower, 9), 9, 3).offset == 3


def test_leader_reports_divergence() -> None:
    leader_cache = cache((0, 0), (2, 6))

    def leader_end(epoch: int) -> tuple[int, int]:
        return leader_cache.end_offset_for(epoch, 10)

    assert diverging_epoch(0, 6, leader_end) is None  # epoch 0 ends at 6 here: no divergence
    assert diverging_epoch(0, 8, leader_end) == (0, 6)  # the follower has 6, 7 of epoch 0 we do not
    assert diverging_epoch(1, 7, leader_end) == (0, 6)  # epoch 1 never existed here
    assert diverging_epoch(2, 10, leader_end) is None
    assert diverging_epoch(-1, 3, leader_end) is None  # an old follower: no epoch sent


# -- the seed scenario (docs/replication.md) ------------------------------------------------------------


def elect_leader(assignment: tuple[int, ...], isr: tuple[int, ...], live: set[int]) -> int:
    """Kafka's clean election (PartitionChangeBuilder): the first replica, in assignment order, that is
    in the ISR and alive; -1 when none (unclean election is off)."""
    return next((r for r in assignment if r in isr and r in live), -1)


def copy(src: UnifiedLog, dst: UnifiedLog, upto: int) -> None:
    data = src.read(dst.log_end_offset, 1 << 20, max_offset=upto)
    assert data.region is not None
    dst.append_as_follower(memoryview(data.region.read_bytes()))


def fetch_and_truncate(follower: UnifiedLog, new_leader: UnifiedLog) -> int:
    """One follower fetch against the new leader: the leader's divergence check, then the follower's
    truncation (what ReplicaFetcher does with `diverging_epoch`). Returns the follower's new LEO."""
    last_epoch = follower.leader_epoch_cache.latest_epoch
    diverging = diverging_epoch(last_epoch, follower.log_end_offset, new_leader.end_offset_for_epoch)
    if diverging is not None:
        ts = offset_truncation_state(diverging[0], diverging[1],
                                     lookup(follower.leader_epoch_cache, follower.log_end_offset),
                                     follower.log_end_offset, follower.high_watermark)
        follower.truncate_to(ts.offset)
    return follower.log_end_offset


@pytest.mark.parametrize("assignment", [(1, 2, 3), (1, 3, 2)])
def test_seed_scenario_leader_at_8_followers_at_4_and_6_leader_dies(tmp_path: Path,
                                                                    assignment: tuple[int, int, int]) -> None:
    clock = Clock()
    logs = {n: new_log(tmp_path / str(n), "t", clock) for n in (1, 2, 3)}
    a, b, c = logs[1], logs[2], logs[3]
    for _ in range(8):  # leader 1, epoch 0: offsets 0..7, one record per batch
        a.append_as_leader(batch(1), leader_epoch=0)
    copy(a, b, 4)
    copy(a, c, 6)
    # All three were in the ISR: the HW is the smallest LEO, 4. Offsets 0-3 are committed (every
    # acks=all answered so far is among them); 4-7 were never acknowledged to an acks=all producer.
    hw = min(x.log_end_offset for x in logs.values())
    assert (a.log_end_offset, b.log_end_offset, c.log_end_offset, hw) == (8, 4, 6, 4)
    a.update_high_watermark(hw)
    b.update_high_watermark(2)  # followers learn the HW one fetch late
    c.update_high_watermark(3)

    # Broker 1 dies. The controller elects the first live ISR replica in assignment order: any ISR
    # member has every committed record, so it does not look for the longest log.
    new = elect_leader(assignment, (1, 2, 3), live={2, 3})
    assert new == assignment[1]
    other = 5 - new  # the remaining follower (2 + 3 = 5)
    leader_log, follower_log = logs[new], logs[other]
    # Becoming leader at epoch 1 records where epoch 1 starts (its LEO): Partition.makeLeader.
    leader_log.leader_epoch_cache.assign(1, leader_log.log_end_offset)
    leader_log.append_as_leader(batch(1), leader_epoch=1)  # a new write in epoch 1

    # The other follower fetches with its last epoch (0) at its LEO; the new leader answers where its
    # epoch 0 ends, and the follower truncates to that point -- not to its own HW.
    end_of_epoch0 = leader_log.end_offset_for_epoch(0)[1]
    assert fetch_and_truncate(follower_log, leader_log) == min(end_of_epoch0, follower_log.log_end_offset)
    if new == 2:
        # Leader 2 has epoch 0 up to 4: follower 3 drops 4 and 5 (never committed).
        assert end_of_epoch0 == 4 and follower_log.log_end_offset == 4
    else:
        # Leader 3 has epoch 0 up to 6: follower 2 (at 4) keeps everything and copies 4, 5 next.
        assert end_of_epoch0 == 6 and follower_log.log_end_offset == 4
    copy(leader_log, follower_log, leader_log.log_end_offset)
    assert follower_log.leader_epoch_cache.entries() == leader_log.leader_epoch_cache.entries()

    # The old leader comes back: its epoch-0 entries past the new leader's end of epoch 0 diverge.
    assert fetch_and_truncate(a, leader_log) == end_of_epoch0
    copy(leader_log, a, leader_log.log_end_offset)
    assert a.log_end_offset == leader_log.log_end_offset == end_of_epoch0 + 1
    # Every committed offset (below the old HW, 4) survived on every replica.
    for x in logs.values():
        assert x.log_end_offset > hw - 1 and x.leader_epoch_cache.epoch_for_offset(hw - 1) == 0

    # Why not the HW (the seed notes' rule): follower 3's HW was 3 (one fetch late). Had it
    # truncated to its HW it would have dropped offset 3, which was acknowledged (HW 4) -- and if
    # it were then elected, the record would be gone from the cluster (KIP-101's scenario).
    assert c.high_watermark <= 3 < hw


# -- ListOffsets on a new leader whose HW lags its epoch start (Kafka's fetchOffsetForTimestamp) ------


def test_new_leader_answers_offset_not_available_until_its_hw_reaches_the_epoch_start(tmp_path: Path) -> None:
    """A follower elected with LEO 10 but HW 6 (it learns the HW one fetch late): a client's "latest"
    would be 6, below what the old leader already exposed. Kafka answers OFFSET_NOT_AVAILABLE until the
    HW reaches the epoch start offset (10); followers and debug reads still get the log end."""
    clock = Clock()
    plog = new_log(tmp_path, "t", clock)
    part = Partition("t", 0, TID, plog, local_id=2, replicas=(1, 2, 3), time_ms=clock, replica_lag_time_max_ms=LAG)
    part.make_follower(1, 0, 0, (1, 2, 3), (1, 2, 3))
    for _ in range(10):
        plog.append_as_leader(batch(), leader_epoch=0)  # stands for the leader's batches, copied
    part.update_follower_high_watermark(6)
    assert (part.log_end_offset, part.high_watermark) == (10, 6)
    part.make_leader(1, 1, (1, 2, 3), (2, 3))
    with pytest.raises(KafkaError) as err:
        part.fetch_offset_for_timestamp(-1, 0)
    assert err.value.error_code == ErrorCode.OFFSET_NOT_AVAILABLE
    assert part.fetch_offset_for_timestamp(-1, None) == (10, -1, 1)  # a follower's / debug read
    assert part.fetch_offset_for_timestamp(-2, 0) == (0, -1, 0)  # EARLIEST is always answered
    assert part.fetch_offset_for_timestamp(0, 0) is not None  # a timestamp found below the HW
    # The other ISR member fetches at the leader's end: HW 10 = the epoch start, "latest" is 10.
    part.update_follower_fetch_state(3, 10, 0, -1)
    assert part.high_watermark == 10
    assert part.fetch_offset_for_timestamp(-1, 0) == (10, -1, 1)
