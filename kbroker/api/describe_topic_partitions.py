"""DescribeTopicPartitions (API key 75, v0, KIP-966): topics and partitions, paginated by a cursor.

The Java Admin's `describeTopics` uses it when advertised (Kafka 3.8+ clients), so it follows
Kafka's `DescribeTopicPartitionsRequestHandler` + `KRaftMetadataCache` exactly: topics sorted by name,
starting at the cursor's topic and partition; at most min(response_partition_limit, 2000) partitions
per response; `next_cursor` names the first partition not returned. An empty topic list means every
topic (unknown names are then impossible); a named topic that does not exist gets
UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an illegal name). A cursor naming a topic
absent from a non-empty list is INVALID_REQUEST for the whole request.
"""

from __future__ import annotations

import uuid
from typing import Any

from kbroker.api._authz import authorize, authorized_operations
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.api.metadata import TOPIC_AUTHORIZED_OPERATIONS, in_cluster
from kbroker.controller.replication_control import validate_topic_name
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.describe_topic_partitions import (
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
)
from kbroker.security.acl import DESCRIBE, TOPIC

API_KEY = 75
MIN_VERSION = 0
MAX_VERSION = 0

# Kafka's broker config max.request.partition.size.limit (default 2000) caps the client's limit.
MAX_REQUEST_PARTITION_SIZE_LIMIT = 2000
_ZERO_UUID = uuid.UUID(int=0)

Resp = DescribeTopicPartitionsResponse
TopicResult = Resp.DescribeTopicPartitionsResponseTopic
PartitionResult = Resp.DescribeTopicPartitionsResponsePartition


def _remote_partition(services: BrokerServices, reg: Any, index: int, listener_name: str) -> Any:
    """A KRaft cluster's partition led by another broker (or none), as the image says."""
    brokers = services.metadata.image.cluster.brokers
    leader = brokers.get(reg.leader)
    leader_ok = leader is not None and leader.endpoint(listener_name) is not None

    def reachable(node: int) -> bool:
        b = brokers.get(node)
        return b is not None and not b.fenced and b.endpoint(listener_name) is not None

    return PartitionResult(
        error_code=int(ErrorCode.NONE if leader_ok else ErrorCode.LEADER_NOT_AVAILABLE), partition_index=index,
        leader_id=reg.leader if leader_ok else -1, leader_epoch=reg.leader_epoch, replica_nodes=list(reg.replicas),
        isr_nodes=list(reg.isr), eligible_leader_replicas=list(reg.elr), last_known_elr=list(reg.last_known_elr),
        offline_replicas=[r for r in reg.replicas if not reachable(r)])


def _partition(services: BrokerServices, topic: str, index: int, listener_name: str = "PLAINTEXT") -> Any:
    node = services.node_id
    replicas, isr = [node], [node]
    elr: list[int] = []
    last_known_elr: list[int] = []
    if in_cluster(services):
        reg = services.metadata.image.partition(topic, index)
        if reg is not None and reg.leader != node:
            return _remote_partition(services, reg, index, listener_name)
        if reg is not None:
            replicas, isr = list(reg.replicas), list(reg.isr)
            # KIP-966: the image's ELR and last-known ELR, as Kafka's KRaftMetadataCache answers them.
            elr, last_known_elr = list(reg.elr), list(reg.last_known_elr)
    partition = services.replica_manager.get_partition(topic, index)
    if partition is None:
        return PartitionResult(error_code=int(ErrorCode.LEADER_NOT_AVAILABLE), partition_index=index,
                               leader_id=-1, leader_epoch=-1, replica_nodes=[node], isr_nodes=[],
                               eligible_leader_replicas=[], last_known_elr=[], offline_replicas=[])
    offline = partition.is_offline
    return PartitionResult(
        error_code=int(ErrorCode.KAFKA_STORAGE_ERROR if offline else ErrorCode.NONE),
        partition_index=index,
        leader_id=-1 if offline else node,
        leader_epoch=partition.leader_epoch,
        replica_nodes=replicas,
        isr_nodes=[] if offline else isr,
        eligible_leader_replicas=elr,
        last_known_elr=last_known_elr,
        offline_replicas=[node] if offline else [],
    )


def _missing(services: BrokerServices, ctx: RequestContext, name: str) -> Any:
    try:
        validate_topic_name(name)
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    except KafkaError:
        code = ErrorCode.INVALID_TOPIC_EXCEPTION
    return TopicResult(error_code=int(code), name=name, topic_id=_ZERO_UUID, is_internal=False, partitions=[],
                       topic_authorized_operations=authorized_operations(services, ctx, TOPIC, name))


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
           request: DescribeTopicPartitionsRequest) -> DescribeTopicPartitionsResponse:
    metadata = services.metadata
    fetch_all = not request.topics
    cursor = request.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    if fetch_all:
        names = {info.name for info in metadata.topics() if info.name >= cursor_topic}
    else:
        names = {t.name for t in request.topics if t.name >= cursor_topic}
        if cursor is not None and cursor.topic_name not in names:
            raise KafkaError("DescribeTopicPartitionsRequest topic list should contain the cursor topic: "
                             f"{cursor.topic_name}", error_code=ErrorCode.INVALID_REQUEST)
    remaining = min(MAX_REQUEST_PARTITION_SIZE_LIMIT, request.response_partition_limit)
    response = Resp(throttle_time_ms=0, topics=[], next_cursor=None)
    # DescribeTopicPartitionsRequestHandler: DESCRIBE on each topic as the sorted walk reaches it; a
    # refused topic is skipped (asked by name: TOPIC_AUTHORIZATION_FAILED, with no id, after the
    # others; in "all topics" it is left out). Authorized operations are always reported (KIP-430).
    check = services.authorizer is not None
    refused: list[Any] = []
    for name in sorted(names):
        if check and not authorize(services, ctx, DESCRIBE, TOPIC, name):
            if not fetch_all:
                refused.append(TopicResult(error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), name=name,
                                           topic_id=_ZERO_UUID, is_internal=False, partitions=[]))
            continue
        if remaining == 0:
            # The cursor points at the start of the next topic (which need not exist).
            response.next_cursor = Resp.Cursor(topic_name=name, partition_index=0)
            break
        if remaining < 0:  # a negative limit: Kafka answers nothing and no cursor
            continue
        info = metadata.topic(name)
        if info is None:
            if not fetch_all:
                response.topics.append(_missing(services, ctx, name))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor_topic else 0
        end = min(info.num_partitions, start + remaining)
        partitions = [_partition(services, name, i, ctx.listener_name) for i in range(start, end)]
        response.topics.append(TopicResult(error_code=0, name=name, topic_id=info.topic_id,
                                           is_internal=info.is_internal, partitions=partitions,
                                           topic_authorized_operations=authorized_operations(
                                               services, ctx, TOPIC, name)))
        if end < info.num_partitions:
            response.next_cursor = Resp.Cursor(topic_name=name, partition_index=end)
            break
        remaining -= len(partitions)
    response.topics.extend(refused)
    return response


def error_response(request: DescribeTopicPartitionsRequest, version: int,
                   error: Any) -> DescribeTopicPartitionsResponse:
    """Kafka's `DescribeTopicPartitionsRequest.getErrorResponse`: every named topic gets the error."""
    return Resp(throttle_time_ms=0, topics=[
        TopicResult(error_code=int(error), name=t.name, topic_id=_ZERO_UUID, is_internal=False, partitions=[],
                    topic_authorized_operations=TOPIC_AUTHORIZED_OPERATIONS)
        for t in request.topics
    ], next_cursor=None)
