"""ElectLeaders (API key 43, v0-2; served on the controller listener): preferred or unclean election.

Kafka's `ControllerApis.handleElectLeaders` (KIP-183, KIP-460): per partition, ELECTION_NOT_NEEDED
when the wanted leader already leads, PREFERRED_LEADER_NOT_AVAILABLE / ELIGIBLE_LEADERS_NOT_AVAILABLE
when no replica qualifies, UNKNOWN_TOPIC_OR_PARTITION; a null partition list elects for every
partition and leaves the not-needed ones out (controller/replication_control.py, `elect_leaders`).
Kafka also accepts it on broker listeners and forwards it to the controller; a process.roles=broker
kbroker does the same (`KRAFT_BROKER_FORWARDS`, issue 12), while a single node's broker listener
leaves it out and advertises exactly what it did.
"""

from __future__ import annotations

from kbroker.api._authz import check_cluster
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.elect_leaders import ElectLeadersRequest, ElectLeadersResponse
from kbroker.security.acl import ALTER

API_KEY = 43
MIN_VERSION = 0
MAX_VERSION = 2
LISTENERS = ("broker", "controller")
# A broker listener serves it only on a process.roles=broker node, which forwards it to the active
# controller (Kafka's ForwardingManager); a single node's broker listener leaves it out.
KRAFT_BROKER_FORWARDS = True


async def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
                 request: ElectLeadersRequest) -> ElectLeadersResponse:
    check_cluster(services, ctx, ALTER)  # Kafka's ControllerApis: ALTER on the cluster
    if services.kraft is not None:
        return await services.kraft.channel.send(API_KEY, request, ElectLeadersResponse)
    return await services.controller.elect_leaders(request)


def error_response(request: ElectLeadersRequest, version: int, error: ErrorCode) -> ElectLeadersResponse:
    """Kafka's `ElectLeadersRequest.getErrorResponse`: the error on every partition asked for (and at
    the top level from v1)."""
    Result = ElectLeadersResponse.ReplicaElectionResult
    results = [Result(topic=t.topic, partition_result=[
        ElectLeadersResponse.PartitionResult(partition_id=p, error_code=int(error), error_message=None)
        for p in t.partitions]) for t in request.topic_partitions or []]
    return ElectLeadersResponse(throttle_time_ms=0, error_code=int(error) if version >= 1 else 0,
                                replica_election_results=results)
