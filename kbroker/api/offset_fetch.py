"""OffsetFetch (key 9): committed offsets of one group (v1-7) or several (v8), all or requested partitions.

Versions 1-8 (v9 is KIP-848's member epoch, v10 topic ids). Partitions without a commit answer
offset -1. `require_stable` (v7+) only matters for pending transactional commits, which do not exist
yet. In v1 a group-level error (COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR) is reported in every
requested partition, as the version has no top-level error.
"""

from __future__ import annotations

from typing import Any

from kbroker.api._groups import coordinator
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.coord.group_admin import FetchedOffset
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchResponse

API_KEY = 9
MIN_VERSION = 1
MAX_VERSION = 8

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


def _by_topic(fetched: list[FetchedOffset]) -> dict[str, list[FetchedOffset]]:
    out: dict[str, list[FetchedOffset]] = {}
    for f in fetched:
        out.setdefault(f.topic, []).append(f)
    return out


def handle(services: BrokerServices, ctx: RequestContext, header: Any, request: OffsetFetchRequest) -> OffsetFetchResponse:
    version = header.api_version
    coord = coordinator(services)
    if version >= 8:
        groups = []
        for g in request.groups:
            error, fetched = coord.fetch_offsets(g.group_id, _requested(g.topics))
            groups.append(R.OffsetFetchResponseGroup(group_id=g.group_id, error_code=error, topics=[
                R.OffsetFetchResponseTopics(name=name, partitions=[
                    R.OffsetFetchResponsePartitions(partition_index=f.partition, committed_offset=f.offset,
                                                    committed_leader_epoch=f.leader_epoch, metadata=f.metadata,
                                                    error_code=f.error)
                    for f in parts
                ])
                for name, parts in _by_topic(fetched).items()
            ] if error == ErrorCode.NONE else []))
        return R(groups=groups)
    requested = _requested(request.topics)
    error, fetched = coord.fetch_offsets(request.group_id, requested)
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
