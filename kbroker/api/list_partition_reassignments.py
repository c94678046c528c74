"""ListPartitionReassignments (API key 46, v0; served on the controller listener): ongoing reassignments.

Kafka's `ControllerApis.handleListPartitionReassignments`: the committed state's partitions with
adding or removing replicas, for the topics named (unknown ones are skipped) or all of them. Kafka
also accepts it on broker listeners and forwards it; a process.roles=broker kbroker forwards it to the active controller as they do (issue 12).
"""

from __future__ import annotations

from kbroker.api._authz import check_cluster
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.list_partition_reassignments import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from kbroker.security.acl import DESCRIBE

API_KEY = 46
MIN_VERSION = 0
MAX_VERSION = 0
LISTENERS = ("broker", "controller")
# A broker listener serves it only on a process.roles=broker node, which forwards it to the active
# controller (Kafka's ForwardingManager); a single node's broker listener leaves it out.
KRAFT_BROKER_FORWARDS = True


async def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
                 request: ListPartitionReassignmentsRequest) -> ListPartitionReassignmentsResponse:
    check_cluster(services, ctx, DESCRIBE)  # Kafka's ControllerApis: DESCRIBE on the cluster
    if services.kraft is not None:
        return await services.kraft.channel.send(API_KEY, request, ListPartitionReassignmentsResponse)
    return await services.controller.list_partition_reassignments(request)


def error_response(request: ListPartitionReassignmentsRequest, version: int,
                   error: ErrorCode) -> ListPartitionReassignmentsResponse:
    return ListPartitionReassignmentsResponse(throttle_time_ms=0, error_code=int(error), error_message=None,
                                              topics=[])
