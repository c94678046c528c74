"""OffsetCommit (key 8): store committed offsets of a group in `__consumer_offsets`.

Versions 2-8 (v9 is KIP-848's member epoch, v10 topic ids). Members are checked against the
group's generation (ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID /
REBALANCE_IN_PROGRESS); generation -1 with no member commits for a "simple" group while it has no
members. v2-4 retention times become an expire timestamp (OffsetCommitValue v1), as in Kafka.
A commit counts as a heartbeat of the member. Unknown topics get UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from typing import Any

from kbroker.api._groups import coordinator
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.coord.group_admin import CommitRequestPartition
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.offset_commit import OffsetCommitRequest, OffsetCommitResponse

API_KEY = 8
MIN_VERSION = 2
MAX_VERSION = 8

R = OffsetCommitResponse


def error_response(request: OffsetCommitRequest, version: int, error: ErrorCode) -> OffsetCommitResponse:
    return R(topics=[
        R.OffsetCommitResponseTopic(name=t.name, partitions=[
            R.OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=error) for p in t.partitions
        ])
        for t in request.topics
    ])


def handle(services: BrokerServices, ctx: RequestContext, header: Any, request: OffsetCommitRequest) -> OffsetCommitResponse:
    version = header.api_version
    errors: dict[tuple[str, int], ErrorCode] = {}
    valid: list[CommitRequestPartition] = []
    for t in request.topics:
        info = services.metadata.topic(t.name)
        for p in t.partitions:
            if info is None or not 0 <= p.partition_index < info.num_partitions:
                errors[(t.name, p.partition_index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            valid.append(CommitRequestPartition(
                t.name, p.partition_index, p.committed_offset,
                p.committed_leader_epoch if version >= 6 else -1, p.committed_metadata,
            ))
    if valid:
        results = coordinator(services).commit_offsets(
            request.group_id,
            request.generation_id_or_member_epoch,
            request.member_id,
            request.group_instance_id if version >= 7 else None,
            request.retention_time_ms if version <= 4 else -1,
            valid,
        )
        for cp, error in zip(valid, results, strict=True):
            errors[(cp.topic, cp.partition)] = error
    return R(topics=[
        R.OffsetCommitResponseTopic(name=t.name, partitions=[
            R.OffsetCommitResponsePartition(partition_index=p.partition_index,
                                            error_code=errors[(t.name, p.partition_index)])
            for p in t.partitions
        ])
        for t in request.topics
    ])
