"""The machinery KIP-848 consumer groups and KIP-932 share groups share (`kbroker.coord.modern_group`,
`kbroker.coord.modern_group_protocol`), driven through both group types on a fake clock with the same
scenario and the same assertions: group epoch and target assignment on joins, session expiry fencing
the silent member, a new target when a subscribed topic grows, a rejected stale member epoch, and the
group put back as it was (timers included) when an append fails.

A spy on the base class's `fence_member` / `compute_target_assignment` checks that both group types
really run the one shared implementation (a copy in either protocol would not be seen by the spy)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from kbroker.coord.config import CoordinatorConfig
from kbroker.coord.consumer_coordinator import HeartbeatRequestData
from kbroker.coord.modern_group import ModernGroup, ModernGroupMember
from kbroker.coord.modern_group_protocol import HeartbeatResult, ModernGroupProtocol
from kbroker.coord.shard import GroupCoordinatorShard
from kbroker.coord.share_group_protocol import ShareHeartbeatRequestData
from kbroker.protocol.errors import ErrorCode
from tests.coord.support import FakeScheduler, MemoryLog
from tests.coord.test_consumer_group import Topics

E = ErrorCode
GID = "g"


class Harness:
    """One shard with a fake clock and topics; `hb` speaks the group type's own heartbeat."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.sched = FakeScheduler()
        self.log = MemoryLog()
        self.topics = Topics()
        self.tid = self.topics.add("t", 4)
        self.coord = GroupCoordinatorShard(CoordinatorConfig(), self.sched, self.log, self.sched.time_ms,
                                           lambda g: E.NONE, topics=self.topics)
        gm = self.coord.group_manager
        self.proto: ModernGroupProtocol[ModernGroup[ModernGroupMember], ModernGroupMember] = \
            gm.consumer if kind == "consumer" else gm.share  # type: ignore[assignment]

    def group(self) -> ModernGroup[ModernGroupMember]:
        return self.proto.groups()[GID]

    def hb(self, member_id: str, epoch: int | None = None) -> HeartbeatResult:
        """A join (epoch 0) or a heartbeat at the member's current epoch (consumer: acknowledging what
        it was asked to revoke, so it reaches the target)."""
        if epoch is None:
            epoch = self.group().members[member_id].member_epoch
        if self.kind == "share":
            return self.coord.share_group_heartbeat(ShareHeartbeatRequestData(
                GID, member_id, epoch, subscribed_topic_names=["t"] if epoch == 0 else None))
        current = self.group().members.get(member_id) if GID in self.proto.groups() else None
        owned = {} if epoch == 0 or current is None else {t: set(ps) for t, ps in current.assigned.items()}
        return self.coord.consumer_group_heartbeat(HeartbeatRequestData(
            GID, member_id, epoch, rebalance_timeout_ms=30000 if epoch == 0 else -1,
            subscribed_topic_names=["t"] if epoch == 0 else None, owned=owned))

    def session_timeout_ms(self, member_id: str) -> int:
        group = self.group()
        return self.proto.session_timeout_ms(group, group.members[member_id])

    def session_timer(self, member_id: str) -> bool:
        return self.proto.session_key(GID, member_id) in self.sched.timers

    def target_partitions(self) -> dict[str, set[int]]:
        return {mid: set(a.get(self.tid, set())) for mid, a in self.group().target_assignment.items()}


@dataclass
class Spy:
    calls: list[tuple[str, str]]


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Iterator[Spy]:
    """Record every call of the base class's fence_member and compute_target_assignment."""
    seen = Spy([])
    fence = ModernGroupProtocol.fence_member
    compute = ModernGroupProtocol.compute_target_assignment

    def fence_spy(self: ModernGroupProtocol[ModernGroup[ModernGroupMember], ModernGroupMember],
                  group: ModernGroup[ModernGroupMember], member: ModernGroupMember, reason: str) -> ErrorCode:
        seen.calls.append((f"fence:{self.group_type}", f"{member.member_id}: {reason}"))
        return fence(self, group, member, reason)

    def compute_spy(self: ModernGroupProtocol[ModernGroup[ModernGroupMember], ModernGroupMember],
                    group: ModernGroup[ModernGroupMember]) -> None:
        seen.calls.append((f"assign:{self.group_type}", str(group.group_epoch)))
        compute(self, group)

    monkeypatch.setattr(ModernGroupProtocol, "fence_member", fence_spy)
    monkeypatch.setattr(ModernGroupProtocol, "compute_target_assignment", compute_spy)
    yield seen


