"""OffsetForLeaderEpoch (API key 23, v2-4): the end offset of a leader epoch (KIP-101/KIP-320).

Consumers call it after a leader change to detect log truncation. Per partition: KIP-320 fencing of
`current_leader_epoch` (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH), then the log's leader-epoch
cache answers the largest epoch <= the one asked for and where it ends (the log end offset for the
latest epoch), or -1/-1 when the epoch precedes everything the log knows.
"""

from __future__ import annotations

from typing import Any

from kbroker.api._authz import authorize_cluster, filter_authorized
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode, error_fields
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from kbroker.security.acl import CLUSTER_ACTION, DESCRIBE, TOPIC

API_KEY = 23
MIN_VERSION = 2
MAX_VERSION = 4

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1

TopicResult = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
EpochEndOffset = OffsetForLeaderEpochResponse.EpochEndOffset


def _end_offset(services: BrokerServices, topic: str, p: Any) -> Any:
    result = EpochEndOffset(error_code=0, partition=p.partition, leader_epoch=UNDEFINED_EPOCH,
                            end_offset=UNDEFINED_OFFSET)
    partition = services.replica_manager.get_partition(topic, p.partition)
    if partition is None:
        rm = services.replica_manager
        offline = (topic, p.partition) in rm.offline  # its log dir failed
        follower = rm.follower_partition(topic, p.partition) is not None  # only the leader answers
        result.error_code = int(ErrorCode.KAFKA_STORAGE_ERROR if offline else ErrorCode.NOT_LEADER_OR_FOLLOWER
                                if follower else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return result
    if partition.is_offline:
        result.error_code = int(ErrorCode.KAFKA_STORAGE_ERROR)
        return result
    fencing = partition.check_leader_epoch(p.current_leader_epoch)
    if fencing != ErrorCode.NONE:
        result.error_code = int(fencing)
        return result
    try:
        found = partition.log.end_offset_for_epoch(p.leader_epoch)
    except Exception as e:  # noqa: BLE001 - a storage failure is this partition's error
        result.error_code = error_fields(e)[0]
        return result
    if found is not None:
        epoch, offset = found
        result.leader_epoch, result.end_offset = int(epoch), int(offset)
    # Kafka's leader records its epoch's start offset when it takes leadership
    # (`maybeAssignEpochStartOffset`), so the current epoch is known even before the first append
    # in it: answer (leader epoch, LEO) where the cache has not seen that epoch yet.
    latest = partition.log.leader_epoch_cache.latest_epoch
    if p.leader_epoch == partition.leader_epoch and latest < partition.leader_epoch and result.end_offset < 0:
        result.leader_epoch, result.end_offset = partition.leader_epoch, partition.log_end_offset
    return result


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
           request: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse:
    # KafkaApis (KIP-320): CLUSTER_ACTION on the cluster (a follower) answers every topic; otherwise
    # DESCRIBE on each topic (a consumer), and the others' partitions get TOPIC_AUTHORIZATION_FAILED,
    # after the authorized topics.
    allowed, refused = list(request.topics), []
    if services.authorizer is not None and not authorize_cluster(services, ctx, CLUSTER_ACTION):
        names = filter_authorized(services, ctx, DESCRIBE, TOPIC, (t.topic for t in request.topics))
        allowed = [t for t in request.topics if t.topic in names]
        refused = [t for t in request.topics if t.topic not in names]
    topics = [
        TopicResult(topic=t.topic, partitions=[_end_offset(services, t.topic, p) for p in t.partitions])
        for t in allowed
    ] + [
        TopicResult(topic=t.topic, partitions=[
            EpochEndOffset(error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), partition=p.partition,
                           leader_epoch=UNDEFINED_EPOCH, end_offset=UNDEFINED_OFFSET) for p in t.partitions])
        for t in refused
    ]
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)


def error_response(request: OffsetForLeaderEpochRequest, version: int,
                   error: Any) -> OffsetForLeaderEpochResponse:
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=[
        TopicResult(topic=t.topic, partitions=[
            EpochEndOffset(error_code=int(error), partition=p.partition, leader_epoch=UNDEFINED_EPOCH,
                           end_offset=UNDEFINED_OFFSET)
            for p in t.partitions
        ])
        for t in request.topics
    ])
