"""The KIP-932 share group state machine without sockets: ShareGroupHeartbeat / ShareGroupDescribe on a
shard with a fake clock and topics image, the `simple` assignor, and the hook that tells the
share-partition manager a member is gone."""

from __future__ import annotations

import uuid

from kbroker.coord.config import CoordinatorConfig
from kbroker.coord.consumer_coordinator import HeartbeatRequestData, HeartbeatResult
from kbroker.coord.shard import GroupCoordinatorShard
from kbroker.coord.share_group import ShareGroupState, simple_assign
from kbroker.coord.share_group_protocol import ShareHeartbeatRequestData
from kbroker.protocol.errors import ErrorCode
from tests.coord.support import FakeScheduler, MemoryLog
from tests.coord.test_consumer_group import Topics

E = ErrorCode


class H:
    def __init__(self, partitions: int = 2, **config: int) -> None:
        self.sched = FakeScheduler()
        self.log = MemoryLog()
        self.topics = Topics()
        self.coord = GroupCoordinatorShard(CoordinatorConfig(**config), self.sched, self.log, self.sched.time_ms,
                                           lambda g: E.NONE, topics=self.topics)
        self.tid = self.topics.add("jobs", partitions)
        self.left: list[tuple[str, str]] = []
        self.coord.group_manager.share.listener = lambda g, m: self.left.append((g, m))

    def hb(self, member: str, epoch: int, topics: list[str] | None = None, group: str = "sg") -> HeartbeatResult:
        if epoch == 0 and topics is None:
            topics = ["jobs"]
        return self.coord.share_group_heartbeat(ShareHeartbeatRequestData(
            group_id=group, member_id=member, member_epoch=epoch, subscribed_topic_names=topics,
            client_id="c", client_host="/h"))

    def parts(self, r: HeartbeatResult) -> set[int]:
        assert r.assignment is not None
        return set(r.assignment.get(self.tid, set()))


def test_more_members_than_partitions_all_get_work() -> None:
    h = H(partitions=2)
    results = [h.hb(f"m{i}", 0) for i in range(6)]
    assert all(r.error == E.NONE for r in results)
    # Members learn the latest assignment on their next heartbeat (epoch = group epoch).
    final = {f"m{i}": h.hb(f"m{i}", results[i].member_epoch) for i in range(6)}
    group = h.coord.group_manager.share_groups["sg"]
    assert group.group_epoch == 6 and group.assignment_epoch == 6 and group.state == ShareGroupState.STABLE
    owners: dict[int, list[str]] = {}
    for mid, m in group.members.items():
        assert m.member_epoch == 6
        assert len(m.assigned.get(h.tid, set())) == 1, mid  # every member has a partition
        for p in m.assigned[h.tid]:
            owners.setdefault(p, []).append(mid)
    assert sorted(owners) == [0, 1] and sorted(len(v) for v in owners.values()) == [3, 3]
    assert all(r.error == E.NONE for r in final.values())


def test_epochs_fencing_and_leave() -> None:
    h = H(partitions=3)
    a = h.hb("a", 0)
    assert (a.error, a.member_epoch, a.heartbeat_interval_ms, h.parts(a)) == (E.NONE, 1, 5000, {0, 1, 2})
    b = h.hb("b", 0)
    assert b.member_epoch == 2 and len(h.parts(b)) == 1
    # a is at epoch 1 and the group at 2: a heartbeat with 1 is accepted and brings the new assignment.
    a2 = h.hb("a", 1, topics=None)
    assert a2.member_epoch == 2 and len(h.parts(a2)) == 2
    assert h.hb("a", 1).error == E.FENCED_MEMBER_EPOCH
    assert h.hb("a", 7).error == E.FENCED_MEMBER_EPOCH
    assert h.hb("zz", 2).error == E.UNKNOWN_MEMBER_ID
    unchanged = h.hb("a", 2, topics=None)
    assert unchanged.error == E.NONE and unchanged.assignment is None
    left = h.hb("b", -1)
    assert (left.error, left.member_epoch) == (E.NONE, -1)
    assert h.left == [("sg", "b")]
    assert h.parts(h.hb("a", 2, topics=None)) == {0, 1, 2}


def test_session_timeout_fences_the_member_and_tells_the_share_partitions() -> None:
    h = H(share_session_timeout_ms=1000)
    h.hb("a", 0)
    h.hb("b", 0)
    h.sched.advance(500)
    assert h.hb("a", 1, topics=None).member_epoch == 2  # renews a's session only
    h.sched.advance(600)
    group = h.coord.group_manager.share_groups["sg"]
    assert list(group.members) == ["a"] and h.left == [("sg", "b")]
    h.sched.advance(1000)
    assert group.state == ShareGroupState.EMPTY


