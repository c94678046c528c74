"""OffsetCommit (key 8): store committed offsets of a group in `__consumer_offsets`.

Versions 2-10. Classic members are checked against the group's generation (ILLEGAL_GENERATION /
UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID / REBALANCE_IN_PROGRESS); generation -1 with no member commits
for a "simple" group while it has no members. v9 is KIP-848's: for a consumer group the field is the
member epoch (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH; a consumer-protocol member must use v9+); v10
names topics by id (UNKNOWN_TOPIC_ID when the id is unknown). v2-4 retention times become an expire timestamp (OffsetCommitValue v1), as in Kafka.
A commit counts as a heartbeat of the member. Unknown topics get UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from typing import Any

from kbroker.api._authz import authorize
from kbroker.api._groups import coordinator, then
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.coord.offset_metadata_manager import CommitRequestPartition
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.offset_commit import OffsetCommitRequest, OffsetCommitResponse
from kbroker.security.acl import GROUP, READ, TOPIC

API_KEY = 8
MIN_VERSION = 2
MAX_VERSION = 10

R = OffsetCommitResponse


def error_response(request: OffsetCommitRequest, version: int, error: ErrorCode) -> OffsetCommitResponse:
    return R(topics=[
        R.OffsetCommitResponseTopic(name=t.name, topic_id=t.topic_id, partitions=[
            R.OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=error) for p in t.partitions
        ])
        for t in request.topics
    ])


def handle(services: BrokerServices, ctx: RequestContext, header: Any, request: OffsetCommitRequest) -> Any:
    if services.authorizer is not None and not authorize(services, ctx, READ, GROUP, request.group_id):
        # KafkaApis: READ on the group, else GROUP_AUTHORIZATION_FAILED.
        return error_response(request, header.api_version, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    version = header.api_version
    errors: dict[tuple[int, int], ErrorCode] = {}
    valid: list[CommitRequestPartition] = []
    keys: list[tuple[int, int]] = []
    check_topics = services.authorizer is not None
    for i, t in enumerate(request.topics):
        if version >= 10:
            info = services.metadata.topic_by_id(t.topic_id)
            missing = ErrorCode.UNKNOWN_TOPIC_ID
        else:
            info = services.metadata.topic(t.name)
            missing = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        name = t.name if version < 10 else (info.name if info is not None else None)
        if check_topics and name is not None and not authorize(services, ctx, READ, TOPIC, name):
            # KafkaApis: READ on each topic, else TOPIC_AUTHORIZATION_FAILED on each of its partitions
            # (whether or not it exists: its existence is not disclosed).
            for p in t.partitions:
                errors[(i, p.partition_index)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            continue
        for p in t.partitions:
            if info is None or not 0 <= p.partition_index < info.num_partitions:
                errors[(i, p.partition_index)] = missing if info is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            keys.append((i, p.partition_index))
            valid.append(CommitRequestPartition(
                info.name, p.partition_index, p.committed_offset,
                p.committed_leader_epoch if version >= 6 else -1, p.committed_metadata,
            ))
    if not valid:
        return to_response(request, errors, keys, [])
    answer = coordinator(services).commit_offsets(
        request.group_id,
        request.generation_id_or_member_epoch,
        request.member_id,
        request.group_instance_id if version >= 7 else None,
        request.retention_time_ms if version <= 4 else -1,
        valid,
        api_version=version,
    )
    return then(answer, lambda results: to_response(request, errors, keys, results))


def to_response(request: OffsetCommitRequest, errors: dict[tuple[int, int], ErrorCode], keys: list[tuple[int, int]],
                results: list[ErrorCode]) -> OffsetCommitResponse:
    for key, error in zip(keys, results, strict=True):
        errors[key] = error
    return R(topics=[
        R.OffsetCommitResponseTopic(name=t.name, topic_id=t.topic_id, partitions=[
            R.OffsetCommitResponsePartition(partition_index=p.partition_index,
                                            error_code=errors[(i, p.partition_index)])
            for p in t.partitions
        ])
        for i, t in enumerate(request.topics)
    ])
