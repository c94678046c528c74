"""BrokerRegistration (API key 62, v0-4; controller listener): a broker joins the KRaft cluster.

Kafka's `ControllerApis.handleBrokerRegistration`: the active controller checks the registration
(cluster id, incarnation, log directories, features against the finalized levels) and answers with
the broker epoch once the `RegisterBrokerRecord` has committed (controller/cluster_control.py). Errors
go back in `error_code` with broker epoch -1 (NOT_CONTROLLER on a standby: the broker finds the
active controller and retries).
"""

from __future__ import annotations

from kbroker.api._authz import check_cluster
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.broker_registration import (
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
)
from kbroker.security.acl import CLUSTER_ACTION

API_KEY = 62
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
                 request: BrokerRegistrationRequest) -> BrokerRegistrationResponse:
    check_cluster(services, ctx, CLUSTER_ACTION)  # Kafka's ControllerApis: CLUSTER_ACTION on the cluster
    reply = await services.controller.process_broker_registration(request)
    return BrokerRegistrationResponse(throttle_time_ms=0, error_code=0, broker_epoch=reply.epoch)


def error_response(request: BrokerRegistrationRequest, version: int, error: ErrorCode) -> BrokerRegistrationResponse:
    return BrokerRegistrationResponse(throttle_time_ms=0, error_code=int(error), broker_epoch=-1)
