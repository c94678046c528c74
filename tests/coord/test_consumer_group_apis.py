"""The KIP-848 APIs through real request/response frames and the dispatcher: ConsumerGroupHeartbeat,
ConsumerGroupDescribe, OffsetCommit v9-10, OffsetFetch v9-10, DescribeGroups v6, ListGroups types and the
group.version feature in ApiVersions."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.api_versions import ApiVersionsRequest
from kbroker.protocol.messages.consumer_group_describe import ConsumerGroupDescribeRequest
from kbroker.protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest
from kbroker.protocol.messages.describe_groups import DescribeGroupsRequest
from kbroker.protocol.messages.find_coordinator import FindCoordinatorRequest
from kbroker.protocol.messages.join_group import JoinGroupRequest
from kbroker.protocol.messages.list_groups import ListGroupsRequest
from kbroker.protocol.messages.offset_commit import OffsetCommitRequest
from kbroker.protocol.messages.offset_fetch import OffsetFetchRequest
from tests.coord.stack import Stack
from tests.coord.support import subscription
from tests.support.sync import run_now

E = ErrorCode
HB = ConsumerGroupHeartbeatRequest


def run(tmp_path: Path, body) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        stack = Stack(tmp_path)
        stack.start()
        run_now(stack.services.controller.create_topic("orders", num_partitions=4))
        try:
            await stack.call(10, 0, FindCoordinatorRequest(key="g"))
            await stack.wait_loaded()
            await body(stack)
        finally:
            stack.shutdown()

    asyncio.run(main())


def _join(member: str, group: str = "g") -> HB:
    return HB(group_id=group, member_id=member, member_epoch=0, rebalance_timeout_ms=30000,
              subscribed_topic_names=["orders"], topic_partitions=[], server_assignor="range")


def test_api_versions_advertises_group_version_and_the_apis(tmp_path: Path) -> None:
    async def body(s: Stack) -> None:
        r4 = await s.call(18, 4, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        ranges = {k.api_key: (k.min_version, k.max_version) for k in r4.api_keys}
        assert ranges[68] == (0, 1) and ranges[69] == (0, 1)
        assert ranges[8] == (2, 10) and ranges[9] == (1, 10) and ranges[15] == (0, 6)
        assert ("group.version", 0, 1) in [(f.name, f.min_version, f.max_version) for f in r4.supported_features]
        assert ("group.version", 1, 1) in [(f.name, f.min_version_level, f.max_version_level)
                                           for f in r4.finalized_features]
        # KAFKA-17011: v3 leaves out supported features whose minimum is 0; finalized stays.
        r3 = await s.call(18, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        assert "group.version" not in [f.name for f in r3.supported_features]
        assert "group.version" in [f.name for f in r3.finalized_features]

    run(tmp_path, body)


def test_heartbeat_describe_commit_fetch(tmp_path: Path) -> None:
    async def body(s: Stack) -> None:
        info = s.metadata.topic("orders")
        assert info is not None
        tid = info.topic_id
        joined = await s.call(68, 1, _join("m1"))
        assert (joined.error_code, joined.member_id, joined.member_epoch, joined.heartbeat_interval_ms) == \
            (0, "m1", 1, 5000)
        assert [(t.topic_id, t.partitions) for t in joined.assignment.topic_partitions] == [(tid, [0, 1, 2, 3])]
        v0 = await s.call(68, 0, _join("", group="g0"))
        assert v0.error_code == 0 and v0.member_id
        empty = await s.call(68, 1, _join(""))
        assert (empty.error_code, empty.error_message) == (E.INVALID_REQUEST, "MemberId can't be empty.")
        # A second member: the first must revoke two partitions before the second gets them.
        j2 = await s.call(68, 1, _join("m2"))
        assert j2.member_epoch == 2 and j2.assignment.topic_partitions == []
        hb = await s.call(68, 1, HB(group_id="g", member_id="m1", member_epoch=1))
        kept = hb.assignment.topic_partitions[0].partitions
        assert hb.member_epoch == 1 and len(kept) == 2
        ack = await s.call(68, 1, HB(group_id="g", member_id="m1", member_epoch=1, topic_partitions=[
            HB.TopicPartitions(topic_id=tid, partitions=kept)]))
        assert ack.member_epoch == 2
        hb2 = await s.call(68, 1, HB(group_id="g", member_id="m2", member_epoch=2))
        assert sorted(hb2.assignment.topic_partitions[0].partitions + kept) == [0, 1, 2, 3]

        d = await s.call(69, 1, ConsumerGroupDescribeRequest(group_ids=["g", "nope"],
                                                             include_authorized_operations=True))
        g = d.groups[0]
        assert (g.error_code, g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name) == \
            (0, "Stable", 2, 2, "range")
        assert sorted(m.member_id for m in g.members) == ["m1", "m2"]
        m1 = next(m for m in g.members if m.member_id == "m1")
        assert (m1.member_type, m1.client_host, m1.subscribed_topic_names) == (1, "/127.0.0.1", ["orders"])
        assert m1.assignment.topic_partitions[0].topic_name == "orders"
        assert (d.groups[1].error_code, d.groups[1].error_message) == (E.GROUP_ID_NOT_FOUND, "Group nope not found.")

        # OffsetCommit v9 (names) and v10 (ids) with member epochs.
        P = OffsetCommitRequest.OffsetCommitRequestPartition
        T = OffsetCommitRequest.OffsetCommitRequestTopic
        c9 = await s.call(8, 9, OffsetCommitRequest(group_id="g", generation_id_or_member_epoch=2, member_id="m1",
                                                    topics=[T(name="orders", partitions=[P(partition_index=0,
                                                                                            committed_offset=11)])]))
        assert c9.topics[0].partitions[0].error_code == 0
        # KIP-1251: an older epoch is valid for partitions assigned at or before it (m1 has held
        # `kept` since epoch 1), not for partitions it gave up, nor below that; a newer one never.
        gone = sorted({0, 1, 2, 3} - set(kept))
        for epoch, part, error in [(1, kept[0], 0), (1, gone[0], E.STALE_MEMBER_EPOCH),
                                   (0, kept[0], E.STALE_MEMBER_EPOCH), (3, kept[0], E.STALE_MEMBER_EPOCH)]:
            r = await s.call(8, 9, OffsetCommitRequest(group_id="g", generation_id_or_member_epoch=epoch,
                                                       member_id="m1", topics=[T(name="orders", partitions=[
                                                           P(partition_index=part, committed_offset=11)])]))
            assert r.topics[0].partitions[0].error_code == error, (epoch, part)
        c10 = await s.call(8, 10, OffsetCommitRequest(
            group_id="g", generation_id_or_member_epoch=2, member_id="m2",
            topics=[T(topic_id=tid, partitions=[P(partition_index=1, committed_offset=22)]),
                    T(topic_id=uuid.uuid4(), partitions=[P(partition_index=0, committed_offset=1)])]))
        assert [(t.topic_id, t.partitions[0].error_code) for t in c10.topics] == \
            [(tid, 0), (c10.topics[1].topic_id, E.UNKNOWN_TOPIC_ID)]
        old = await s.call(8, 8, OffsetCommitRequest(group_id="g", generation_id_or_member_epoch=2, member_id="m1",
                                                     topics=[T(name="orders", partitions=[P(partition_index=0)])]))
        assert old.topics[0].partitions[0].error_code == E.UNSUPPORTED_VERSION

        G = OffsetFetchRequest.OffsetFetchRequestGroup
        FT = OffsetFetchRequest.OffsetFetchRequestTopics
        f9 = await s.call(9, 9, OffsetFetchRequest(groups=[
            G(group_id="g", member_id="m1", member_epoch=2, topics=[FT(name="orders", partition_indexes=[0, 1])]),
            G(group_id="g", member_id="m1", member_epoch=1, topics=None),
            G(group_id="g", member_id="zz", member_epoch=2, topics=None),
            G(group_id="g", topics=None)]))
        assert [p.committed_offset for p in f9.groups[0].topics[0].partitions] == [11, 22]
        assert [g.error_code for g in f9.groups[1:]] == [E.STALE_MEMBER_EPOCH, E.UNKNOWN_MEMBER_ID, 0]
        f10 = await s.call(9, 10, OffsetFetchRequest(groups=[
            G(group_id="g", member_id="m2", member_epoch=2,
              topics=[FT(topic_id=tid, partition_indexes=[1]), FT(topic_id=uuid.uuid4(), partition_indexes=[0])]),
            G(group_id="g", topics=None)]))
        assert [(t.topic_id == tid, [(p.committed_offset, p.error_code) for p in t.partitions])
                for t in f10.groups[0].topics] == [(True, [(22, 0)]), (False, [(-1, E.UNKNOWN_TOPIC_ID)])]
        assert [(t.topic_id, len(t.partitions)) for t in f10.groups[1].topics] == [(tid, 2)]

        # The classic admin APIs.
        dg6 = await s.call(15, 6, DescribeGroupsRequest(groups=["g", "absent"]))
        assert [(x.error_code, x.error_message, x.group_state) for x in dg6.groups] == [
            (E.GROUP_ID_NOT_FOUND, "Group g is not a classic group.", "Dead"),
            (E.GROUP_ID_NOT_FOUND, "Group absent not found.", "Dead")]
        dg5 = await s.call(15, 5, DescribeGroupsRequest(groups=["g"]))
        assert (dg5.groups[0].error_code, dg5.groups[0].group_state) == (0, "Dead")
        lg = await s.call(16, 5, ListGroupsRequest(types_filter=["consumer"]))
        assert sorted((x.group_id, x.group_type, x.protocol_type) for x in lg.groups) == \
            [("g", "consumer", "consumer"), ("g0", "consumer", "consumer")]
        lc = await s.call(16, 5, ListGroupsRequest(types_filter=["classic"]))
        assert lc.groups == []
        join = await s.call(11, 9, JoinGroupRequest(
            group_id="g", session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
            protocol_type="consumer", protocols=[JoinGroupRequest.JoinGroupRequestProtocol(
                name="range", metadata=subscription("orders"))]))
        # A classic member may join the consumer group (online migration): KIP-394's first step.
        assert join.error_code == E.MEMBER_ID_REQUIRED

        left = await s.call(68, 1, HB(group_id="g", member_id="m1", member_epoch=-1))
        assert (left.error_code, left.member_epoch) == (0, -1)

    run(tmp_path, body)


def test_describe_reports_classic_members_of_a_mixed_group_as_classic(tmp_path: Path) -> None:
    # KIP-1099's MemberType: 0 for a classic-protocol member inside a consumer group (online
    # migration), 1 for a consumer-protocol member.
    async def body(s: Stack) -> None:
        joined = await s.call(68, 1, _join("m1", group="mixed"))
        assert joined.error_code == 0
        protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=subscription("orders"))]
        first = await s.call(11, 9, JoinGroupRequest(
            group_id="mixed", session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
            protocol_type="consumer", protocols=protocols))
        assert first.error_code == E.MEMBER_ID_REQUIRED
        second = await s.call(11, 9, JoinGroupRequest(
            group_id="mixed", session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id=first.member_id,
            protocol_type="consumer", protocols=protocols))
        assert second.error_code == 0
        d = await s.call(69, 1, ConsumerGroupDescribeRequest(group_ids=["mixed"]))
        types = {m.member_id: m.member_type for m in d.groups[0].members}
        assert types == {"m1": 1, first.member_id: 0}

    run(tmp_path, body)
