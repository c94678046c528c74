"""The group APIs through real request/response frames and the dispatcher, across their versions."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.delete_groups import DeleteGroupsRequest
from kbroker.protocol.messages.describe_groups import DescribeGroupsRequest
from kbroker.protocol.messages.find_coordinator import FindCoordinatorRequest
from kbroker.protocol.messages.heartbeat import HeartbeatRequest
from kbroker.protocol.messages.join_group import JoinGroupRequest
from kbroker.protocol.messages.leave_group import LeaveGroupRequest
from kbroker.protocol.messages.list_groups import ListGroupsRequest
from kbroker.protocol.messages.offset_commit import OffsetCommitRequest
from kbroker.protocol.messages.offset_delete import OffsetDeleteRequest
from kbroker.protocol.messages.offset_fetch import OffsetFetchRequest
from kbroker.protocol.messages.sync_group import SyncGroupRequest
from tests.coord.stack import Stack
from tests.coord.support import subscription
from tests.support.sync import run_now

E = ErrorCode
SUB = subscription("orders")


def _join(group: str, member_id: str = "", instance: str | None = None) -> JoinGroupRequest:
    return JoinGroupRequest(group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=20000,
                            member_id=member_id, group_instance_id=instance, protocol_type="consumer",
                            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=SUB)])


def _commit(group: str, gen: int, member: str, topic: str, offset: int, epoch: int = -1) -> OffsetCommitRequest:
    P = OffsetCommitRequest.OffsetCommitRequestPartition
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    return OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=gen, member_id=member,
                               topics=[T(name=topic, partitions=[P(partition_index=0, committed_offset=offset,
                                                                    committed_metadata="md",
                                                                    committed_leader_epoch=epoch)])])


def run(tmp_path: Path, body) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        stack = Stack(tmp_path)
        stack.start()
        run_now(stack.services.controller.create_topic("orders", num_partitions=2))
        try:
            await body(stack)
        finally:
            stack.shutdown()

    asyncio.run(main())


def test_find_coordinator_versions(tmp_path: Path) -> None:
    async def body(s: Stack) -> None:
        r0 = await s.call(10, 0, FindCoordinatorRequest(key="g"))
        assert (r0.error_code, r0.node_id, r0.host, r0.port) == (0, 1, "127.0.0.1", 9092)
        assert s.metadata.topic("__consumer_offsets") is not None
        r3 = await s.call(10, 3, FindCoordinatorRequest(key="tx", key_type=1))
        assert r3.error_code == E.NONE and r3.node_id == 1  # creates __transaction_state
        assert s.metadata.topic("__transaction_state") is not None
        r4 = await s.call(10, 4, FindCoordinatorRequest(key_type=0, coordinator_keys=["a", "b"]))
        assert [(c.key, c.error_code, c.node_id) for c in r4.coordinators] == [("a", 0, 1), ("b", 0, 1)]
        bad = await s.call(10, 4, FindCoordinatorRequest(key_type=7, coordinator_keys=["a"]))
        assert bad.coordinators[0].error_code == E.INVALID_REQUEST

    run(tmp_path, body)


def test_group_lifecycle_across_versions(tmp_path: Path) -> None:
    async def body(s: Stack) -> None:
        await s.call(10, 0, FindCoordinatorRequest(key="g"))
        await s.wait_loaded()
        first = await s.call(11, 9, _join("g"))
        assert first.error_code == E.MEMBER_ID_REQUIRED and first.member_id
        joined = await s.call(11, 9, _join("g", first.member_id))
        assert (joined.error_code, joined.generation_id, joined.protocol_name, joined.protocol_type) == \
            (0, 1, "range", "consumer")
        assert joined.leader == joined.member_id and joined.members[0].metadata == SUB
        mid = joined.member_id
        A = SyncGroupRequest.SyncGroupRequestAssignment
        synced = await s.call(14, 5, SyncGroupRequest(group_id="g", generation_id=1, member_id=mid,
                                                      protocol_type="consumer", protocol_name="range",
                                                      assignments=[A(member_id=mid, assignment=b"X")]))
        assert (synced.error_code, synced.assignment, synced.protocol_name) == (0, b"X", "range")
        hb = await s.call(12, 4, HeartbeatRequest(group_id="g", generation_id=1, member_id=mid))
        assert hb.error_code == 0
        hb0 = await s.call(12, 0, HeartbeatRequest(group_id="g", generation_id=0, member_id=mid))
        assert hb0.error_code == E.ILLEGAL_GENERATION
        c8 = await s.call(8, 8, _commit("g", 1, mid, "orders", 42, epoch=0))
        assert c8.topics[0].partitions[0].error_code == 0
        bad = await s.call(8, 8, _commit("g", 1, mid, "no-such-topic", 1))
        assert bad.topics[0].partitions[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION
        stale = await s.call(8, 2, _commit("g", 0, mid, "orders", 1))
        assert stale.topics[0].partitions[0].error_code == E.ILLEGAL_GENERATION
        # OffsetFetch v1 (requested partitions), v7 (all), v8 (several groups).
        T = OffsetFetchRequest.OffsetFetchRequestTopic
        f1 = await s.call(9, 1, OffsetFetchRequest(group_id="g", topics=[T(name="orders", partition_indexes=[0, 1])]))
        assert [(p.partition_index, p.committed_offset, p.metadata) for p in f1.topics[0].partitions] == \
            [(0, 42, "md"), (1, -1, "")]
        f7 = await s.call(9, 7, OffsetFetchRequest(group_id="g", topics=None, require_stable=True))
        assert f7.error_code == 0
        assert [(t.name, p.committed_offset, p.committed_leader_epoch) for t in f7.topics for p in t.partitions] == \
            [("orders", 42, 0)]
        G = OffsetFetchRequest.OffsetFetchRequestGroup
        f8 = await s.call(9, 8, OffsetFetchRequest(groups=[G(group_id="g", topics=None),
                                                           G(group_id="other", topics=None)]))
        assert [(g.group_id, g.error_code, len(g.topics)) for g in f8.groups] == [("g", 0, 1), ("other", 0, 0)]
        d = await s.call(15, 5, DescribeGroupsRequest(groups=["g", "nope"], include_authorized_operations=True))
        assert (d.groups[0].group_state, d.groups[0].protocol_data, d.groups[0].members[0].member_assignment) == \
            ("Stable", "range", b"X")
        assert d.groups[0].members[0].client_host == "/127.0.0.1" and d.groups[0].authorized_operations > 0
        assert (d.groups[1].error_code, d.groups[1].group_state) == (0, "Dead")
        listed = await s.call(16, 5, ListGroupsRequest(states_filter=["Stable"], types_filter=["classic"]))
        assert [(g.group_id, g.group_state, g.group_type) for g in listed.groups] == [("g", "Stable", "classic")]
        listed0 = await s.call(16, 0, ListGroupsRequest())
        assert [(g.group_id, g.protocol_type) for g in listed0.groups] == [("g", "consumer")]
        nonempty = await s.call(42, 2, DeleteGroupsRequest(groups_names=["g"]))
        assert nonempty.results[0].error_code == E.NON_EMPTY_GROUP
        od = await s.call(47, 0, OffsetDeleteRequest(group_id="g", topics=[
            OffsetDeleteRequest.OffsetDeleteRequestTopic(
                name="orders", partitions=[OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0)])]))
        assert od.error_code == 0 and od.topics[0].partitions[0].error_code == E.GROUP_SUBSCRIBED_TO_TOPIC
        left = await s.call(13, 5, LeaveGroupRequest(group_id="g", members=[
            LeaveGroupRequest.MemberIdentity(member_id=mid), LeaveGroupRequest.MemberIdentity(member_id="x")]))
        assert left.error_code == 0 and [m.error_code for m in left.members] == [0, E.UNKNOWN_MEMBER_ID]
        left0 = await s.call(13, 0, LeaveGroupRequest(group_id="g", member_id=mid))
        assert left0.error_code == E.UNKNOWN_MEMBER_ID
        deleted = await s.call(42, 2, DeleteGroupsRequest(groups_names=["g", "g2"]))
        assert [r.error_code for r in deleted.results] == [0, E.GROUP_ID_NOT_FOUND]

    run(tmp_path, body)


def test_join_v0_and_simple_commit_with_retention(tmp_path: Path) -> None:
    async def body(s: Stack) -> None:
        await s.call(10, 0, FindCoordinatorRequest(key="g"))
        await s.wait_loaded()
        r = await s.call(11, 0, _join("old"))  # v0-v3: no MEMBER_ID_REQUIRED step
        assert r.error_code == 0 and r.generation_id == 1 and r.protocol_name == "range"
        c = await s.call(8, 2, OffsetCommitRequest(
            group_id="simple", generation_id_or_member_epoch=-1, member_id="", retention_time_ms=60000,
            topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name="orders", partitions=[
                OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=1, committed_offset=5)])]))
        assert c.topics[0].partitions[0].error_code == 0
        stored = s.coordinator.shard_for("simple").offsets.get("simple", "orders", 1)
        assert stored.expire_timestamp - stored.commit_timestamp == 60000

    run(tmp_path, body)


def test_groups_answer_load_in_progress_then_serve(tmp_path: Path) -> None:
    async def first() -> None:
        s = Stack(tmp_path)
        s.start()
        run_now(s.runtime.create_offsets_topic())
        s.shutdown()

    asyncio.run(first())

    async def second() -> None:
        s = Stack(tmp_path)
        s.start()
        hb = await s.call(12, 4, HeartbeatRequest(group_id="g", generation_id=1, member_id="m"))
        assert hb.error_code == E.COORDINATOR_LOAD_IN_PROGRESS
        listed = await s.call(16, 4, ListGroupsRequest())
        assert listed.error_code == E.COORDINATOR_LOAD_IN_PROGRESS
        await s.wait_loaded()
        hb = await s.call(12, 4, HeartbeatRequest(group_id="g", generation_id=1, member_id="m"))
        assert hb.error_code == E.UNKNOWN_MEMBER_ID
        s.shutdown()

    asyncio.run(second())


def test_offset_commit_is_answered_once_the_high_watermark_passes_it(tmp_path: Path) -> None:
    """Through the dispatcher and a real partition: with the high watermark held back (what a follower
    not yet caught up does), OffsetCommit and a later OffsetFetch are answered only when the replica
    manager's acks=-1 wait completes."""

    async def body(s: Stack) -> None:
        await s.call(10, 3, FindCoordinatorRequest(key="g", key_type=0))
        real_append = s.replica_manager.append_records
        held: list[tuple[asyncio.Future[dict], dict]] = []

        def held_back(timeout_ms: int, acks: int, internal: bool, entries: dict) -> object:
            results = real_append(timeout_ms, 1, internal, entries)  # appended to the log now
            future: asyncio.Future[dict] = asyncio.get_running_loop().create_future()
            held.append((future, results))
            return future

        s.replica_manager.append_records = held_back  # type: ignore[method-assign]
        commit = asyncio.ensure_future(s.call(8, 8, _commit("g", -1, "", "orders", 42)))
        await asyncio.sleep(0.05)
        assert held and not commit.done()
        fetch = asyncio.ensure_future(s.call(9, 5, OffsetFetchRequest(group_id="g", topics=[
            OffsetFetchRequest.OffsetFetchRequestTopic(name="orders", partition_indexes=[0])])))
        await asyncio.sleep(0.05)
        assert not fetch.done()  # a read waits for the write before it
        future, results = held[0]
        future.set_result(results)  # the high watermark passes the write
        committed = await commit
        assert committed.topics[0].partitions[0].error_code == 0
        fetched = await fetch
        assert fetched.topics[0].partitions[0].committed_offset == 42
        # A write that never commits (offsets.commit.timeout.ms passed): COORDINATOR_NOT_AVAILABLE.
        late = asyncio.ensure_future(s.call(8, 8, _commit("g", -1, "", "orders", 43)))
        await asyncio.sleep(0.05)
        future, results = held[1]
        key = next(iter(results))
        results[key].error = E.REQUEST_TIMED_OUT
        future.set_result(results)
        assert (await late).topics[0].partitions[0].error_code == E.COORDINATOR_NOT_AVAILABLE

    run(tmp_path, body)
