"""AlterPartitionReassignments (API key 45, v0-1; served on the controller listener): move replicas.

Kafka's `ControllerApis.handleAlterPartitionReassignments` (KIP-455, KIP-860's
`AllowReplicationFactorChange` in v1): per partition, start a reassignment (replicas given) or cancel
one (replicas null), with Kafka's errors (UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT,
INVALID_REPLICATION_FACTOR, NO_REASSIGNMENT_IN_PROGRESS). Kafka also accepts it on broker listeners
and forwards it; a process.roles=broker kbroker forwards it to the active controller as they do (issue 12).
"""

from __future__ import annotations

from kbroker.api._authz import check_cluster
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.alter_partition_reassignments import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
)
from kbroker.security.acl import ALTER

API_KEY = 45
MIN_VERSION = 0
MAX_VERSION = 1
LISTENERS = ("broker", "controller")
# A broker listener serves it only on a process.roles=broker node, which forwards it to the active
# controller (Kafka's ForwardingManager); a single node's broker listener leaves it out.
KRAFT_BROKER_FORWARDS = True


async def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
                 request: AlterPartitionReassignmentsRequest) -> AlterPartitionReassignmentsResponse:
    check_cluster(services, ctx, ALTER)  # Kafka's ControllerApis: ALTER on the cluster
    if services.kraft is not None:
        return await services.kraft.channel.send(API_KEY, request, AlterPartitionReassignmentsResponse)
    return await services.controller.alter_partition_reassignments(request)


def error_response(request: AlterPartitionReassignmentsRequest, version: int,
                   error: ErrorCode) -> AlterPartitionReassignmentsResponse:
    return AlterPartitionReassignmentsResponse(throttle_time_ms=0, error_code=int(error), error_message=None,
                                               responses=[])
