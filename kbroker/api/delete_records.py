"""DeleteRecords (API key 21, v0-2): move a partition's log start offset forward (KIP-107).

Offset -1 means "up to the high watermark". An offset beyond the high watermark (or otherwise
negative) is OFFSET_OUT_OF_RANGE; a topic whose cleanup.policy lacks `delete` is POLICY_VIOLATION, as in
Kafka's `Partition.deleteRecordsOnLeader`. The answer is the new low watermark (log start offset);
on one replica it is final at once, so nothing waits in a purgatory.
"""

from __future__ import annotations

from typing import Any

from kbroker.api._authz import check_topic
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode, KafkaError, error_fields
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.delete_records import DeleteRecordsRequest, DeleteRecordsResponse
from kbroker.security.acl import DELETE

API_KEY = 21
MIN_VERSION = 0
MAX_VERSION = 2

HIGH_WATERMARK = -1

TopicResult = DeleteRecordsResponse.DeleteRecordsTopicResult
PartitionResult = DeleteRecordsResponse.DeleteRecordsPartitionResult


def _delete(services: BrokerServices, topic: str, index: int, offset: int) -> int:
    partition = services.replica_manager.get_partition(topic, index)
    if partition is None:
        offline = (topic, index) in services.replica_manager.offline  # its log dir failed
        follower = services.replica_manager.follower_partition(topic, index) is not None  # only the leader deletes
        raise KafkaError(error_code=ErrorCode.KAFKA_STORAGE_ERROR if offline else ErrorCode.NOT_LEADER_OR_FOLLOWER
                         if follower else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    if partition.is_offline:
        raise KafkaError(error_code=ErrorCode.KAFKA_STORAGE_ERROR)
    log = partition.log
    hw = partition.high_watermark
    target = hw if offset == HIGH_WATERMARK else offset
    if target < 0:
        raise KafkaError(f"The offset {target} for partition {topic}-{index} is not valid",
                         error_code=ErrorCode.OFFSET_OUT_OF_RANGE)
    if not log.config.delete:
        raise KafkaError(f"Records of partition {topic}-{index} can not be deleted due to the configured policy",
                         error_code=ErrorCode.POLICY_VIOLATION)
    if target > hw:
        raise KafkaError(f"Cannot increment the log start offset to {target} of partition {topic}-{index} "
                         f"since it is larger than the high watermark {hw}", error_code=ErrorCode.OFFSET_OUT_OF_RANGE)
    log.delete_records_before(target)
    return int(partition.log_start_offset)


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
    topics = []
    for t in request.topics:
        results = []
        for p in t.partitions:
            try:
                check_topic(services, ctx, DELETE, t.name)  # KafkaApis: DELETE on the topic
                low = _delete(services, t.name, p.partition_index, p.offset)
            except Exception as e:  # noqa: BLE001 - every failure becomes this partition's error
                results.append(PartitionResult(partition_index=p.partition_index, low_watermark=-1,
                                               error_code=error_fields(e)[0]))
            else:
                results.append(PartitionResult(partition_index=p.partition_index, low_watermark=low, error_code=0))
        topics.append(TopicResult(name=t.name, partitions=results))
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)


def error_response(request: DeleteRecordsRequest, version: int, error: Any) -> DeleteRecordsResponse:
    return DeleteRecordsResponse(throttle_time_ms=0, topics=[
        TopicResult(name=t.name, partitions=[
            PartitionResult(partition_index=p.partition_index, low_watermark=-1, error_code=int(error))
            for p in t.partitions
        ])
        for t in request.topics
    ])