KINDS = ["consumer", "share"]


@pytest.mark.parametrize("kind", KINDS)
def test_session_expiry_fences_through_the_shared_base(kind: str, spy: Spy) -> None:
    h = Harness(kind)
    assert h.hb("a", 0).member_epoch == 1
    assert h.hb("b", 0).member_epoch == 2
    group = h.group()
    assert (group.group_epoch, group.target_assignment_epoch) == (2, 2)
    assert sorted(len(ps) for ps in h.target_partitions().values()) == [2, 2]
    assert [c for c in spy.calls if c[0].startswith("assign")] == [(f"assign:{kind}", "1"), (f"assign:{kind}", "2")]

    # a heartbeats every interval, b stays silent: b's session (renewed by nothing) expires.
    timeout = h.session_timeout_ms("b")
    step = timeout // 5
    written = len(h.log.records)
    for _ in range(6):
        h.sched.advance(step)
        assert h.hb("a").error == E.NONE
    group = h.group()
    assert set(group.members) == {"a"}
    assert (group.group_epoch, group.target_assignment_epoch) == (3, 3)
    assert h.target_partitions() == {"a": {0, 1, 2, 3}}
    assert h.hb("a").member_epoch == 3
    assert not h.session_timer("b") and h.session_timer("a")
    assert (f"fence:{kind}", "b: its session timeout expired") in spy.calls
    tombstones = [k for g, k, v in h.log.records[written:] if g == GID and v is None]
    assert tombstones, "the fenced member's records are tombstoned"
    # The fenced member is unknown now; a leave goes through the same fencing.
    assert h.hb("b", 2).error == E.UNKNOWN_MEMBER_ID
    left = h.hb("a", -1)
    assert (left.error, left.member_epoch) == (E.NONE, -1)
    assert (f"fence:{kind}", "a: the member left the group") in spy.calls
    assert h.group().members == {} and h.group().group_epoch == 4


@pytest.mark.parametrize("kind", KINDS)
def test_topic_growth_bumps_the_epoch_and_a_stale_epoch_is_fenced(kind: str) -> None:
    h = Harness(kind)
    h.hb("a", 0)
    h.topics.add("t", 6)
    r = h.hb("a")
    assert r.error == E.NONE and h.group().group_epoch == 2
    assert h.target_partitions() == {"a": set(range(6))}
    assert h.group().subscribed_metadata == {"t": (h.tid, 6)}
    stale = h.hb("a", 99)
    assert stale.error == E.FENCED_MEMBER_EPOCH
    assert stale.message == (f"The {kind} group member has a greater member epoch (99) than the one known "
                             f"by the group coordinator ({h.group().members['a'].member_epoch}).")


@pytest.mark.parametrize("kind", KINDS)
def test_failed_append_puts_the_group_back(kind: str) -> None:
    h = Harness(kind)
    h.hb("a", 0)
    h.hb("a")
    group_before = h.group()
    epochs = (group_before.group_epoch, group_before.target_assignment_epoch)
    target = h.target_partitions()
    written = dict(h.proto.written()[GID])
    h.log.fail_with = E.NOT_LEADER_OR_FOLLOWER
    r = h.hb("c", 0)
    assert r.error == E.NOT_COORDINATOR  # Kafka's mapping of a failed coordinator append
    group = h.group()
    assert set(group.members) == {"a"} and (group.group_epoch, group.target_assignment_epoch) == epochs
    assert h.target_partitions() == target and h.proto.written()[GID] == written
    assert h.session_timer("a") and not h.session_timer("c")
    # The restored member's session still runs: silent, it is fenced when its timeout passes.
    h.log.fail_with = None
    assert h.hb("c", 0).member_epoch == epochs[0] + 1
    h.sched.advance(h.session_timeout_ms("a") + 1)
    assert set(h.group().members) == set()  # c never heartbeat again either


