"""DescribeProducers (key 61): the active producers of partitions this broker leads
(kafka-transactions describe-producers, find-hanging).

Version 0. Per producer: id, epoch, last sequence, last timestamp, coordinator epoch and the first
offset of its open transaction (-1 when none), from the partition's producer state. A partition not
hosted here is UNKNOWN_TOPIC_OR_PARTITION, one hosted as a follower NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

from typing import Any

from kbroker.api._authz import authorize
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.describe_producers import DescribeProducersRequest, DescribeProducersResponse
from kbroker.security.acl import READ, TOPIC

API_KEY = 61
MIN_VERSION = 0
MAX_VERSION = 0

R = DescribeProducersResponse


def error_response(request: DescribeProducersRequest, version: int, error: ErrorCode) -> DescribeProducersResponse:
    return R(throttle_time_ms=0, topics=[R.TopicResponse(name=t.name, partitions=[
        R.PartitionResponse(partition_index=p, error_code=error, error_message=None, active_producers=[])
        for p in t.partition_indexes]) for t in request.topics])


def _partition(services: BrokerServices, topic: str, index: int) -> R.PartitionResponse:
    partition = services.replica_manager.get_partition(topic, index)
    if partition is None:
        info = services.metadata.topic(topic)
        error = ErrorCode.NOT_LEADER_OR_FOLLOWER if info is not None and 0 <= index < info.num_partitions \
            else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return R.PartitionResponse(partition_index=index, error_code=error, error_message=None, active_producers=[])
    producers = [R.ProducerState(producer_id=e.producer_id, producer_epoch=e.producer_epoch,
                                 last_sequence=e.last_seq, last_timestamp=e.last_timestamp,
                                 coordinator_epoch=e.coordinator_epoch,
                                 current_txn_start_offset=e.current_txn_first_offset)
                 for e in sorted(partition.log.producer_state.producers.values(), key=lambda e: e.producer_id)]
    return R.PartitionResponse(partition_index=index, error_code=ErrorCode.NONE, error_message=None,
                               active_producers=producers)


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
           request: DescribeProducersRequest) -> Any:
    topics = []
    for t in request.topics:
        if services.authorizer is not None and not authorize(services, ctx, READ, TOPIC, t.name):
            # KafkaApis.handleDescribeProducersRequest: READ on each topic, else TOPIC_AUTHORIZATION_FAILED
            # (with its default message) on each partition asked for.
            error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            topics.append(R.TopicResponse(name=t.name, partitions=[
                R.PartitionResponse(partition_index=p, error_code=error, error_message=error.message,
                                    active_producers=[]) for p in t.partition_indexes]))
            continue
        topics.append(R.TopicResponse(name=t.name, partitions=[
            _partition(services, t.name, p) for p in t.partition_indexes]))
    return R(throttle_time_ms=0, topics=topics)

