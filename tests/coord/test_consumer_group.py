"""The KIP-848 consumer group state machine without sockets: a fake clock/scheduler and topics image."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from kbroker.coord.assignors import Assignment
from kbroker.coord.config import CoordinatorConfig
from kbroker.coord.consumer_coordinator import HeartbeatRequestData, HeartbeatResult
from kbroker.coord.consumer_group import (
    ConsumerGroup,
    ConsumerGroupMember,
    ConsumerGroupState,
    MemberState,
    reconcile,
)
from kbroker.coord.offset_metadata_manager import CommitRequestPartition
from kbroker.coord.shard import GroupCoordinatorShard
from kbroker.protocol.errors import ErrorCode
from tests.coord.support import FakeScheduler, MemoryLog, subscription

E = ErrorCode
SESSION = 45000


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    num_partitions: int
    is_internal: bool = False


class Topics:
    def __init__(self) -> None:
        self.by_name: dict[str, TopicInfo] = {}

    def add(self, name: str, partitions: int) -> uuid.UUID:
        info = self.by_name.get(name)
        if info is None:
            info = self.by_name[name] = TopicInfo(name, uuid.uuid4(), partitions)
        info.num_partitions = partitions
        return info.topic_id

    def topic(self, name: str) -> TopicInfo | None:
        return self.by_name.get(name)

    def topic_by_id(self, tid: uuid.UUID) -> TopicInfo | None:
        return next((t for t in self.by_name.values() if t.topic_id == tid), None)

    def topics(self) -> list[TopicInfo]:
        return list(self.by_name.values())


class H:
    def __init__(self, **config: Any) -> None:
        self.sched = FakeScheduler()
        self.log = MemoryLog()
        self.topics = Topics()
        self.coord = GroupCoordinatorShard(CoordinatorConfig(**config), self.sched, self.log, self.sched.time_ms,
                                      lambda g: E.NONE, topics=self.topics)
        self.tid = self.topics.add("orders", 6)

    def hb(self, member: str, epoch: int, owned: Assignment | None = None, *, topics: list[str] | None = None,
           group: str = "g", instance: str | None = None, regex: str | None = None, assignor: str | None = None,
           rebalance_timeout: int = 30000, version: int = 1) -> HeartbeatResult:
        if epoch == 0:
            owned = {} if owned is None else owned
            if topics is None and regex is None:
                topics = ["orders"]
        return self.coord.consumer_group_heartbeat(HeartbeatRequestData(
            group_id=group, member_id=member, member_epoch=epoch, instance_id=instance,
            rebalance_timeout_ms=rebalance_timeout if epoch == 0 else -1, subscribed_topic_names=topics,
            subscribed_topic_regex=regex, server_assignor=assignor, owned=owned, client_id="c",
            client_host="/h", api_version=version))

    def group(self, gid: str = "g") -> Any:
        return self.coord.consumer_groups[gid]

    def parts(self, r: HeartbeatResult) -> set[int]:
        assert r.assignment is not None
        return set(r.assignment.get(self.tid, set()))


def owners(h: H, gid: str = "g") -> dict[int, list[str]]:
    """partition -> members that hold it (assigned or pending revocation)."""
    out: dict[int, list[str]] = {}
    for m in h.group(gid).members.values():
        for a in (m.assigned, m.pending_revocation):
            for p in a.get(h.tid, set()):
                out.setdefault(p, []).append(m.member_id)
    return out


def test_first_member_gets_every_partition() -> None:
    h = H()
    r = h.hb("a", 0)
    assert (r.error, r.member_id, r.member_epoch, r.heartbeat_interval_ms) == (E.NONE, "a", 1, 5000)
    assert h.parts(r) == set(range(6))
    g = h.group()
    assert (g.group_epoch, g.target_assignment_epoch, g.state) == (1, 1, ConsumerGroupState.STABLE)
    # An unchanged heartbeat carries no assignment, even with owned partitions (as Kafka 4.3 answers
    # the Java consumer: tests/golden/captures/java-consumer-group-consumer/0007); a full request does.
    again = h.hb("a", 1, {h.tid: set(range(6))})
    assert again.error == E.NONE and again.assignment is None and again.member_epoch == 1
    full = h.coord.consumer_group_heartbeat(HeartbeatRequestData(
        group_id="g", member_id="a", member_epoch=1, rebalance_timeout_ms=30000,
        subscribed_topic_names=["orders"], owned={h.tid: set(range(6))}))
    assert full.assignment == {h.tid: set(range(6))}


def test_v0_generates_the_member_id_and_v1_requires_it() -> None:
    h = H()
    r = h.hb("", 0, version=0)
    assert r.error == E.NONE and r.member_id and len(r.member_id) == 22
    bad = h.hb("", 0, version=1)
    assert bad.error == E.INVALID_REQUEST and bad.message == "MemberId can't be empty."


def test_revocation_before_reassignment() -> None:
    h = H()
    h.hb("a", 0)
    rb = h.hb("b", 0)
    # b is at the new epoch but its partitions are still held by a: it gets nothing yet.
    assert rb.member_epoch == 2 and h.parts(rb) == set()
    assert h.group().members["b"].state == MemberState.UNRELEASED_PARTITIONS
    ra = h.hb("a", 1)
    kept = h.parts(ra)
    assert len(kept) == 3 and ra.member_epoch == 1  # a keeps its epoch until it has revoked
    assert h.group().members["a"].state == MemberState.UNREVOKED_PARTITIONS
    assert h.group().state == ConsumerGroupState.RECONCILING
    # Not yet acknowledged (still owns everything): b still waits, nobody holds a partition twice.
    still = h.hb("a", 1, {h.tid: set(range(6))})
    assert still.member_epoch == 1 and still.assignment is None  # unchanged: no assignment, as Kafka
    assert h.hb("b", 2).assignment is None
    assert all(len(v) == 1 for v in owners(h).values())
    # a acknowledges: it moves to epoch 2, then b gets the released partitions.
    ack = h.hb("a", 1, {h.tid: kept})
    assert ack.member_epoch == 2 and h.group().members["a"].state == MemberState.STABLE
    rb2 = h.hb("b", 2)
    assert h.parts(rb2) == set(range(6)) - kept
    assert h.group().state == ConsumerGroupState.STABLE
    assert sorted(owners(h)) == list(range(6)) and all(len(v) == 1 for v in owners(h).values())


def test_lost_response_retry_with_previous_epoch() -> None:
    h = H()
    h.hb("a", 0)
    h.hb("b", 0)
    kept = h.parts(h.hb("a", 1))
    assert h.hb("a", 1, {h.tid: kept}).member_epoch == 2
    # The response was lost: the member retries with epoch 1 and what it owns; accepted.
    retry = h.hb("a", 1, {h.tid: kept})
    assert retry.error == E.NONE and retry.member_epoch == 2
    # Owning something it was not assigned with an old epoch is fenced.
    fenced = h.hb("a", 1, {h.tid: set(range(6))})
    assert fenced.error == E.FENCED_MEMBER_EPOCH
    assert h.hb("a", 7).error == E.FENCED_MEMBER_EPOCH


def test_unknown_member_and_group() -> None:
    h = H()
    r = h.hb("x", 3, group="nope")
    assert (r.error, r.message) == (E.GROUP_ID_NOT_FOUND, "Consumer group nope not found.")
    assert h.hb("x", -1, group="nope").error == E.GROUP_ID_NOT_FOUND
    h.hb("a", 0)
    assert h.hb("x", 1).error == E.UNKNOWN_MEMBER_ID
    assert h.hb("x", -1).error == E.UNKNOWN_MEMBER_ID


def test_leave_frees_partitions_for_the_others() -> None:
    h = H()
    h.hb("a", 0)
    h.hb("b", 0)
    kept = h.parts(h.hb("a", 1))
    h.hb("a", 1, {h.tid: kept})
    h.hb("b", 2)
    left = h.hb("a", -1)
    assert (left.error, left.member_epoch) == (E.NONE, -1)
    assert "a" not in h.group().members and h.group().group_epoch == 3
    rb = h.hb("b", 2)
    assert rb.member_epoch == 3 and h.parts(rb) == set(range(6))


def test_session_timeout_fences_the_member() -> None:
    h = H(consumer_session_timeout_ms=SESSION)
    h.hb("a", 0)
    h.hb("b", 0)
    h.sched.advance(SESSION - 1000)
    h.hb("b", 2)  # b stays alive, a goes silent
    h.sched.advance(2000)
    assert set(h.group().members) == {"b"}
    assert h.parts(h.hb("b", 2)) == set(range(6))
    assert h.hb("a", 1).error == E.UNKNOWN_MEMBER_ID
    h.sched.advance(SESSION + 1)
    assert h.group().is_empty() and h.group().state == ConsumerGroupState.EMPTY


def test_rebalance_timeout_fences_a_member_that_does_not_revoke() -> None:
    h = H()
    h.hb("a", 0, rebalance_timeout=10000)
    h.hb("b", 0)
    h.hb("a", 1)  # asked to revoke: the rebalance timer starts
    b_epoch = 2
    for _ in range(3):
        h.sched.advance(4000)
        h.hb("a", 1, {h.tid: set(range(6))})  # heartbeats but never revokes
        b_epoch = h.hb("b", b_epoch).member_epoch
    assert "a" not in h.group().members and b_epoch == 3
    assert h.hb("a", 1).error == E.UNKNOWN_MEMBER_ID
    assert owners(h) == {p: ["b"] for p in range(6)}


def test_static_member_leave_and_rejoin_keeps_its_assignment() -> None:
    h = H()
    h.hb("a", 0, instance="i-a")
    r = h.hb("a", -2, instance="i-a")
    assert (r.error, r.member_epoch) == (E.NONE, -2)
    assert h.group().members["a"].assigned  # partitions stay with the departed static member
    dup = h.hb("a2", 0, instance="i-b")
    assert dup.error == E.NONE
    back = h.hb("a3", 0, instance="i-a")
    assert back.error == E.NONE and back.member_epoch >= 1 and "a" not in h.group().members
    assert h.hb("a4", 0, instance="i-a").error == E.UNRELEASED_INSTANCE_ID
    assert h.hb("a3", -2).error == E.INVALID_REQUEST  # static leave needs the instance id


def test_request_validation() -> None:
    h = H()
    base: dict[str, Any] = dict(group_id="g", member_id="m", member_epoch=0, rebalance_timeout_ms=1000,
                                subscribed_topic_names=["orders"], owned={})
    cases: list[tuple[dict[str, Any], ErrorCode]] = [
        (dict(group_id=""), E.INVALID_REQUEST),
        (dict(rebalance_timeout_ms=-1), E.INVALID_REQUEST),
        (dict(owned=None), E.INVALID_REQUEST),
        (dict(owned={uuid.uuid4(): {1}}), E.INVALID_REQUEST),
        (dict(subscribed_topic_names=None), E.INVALID_REQUEST),
        (dict(member_epoch=-3), E.INVALID_REQUEST),
        (dict(server_assignor="sticky"), E.UNSUPPORTED_ASSIGNOR),
        (dict(subscribed_topic_regex="(", subscribed_topic_names=None), E.INVALID_REGULAR_EXPRESSION),
    ]
    for change, error in cases:
        r = h.coord.consumer_group_heartbeat(HeartbeatRequestData(**{**base, **change}))
        assert r.error == error, change


def test_group_max_size() -> None:
    h = H(consumer_max_size=2)
    h.hb("a", 0)
    h.hb("b", 0)
    r = h.hb("c", 0)
    assert r.error == E.GROUP_MAX_SIZE_REACHED


def test_topic_created_later_and_partitions_added_trigger_assignment() -> None:
    h = H()
    r = h.hb("a", 0, topics=["orders", "later"])
    epoch = r.member_epoch
    later = h.topics.add("later", 2)
    r2 = h.hb("a", epoch)
    assert r2.member_epoch == epoch + 1 and r2.assignment is not None and r2.assignment[later] == {0, 1}
    h.topics.add("later", 4)
    r3 = h.hb("a", epoch + 1)
    assert r3.member_epoch == epoch + 2 and r3.assignment is not None and r3.assignment[later] == {0, 1, 2, 3}


def test_regex_subscription() -> None:
    h = H()
    other = h.topics.add("orders-eu", 2)
    h.topics.add("payments", 2)
    r = h.hb("a", 0, regex="orders.*", topics=None)
    assert r.error == E.NONE and r.assignment is not None
    assert set(r.assignment) == {h.tid, other}


def test_assignor_choice_and_describe() -> None:
    h = H()
    h.hb("a", 0, assignor="range")
    assert h.coord.group_manager.preferred_assignor(h.group()) == "range"
    error, _, group = h.coord.consumer_group_describe("g")
    assert error == E.NONE and group is h.group()
    error, message, _ = h.coord.consumer_group_describe("missing")
    assert (error, message) == (E.GROUP_ID_NOT_FOUND, "Group missing not found.")


def test_offset_commit_and_fetch_member_epoch_checks() -> None:
    h = H()
    h.hb("a", 0)
    part = [CommitRequestPartition("orders", 0, 5)]
    assert h.coord.commit_offsets("g", 1, "a", None, -1, part, api_version=9) == [E.NONE]
    assert h.coord.commit_offsets("g", 0, "a", None, -1, part, api_version=9) == [E.STALE_MEMBER_EPOCH]
    assert h.coord.commit_offsets("g", 1, "zz", None, -1, part, api_version=9) == [E.UNKNOWN_MEMBER_ID]
    assert h.coord.commit_offsets("g", 1, "a", None, -1, part, api_version=8) == [E.UNSUPPORTED_VERSION]
    assert h.coord.commit_offsets("g", -1, "", None, -1, part, api_version=9) == [E.UNKNOWN_MEMBER_ID]
    assert h.coord.fetch_offsets("g", [("orders", 0)], "a", 1)[1][0].offset == 5
    assert h.coord.fetch_offsets("g", [("orders", 0)], "a", 0)[0] == E.STALE_MEMBER_EPOCH
    assert h.coord.fetch_offsets("g", [("orders", 0)], "b", 1)[0] == E.UNKNOWN_MEMBER_ID
    assert h.coord.fetch_offsets("g", None, None, -1)[0] == E.NONE  # admin fetch
    h.hb("a", -1)
    # An empty consumer group takes admin commits.
    assert h.coord.commit_offsets("g", -1, "", None, -1, part, api_version=9) == [E.NONE]


def test_empty_classic_group_converts_and_non_empty_does_not() -> None:
    # group.consumer.migration.policy=disabled: only empty groups change type (online migration is
    # tests/coord/test_group_migration.py).
    h = H(consumer_migration_policy="disabled")
    # A "simple" classic group with committed offsets only.
    assert h.coord.commit_offsets("g", -1, "", None, -1, [CommitRequestPartition("orders", 0, 7)]) == [E.NONE]
    assert "g" in h.coord.groups
    r = h.hb("a", 0)
    assert r.error == E.NONE and "g" not in h.coord.groups and "g" in h.coord.consumer_groups
    assert h.coord.fetch_offsets("g", [("orders", 0)], "a", r.member_epoch)[1][0].offset == 7
    # A classic JoinGroup to the non-empty consumer group is refused.
    answers: list[Any] = []
    h.coord.join_group("g", "", None, "consumer", [("range", subscription("orders"))], 10000, 10000, "c", "h",
                       False, answers.append)
    assert answers[0].error == E.INCONSISTENT_GROUP_PROTOCOL
    # A heartbeat to a non-empty classic group is refused.
    h.coord.join_group("classic", "", None, "consumer", [("range", subscription("orders"))], 10000, 10000, "c",
                       "h", False, answers.append)
    refused = h.hb("b", 0, group="classic")
    assert (refused.error, refused.message) == (E.GROUP_ID_NOT_FOUND, "Group classic is not a consumer group")
    listed = h.coord.list_groups([], [])
    assert [(g, t) for g, _, _, t in listed] == [("classic", "classic"), ("g", "consumer")]
    assert [g for g, *_ in h.coord.list_groups(["stable"], ["consumer"])] == ["g"]
    assert h.coord.delete_groups(["g"]) == [E.NON_EMPTY_GROUP]
    h.hb("a", -1)
    assert h.coord.delete_groups(["g"]) == [E.NONE] and "g" not in h.coord.consumer_groups


def test_epoch_zero_rejoin_of_a_known_member_restarts_its_assignment() -> None:
    h = H()
    h.hb("a", 0)
    h.hb("b", 0)
    kept = h.parts(h.hb("a", 1))
    h.hb("a", 1, {h.tid: kept})
    h.hb("b", 2)
    # b was fenced client-side and rejoins with epoch 0 owning nothing.
    r = h.hb("b", 0)
    assert r.error == E.NONE and r.member_epoch == 2 and h.parts(r) == set(range(6)) - kept


def test_commit_with_the_previous_epoch_is_valid_for_partitions_held_since_then() -> None:
    """KIP-1251: a commit built just before a heartbeat bumped the member's epoch (the Java consumer's
    auto-commit racing a rebalance) is accepted for partitions the member held at that epoch."""
    h = H()
    h.hb("a", 0)
    h.hb("b", 0)
    kept = h.parts(h.hb("a", 1))
    h.hb("a", 1, {h.tid: kept})  # a moves to epoch 2, keeping `kept` (assigned at epoch 1)
    gone = set(range(6)) - kept
    b_parts = h.parts(h.hb("b", 2))
    assert b_parts == gone
    a_member = h.group().members["a"]
    assert {a_member.assignment_epochs[(h.tid, p)] for p in kept} == {1}
    assert {h.group().members["b"].assignment_epochs[(h.tid, p)] for p in gone} == {2}
    parts = [CommitRequestPartition("orders", p, 1) for p in sorted(kept)]
    assert h.coord.commit_offsets("g", 1, "a", None, -1, parts, api_version=10) == [E.NONE] * 3
    mixed = [CommitRequestPartition("orders", min(kept), 1), CommitRequestPartition("orders", min(gone), 1)]
    assert h.coord.commit_offsets("g", 1, "a", None, -1, mixed, api_version=10) == [E.NONE, E.STALE_MEMBER_EPOCH]
    # b got its partitions at epoch 2: an epoch-1 commit from b is a zombie's.
    assert h.coord.commit_offsets("g", 1, "b", None, -1, [CommitRequestPartition("orders", min(gone), 1)],
                                  api_version=10) == [E.STALE_MEMBER_EPOCH]
    assert h.coord.commit_offsets("g", 3, "a", None, -1, parts, api_version=10) == [E.STALE_MEMBER_EPOCH] * 3


def test_new_partitions_wait_until_the_revocation_is_acknowledged() -> None:
    # Kafka's CurrentAssignmentBuilder: while a member must revoke, it is given only the partitions it
    # keeps (at its old epoch); free partitions its new target adds come with the target epoch, once
    # the revocation is acknowledged.
    tid = uuid.UUID(int=7)
    group = ConsumerGroup("g", group_epoch=2, target_assignment_epoch=2)
    a = ConsumerGroupMember("a", member_epoch=1)
    group.add_member(a)
    group.set_member_assignment(a, {tid: {0, 1, 2}}, {})
    group.target_assignment = {"a": {tid: {1, 2, 3}}}
    reconcile(group, a, {tid: {0, 1, 2}})
    assert (a.state, a.member_epoch) == (MemberState.UNREVOKED_PARTITIONS, 1)
    assert a.assigned == {tid: {1, 2}} and a.pending_revocation == {tid: {0}}
    assert (tid, 3) not in group.partition_owner
    reconcile(group, a, {tid: {1, 2}})
    assert (a.state, a.member_epoch) == (MemberState.STABLE, 2)
    assert a.assigned == {tid: {1, 2, 3}} and a.pending_revocation == {}
    assert a.assignment_epochs == {(tid, 1): 1, (tid, 2): 1, (tid, 3): 2}
