"""ReadShareGroupStateSummary (key 87, v0-1, KIP-932): a share-partition's recorded epochs and start
offset (DescribeShareGroupOffsets and the group coordinator's lag computation ask for it).

Served by kbroker's share coordinator as Kafka 4.3.1 serves it: state epoch, leader epoch, start offset
and (v1) delivery complete count as recorded; an uninitialized share-partition answers NONE with start
offset -1 and delivery complete count -1, an unknown topic id or partition UNKNOWN_TOPIC_OR_PARTITION;
nothing is written and nothing fenced. Common rules in
`kbroker.api._share_state`.
"""

from __future__ import annotations

from typing import Any

from kbroker.api._share_state import authorize_cluster_action, per_partition
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.read_share_group_state_summary import (
    ReadShareGroupStateSummaryRequest,
    ReadShareGroupStateSummaryResponse,
)

API_KEY = 87
MIN_VERSION = 0
MAX_VERSION = 1

R = ReadShareGroupStateSummaryResponse


def error_response(request: ReadShareGroupStateSummaryRequest, version: int, error: ErrorCode) -> R:
    return R(results=[R.ReadStateSummaryResult(topic_id=t.topic_id, partitions=[
        R.PartitionResult(partition=p.partition, error_code=error, error_message=error.message, state_epoch=0,
                          leader_epoch=0, start_offset=0, delivery_complete_count=-1) for p in t.partitions])
        for t in request.topics])


def _partition(p: Any, r: Any) -> Any:
    s = r.state
    if r.error != ErrorCode.NONE:
        return R.PartitionResult(partition=p.partition, error_code=r.error, error_message=r.message, state_epoch=0,
                                 leader_epoch=0, start_offset=0, delivery_complete_count=-1)
    if s is None:
        return R.PartitionResult(partition=p.partition, error_code=0, error_message=None, state_epoch=0,
                                 leader_epoch=0, start_offset=-1, delivery_complete_count=-1)
    return R.PartitionResult(partition=p.partition, error_code=0, error_message=None, state_epoch=s.state_epoch,
                             leader_epoch=s.leader_epoch, start_offset=s.start_offset,
                             delivery_complete_count=s.delivery_complete_count)


async def handle(services: BrokerServices, ctx: RequestContext, header: Any,
                 request: ReadShareGroupStateSummaryRequest) -> R:
    authorize_cluster_action(services, ctx)
    gid = request.group_id
    if not gid or not request.topics or any(not t.partitions for t in request.topics):
        return R()

    async def call(sc: Any, topic_id: Any, p: Any) -> Any:
        key = (gid, topic_id, p.partition)
        known = sc.partition_known(topic_id, p.partition)
        return await sc.call(key, lambda s: s.summary(key, known), "read summary", write=False)

    return R(results=[R.ReadStateSummaryResult(topic_id=tid, partitions=[_partition(p, r) for p, r in parts])
                      for tid, parts in await per_partition(services, request.topics, call)])