def test_validation_and_group_types() -> None:
    h = H(share_max_size=1)
    assert h.hb("", 0).error == E.INVALID_REQUEST
    assert h.hb("a", 0, topics=[]).error == E.INVALID_REQUEST
    assert h.hb("a", -2).error == E.INVALID_REQUEST
    assert h.hb("a", 0, group="").error == E.INVALID_REQUEST
    assert h.hb("a", 0).error == E.NONE
    assert h.hb("b", 0).error == E.GROUP_MAX_SIZE_REACHED
    # A consumer group's id is not a share group's, and the other way around.
    h.coord.consumer_group_heartbeat(HeartbeatRequestData(
        group_id="cg", member_id="x", member_epoch=0, rebalance_timeout_ms=30000,
        subscribed_topic_names=["jobs"], owned={}))
    assert h.hb("a", 0, group="cg").error == E.GROUP_ID_NOT_FOUND
    assert h.coord.share_group_describe("cg")[:2] == (E.GROUP_ID_NOT_FOUND, "Group cg is not a share group.")
    assert h.coord.share_group_describe("nope")[:2] == (E.GROUP_ID_NOT_FOUND, "Group nope not found.")
    error, _, group = h.coord.share_group_describe("sg")
    assert error == E.NONE and group is not None and list(group.members) == ["a"]


def test_list_and_delete_share_groups() -> None:
    h = H()
    h.hb("a", 0)
    assert h.coord.list_groups([], ["share"]) == [("sg", "share", "Stable", "share")]
    assert h.coord.list_groups([], ["consumer"]) == []
    assert h.coord.delete_groups(["sg"]) == [E.NON_EMPTY_GROUP]
    h.hb("a", -1)
    assert h.coord.list_groups(["empty"], []) == [("sg", "share", "Empty", "share")]
    assert h.coord.delete_groups(["sg"]) == [E.NONE]
    assert h.coord.list_groups([], []) == []


def test_new_partitions_are_assigned_on_the_next_heartbeat() -> None:
    h = H(partitions=1)
    h.hb("a", 0)
    h.topics.add("jobs", 3)
    r = h.hb("a", 1, topics=None)
    assert r.member_epoch == 2 and h.parts(r) == {0, 1, 2}


def test_simple_assignor() -> None:
    t1, t2 = uuid.UUID(int=1), uuid.UUID(int=2)
    fewer = simple_assign({"a": {t1}, "b": {t1}}, {t1: 5})
    assert fewer == {"a": {t1: {0, 2, 4}}, "b": {t1: {1, 3}}}
    more = simple_assign({m: {t1} for m in "abcde"}, {t1: 2})
    assert [sorted(more[m][t1]) for m in "abcde"] == [[0], [1], [0], [1], [0]]
    mixed = simple_assign({"a": {t1, t2}, "b": {t2}}, {t1: 1, t2: 1})
    assert mixed == {"a": {t1: {0}, t2: {0}}, "b": {t2: {0}}}
    assert simple_assign({"a": set()}, {t1: 3}) == {"a": {}}


def test_records_are_written_and_a_new_shard_loads_the_group_back() -> None:
    from kbroker.coord.records import decode_key
    from kbroker.coord.share_records import ShareGroupRecordKey
    from kbroker.protocol.coordinator_records.serde import record_type_of

    h = H(partitions=2)
    h.hb("a", 0)
    h.hb("b", 0)
    h.hb("a", 1, topics=None)
    types = [record_type_of(k) for _g, k, _v in h.log.records]
    # The first join: member metadata, group epoch, target assignment, its metadata, current assignment.
    assert types[:5] == [10, 11, 13, 12, 14]
    assert all(isinstance(decode_key(k), ShareGroupRecordKey) for _g, k, _v in h.log.records)
    fresh = H(partitions=2)
    fresh.topics = h.topics
    fresh.coord = GroupCoordinatorShard(CoordinatorConfig(), fresh.sched, fresh.log, fresh.sched.time_ms,
                                        lambda g: E.NONE, topics=h.topics)
    for _g, k, v in h.log.records:
        fresh.coord.replay_record(k, v)
    fresh.coord.on_loaded()
    before, after = h.coord.group_manager.share_groups["sg"], fresh.coord.group_manager.share_groups["sg"]
    assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch, before.assignment_epoch) == (2, 2)
    assert {m: (x.member_epoch, x.assigned, x.subscribed_topic_names) for m, x in after.members.items()} == \
        {m: (x.member_epoch, x.assigned, x.subscribed_topic_names) for m, x in before.members.items()}
    assert after.target_assignment == before.target_assignment
    # The loaded members keep heartbeating with their epochs; nothing new is written for that.
    written = len(fresh.log.records)
    assert fresh.coord.share_group_heartbeat(ShareHeartbeatRequestData("sg", "b", 2, client_id="c", client_host="/h")).error == E.NONE
    assert len(fresh.log.records) == written
    # Leaving and deleting write tombstones; a reload then knows no group.
    h.hb("a", 2, topics=None)
    h.hb("a", -1)
    h.hb("b", -1)
    assert h.coord.delete_groups(["sg"]) == [E.NONE]
    again = GroupCoordinatorShard(CoordinatorConfig(), FakeScheduler(), MemoryLog(), lambda: 0, lambda g: E.NONE,
                                  topics=h.topics)
    for _g, k, v in h.log.records:
        again.replay_record(k, v)
    assert again.group_manager.share_groups == {}


def test_a_failed_append_leaves_the_group_as_it_was() -> None:
    h = H()
    h.hb("a", 0)
    h.log.fail_with = E.NOT_LEADER_OR_FOLLOWER
    assert h.hb("b", 0).error == E.NOT_COORDINATOR
    group = h.coord.group_manager.share_groups["sg"]
    assert list(group.members) == ["a"] and group.group_epoch == 1
    h.log.fail_with = None
    assert h.hb("b", 0).member_epoch == 2
