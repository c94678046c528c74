"""Committed offsets and groups stored through the real log (`__consumer_offsets` UnifiedLogs in a temp
dir) and loaded back by a new broker stack; offset commit/fetch/delete/expiry and group admin rules."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kbroker.coord.group import GroupState
from kbroker.coord.offset_metadata_manager import CommitRequestPartition as CP
from kbroker.coord.records import OffsetCommitValue
from kbroker.coord.runtime import GROUP_METADATA_TOPIC, java_string_hashcode, partition_for
from kbroker.protocol.errors import ErrorCode
from tests.coord.stack import Stack
from tests.coord.support import Box, Harness, subscription
from tests.support.sync import run_now

E = ErrorCode
S = GroupState


def test_java_string_hashcode_and_partition() -> None:
    # Values of java.lang.String#hashCode.
    assert java_string_hashcode("") == 0
    assert java_string_hashcode("a") == 97
    assert java_string_hashcode("hello") == 99162322

    assert java_string_hashcode("polygenelubricants") == -2**31  # Integer.MIN_VALUE
    assert partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) is 0
    assert java_string_hashcode("é€𝄞") == (((0xE9 * 31 + 0x20AC) * 31 + 0xD834) * 31 + 0xDD1E)
    assert partition_for("console-consumer-1", 50) == abs(java_string_hashcode("console-consumer-1")) % 50


async def _populate(stack: Stack) -> tuple[str, str]:
    assert run_now(stack.runtime.create_offsets_topic()) == E.NONE
    coord = stack.coordinator
    # A simple group (generation -1) with offsets and metadata.
    assert coord.commit_offsets("simple", -1, "", None, -1, [CP("t", 0, 10, 3, "meta"), CP("t", 1, 20)]) == \
        [E.NONE, E.NONE]
    assert coord.commit_offsets("simple", -1, "", None, -1, [CP("t", 0, 11, 4, "m2")]) == [E.NONE]
    # A consumer group: one member, synced, with a commit.
    first = Box()
    coord.join_group("active", "", None, "consumer", [("range", subscription("t"))], 10000, 30000, "c",
                     "/127.0.0.1", True, first)
    second = Box()
    coord.join_group("active", first.result.member_id, None, "consumer", [("range", subscription("t"))], 10000,
                     30000, "c", "/127.0.0.1", True, second)
    for _ in range(5):
        await asyncio.sleep(0.01)
        if second.done:
            break
    joined = second.result
    assert joined.error == E.NONE
    synced = Box()
    coord.sync_group("active", 1, joined.member_id, None, None, None, {joined.member_id: b"ASSIGNED"}, synced)
    assert synced.result.error == E.NONE
    assert coord.commit_offsets("active", 1, joined.member_id, None, -1, [CP("t", 2, 7)]) == [E.NONE]
    # A deleted group leaves tombstones only.
    assert coord.commit_offsets("gone", -1, "", None, -1, [CP("t", 0, 1)]) == [E.NONE]
    assert coord.delete_groups(["gone"]) == [E.NONE]
    return joined.member_id, "active"


def test_offsets_and_groups_survive_a_restart(tmp_path: Path) -> None:
    async def first() -> str:
        stack = Stack(tmp_path)
        stack.start()
        member_id, _ = await _populate(stack)
        stack.shutdown()
        return member_id

    member_id = asyncio.run(first())

    async def second() -> None:
        stack = Stack(tmp_path)
        stack.start()
        # Until its partition is loaded, a group answers COORDINATOR_LOAD_IN_PROGRESS.
        assert stack.runtime.loading == {0, 1, 2}
        assert stack.coordinator.heartbeat("active", 1, member_id, None) == E.COORDINATOR_LOAD_IN_PROGRESS
        assert stack.coordinator.fetch_offsets("simple", None)[0] == E.COORDINATOR_LOAD_IN_PROGRESS
        await stack.wait_loaded()
        coord = stack.coordinator
        err, offsets = coord.fetch_offsets("simple", None)
        assert err == E.NONE
        assert [(o.topic, o.partition, o.offset, o.leader_epoch, o.metadata) for o in offsets] == \
            [("t", 0, 11, 4, "m2"), ("t", 1, 20, -1, "")]
        group = coord.shard_for("active").groups["active"]
        assert group.state == S.STABLE and group.generation_id == 1 and group.protocol_name == "range"
        assert group.members[member_id].assignment == b"ASSIGNED"
        # The member carries on after the restart with its old generation.
        assert coord.heartbeat("active", 1, member_id, None) == E.NONE
        assert coord.fetch_offsets("active", [("t", 2)])[1][0].offset == 7
        assert "gone" not in coord.shard_for("gone").groups and coord.fetch_offsets("gone", None) == (E.NONE, [])
        assert sorted(g for g, *_ in coord.list_groups([], [])) == ["active", "simple"]
        stack.shutdown()

    asyncio.run(second())


def test_records_go_to_the_group_partition(tmp_path: Path) -> None:
    async def run() -> None:
        stack = Stack(tmp_path)
        stack.start()
        assert run_now(stack.runtime.create_offsets_topic()) == E.NONE
        info = stack.metadata.topic(GROUP_METADATA_TOPIC)
        assert info is not None and info.is_internal and info.num_partitions == 3 and info.configs["cleanup.policy"] == "compact"
        stack.coordinator.commit_offsets("group-x", -1, "", None, -1, [CP("t", 0, 5)])
        p = partition_for("group-x", 3)
        parts = [stack.replica_manager.get_partition(GROUP_METADATA_TOPIC, i) for i in range(3)]
        ends = {i: part.log_end_offset for i, part in enumerate(parts) if part is not None}
        assert ends[p] == 1 and sum(ends.values()) == 1
        stack.shutdown()

    asyncio.run(run())


# -- offset rules (no log needed) -------------------------------------------------------------------


def test_commit_validation() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    c = h.coord
    assert c.commit_offsets("none", 3, "m", None, -1, [CP("t", 0, 1)]) == [E.ILLEGAL_GENERATION]
    assert "none" not in c.groups
    (a,) = h.stable_group(1)
    assert c.commit_offsets("g", 1, a.member_id, None, -1, [CP("t", 0, 1)]) == [E.NONE]
    assert c.commit_offsets("g", 2, a.member_id, None, -1, [CP("t", 0, 1)]) == [E.ILLEGAL_GENERATION]
    assert c.commit_offsets("g", 1, "ghost", None, -1, [CP("t", 0, 1)]) == [E.UNKNOWN_MEMBER_ID]
    assert c.commit_offsets("g", -1, "", None, -1, [CP("t", 0, 1)]) == [E.UNKNOWN_MEMBER_ID]  # not empty
    assert c.commit_offsets("g", 1, a.member_id, "inst", -1, [CP("t", 0, 1)]) == [E.UNKNOWN_MEMBER_ID]
    assert c.commit_offsets("g", 1, a.member_id, None, -1, [CP("t", 0, 1, -1, "x" * 4097)]) == \
        [E.OFFSET_METADATA_TOO_LARGE]
    # While preparing, the old generation may still commit (onJoinPrepare commits before rejoining).
    h.join_new()
    assert c.commit_offsets("g", 1, a.member_id, None, -1, [CP("t", 0, 2)]) == [E.NONE]
    r = h.join(member_id=a.member_id).result
    assert r.generation_id == 2
    assert c.commit_offsets("g", 2, a.member_id, None, -1, [CP("t", 0, 3)]) == [E.REBALANCE_IN_PROGRESS]
    h.status["g"] = E.NOT_COORDINATOR
    assert c.commit_offsets("g", 2, a.member_id, None, -1, [CP("t", 0, 3)]) == [E.NOT_COORDINATOR]


def test_commit_counts_as_heartbeat() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    (a,) = h.stable_group(1, session_timeout_ms=10000)
    for _ in range(5):
        h.sched.advance(6000)
        assert h.coord.commit_offsets("g", 1, a.member_id, None, -1, [CP("t", 0, 1)]) == [E.NONE]
    assert a.member_id in h.coord.groups["g"].members


def test_failed_commit_write_is_not_visible() -> None:
    h = Harness()
    h.log.fail_with = E.NOT_LEADER_OR_FOLLOWER
    assert h.coord.commit_offsets("s", -1, "", None, -1, [CP("t", 0, 1)]) == [E.NOT_COORDINATOR]
    assert h.coord.fetch_offsets("s", [("t", 0)])[1][0].offset == -1
    h.log.fail_with = E.RECORD_LIST_TOO_LARGE
    assert h.coord.commit_offsets("s", -1, "", None, -1, [CP("t", 0, 1)]) == [E.INVALID_COMMIT_OFFSET_SIZE]


def test_fetch_offsets() -> None:
    h = Harness()
    h.coord.commit_offsets("s", -1, "", None, -1, [CP("t", 1, 9, 2, "md"), CP("u", 0, 3)])
    err, got = h.coord.fetch_offsets("s", [("t", 1), ("t", 5)])
    assert err == E.NONE
    assert [(o.offset, o.leader_epoch, o.metadata) for o in got] == [(9, 2, "md"), (-1, -1, "")]
    assert [(o.topic, o.partition) for o in h.coord.fetch_offsets("s", None)[1]] == [("t", 1), ("u", 0)]
    assert h.coord.fetch_offsets("unknown", None) == (E.NONE, [])


def test_offset_expiry_for_empty_groups() -> None:
    h = Harness(initial_rebalance_delay_ms=0, offsets_retention_ms=60_000)
    h.coord.commit_offsets("simple", -1, "", None, -1, [CP("t", 0, 1)])
    h.coord.commit_offsets("explicit", -1, "", None, 5_000, [CP("t", 0, 1)])  # v2-v4 retention time
    (a,) = h.stable_group(1, session_timeout_ms=600_000)
    h.coord.commit_offsets("g", 1, a.member_id, None, -1, [CP("t", 0, 1)])
    h.sched.advance(5_000)
    assert h.coord.expire_offsets() == 1 and "explicit" not in h.coord.groups
    h.sched.advance(55_000)
    assert h.coord.expire_offsets() == 1  # the simple group's; "g" has a member
    assert "simple" not in h.coord.groups
    h.coord.leave_group("g", [(a.member_id, None)])
    h.sched.advance(59_000)
    assert h.coord.expire_offsets() == 0  # retention counts from when the group became empty
    h.sched.advance(1_000)
    assert h.coord.expire_offsets() == 1 and "g" not in h.coord.groups


def test_delete_groups_and_offsets() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    (a,) = h.stable_group(1)
    h.coord.commit_offsets("g", 1, a.member_id, None, -1, [CP("t", 0, 1), CP("other", 0, 1)])
    assert h.coord.delete_groups(["g", "nope"]) == [E.NON_EMPTY_GROUP, E.GROUP_ID_NOT_FOUND]
    # Offsets of a topic the active consumer group subscribes to cannot be deleted.
    assert h.coord.delete_offsets("g", [("t", 0), ("other", 0)]) == (E.NONE, [E.GROUP_SUBSCRIBED_TO_TOPIC, E.NONE])
    assert [o.topic for o in h.coord.fetch_offsets("g", None)[1]] == ["t"]
    assert h.coord.delete_offsets("nope", [("t", 0)]) == (E.GROUP_ID_NOT_FOUND, [])
    h.coord.leave_group("g", [(a.member_id, None)])
    assert h.coord.delete_groups(["g"]) == [E.NONE]
    assert "g" not in h.coord.groups and h.coord.fetch_offsets("g", None) == (E.NONE, [])
    tombstones = [v for _, _, v in h.log.records[-2:]]
    assert tombstones == [None, None]


def test_non_consumer_group_offsets_cannot_be_deleted_while_active() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    h.stable_group(1, protocol_type="connect")
    assert h.coord.delete_offsets("g", [("t", 0)]) == (E.NON_EMPTY_GROUP, [])


def test_describe_and_list() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    (a,) = h.stable_group(1)
    h.coord.commit_offsets("simple", -1, "", None, -1, [CP("t", 0, 1)])
    err, d = h.coord.describe_group("g")
    assert err == E.NONE and (d.state, d.protocol_type, d.protocol_data) == ("Stable", "consumer", "range")
    assert d.members == [(a.member_id, None, "client", "/127.0.0.1", subscription("t"), a.member_id.encode())]
    assert h.coord.describe_group("nope")[1].state == "Dead"
    assert h.coord.list_groups([], []) == [("g", "consumer", "Stable", "classic"), ("simple", "", "Empty", "classic")]
    assert h.coord.list_groups(["empty"], []) == [("simple", "", "Empty", "classic")]
    assert h.coord.list_groups([], ["consumer"]) == []
    assert h.coord.list_groups(["STABLE"], ["Classic"]) == [("g", "consumer", "Stable", "classic")]


def test_offset_value_types() -> None:
    assert OffsetCommitValue(offset=1).expire_timestamp == -1


def test_offsets_of_deleted_topics_are_removed() -> None:
    h = Harness()
    h.coord.commit_offsets("a", -1, "", None, -1, [CP("gone", 0, 1), CP("kept", 0, 1)])
    h.coord.commit_offsets("b", -1, "", None, -1, [CP("gone", 3, 1)])
    assert h.coord.remove_offsets_of_topics({"gone"}) == 2
    assert [o.topic for o in h.coord.fetch_offsets("a", None)[1]] == ["kept"]
    assert h.coord.fetch_offsets("b", None) == (E.NONE, [])
    assert [v for _, _, v in h.log.records[-2:]] == [None, None]
