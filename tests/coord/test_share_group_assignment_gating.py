"""Share-group assignment gating (KIP-932, Kafka 4.3's `initializedAssignmentPending` and the target
assignment's topic partitions filter) without sockets, on a fake clock: a member is assigned only
share-partitions the group coordinator initialized (ShareGroupStatePartitionMetadata's
InitializedTopics); the heartbeat after an initialization completed bumps the group epoch and hands the
new partitions out; a failed initialization is retried; a state a leader already wrote is kept."""

from __future__ import annotations

import asyncio

from kbroker.coord.config import CoordinatorConfig
from kbroker.coord.modern_group_protocol import HeartbeatResult
from kbroker.coord.shard import GroupCoordinatorShard
from kbroker.coord.share_coordinator import SharePartitionState
from kbroker.coord.share_group import simple_assign_partitions
from kbroker.coord.share_group_initialization import SHARE_GROUP_INITIALIZE_RETRY_INTERVAL_MS
from kbroker.coord.share_group_protocol import ShareHeartbeatRequestData
from kbroker.coord.share_group_state_client import initialize_share_state
from kbroker.protocol.errors import ErrorCode
from tests.coord.support import FakeScheduler, MemoryLog
from tests.coord.test_consumer_group import Topics
from tests.coord.test_share_group_state_partition_metadata import FakeShareCoordinator

E = ErrorCode


class H:
    """A shard wired as the group coordinator service wires it when a share coordinator initializes
    share-partition states (the share protocol's assignor sees only initialized partitions)."""

    def __init__(self, gated: bool = True) -> None:
        self.sched = FakeScheduler()
        self.log = MemoryLog()
        self.topics = Topics()
        self.gated = gated
        self.coord = self.shard()
        self.jobs = self.topics.add("jobs", 3)

    def shard(self) -> GroupCoordinatorShard:
        shard = GroupCoordinatorShard(CoordinatorConfig(), self.sched, self.log, self.sched.time_ms,
                                      lambda g: E.NONE, topics=self.topics)
        if self.gated:
            shard.group_manager.share.initialized_partitions = shard.share_state_partitions.initialized_partitions
        return shard

    def heartbeat(self, member: str, epoch: int, topics: list[str] | None = None) -> HeartbeatResult:
        r = self.coord.share_group_heartbeat(ShareHeartbeatRequestData(
            group_id="sg", member_id=member, member_epoch=epoch, subscribed_topic_names=topics))
        assert r.error == E.NONE, r
        return r

    def initialize(self) -> dict:  # type: ignore[type-arg]
        """What the service does after a heartbeat: record the partitions to initialize as initializing."""
        g = self.coord.group_manager.share_groups["sg"]
        req = self.coord.share_state_partitions.maybe_initialize("sg", g.group_epoch, g.subscribed_topic_names())
        return {} if req is None else {t: set(ps) for t, ps in req.partitions.items()}

    def epoch(self) -> int:
        return self.coord.group_manager.share_groups["sg"].group_epoch


def test_members_get_nothing_until_initialized_then_a_new_epoch_hands_the_partitions_out() -> None:
    h = H()
    a = h.heartbeat("a", 0, ["jobs"])
    assert (a.member_epoch, a.assignment) == (1, {})  # answered at once, nothing assignable yet
    assert h.initialize() == {h.jobs: {0, 1, 2}}
    # Still initializing: heartbeats change nothing (no epoch bump, no assignment).
    h.sched.advance(5000)
    a = h.heartbeat("a", 1)
    assert (a.member_epoch, a.assignment, h.epoch()) == (1, None, 1)
    assert h.initialize() == {}
    assert h.coord.share_state_partitions.initialize_succeeded("sg", {h.jobs: {0, 1, 2}}) == E.NONE
    # The next heartbeat finds initialized partitions the target does not hand out: a new epoch.
    a = h.heartbeat("a", 1)
    assert (a.member_epoch, a.assignment, h.epoch()) == (2, {h.jobs: {0, 1, 2}}, 2)
    # Settled: no further bump.
    a = h.heartbeat("a", 2)
    assert (a.member_epoch, a.assignment, h.epoch()) == (2, None, 2)
    # A second member shares the initialized partitions at once; the first takes its new target.
    b = h.heartbeat("b", 0, ["jobs"])
    assert b.member_epoch == 3 and b.assignment == {h.jobs: {1}}
    a = h.heartbeat("a", 2)
    assert a.member_epoch == 3 and a.assignment == {h.jobs: {0, 2}}
    assert h.initialize() == {}


def test_partly_initialized_only_those_are_assigned_and_a_failure_is_retried() -> None:
    h = H()
    h.heartbeat("a", 0, ["jobs"])
    assert h.initialize() == {h.jobs: {0, 1, 2}}
    meta = h.coord.share_state_partitions
    assert meta.initialize_succeeded("sg", {h.jobs: {0, 2}}) == E.NONE
    assert meta.initialize_failed("sg", {h.jobs: {1}}) == E.NONE
    a = h.heartbeat("a", 1)
    assert (a.member_epoch, a.assignment) == (2, {h.jobs: {0, 2}})
    # The failed partition is initialized again after that heartbeat, then handed out too.
    assert h.initialize() == {h.jobs: {1}}
    assert meta.initialize_succeeded("sg", {h.jobs: {1}}) == E.NONE
    a = h.heartbeat("a", 2)
    assert (a.member_epoch, a.assignment) == (3, {h.jobs: {0, 1, 2}})


