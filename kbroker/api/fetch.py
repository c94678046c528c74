"""Fetch (key 1): consumer fetches with long polling, KIP-74 limits and incremental sessions.

Versions 4-18 (Kafka 4.0 removed 0-3). v13+ name topics by id (KIP-516): ids are resolved through
the metadata image, an unknown id answers UNKNOWN_TOPIC_ID, and a session never mixes name- and
id-based requests (FETCH_SESSION_TOPIC_ID_ERROR). v15 moves the replica id into the tagged
ReplicaState (KIP-903), v16 adds leader hints (KIP-951, only sent with NOT_LEADER_OR_FOLLOWER,
which a single node never returns), v17 a replica directory id (KIP-853, followers only), v18
the follower's high watermark (KIP-1166: a tagged request field only followers send; a consumer's v18
is its v17).

Records are returned as FileRegions of the segment files; the network layer sends them with
sendfile. Below v10 a consumer cannot read zstd (KIP-110): partitions of a topic whose
``compression.type`` is zstd answer UNSUPPORTED_COMPRESSION_TYPE (KafkaApis.maybeConvertFetchedData),
followers excepted. A response never contains a partition that was not asked for (or, in an incremental
session, that is not in the session): Java's consumer treats that as an IllegalStateException.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Hashable
from typing import TYPE_CHECKING

from kbroker.api._authz import authorize, authorize_cluster
from kbroker.api._futures import chain_future
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.cluster.quotas import ClientQuotaManager
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.fetch import FetchRequest, FetchResponse
from kbroker.replica.delayed import FetchParams
from kbroker.replica.fetch_session import NO_REPLICA_HIGH_WATERMARK, FetchPartitionRequest, PartitionResult
from kbroker.replica.partition import FETCH_LOG_END
from kbroker.security.acl import CLUSTER_ACTION, READ, TOPIC

if TYPE_CHECKING:
    from kbroker.replica.replica_manager import ReplicaManager

API_KEY = 1
MIN_VERSION = 4
MAX_VERSION = 18
VERSION_NOTES = (
    "0-3 removed in Kafka 4.0. v13+ fetch by topic id (KIP-516), v15 ReplicaState (KIP-903), v16 leader "
    "hints (KIP-951), v17 directory id (KIP-853), v18 follower high watermark (KIP-1166, a tagged field followers send)."
)

ZERO_UUID = uuid.UUID(int=0)
_EMPTY = b""


def _fetch_data(services: BrokerServices, request: FetchRequest, version: int) -> list[FetchPartitionRequest]:
    store = services.metadata
    out: list[FetchPartitionRequest] = []
    for t in request.topics:
        if version >= 13:
            topic_id = t.topic_id
            info = store.topic_by_id(topic_id)
            name = "" if info is None else info.name
            for p in t.partitions:
                out.append(
                    FetchPartitionRequest(
                        (topic_id, p.partition), name, topic_id, p.partition, p.fetch_offset,
                        p.partition_max_bytes, p.log_start_offset, p.current_leader_epoch,
                        p.last_fetched_epoch,
                        # KIP-1166 (v18): the follower's HW, so its waiting fetch returns when ours is newer.
                        p.high_watermark if version >= 18 else NO_REPLICA_HIGH_WATERMARK,
                    )
                )
        else:
            name = t.topic
            for p in t.partitions:
                out.append(
                    FetchPartitionRequest(
                        (name, p.partition), name, ZERO_UUID, p.partition, p.fetch_offset,
                        p.partition_max_bytes, p.log_start_offset,
                        p.current_leader_epoch if version >= 9 else -1,
                        p.last_fetched_epoch if version >= 12 else -1,
                    )
                )
    return out


def _forgotten(request: FetchRequest, version: int) -> list[Hashable]:
    if version < 7:
        return []
    keys: list[Hashable] = []
    for f in request.forgotten_topics_data:
        ident: uuid.UUID | str = f.topic_id if version >= 13 else f.topic
        keys.extend((ident, p) for p in f.partitions)
    return keys


def _partition_data(req: FetchPartitionRequest, r: PartitionResult, version: int, isolation: int,
                    unsupported: frozenset[str] = frozenset()) -> FetchResponse.PartitionData:
    if req.topic in unsupported:
        # KafkaApis.maybeConvertFetchedData: FetchResponse.partitionResponse(tp, error).
        return FetchResponse.PartitionData(
            partition_index=req.partition, error_code=ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, high_watermark=-1,
            last_stable_offset=-1, log_start_offset=-1, aborted_transactions=None, preferred_read_replica=-1,
            records=_EMPTY)
    # null for read_uncommitted reads; a (possibly empty) list for read_committed reads and for the
    # partitions rejected before reading, as Kafka's FetchResponse carries them.
    aborted = None
    if r.aborted_transactions is not None:
        aborted = [
            FetchResponse.AbortedTransaction(producer_id=pid, first_offset=first)
            for pid, first in r.aborted_transactions
        ]
    data = FetchResponse.PartitionData(
        partition_index=req.partition,
        error_code=r.error,
        high_watermark=r.high_watermark,
        last_stable_offset=r.last_stable_offset,
        log_start_offset=r.log_start_offset,
        aborted_transactions=aborted,
        preferred_read_replica=r.preferred_read_replica if version >= 11 else -1,
        records=r.records if r.records is not None else _EMPTY,
    )
    if r.diverging_epoch is not None and version >= 12:
        data.diverging_epoch = FetchResponse.EpochEndOffset(epoch=r.diverging_epoch[0],
                                                            end_offset=r.diverging_epoch[1])
    return data


def _build_response(
    version: int,
    session_id: int,
    parts: list[tuple[FetchPartitionRequest, PartitionResult]],
    isolation: int,
    error: ErrorCode = ErrorCode.NONE,
    unsupported: frozenset[str] = frozenset(),
) -> FetchResponse:
    topics: list[FetchResponse.FetchableTopicResponse] = []
    current: FetchResponse.FetchableTopicResponse | None = None
    current_ident: uuid.UUID | str | None = None
    for req, result in parts:
        ident = req.topic_id if version >= 13 else req.topic
        if current is None or ident != current_ident:
            # Consecutive partitions of one topic share an entry, as Kafka's FetchResponse.of does.
            current = FetchResponse.FetchableTopicResponse(partitions=[])
            if version >= 13:
                current.topic_id = req.topic_id
            else:
                current.topic = req.topic
            current_ident = ident
            topics.append(current)
        current.partitions.append(_partition_data(req, result, version, isolation, unsupported))
    return FetchResponse(throttle_time_ms=0, error_code=error, session_id=session_id, responses=topics)


def _zstd_topics(rm: ReplicaManager, parts: list[tuple[FetchPartitionRequest, PartitionResult]]) -> frozenset[str]:
    """Topics with ``compression.type=zstd``: a consumer fetching below v10 cannot read zstd
    (KIP-110), so Kafka answers UNSUPPORTED_COMPRESSION_TYPE for their partitions, whatever they hold."""
    out = set()
    for req, _result in parts:
        partition = rm.get_partition(req.topic, req.partition) if req.topic else None
        if partition is not None and partition.log.config.compression_type == "zstd":
            out.add(req.topic)
    return frozenset(out)


_DENIED = PartitionResult(ErrorCode.TOPIC_AUTHORIZATION_FAILED, aborted_transactions=[])


def _authorize(services: BrokerServices, ctx: RequestContext, fetch_data: list[FetchPartitionRequest],
               replica_id: int) -> tuple[list[FetchPartitionRequest], list[FetchPartitionRequest]]:
    """KafkaApis.handleFetchRequest: a follower needs CLUSTER_ACTION on the cluster (else every partition
    is TOPIC_AUTHORIZATION_FAILED); a consumer READ on each topic. Returns (allowed, denied); the
    denied partitions never enter the fetch session and are answered TOPIC_AUTHORIZATION_FAILED."""
    if replica_id >= 0:
        if authorize_cluster(services, ctx, CLUSTER_ACTION):
            return fetch_data, []
        return [], fetch_data
    verdict: dict[str, bool] = {}
    allowed: list[FetchPartitionRequest] = []
    denied: list[FetchPartitionRequest] = []
    for req in fetch_data:
        ok = verdict.get(req.topic)
        if ok is None:
            ok = verdict[req.topic] = bool(req.topic) and authorize(services, ctx, READ, TOPIC, req.topic)
        (allowed if ok or not req.topic else denied).append(req)
    return allowed, denied


def _fetch_quota(quota: ClientQuotaManager, user: str, client_id: str,
                 results: dict[Hashable, PartitionResult]) -> int:
    """consumer_byte_rate: record the response's record bytes; when that violates the quota, take them
    back and answer the throttle time (KafkaApis: `unrecordQuotaSensor`, `getThrottledResponse`)."""
    size = sum(r.records_size for r in results.values())
    throttle_ms = quota.record_and_get_throttle_time_ms(user, client_id, size)
    if throttle_ms:
        quota.unrecord(user, client_id, size)
        quota.throttle(user, client_id, throttle_ms)
    return throttle_ms


def error_response(request: FetchRequest, version: int, error: ErrorCode) -> FetchResponse:
    return FetchResponse(throttle_time_ms=0, error_code=error, session_id=0, responses=[])


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
           request: FetchRequest) -> FetchResponse | asyncio.Future[FetchResponse]:
    version = header.api_version
    rm = services.replica_manager
    isolation = 1 if request.isolation_level == 1 else 0
    replica_id = request.replica_state.replica_id if version >= 15 else request.replica_id
    fetch_data = _fetch_data(services, request, version)
    denied: list[FetchPartitionRequest] = []
    if services.authorizer is not None:
        fetch_data, denied = _authorize(services, ctx, fetch_data, replica_id)
    context = rm.fetch_manager.new_context(
        version,
        request.session_id if version >= 7 else 0,
        request.session_epoch if version >= 7 else -1,
        fetch_data,
        _forgotten(request, version),
        is_follower=replica_id >= 0,
        topic_name=lambda topic_id: None if (info := services.metadata.topic_by_id(topic_id)) is None else info.name,
    )
    if context.error != ErrorCode.NONE:
        return _build_response(version, 0, [], isolation, context.error)
    quotas = services.quotas
    fetch_quota = quotas.fetch if quotas is not None and replica_id < 0 and quotas.fetch.quotas_enabled else None
    user = client_id = ""
    max_bytes, min_bytes = request.max_bytes, request.min_bytes
    if fetch_quota is not None:
        user, client_id = ctx.principal.partition(":")[2], header.client_id or ""
        # KafkaApis.handleFetchRequest: never more than the quota lets through in one window.
        max_bytes = int(min(max_bytes, fetch_quota.max_value_in_quota_window(user, client_id)))
        min_bytes = min(min_bytes, max_bytes)
    params = FetchParams(
        replica_id=replica_id,
        replica_epoch=request.replica_state.replica_epoch if version >= 15 else -1,
        max_wait_ms=request.max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        # A follower (a replica id, KIP-903's ReplicaState from v15) reads up to the log end offset.
        isolation_level=FETCH_LOG_END if replica_id >= 0 else isolation,
        # KIP-392: a v11+ consumer carries client metadata (its rack) and may read from a follower.
        fetch_only_leader=replica_id >= 0 or version < 11,
        client_rack=(request.rack_id or "") if version >= 11 else "",
    )
    outcome = rm.fetch_messages(params, context.partitions_to_read())

    def respond(results: dict[Hashable, PartitionResult]) -> FetchResponse:
        if fetch_quota is not None:
            throttle_ms = _fetch_quota(fetch_quota, user, client_id, results)
            if throttle_ms:
                # Throttled: an empty response (the bytes are taken back), the session untouched.
                session = getattr(context, "session", None)
                return FetchResponse(throttle_time_ms=throttle_ms, error_code=0,
                                     session_id=session.id if session is not None else 0, responses=[])
        session_id, parts = context.update_and_generate_response(results)
        if denied:
            parts = parts + [(req, _DENIED) for req in denied]
        unsupported = _zstd_topics(rm, parts) if version < 10 and replica_id < 0 else frozenset()
        return _build_response(version, session_id, parts, isolation, unsupported=unsupported)

    if isinstance(outcome, dict):
        return respond(outcome)

    # The purgatory completes `outcome`; the response is built in its done-callback (no Task).
    return chain_future(outcome, respond)
