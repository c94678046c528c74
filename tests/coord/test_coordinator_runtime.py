"""The generic coordinator runtime on a fake clock and a fake partition whose high watermark moves only
when the test says so: answers are held until the high watermark passes the write, a failed append
leaves the group exactly as before, loading replays the log, unloading answers NOT_COORDINATOR."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from kbroker.coord.config import CoordinatorConfig, RecordWriter
from kbroker.coord.consumer_coordinator import HeartbeatRequestData
from kbroker.coord.coordinator_runtime import AppendResult, CoordinatorRuntime, CoordinatorTimer, Record
from kbroker.coord.group import GroupState, JoinResult, SyncResult
from kbroker.coord.offset_metadata_manager import CommitRequestPartition as CP
from kbroker.coord.shard import GroupCoordinatorShard
from kbroker.protocol.errors import ErrorCode as E
from tests.coord.support import PROTOCOLS, Box, FakeScheduler


class FakePartitions:
    """Partition logs in memory: appends get offsets, the high watermark moves by `commit`."""

    def __init__(self) -> None:
        self.logs: dict[int, list[Record]] = {}
        self.fail_with: E | None = None

    def append(self, partition: int, records: list[Record], producer: object = None) -> AppendResult:
        if self.fail_with is not None:
            return AppendResult(self.fail_with)
        log = self.logs.setdefault(partition, [])
        log.extend(records)
        return AppendResult(E.NONE, len(log))

    def load(self, partition: int, replay: Callable[[int, Any, Any], None], *_: object) -> int:
        log = self.logs.get(partition, [])
        for offset, (key, value) in enumerate(log):
            replay(offset, key, value)
        return len(log)


class Rig:
    def __init__(self, partitions: FakePartitions | None = None, **config: Any) -> None:
        self.sched = FakeScheduler()
        self.parts = partitions or FakePartitions()
        self.config = CoordinatorConfig(**{"initial_rebalance_delay_ms": 0, **config})
        self.rt: CoordinatorRuntime[GroupCoordinatorShard] = CoordinatorRuntime(
            self.parts, self.parts, self._shard, self.sched)

    def _shard(self, partition: int, timer: CoordinatorTimer,
               append: Callable[[list[Record]], E]) -> GroupCoordinatorShard:
        writer: RecordWriter = lambda _group, records: append(records)  # noqa: E731
        return GroupCoordinatorShard(self.config, timer, writer, self.sched.time_ms)

    def load(self, partition: int = 0) -> GroupCoordinatorShard:
        assert self.rt.schedule_load(partition)
        assert self.rt.status(partition) == E.COORDINATOR_LOAD_IN_PROGRESS
        self.rt.run_load(partition)
        assert self.rt.status(partition) == E.NONE
        ctx = self.rt.context(partition)
        assert ctx is not None and ctx.shard is not None
        return ctx.shard

    def commit_hw(self, partition: int = 0, hw: int | None = None) -> None:
        self.rt.on_high_watermark_updated(partition, len(self.parts.logs.get(partition, [])) if hw is None else hw)

    def write(self, op: Callable[[GroupCoordinatorShard], Any], partition: int = 0) -> Box:
        box = Box()
        self.rt.write(partition, op, box, lambda e: box(("failed", e)))
        return box

    def read(self, op: Callable[[GroupCoordinatorShard], Any], partition: int = 0) -> Box:
        box = Box()
        self.rt.read(partition, op, box, lambda e: box(("failed", e)))
        return box

    def deferring(self, box: Box, on_error: Callable[[E], Any]) -> Callable[[Any], None]:
        """What GroupCoordinatorService wraps a JoinGroup/SyncGroup callback with."""
        return lambda result: self.rt.defer(lambda: box(result), lambda e: box(on_error(e)))

    def join(self, member_id: str = "", instance_id: str | None = None, committed: bool = True) -> Box:
        box = Box()
        answer = self.deferring(box, lambda e: JoinResult(e, member_id))
        self.write(lambda s: s.join_group("g", member_id, instance_id, "consumer", PROTOCOLS, 10000, 30000,
                                          "client", "/h", False, answer))
        self.sched.advance(0)  # timers due now (the initial rebalance delay of 0) run
        if committed:
            self.commit_hw()
        return box

    def sync(self, generation: int, member_id: str, assignments: dict[str, bytes]) -> Box:
        box = Box()
        answer = self.deferring(box, SyncResult)
        self.write(lambda s: s.sync_group("g", generation, member_id, None, None, None, assignments, answer))
        return box


def _fingerprint(shard: GroupCoordinatorShard, group_id: str = "g") -> Any:
    group = shard.groups.get(group_id)
    if group is None:
        return None
    members = sorted((m.member_id, m.group_instance_id, list(m.protocols), m.assignment, m.session_timeout_ms,
                      m.rebalance_timeout_ms) for m in group.members.values())
    return (group.state, group.generation_id, group.leader_id, group.protocol_name, members,
            sorted(group.pending_members), shard.offsets.group_offsets(group_id))


def test_offset_commit_answers_only_when_the_high_watermark_passes_it() -> None:
    rig = Rig()
    rig.load()
    commit = rig.write(lambda s: s.commit_offsets("g", -1, "", None, -1, [CP("t", 0, 42)]))
    assert rig.parts.logs[0] and not commit.done  # appended, not yet committed
    fetch = rig.read(lambda s: s.fetch_offsets("g", [("t", 0)]))
    assert not fetch.done  # a read waits for the pending write before it
    rig.commit_hw(hw=0)
    assert not commit.done and not fetch.done
    rig.commit_hw()
    assert commit.result == [E.NONE]
    err, fetched = fetch.result
    assert err == E.NONE and fetched[0].offset == 42


def test_later_answers_wait_for_earlier_writes_in_offset_order() -> None:
    rig = Rig()
    rig.load()
    first = rig.write(lambda s: s.commit_offsets("g", -1, "", None, -1, [CP("t", 0, 1)]))
    end_first = len(rig.parts.logs[0])
    second = rig.write(lambda s: s.commit_offsets("g", -1, "", None, -1, [CP("t", 0, 2)]))
    rig.commit_hw(hw=end_first)
    assert first.result == [E.NONE] and not second.done
    rig.commit_hw()
    assert second.result == [E.NONE]


def test_sync_answers_of_every_member_wait_for_the_group_record() -> None:
    rig = Rig()
    rig.load()
    a = rig.join().result
    assert a.error == E.NONE  # the join phase completes at once (initial delay 0, one member)
    written = len(rig.parts.logs.get(0, []))
    synced = rig.sync(a.generation_id, a.member_id, {a.member_id: b"A"})
    assert len(rig.parts.logs[0]) == written + 1  # the GroupMetadata record is appended ...
    assert not synced.done  # ... and the answer waits for its commit
    rig.commit_hw()
    assert synced.result.error == E.NONE and synced.result.assignment == b"A"


def test_failed_offset_commit_append_leaves_the_group_as_before() -> None:
    rig = Rig()
    shard = rig.load()
    assert rig.write(lambda s: s.commit_offsets("g", -1, "", None, -1, [CP("t", 0, 5)])).results == []
    rig.commit_hw()
    before = copy.deepcopy(_fingerprint(shard))
    rig.parts.fail_with = E.NOT_ENOUGH_REPLICAS
    failed = rig.write(lambda s: s.commit_offsets("g", -1, "", None, -1, [CP("t", 0, 6), CP("t", 1, 7)]))
    assert failed.result == [E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_NOT_AVAILABLE]
    assert _fingerprint(shard) == before


def test_failed_static_rejoin_append_leaves_the_group_as_before() -> None:
    rig = Rig()
    shard = rig.load()
    a = rig.join(instance_id="i1").result
    rig.sync(a.generation_id, a.member_id, {a.member_id: b"A"})
    rig.commit_hw()
    assert shard.groups["g"].state == GroupState.STABLE
    before = copy.deepcopy(_fingerprint(shard))
    rig.parts.fail_with = E.NOT_LEADER_OR_FOLLOWER
    # A restarted static member rejoins: its new member id must be written first; the write fails.
    rejoin = rig.join(instance_id="i1").result
    assert rejoin.error == E.NOT_COORDINATOR
    assert _fingerprint(shard) == before


def test_failed_consumer_heartbeat_append_leaves_the_group_as_before() -> None:
    rig = Rig()
    shard = rig.load()
    req = HeartbeatRequestData("cg", "m1", 0, rebalance_timeout_ms=30000, subscribed_topic_names=["t"], owned={})
    assert rig.write(lambda s: s.consumer_group_heartbeat(req)).results == []
    rig.commit_hw()
    group = shard.consumer_groups["cg"]
    before = (group.group_epoch, sorted(group.members), dict(shard.consumer_written["cg"]))
    rig.parts.fail_with = E.KAFKA_STORAGE_ERROR
    join = HeartbeatRequestData("cg", "m2", 0, rebalance_timeout_ms=30000, subscribed_topic_names=["t"], owned={})
    result = rig.write(lambda s: s.consumer_group_heartbeat(join)).result
    assert result.error == E.NOT_COORDINATOR
    group = shard.consumer_groups["cg"]
    assert (group.group_epoch, sorted(group.members), dict(shard.consumer_written["cg"])) == before
    # A new group whose first write fails is not left behind either.
    other = HeartbeatRequestData("new", "m1", 0, rebalance_timeout_ms=30000, subscribed_topic_names=["t"], owned={})
    assert rig.write(lambda s: s.consumer_group_heartbeat(other)).result.error == E.NOT_COORDINATOR
    assert "new" not in shard.consumer_groups


def test_load_replays_the_log_and_unload_answers_not_coordinator() -> None:
    parts = FakePartitions()
    rig = Rig(parts, initial_rebalance_delay_ms=60000)
    rig.load()
    rig.write(lambda s: s.commit_offsets("g", -1, "", None, -1, [CP("t", 0, 9)]))
    rig.commit_hw()
    # Another broker (a new runtime) becomes leader of the same log: it replays it.
    again = Rig(parts)
    again.load()
    fetched = again.read(lambda s: s.fetch_offsets("g", [("t", 0)])).result
    assert fetched[1][0].offset == 9

    # Unloading: a waiting JoinGroup, a held answer and the timers all go.
    waiting = rig.join(committed=False)
    assert not waiting.done  # the initial rebalance delay holds the join phase open
    held = rig.write(lambda s: s.commit_offsets("h", -1, "", None, -1, [CP("t", 0, 1)]))
    assert not held.done
    assert len(rig.sched.timers) > 0
    rig.rt.unload(0)
    assert waiting.result.error == E.NOT_COORDINATOR
    assert held.result == ("failed", E.NOT_COORDINATOR)
    assert rig.sched.timers == {}
    assert rig.rt.status(0) == E.NOT_COORDINATOR
    assert rig.write(lambda s: s.heartbeat("g", 0, "m", None)).result == ("failed", E.NOT_COORDINATOR)


def test_a_write_that_never_commits_fails_its_answer() -> None:
    rig = Rig()
    rig.load()
    commit = rig.write(lambda s: s.commit_offsets("g", -1, "", None, -1, [CP("t", 0, 1)]))
    rig.rt.on_write_failed(0, len(rig.parts.logs[0]), E.REQUEST_TIMED_OUT)
    assert commit.result == ("failed", E.REQUEST_TIMED_OUT)


def test_timers_run_as_operations_of_their_partition() -> None:
    rig = Rig(initial_rebalance_delay_ms=100)
    shard = rig.load()
    a = rig.join(committed=False)
    assert not a.done
    rig.sched.advance(100)  # the initial delay ends: the join phase completes in a timer operation
    assert a.result.error == E.NONE and shard.groups["g"].state == GroupState.COMPLETING_REBALANCE
    assert all(key.startswith("0/") for key in rig.sched.timers)
