"""BrokerHeartbeat (API key 63, v0-2; controller listener): a broker's session with the controller.

Kafka's `ControllerApis.handleBrokerHeartbeatRequest`: keeps the broker's session alive, and answers
whether it has caught up with the metadata log, is fenced, and may shut down (after a controlled
shutdown, `want_shut_down`). State changes it causes (unfencing, controlled shutdown, fencing) are
committed before the answer (controller/broker_heartbeat_manager.py). An error leaves the broker
fenced in the answer (the response's defaults), as in Kafka.
"""

from __future__ import annotations

from kbroker.api._authz import check_cluster
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.broker_heartbeat import BrokerHeartbeatRequest, BrokerHeartbeatResponse
from kbroker.security.acl import CLUSTER_ACTION

API_KEY = 63
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
                 request: BrokerHeartbeatRequest) -> BrokerHeartbeatResponse:
    check_cluster(services, ctx, CLUSTER_ACTION)  # Kafka's ControllerApis: CLUSTER_ACTION on the cluster
    reply = await services.controller.process_broker_heartbeat(request)
    return BrokerHeartbeatResponse(throttle_time_ms=0, error_code=0, is_caught_up=reply.is_caught_up,
                                   is_fenced=reply.is_fenced, should_shut_down=reply.should_shut_down)


def error_response(request: BrokerHeartbeatRequest, version: int, error: ErrorCode) -> BrokerHeartbeatResponse:
    return BrokerHeartbeatResponse(throttle_time_ms=0, error_code=int(error))
