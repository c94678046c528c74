"""OffsetFetch (key 9): committed offsets of one group (v1-7) or several (v8), all or requested partitions.

Versions 1-10. v9 adds KIP-848's member id and epoch: a consumer group member must be at its current
epoch (UNKNOWN_MEMBER_ID / STALE_MEMBER_EPOCH as the group's error); an admin fetch (no member id,
epoch -1) is always allowed. v10 names topics by id (an unknown id answers UNKNOWN_TOPIC_ID in its
partitions; committed offsets of topics that no longer exist are left out of an all-topics fetch).
Partitions without a commit answer offset -1. `require_stable` (v7+, KIP-447): a requested partition
with a pending transactional commit (TxnOffsetCommit not yet committed) answers UNSTABLE_OFFSET_COMMIT,
which the consumer retries. In v1 a group-level error (COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR) is reported in every
requested partition, as the version has no top-level error.
"""

from __future__ import annotations

import uuid
from functools import partial
from typing import Any

from kbroker.api._authz import authorize, filter_authorized
from kbroker.api._groups import coordinator, gather, then
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.coord.offset_metadata_manager import FetchedOffset
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchResponse
from kbroker.security.acl import DESCRIBE, GROUP, TOPIC

API_KEY = 9
MIN_VERSION = 1
MAX_VERSION = 10

R = OffsetFetchResponse


def error_response(request: OffsetFetchRequest, version: int, error: ErrorCode) -> OffsetFetchResponse:
    if version >= 8:
        return R(groups=[R.OffsetFetchResponseGroup(group_id=g.group_id, error_code=error) for g in request.groups])
    topics = request.topics or []
    return R(error_code=error, topics=[
        R.OffsetFetchResponseTopic(name=t.name, partitions=[
            R.OffsetFetchResponsePartition(partition_index=p, committed_offset=-1, error_code=error)
            for p in t.partition_indexes
        ])
        for t in topics
    ])


def _requested(topics: list[Any] | None) -> list[tuple[str, int]] | None:
    if topics is None:
        return None
    return [(t.name, p) for t in topics for p in t.partition_indexes]


def _requested_by_id(services: BrokerServices,
                     topics: list[Any] | None) -> tuple[list[tuple[str, int]] | None, dict[str, Any]]:
    """v10: requested partitions by topic name, and the requested topics whose id is unknown (keyed
    by a placeholder name that cannot be a topic's)."""
    if topics is None:
        return None, {}
    out: list[tuple[str, int]] = []
    unknown: dict[str, Any] = {}
    for t in topics:
        info = services.metadata.topic_by_id(t.topic_id)
        if info is None:
            unknown[f"\0{t.topic_id}"] = t
        else:
            out += [(info.name, p) for p in t.partition_indexes]
    return out, unknown


def _topic_id(services: BrokerServices, name: str, unknown: dict[str, Any]) -> Any:
    if name in unknown:
        return unknown[name].topic_id
    info = services.metadata.topic(name)
    return info.topic_id if info is not None else uuid.UUID(int=0)


def _by_topic(fetched: list[FetchedOffset]) -> dict[str, list[FetchedOffset]]:
    out: dict[str, list[FetchedOffset]] = {}
    for f in fetched:
        out.setdefault(f.topic, []).append(f)
    return out


def _authorized(services: BrokerServices, ctx: RequestContext, requested: list[tuple[str, int]] | None
                ) -> tuple[list[tuple[str, int]] | None, list[FetchedOffset]]:
    """KafkaApis.fetchOffsetsForGroup: the requested partitions of topics the principal may DESCRIBE
    (asked of the coordinator), and TOPIC_AUTHORIZATION_FAILED (offset -1) for the others' partitions,
    answered after the coordinator's; for "all topics" (None) the set of topics the answer may show
    (KafkaApis.fetchAllOffsetsForGroup drops the others silently). Without an authorizer: no change."""
    if services.authorizer is None or requested is None:
        return requested, []
    allowed = filter_authorized(services, ctx, DESCRIBE, TOPIC, (t for t, _ in requested))
    denied = [FetchedOffset(t, p, error=ErrorCode.TOPIC_AUTHORIZATION_FAILED) for t, p in requested if t not in allowed]
    return [(t, p) for t, p in requested if t in allowed], denied


