"""ReadShareGroupState (key 84, v0, KIP-932): a share-partition leader loads its durable state.

Served by kbroker's share coordinator as Kafka 4.3.1 serves it (`readStateAndMaybeUpdateLeaderEpoch`):
the state epoch, start offset and state batches; a leader epoch other than -1 is recorded (a new
snapshot) and fences older leaders (FENCED_LEADER_EPOCH); an uninitialized share-partition answers
INVALID_REQUEST "Read operation on uninitialized share partition not allowed.". Common rules in
`kbroker.api._share_state`.
"""

from __future__ import annotations

from typing import Any

from kbroker.api._share_state import authorize_cluster_action, per_partition
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.read_share_group_state import (
    ReadShareGroupStateRequest,
    ReadShareGroupStateResponse,
)

API_KEY = 84
MIN_VERSION = 0
MAX_VERSION = 0

R = ReadShareGroupStateResponse


def error_response(request: ReadShareGroupStateRequest, version: int, error: ErrorCode) -> R:
    return R(results=[R.ReadStateResult(topic_id=t.topic_id, partitions=[
        R.PartitionResult(partition=p.partition, error_code=error, error_message=error.message, state_epoch=0,
                          start_offset=0, state_batches=[]) for p in t.partitions]) for t in request.topics])


def _partition(p: Any, r: Any) -> Any:
    if r.error != ErrorCode.NONE or r.state is None:
        return R.PartitionResult(partition=p.partition, error_code=r.error, error_message=r.message, state_epoch=0,
                                 start_offset=0, state_batches=[])
    s = r.state
    return R.PartitionResult(partition=p.partition, error_code=0, error_message=None, state_epoch=s.state_epoch,
                             start_offset=s.start_offset, state_batches=[R.StateBatch(
                                 first_offset=b.first_offset, last_offset=b.last_offset,
                                 delivery_state=b.delivery_state, delivery_count=b.delivery_count)
                                 for b in s.batches])


async def handle(services: BrokerServices, ctx: RequestContext, header: Any, request: ReadShareGroupStateRequest) -> R:
    authorize_cluster_action(services, ctx)
    gid = request.group_id
    if not gid or not request.topics or any(not t.partitions for t in request.topics):
        return R()

    async def call(sc: Any, topic_id: Any, p: Any) -> Any:
        key = (gid, topic_id, p.partition)
        known = sc.partition_known(topic_id, p.partition)
        return await sc.call(key, lambda s: s.read(key, p.leader_epoch, known), "read")

    return R(results=[R.ReadStateResult(topic_id=tid, partitions=[_partition(p, r) for p, r in parts])
                      for tid, parts in await per_partition(services, request.topics, call)])
