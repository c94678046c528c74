"""WriteShareGroupState (key 85, v0-1, KIP-932): a share-partition leader records its state.

Served by kbroker's share coordinator as Kafka 4.3.1 serves it: the state batches are merged into
the recorded ones (overlaps overwritten, offsets below the start offset dropped, contiguous batches
of equal state and count coalesced), the start offset moves unless -1, the delivery complete count
(v1) is taken as given. A lower leader epoch than one recorded by ReadShareGroupState answers
FENCED_LEADER_EPOCH, a lower state epoch FENCED_STATE_EPOCH, an uninitialized share-partition
INVALID_REQUEST "Write operation on uninitialized share partition not allowed.". Common rules in
`kbroker.api._share_state`.
"""

from __future__ import annotations

import time
from typing import Any

from kbroker.api._share_state import authorize_cluster_action, per_partition
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.coord.share_coordinator import StateBatch
from kbroker.metrics.meters import SHARE_GROUP_METRICS
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.write_share_group_state import (
    WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
)

API_KEY = 85
MIN_VERSION = 0
MAX_VERSION = 1

R = WriteShareGroupStateResponse


def error_response(request: WriteShareGroupStateRequest, version: int, error: ErrorCode) -> R:
    return R(results=[R.WriteStateResult(topic_id=t.topic_id, partitions=[
        R.PartitionResult(partition=p.partition, error_code=error, error_message=error.message) for p in t.partitions])
        for t in request.topics])


async def handle(services: BrokerServices, ctx: RequestContext, header: Any, request: WriteShareGroupStateRequest) -> R:
    authorize_cluster_action(services, ctx)
    gid = request.group_id
    if not gid or not request.topics:
        return R()

    async def call(sc: Any, topic_id: Any, p: Any) -> Any:
        key = (gid, topic_id, p.partition)
        known = sc.partition_known(topic_id, p.partition)
        batches = [StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                   for b in p.state_batches]
        return await sc.call(key, lambda s: s.write(key, p.state_epoch, p.leader_epoch, p.start_offset,
                                                    p.delivery_complete_count, batches, known), "write")

    started = time.monotonic()
    written = await per_partition(services, request.topics, call)
    # share-coordinator-metrics write-latency-avg/max: the request, to its records committed.
    now = time.monotonic()
    SHARE_GROUP_METRICS.share_coordinator_write_latency.record((now - started) * 1000, int(now * 1000))
    return R(results=[R.WriteStateResult(topic_id=tid, partitions=[
        R.PartitionResult(partition=p.partition, error_code=r.error, error_message=r.message) for p, r in parts])
        for tid, parts in written])