def _visible(services: BrokerServices, ctx: RequestContext, denied: list[FetchedOffset], all_topics: bool,
             answer: tuple[ErrorCode, list[FetchedOffset]]) -> tuple[ErrorCode, list[FetchedOffset]]:
    """The coordinator's answer as the principal may see it (see `_authorized`); a group error as is."""
    error, fetched = answer
    if error != ErrorCode.NONE:
        return answer
    if all_topics and services.authorizer is not None:
        allowed = filter_authorized(services, ctx, DESCRIBE, TOPIC, (f.topic for f in fetched))
        fetched = [f for f in fetched if f.topic in allowed]
    return error, fetched + denied


def handle(services: BrokerServices, ctx: RequestContext, header: Any, request: OffsetFetchRequest) -> Any:
    version = header.api_version
    coord = coordinator(services)
    if version >= 8:
        answers = []
        for g in request.groups:
            if services.authorizer is not None and not authorize(services, ctx, DESCRIBE, GROUP, g.group_id):
                # KafkaApis: DESCRIBE on each group, else GROUP_AUTHORIZATION_FAILED for that group.
                answers.append(_group(services, version, g.group_id, {},
                                      (ErrorCode.GROUP_AUTHORIZATION_FAILED, [])))
                continue
            member_id, epoch = (g.member_id, g.member_epoch) if version >= 9 else (None, -1)
            unknown_ids: dict[str, Any] = {}
            if version >= 10:
                requested, unknown_ids = _requested_by_id(services, g.topics)
            else:
                requested = _requested(g.topics)
            asked, denied = _authorized(services, ctx, requested)
            fetched = then(coord.fetch_offsets(g.group_id, asked, member_id, epoch, request.require_stable),
                           partial(_visible, services, ctx, denied, requested is None))
            answers.append(then(fetched, partial(_group, services, version, g.group_id, unknown_ids)))
        return then(gather(answers), lambda groups: R(groups=groups))
    requested = _requested(request.topics)
    if services.authorizer is not None and not authorize(services, ctx, DESCRIBE, GROUP, request.group_id):
        return _single_group(version, requested, ErrorCode.GROUP_AUTHORIZATION_FAILED, [])
    stable = request.require_stable if version >= 7 else False
    asked, denied = _authorized(services, ctx, requested)
    fetched = then(coord.fetch_offsets(request.group_id, asked, require_stable=stable),
                   partial(_visible, services, ctx, denied, requested is None))
    return then(fetched, lambda a: _single_group(version, requested, *a))


def _group(services: BrokerServices, version: int, group_id: str, unknown_ids: dict[str, Any],
           answer: tuple[ErrorCode, list[FetchedOffset]]) -> Any:
    error, fetched = answer
    if error == ErrorCode.NONE and version >= 10:
        fetched = [f for f in fetched if services.metadata.topic(f.topic) is not None]
        fetched += [FetchedOffset(key, p, error=ErrorCode.UNKNOWN_TOPIC_ID)
                    for key, t in unknown_ids.items() for p in t.partition_indexes]
    return R.OffsetFetchResponseGroup(group_id=group_id, error_code=error, topics=[
        R.OffsetFetchResponseTopics(name=name, topic_id=_topic_id(services, name, unknown_ids), partitions=[
            R.OffsetFetchResponsePartitions(partition_index=f.partition, committed_offset=f.offset,
                                            committed_leader_epoch=f.leader_epoch, metadata=f.metadata,
                                            error_code=f.error)
            for f in parts
        ])
        for name, parts in _by_topic(fetched).items()
    ] if error == ErrorCode.NONE else [])


def _single_group(version: int, requested: list[tuple[str, int]] | None, error: ErrorCode,
                  fetched: list[FetchedOffset]) -> OffsetFetchResponse:
    if error != ErrorCode.NONE:
        if version >= 2:
            return R(error_code=error)
        fetched = [FetchedOffset(t, p, error=error) for t, p in requested or []]
    return R(error_code=ErrorCode.NONE, topics=[
        R.OffsetFetchResponseTopic(name=name, partitions=[
            R.OffsetFetchResponsePartition(partition_index=f.partition, committed_offset=f.offset,
                                           committed_leader_epoch=f.leader_epoch, metadata=f.metadata,
                                           error_code=f.error)
            for f in parts
        ])
        for name, parts in _by_topic(fetched).items()
    ])
