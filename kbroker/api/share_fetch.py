"""ShareFetch (key 78): a share consumer's fetch (KIP-932): acknowledge, then acquire records.

Versions 1-2 (v2, KIP-1206 / KIP-1222: `ShareAcquireMode` batch_optimized (0) or record_limit (1), and
`IsRenewAck`, a request that only renews acquisition locks and fetches nothing). The share session
(epoch 0 opens, -1 closes) and the share-partitions are `kbroker.coord.share_partition_manager`'s;
this module converts the frames and waits: when nothing could be acquired, the fetch waits up to
`MaxWaitMs` for `MinBytes` in the share-fetch purgatory (`kbroker.coord.delayed_share_fetch`, Kafka's
DelayedShareFetch), completed early by records produced, locks expired and records released.

A response carries whole record batches and, per partition, the acquired offset ranges with their
delivery counts (`AcquiredRecords`); the client keeps only acquired records. The response names every
partition the request named on a new session (epoch 0), else only partitions with records, errors or
acknowledgement results. `AcquisitionLockTimeoutMs` is the group's `share.record.lock.duration.ms` (else the broker's
`group.share.record.lock.duration.ms`).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from kbroker.api import _share_metrics
from kbroker.api._futures import chain_future
from kbroker.api._share import (
    await_acknowledgement_writes,
    pending_acknowledgement_writes,
    share_group_check,
    share_partitions,
)
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.coord.delayed_share_fetch import DelayedShareFetch
from kbroker.coord.share_partition_manager import (
    ShareFetchOutcome,
    SharePartitionManager,
)
from kbroker.coord.share_session import FINAL_EPOCH, INITIAL_EPOCH
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.share_fetch import ShareFetchRequest, ShareFetchResponse

API_KEY = 78
MIN_VERSION = 1
MAX_VERSION = 2
VERSION_NOTES = ("Share-partition state kept on __share_group_state by the share coordinator: in process on a "
                 "single node, through the share-state RPCs (network persister) on a cluster; "
                 "share.isolation.level=read_committed skips aborted transactions.")

R = ShareFetchResponse
RECORD_LIMIT_MODE = 1


def error_response(request: ShareFetchRequest, version: int, error: ErrorCode) -> R:
    return R(error_code=error)


def handle(services: BrokerServices, ctx: RequestContext, header: Any, request: ShareFetchRequest) -> Any:
    group_id = request.group_id or ""
    error, manager = share_group_check(services, ctx, group_id)
    if manager is None:
        return error_response(request, header.api_version, error)
    requested, refused = share_partitions(services, ctx, request.topics)
    denied = set(refused)
    forgotten = [(t.topic_id, p) for t in request.forgotten_topics_data for p in t.partitions]
    version = header.api_version
    record_limit = version >= 2 and request.share_acquire_mode == RECORD_LIMIT_MODE
    renew_only = version >= 2 and request.is_renew_ack
    outcome = manager.share_fetch(group_id, request.member_id or "", request.share_session_epoch, requested,
                                  forgotten, request.max_records, record_limit, renew_only,
                                  request.min_bytes if request.max_wait_ms > 0 else 1,
                                  connection_id=ctx.connection_id)
    _share_metrics.share_fetch_started(services, outcome, request.share_session_epoch != FINAL_EPOCH,
                                       [r.topic_id for r in requested if r.acknowledgements])
    full = request.share_session_epoch == INITIAL_EPOCH
    named = [(r.topic_id, r.partition) for r in requested] + sorted(denied)
    pending = pending_acknowledgement_writes(manager, group_id, outcome) if outcome.error == ErrorCode.NONE else []
    if pending:
        # The acknowledgements complete once their state is written to the share coordinator.
        async def after_writes() -> R:
            await await_acknowledgement_writes(manager, group_id, outcome, pending)
            if outcome.acquired_any() or renew_only or request.share_session_epoch == FINAL_EPOCH \
                    or request.max_wait_ms <= 0:
                return _response(services, manager, outcome, named if full else [], denied)
            waiting = _wait(services, manager, outcome, group_id, request, record_limit, named if full else [],
                            denied)
            return await waiting if isinstance(waiting, asyncio.Future) else waiting
        return after_writes()
    if outcome.error != ErrorCode.NONE or outcome.acquired_any() or renew_only \
            or request.share_session_epoch == FINAL_EPOCH or request.max_wait_ms <= 0:
        return _response(services, manager, outcome, named if full else [], denied)
    return _wait(services, manager, outcome, group_id, request, record_limit, named if full else [], denied)


def _wait(services: BrokerServices, manager: SharePartitionManager, outcome: ShareFetchOutcome,
          group_id: str, request: ShareFetchRequest, record_limit: bool,
          named: list[tuple[uuid.UUID, int]], denied: set[tuple[uuid.UUID, int]]) -> R | asyncio.Future[R]:
    """Kafka's DelayedShareFetch: wait in the share-fetch purgatory up to MaxWaitMs for MinBytes of
    records to acquire; completed early by appends, released records and expired acquisition locks."""
    op = DelayedShareFetch(request.max_wait_ms, manager, outcome, group_id, request.member_id or "",
                           request.max_records, record_limit, request.min_bytes)
    keys = manager.delayed_share_fetch_keys(group_id, outcome)
    if manager.delayed_share_fetch_purgatory.try_complete_else_watch(op, keys):
        return _response(services, manager, op.future.result(), named, denied)
    return chain_future(op.future, lambda done: _response(services, manager, done, named, denied))


def _response(services: BrokerServices, manager: SharePartitionManager, outcome: ShareFetchOutcome,
              named: list[tuple[uuid.UUID, int]], denied: set[tuple[uuid.UUID, int]]) -> R:
    if outcome.error != ErrorCode.NONE:
        return R(error_code=outcome.error, error_message=outcome.message)
    _share_metrics.share_fetch_answered(services, outcome)
    by_topic: dict[uuid.UUID, list[R.PartitionData]] = {}
    seen: set[tuple[uuid.UUID, int]] = set()
    for key, result in outcome.partitions.items():
        seen.add(key)
        by_topic.setdefault(key[0], []).append(R.PartitionData(
            partition_index=key[1], error_code=result.error,
            acknowledge_error_code=result.acknowledge_error,
            current_leader=R.LeaderIdAndEpoch(leader_id=services.node_id if result.leader_epoch >= 0 else -1,
                                              leader_epoch=result.leader_epoch),
            records=result.records if result.records is not None else b"",
            acquired_records=[R.AcquiredRecords(first_offset=a.first_offset, last_offset=a.last_offset,
                                                delivery_count=a.delivery_count) for a in result.acquired],
        ))
    for key in named:
        if key in seen:
            continue
        seen.add(key)
        error = ErrorCode.TOPIC_AUTHORIZATION_FAILED if key in denied else ErrorCode.NONE
        by_topic.setdefault(key[0], []).append(R.PartitionData(
            partition_index=key[1], error_code=error, records=b"",
            current_leader=R.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1)))
    lock_ms = manager.record_lock_duration_ms(outcome.session.group_id if outcome.session is not None else "")
    return R(error_code=ErrorCode.NONE, acquisition_lock_timeout_ms=lock_ms,
             responses=[R.ShareFetchableTopicResponse(topic_id=tid, partitions=parts) for tid, parts in by_topic.items()])