def test_a_stale_initialization_is_retried_after_the_retry_interval_and_assigned_when_done() -> None:
    h = H()
    h.heartbeat("a", 0, ["jobs"])
    assert h.initialize() == {h.jobs: {0, 1, 2}}
    h.sched.now += SHARE_GROUP_INITIALIZE_RETRY_INTERVAL_MS - 1
    assert h.heartbeat("a", 1).assignment is None
    assert h.initialize() == {}
    h.sched.now += 1
    assert h.heartbeat("a", 1).assignment is None
    assert h.initialize() == {h.jobs: {0, 1, 2}}
    h.coord.share_state_partitions.initialize_succeeded("sg", {h.jobs: {0, 1, 2}})
    assert h.heartbeat("a", 1).assignment == {h.jobs: {0, 1, 2}}


def test_new_partitions_of_a_subscribed_topic_wait_for_their_initialization() -> None:
    h = H()
    h.heartbeat("a", 0, ["jobs"])
    h.coord.share_state_partitions.initialize_succeeded("sg", {h.jobs: set(h.initialize()[h.jobs])})
    assert h.heartbeat("a", 1).assignment == {h.jobs: {0, 1, 2}}
    h.topics.add("jobs", 5)  # CreatePartitions: 3 and 4 are new
    a = h.heartbeat("a", 2)
    assert a.member_epoch == 3 and a.assignment is None  # the new epoch still hands out 0..2 only
    assert h.initialize() == {h.jobs: {3, 4}}
    h.coord.share_state_partitions.initialize_succeeded("sg", {h.jobs: {3, 4}})
    a = h.heartbeat("a", 3)
    assert (a.member_epoch, a.assignment) == (4, {h.jobs: {0, 1, 2, 3, 4}})


def test_a_state_a_leader_already_wrote_is_kept_and_its_partition_assigned() -> None:
    h = H()
    h.heartbeat("a", 0, ["jobs"])
    g = h.coord.group_manager.share_groups["sg"]
    req = h.coord.share_state_partitions.maybe_initialize("sg", g.group_epoch, g.subscribed_topic_names())
    assert req is not None
    sc = FakeShareCoordinator()
    sc.states[("sg", h.jobs, 1)] = SharePartitionState(40, 3, 0)
    done, failed = asyncio.run(initialize_share_state(sc, req))
    assert failed == {} and done == {h.jobs: {0, 1, 2}}
    assert [k for k, _so, _se in sc.initialized] == [("sg", h.jobs, 0), ("sg", h.jobs, 2)]
    assert sc.states[("sg", h.jobs, 1)].start_offset == 40  # not reset to -1
    h.coord.share_state_partitions.initialize_succeeded("sg", done)
    assert h.heartbeat("a", 1).assignment == {h.jobs: {0, 1, 2}}


def test_a_reload_keeps_the_gated_assignment() -> None:
    h = H()
    h.heartbeat("a", 0, ["jobs"])
    h.initialize()
    h.coord.share_state_partitions.initialize_succeeded("sg", {h.jobs: {0, 1}})
    assert h.heartbeat("a", 1).assignment == {h.jobs: {0, 1}}
    fresh = h.shard()
    for _g, k, v in h.log.records:
        fresh.replay_record(k, v)
    fresh.on_loaded()
    h.coord = fresh
    assert h.coord.share_state_partitions.initialized_partitions("sg") == {h.jobs: {0, 1}}
    # Partition 2 is not initialized (its initialization never answered): still not handed out.
    a = h.heartbeat("a", 2)
    assert a.assignment in (None, {h.jobs: {0, 1}})
    assert h.coord.group_manager.share_groups["sg"].members["a"].assigned == {h.jobs: {0, 1}}


def test_without_a_share_coordinator_every_subscribed_partition_is_assigned_at_once() -> None:
    h = H(gated=False)
    a = h.heartbeat("a", 0, ["jobs"])
    assert (a.member_epoch, a.assignment) == (1, {h.jobs: {0, 1, 2}})


def test_the_simple_assignor_over_assignable_partitions() -> None:
    t = H().jobs
    assert simple_assign_partitions({"a": {t}, "b": {t}}, {t: [4, 1, 7]}) == {"a": {t: {1, 7}}, "b": {t: {4}}}
    assert simple_assign_partitions({"a": {t}, "b": {t}, "c": {t}}, {t: [5]}) == {
        "a": {t: {5}}, "b": {t: {5}}, "c": {t: {5}}}
    assert simple_assign_partitions({"a": {t}}, {t: []}) == {"a": {}}
