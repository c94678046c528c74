"""AlterPartition (API key 56, v2-3 as Kafka 4.3; controller listener): a leader changes its ISR.

Kafka's `ControllerApis.handleAlterPartitionRequest`: the controller validates each partition (epochs,
leadership, eligible replicas) and answers per partition with the committed leader epoch, partition
epoch and ISR, or Kafka's error (FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, INELIGIBLE_REPLICA,
UNKNOWN_TOPIC_ID, ...); a stale broker epoch fails the whole request (STALE_BROKER_EPOCH). See
controller/replication_control.py, `alter_partition`.
"""

from __future__ import annotations

from kbroker.api._authz import check_cluster
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.alter_partition import AlterPartitionRequest, AlterPartitionResponse
from kbroker.security.acl import CLUSTER_ACTION

API_KEY = 56
MIN_VERSION = 2
MAX_VERSION = 3


async def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
                 request: AlterPartitionRequest) -> AlterPartitionResponse:
    check_cluster(services, ctx, CLUSTER_ACTION)  # Kafka's ControllerApis: CLUSTER_ACTION on the cluster
    return await services.controller.alter_partition(request, header.api_version)


def error_response(request: AlterPartitionRequest, version: int, error: ErrorCode) -> AlterPartitionResponse:
    return AlterPartitionResponse(throttle_time_ms=0, error_code=int(error), topics=[])
