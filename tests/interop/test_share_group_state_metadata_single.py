"""ShareGroupStatePartitionMetadata on a single kbroker node (the group coordinator calls its share
coordinator in process): a member that only heartbeats gets its subscribed share-partitions initialized
(start offset -1, the group epoch as state epoch, seen with ReadShareGroupStateSummary), and DeleteGroups
of the empty group deletes exactly those states, though no ShareFetch ever touched them."""

from __future__ import annotations

import time
import uuid

import pytest

from kbroker.protocol.messages.create_topics import CreateTopicsRequest as CT
from kbroker.protocol.messages.delete_groups import DeleteGroupsRequest
from kbroker.protocol.messages.metadata import MetadataRequest
from kbroker.protocol.messages.read_share_group_state_summary import ReadShareGroupStateSummaryRequest as S
from kbroker.protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest as H
from tests.interop.test_share_fetch_delayed import Member, broker  # noqa: F401 - the module's broker fixture
from tests.support.broker import KBroker
from tests.support.raw_client import RawKafkaClient

pytestmark = pytest.mark.interop

PARTITIONS = 3


def _summaries(c: RawKafkaClient, group: str, tid: uuid.UUID) -> list[tuple[int, int, int]]:
    r = c.request(87, 1, S(group_id=group, topics=[S.ReadStateSummaryData(
        topic_id=tid, partitions=[S.PartitionData(partition=p, leader_epoch=-1) for p in range(PARTITIONS)])]))
    return [(p.error_code, p.state_epoch, p.start_offset) for p in sorted(r.results[0].partitions,
                                                                         key=lambda p: p.partition)]


def test_a_heartbeat_initializes_the_share_partitions_and_delete_groups_deletes_them(
        broker: KBroker) -> None:  # noqa: F811
    topic, group = f"init-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    with RawKafkaClient(broker.bootstrap) as c:
        r = c.request(19, 7, CT(topics=[CT.CreatableTopic(name=topic, num_partitions=PARTITIONS,
                                                          replication_factor=1, assignments=[], configs=[])],
                                timeout_ms=30000))
        assert r.topics[0].error_code == 0, r
        tid = c.request(3, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)])
                        ).topics[0].topic_id
        m = Member(broker.bootstrap, group, topic, tid)  # FindCoordinator + ShareGroupHeartbeat, no fetch
        deadline = time.monotonic() + 30
        while (states := _summaries(c, group, tid)) != [(0, 1, -1)] * PARTITIONS:
            assert time.monotonic() < deadline, states
            time.sleep(0.3)
        left = m.client.request(76, 1, H(group_id=group, member_id=m.member_id, member_epoch=-1))
        assert left.error_code == 0, left
        deleted = c.request(42, 2, DeleteGroupsRequest(groups_names=[group])).results[0].error_code
        assert deleted == 0
        assert _summaries(c, group, tid) == [(0, 0, -1)] * PARTITIONS  # no state any more
        m.close()
