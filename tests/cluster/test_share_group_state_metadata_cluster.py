"""ShareGroupStatePartitionMetadata on a three-node kbroker cluster, with real processes and clients.

The cluster and set-up are `test_share_group_offsets_cluster`'s: `__consumer_offsets` with one
partition (broker G is the group coordinator), `__share_group_state` with three partitions (one led by
each broker), a work topic of four partitions all led by the two brokers other than G.

1. A member that only heartbeats (raw ShareGroupHeartbeat, no ShareFetch anywhere): G records the
   subscribed partitions and initializes their state at their share coordinators itself
   (InitializeShareGroupState, start offset -1, state epoch = group epoch), so DescribeShareGroupOffsets
   without topics lists exactly those four partitions (start offset -1), and each share coordinator
   holds a state for them.
2. A share consumer then consumes everything on the two leaders (not G); after it leaves, DeleteGroups
   to G deletes the state of every recorded partition at its share coordinator, though G never led nor
   fetched any of them (before, G deleted only the states its own broker had seen: none).
"""

from __future__ import annotations

import time
import uuid

import pytest

from kbroker.protocol.messages.delete_groups import DeleteGroupsRequest
from kbroker.protocol.messages.describe_share_group_offsets import DescribeShareGroupOffsetsRequest as D
from kbroker.protocol.messages.metadata import MetadataRequest
from kbroker.protocol.messages.read_share_group_state_summary import ReadShareGroupStateSummaryRequest as S
from kbroker.protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest
from tests.cluster.test_share_group_offsets_cluster import (
    PARTITIONS,
    _consume_all,
    _group_configs,
    _setup,
    cluster,  # noqa: F401 - the module's three-node cluster fixture, reused
)
from tests.cluster.test_share_groups_cluster import Node
from tests.support.raw_client import RawKafkaClient

pytestmark = [pytest.mark.interop]

RECORDS = 5


def _topic_id(node: Node, topic: str) -> uuid.UUID:
    with RawKafkaClient(node.broker.bootstrap) as c:
        r = c.request(3, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]))
    return r.topics[0].topic_id  # type: ignore[no-any-return]


def _describe_all(node: Node, group: str) -> tuple[int, dict[str, dict[int, int]]]:
    """DescribeShareGroupOffsets without topics: (group error, topic -> partition -> start offset)."""
    with RawKafkaClient(node.broker.bootstrap) as c:
        r = c.request(90, 1, D(groups=[D.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None)]))
    g = r.groups[0]
    return g.error_code, {t.topic_name: {p.partition_index: p.start_offset for p in t.partitions} for t in g.topics}


def _summaries(nodes: dict[int, Node], coordinators: dict[int, int], group: str, tid: uuid.UUID
               ) -> dict[int, tuple[int, int, int]]:
    """ReadShareGroupStateSummary to each partition's share coordinator: partition -> (error, state
    epoch, start offset); no state answers (0, 0, -1)."""
    out = {}
    for p, coord in coordinators.items():
        with RawKafkaClient(nodes[coord].broker.bootstrap) as c:
            r = c.request(87, 1, S(group_id=group, topics=[S.ReadStateSummaryData(
                topic_id=tid, partitions=[S.PartitionData(partition=p, leader_epoch=-1)])]))
        res = r.results[0].partitions[0]
        out[p] = (res.error_code, res.state_epoch, res.start_offset)
    return out


def _heartbeat(node: Node, group: str, member: str, epoch: int, topics: list[str] | None) -> int:
    with RawKafkaClient(node.broker.bootstrap) as c:
        r = c.request(76, 1, ShareGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=epoch,
                                                         subscribed_topic_names=topics))
    assert r.error_code == 0, r
    return int(r.member_epoch)


def test_the_group_coordinator_initializes_and_deletes_the_recorded_share_partitions(
        cluster: dict[int, Node]) -> None:  # noqa: F811
    group, topic, gc, leaders, coordinators = _setup(cluster, RECORDS)
    assert any(c != gc for c in coordinators.values()), (gc, coordinators)
    tid = _topic_id(cluster[gc], topic)
    g = cluster[gc]

    # 1. Only heartbeats: G initializes the four share-partitions at their share coordinators.
    member = uuid.uuid4().hex
    epoch = _heartbeat(g, group, member, 0, [topic])
    deadline = time.monotonic() + 30
    while (listed := _describe_all(g, group)) != (0, {topic: {p: -1 for p in range(PARTITIONS)}}):
        assert time.monotonic() < deadline, listed
        time.sleep(0.5)
    states = _summaries(cluster, coordinators, group, tid)
    assert all(err == 0 and state_epoch == epoch and start == -1 for err, state_epoch, start in states.values()), \
        (epoch, states)
    assert _heartbeat(g, group, member, -1, None) == -1

    # 2. A share consumer on the two leaders (not G) consumes everything from the earliest offset.
    _group_configs(g, group, {"share.auto.offset.reset": "earliest"})
    got = _consume_all(cluster, group, topic, RECORDS * PARTITIONS)
    assert sorted((p, o) for p, o, _d in got) == [(p, o) for p in range(PARTITIONS) for o in range(RECORDS)]
    deadline = time.monotonic() + 30
    while (listed := _describe_all(g, group)) != (0, {topic: {p: RECORDS for p in range(PARTITIONS)}}):
        assert time.monotonic() < deadline, listed  # the leaders' last writes land at their coordinators
        time.sleep(0.5)

    # DeleteGroups to G: every recorded share-partition's state goes, wherever its coordinator is.
    deadline = time.monotonic() + 60
    while True:
        with RawKafkaClient(g.broker.bootstrap) as c:
            code = c.request(42, 2, DeleteGroupsRequest(groups_names=[group])).results[0].error_code
        if code == 0:
            break
        assert code == 68 and time.monotonic() < deadline, code  # NON_EMPTY_GROUP until the member left
        time.sleep(1)
    assert _summaries(cluster, coordinators, group, tid) == {p: (0, 0, -1) for p in range(PARTITIONS)}
    assert _describe_all(g, group)[0] == 69  # GROUP_ID_NOT_FOUND
