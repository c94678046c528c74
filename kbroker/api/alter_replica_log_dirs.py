"""AlterReplicaLogDirs (API key 34, v1-2, KIP-113): move replicas between this broker's log directories.

Sent by `kafka-reassign-partitions` (a reassignment JSON with "log_dirs") and the Admin API's
`alterReplicaLogDirs`. Each partition gets its own error code; the move itself (a future log that
catches up, then swaps in) runs after the answer, as in Kafka: a client polls DescribeLogDirs
(`describeReplicaLogDirs`) until the future replica is gone. The work and the error mapping live in
`kbroker.replica.alter_log_dirs`; this module only flattens the request and groups the answer by
topic. v0 was removed in Kafka 4.0 (KIP-896). With an authorizer it needs ALTER on the cluster
(CLUSTER_AUTHORIZATION_FAILED on every partition otherwise), as Kafka.
"""

from __future__ import annotations

from kbroker.api._authz import check_cluster
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.alter_replica_log_dirs import (
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
)
from kbroker.security.acl import ALTER

API_KEY = 34
MIN_VERSION = 1
MAX_VERSION = 2

TopicResult = AlterReplicaLogDirsResponse.AlterReplicaLogDirTopicResult
PartitionResult = AlterReplicaLogDirsResponse.AlterReplicaLogDirPartitionResult


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
           request: AlterReplicaLogDirsRequest) -> AlterReplicaLogDirsResponse:
    check_cluster(services, ctx, ALTER)  # KafkaApis: ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED on every partition
    # Kafka's KafkaApis: one map partition -> path (a partition listed under two paths keeps the last).
    assignments: dict[tuple[str, int], str] = {}
    for d in request.dirs:
        for t in d.topics:
            for p in t.partitions:
                assignments[(t.name, p)] = d.path
    errors = services.replica_manager.alter_log_dirs.alter(assignments)
    by_topic: dict[str, list[PartitionResult]] = {}
    for (topic, partition), code in errors.items():
        by_topic.setdefault(topic, []).append(PartitionResult(partition_index=partition, error_code=int(code)))
    return AlterReplicaLogDirsResponse(
        throttle_time_ms=0,
        results=[TopicResult(topic_name=name, partitions=parts) for name, parts in by_topic.items()])


def error_response(request: AlterReplicaLogDirsRequest, version: int, error: ErrorCode) -> AlterReplicaLogDirsResponse:
    return AlterReplicaLogDirsResponse(throttle_time_ms=0, results=[
        TopicResult(topic_name=t.name, partitions=[PartitionResult(partition_index=p, error_code=int(error))
                                                   for p in t.partitions])
        for d in request.dirs for t in d.topics])
