"""InitializeShareGroupState (key 83, v0, KIP-932): start a share-partition's durable state.

Served by kbroker's share coordinator (`kbroker.coord.share_coordinator`) as Kafka 4.3.1 serves it:
a fresh ShareSnapshot (the given state epoch and start offset, no state batches, leader epoch 0,
delivery complete count 0), FENCED_STATE_EPOCH when a higher state epoch was recorded,
UNKNOWN_TOPIC_OR_PARTITION for a topic id or partition the metadata does not know. Common rules in
`kbroker.api._share_state`.
"""

from __future__ import annotations

from typing import Any

from kbroker.api._share_state import authorize_cluster_action, per_partition
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.initialize_share_group_state import (
    InitializeShareGroupStateRequest,
    InitializeShareGroupStateResponse,
)

API_KEY = 83
MIN_VERSION = 0
MAX_VERSION = 0

R = InitializeShareGroupStateResponse


def error_response(request: InitializeShareGroupStateRequest, version: int, error: ErrorCode) -> R:
    return R(results=[R.InitializeStateResult(topic_id=t.topic_id, partitions=[
        R.PartitionResult(partition=p.partition, error_code=error, error_message=error.message) for p in t.partitions])
        for t in request.topics])


async def handle(services: BrokerServices, ctx: RequestContext, header: Any,
                 request: InitializeShareGroupStateRequest) -> R:
    authorize_cluster_action(services, ctx)
    gid = request.group_id
    if not gid or not request.topics:
        return R()

    async def call(sc: Any, topic_id: Any, p: Any) -> Any:
        key = (gid, topic_id, p.partition)
        known = sc.partition_known(topic_id, p.partition)
        return await sc.call(key, lambda s: s.initialize(key, p.state_epoch, p.start_offset, known), "initialize")

    return R(results=[R.InitializeStateResult(topic_id=tid, partitions=[
        R.PartitionResult(partition=p.partition, error_code=r.error, error_message=r.message) for p, r in parts])
        for tid, parts in await per_partition(services, request.topics, call)])
