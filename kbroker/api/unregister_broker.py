"""UnregisterBroker (API key 64, v0; served on the controller listener): remove a broker's registration.

Kafka's `ControllerApis.handleUnregisterBroker` (KIP-500): the controller removes the broker from
every ISR (electing new leaders) and writes `UnregisterBrokerRecord`; BROKER_ID_NOT_REGISTERED for an
unknown id. Kafka also accepts it on broker listeners and forwards it to the controller; kbroker's
broker does not forward yet (issue 12), so the broker listener leaves it out (`LISTENERS`), and a
single node keeps advertising exactly what it did.
"""

from __future__ import annotations

from kbroker.api._authz import check_cluster
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode, error_fields
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.unregister_broker import UnregisterBrokerRequest, UnregisterBrokerResponse
from kbroker.security.acl import ALTER

API_KEY = 64
MIN_VERSION = 0
MAX_VERSION = 0
LISTENERS = ("controller",)


async def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
                 request: UnregisterBrokerRequest) -> UnregisterBrokerResponse:
    check_cluster(services, ctx, ALTER)  # Kafka's ControllerApis: ALTER on the cluster
    try:
        await services.controller.unregister_broker(request.broker_id)
    except Exception as e:  # noqa: BLE001 - the error goes back with its message
        code, message = error_fields(e)
        return UnregisterBrokerResponse(throttle_time_ms=0, error_code=code, error_message=message)
    return UnregisterBrokerResponse(throttle_time_ms=0, error_code=0, error_message=None)


def error_response(request: UnregisterBrokerRequest, version: int, error: ErrorCode) -> UnregisterBrokerResponse:
    return UnregisterBrokerResponse(throttle_time_ms=0, error_code=int(error), error_message=None)
