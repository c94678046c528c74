"""ShareAcknowledge (key 79): a share consumer acknowledges records without fetching (KIP-932).

Versions 1-2 (v2, KIP-1222: `IsRenewAck`; RENEW (4) acknowledgements renew acquisition locks). Needs a
share session opened by a ShareFetch (epoch 0 is refused with INVALID_SHARE_SESSION_EPOCH); epoch -1
acknowledges and closes the session. Per partition: INVALID_RECORD_STATE when a range holds a record
the member has not acquired (nothing of that partition is applied). The state is
`kbroker.coord.share_partition_manager`'s; this module converts the frames.
"""

from __future__ import annotations

import uuid
from typing import Any

from kbroker.api import _share_metrics
from kbroker.api._share import (
    await_acknowledgement_writes,
    pending_acknowledgement_writes,
    share_group_check,
    share_partitions,
)
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.coord.share_partition_manager import ShareFetchOutcome, SharePartitionManager
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.share_acknowledge import ShareAcknowledgeRequest, ShareAcknowledgeResponse

API_KEY = 79
MIN_VERSION = 1
MAX_VERSION = 2
VERSION_NOTES = "Acknowledged state written to __share_group_state before the answer."

R = ShareAcknowledgeResponse


def error_response(request: ShareAcknowledgeRequest, version: int, error: ErrorCode) -> R:
    return R(error_code=error)


def handle(services: BrokerServices, ctx: RequestContext, header: Any, request: ShareAcknowledgeRequest) -> Any:
    group_id = request.group_id or ""
    error, manager = share_group_check(services, ctx, group_id)
    if manager is None:
        return error_response(request, header.api_version, error)
    requested, denied = share_partitions(services, ctx, request.topics)
    outcome = manager.share_acknowledge(group_id, request.member_id or "", request.share_session_epoch, requested)
    if outcome.error != ErrorCode.NONE:
        return R(error_code=outcome.error, error_message=outcome.message)
    _share_metrics.share_fetch_started(services, outcome, False, [r.topic_id for r in requested])
    pending = pending_acknowledgement_writes(manager, group_id, outcome)
    if pending:
        async def after_writes() -> R:
            await await_acknowledgement_writes(manager, group_id, outcome, pending)
            _share_metrics.share_acknowledge_answered(services, outcome)
            return _response(manager, request, outcome, denied)
        return after_writes()
    _share_metrics.share_acknowledge_answered(services, outcome)
    return _response(manager, request, outcome, denied)


def _response(manager: SharePartitionManager, request: ShareAcknowledgeRequest, outcome: ShareFetchOutcome,
              denied: list[tuple[uuid.UUID, int]]) -> R:
    by_topic: dict[uuid.UUID, list[R.PartitionData]] = {}
    for key, result in outcome.partitions.items():
        by_topic.setdefault(key[0], []).append(R.PartitionData(
            partition_index=key[1], error_code=result.acknowledge_error,
            current_leader=R.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1)))
    for key in denied:
        by_topic.setdefault(key[0], []).append(R.PartitionData(
            partition_index=key[1], error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            current_leader=R.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1)))
    return R(error_code=ErrorCode.NONE, acquisition_lock_timeout_ms=manager.record_lock_duration_ms(request.group_id or ""),
             responses=[R.ShareAcknowledgeTopicResponse(topic_id=tid, partitions=parts)
                        for tid, parts in by_topic.items()])