def test_the_same_rule_set_is_one_implementation() -> None:
    """Both protocols leave the shared steps to the base (no override to drift apart)."""
    from kbroker.coord.consumer_coordinator import ConsumerGroupProtocol
    from kbroker.coord.share_group_protocol import ShareGroupProtocol
    shared: list[Callable[..., object]] = [
        ModernGroupProtocol.fence_member, ModernGroupProtocol.refresh_subscribed_metadata,
        ModernGroupProtocol.compute_target_assignment, ModernGroupProtocol.schedule_session,
        ModernGroupProtocol.run_with_rollback, ModernGroupProtocol.persist,
        ModernGroupProtocol.update_group_epoch_and_target_assignment, ModernGroupProtocol.finish_group_load,
    ]
    for cls in (ConsumerGroupProtocol, ShareGroupProtocol):
        for fn in shared:
            assert getattr(cls, fn.__name__) is fn, (cls.__name__, fn.__name__)


def test_a_group_id_belongs_to_one_group_type() -> None:
    """Kafka's group lookups: a share group's id is GROUP_ID_NOT_FOUND "Group g is not a consumer
    group." to ConsumerGroupHeartbeat / ConsumerGroupDescribe, and the other way round."""
    share, consumer = Harness("share"), Harness("consumer")
    share.hb("a", 0)
    r = share.coord.consumer_group_heartbeat(HeartbeatRequestData(
        GID, "x", 0, rebalance_timeout_ms=30000, subscribed_topic_names=["t"], owned={}))
    assert (r.error, r.message) == (E.GROUP_ID_NOT_FOUND, f"Group {GID} is not a consumer group.")
    assert GID not in share.coord.group_manager.consumer_groups
    assert share.coord.group_manager.consumer.consumer_group_describe(GID) == \
        (E.GROUP_ID_NOT_FOUND, f"Group {GID} is not a consumer group.", None)
    consumer.hb("a", 0)
    s = consumer.coord.share_group_heartbeat(ShareHeartbeatRequestData(GID, "x", 0, subscribed_topic_names=["t"]))
    assert (s.error, s.message) == (E.GROUP_ID_NOT_FOUND, f"Group {GID} is not a share group.")
    assert consumer.coord.group_manager.share.share_group_describe(GID) == \
        (E.GROUP_ID_NOT_FOUND, f"Group {GID} is not a share group.", None)


@pytest.mark.parametrize("kind", KINDS)
def test_a_repeated_subscription_is_no_change(kind: str) -> None:
    """Duplicates and order in SubscribedTopicNames do not make a new group epoch."""
    h = Harness(kind)
    h.topics.add("u", 2)
    h.hb("a", 0)
    h.hb("a")
    epoch = h.group().group_epoch
    for _ in range(2):
        names = ["u", "t", "t"]
        if kind == "share":
            r = h.coord.share_group_heartbeat(ShareHeartbeatRequestData(
                GID, "a", h.group().members["a"].member_epoch, subscribed_topic_names=names))
        else:
            m = h.group().members["a"]
            r = h.coord.consumer_group_heartbeat(HeartbeatRequestData(
                GID, "a", m.member_epoch, subscribed_topic_names=names,
                owned={t: set(ps) for t, ps in m.assigned.items()}))
        assert r.error == E.NONE
    assert h.group().group_epoch == epoch + 1  # the first one added topic u; the second changed nothing
    assert h.group().members["a"].subscribed_topic_names == ["t", "u"]
