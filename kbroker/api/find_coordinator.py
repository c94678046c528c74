"""FindCoordinator (key 10): which broker coordinates a group (and, later, a transactional id).

Versions 0-4 (v4 batches keys, KIP-699; v5 adds TRANSACTION_ABORTABLE, v6 share groups). A GROUP key
maps to partition `abs(hashCode(group)) % partitions` of `__consumer_offsets`, created here on first
use as Kafka does; this node leads every partition, so it is always the answer. A TRANSACTION key gets
COORDINATOR_NOT_AVAILABLE until a transaction coordinator is registered in
`services.extras["transaction_coordinator"]`. librdkafka only enables LZ4 when this API is advertised.
"""

from __future__ import annotations

from typing import Any

from kbroker.api._groups import runtime
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse

API_KEY = 10
MIN_VERSION = 0
MAX_VERSION = 4
VERSION_NOTES = "GROUP keys (creates __consumer_offsets on first use); TRANSACTION keys answer COORDINATOR_NOT_AVAILABLE until transactions exist. v5-6 not advertised."

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1


def _message(error: ErrorCode) -> str | None:
    return None if error == ErrorCode.NONE else error.message


def error_response(request: FindCoordinatorRequest, version: int, error: ErrorCode) -> FindCoordinatorResponse:
    if version >= 4:
        return FindCoordinatorResponse(coordinators=[
            FindCoordinatorResponse.Coordinator(key=k, node_id=-1, host="", port=-1, error_code=error,
                                                error_message=_message(error))
            for k in request.coordinator_keys
        ])
    return FindCoordinatorResponse(error_code=error, error_message=_message(error), node_id=-1, host="", port=-1)


def _lookup(services: BrokerServices, ctx: RequestContext, key_type: int) -> tuple[ErrorCode, int, str, int]:
    if key_type == GROUP_KEY_TYPE:
        error = runtime(services).ensure_topic()
    elif key_type == TRANSACTION_KEY_TYPE:
        txn = services.extras.get("transaction_coordinator")
        ensure = getattr(txn, "ensure_topic", None)
        if txn is None:
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        else:
            error = ensure() if callable(ensure) else ErrorCode.NONE
    else:
        error = ErrorCode.INVALID_REQUEST
    if error != ErrorCode.NONE:
        return error, -1, "", -1
    endpoints = list(services.config.advertised_listeners)
    chosen = [e for e in endpoints if e.name == ctx.listener_name] or endpoints[:1]
    if not chosen:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
    return ErrorCode.NONE, services.node_id, chosen[0].host, chosen[0].port


def handle(services: BrokerServices, ctx: RequestContext, header: Any,
           request: FindCoordinatorRequest) -> FindCoordinatorResponse:
    version = header.api_version
    if version >= 4:
        coordinators = []
        for key in request.coordinator_keys:
            error, node, host, port = _lookup(services, ctx, request.key_type)
            coordinators.append(FindCoordinatorResponse.Coordinator(
                key=key, node_id=node, host=host, port=port, error_code=error, error_message=_message(error)))
        return FindCoordinatorResponse(coordinators=coordinators)
    key_type = request.key_type if version >= 1 else GROUP_KEY_TYPE
    error, node, host, port = _lookup(services, ctx, key_type)
    return FindCoordinatorResponse(error_code=error, error_message=_message(error), node_id=node, host=host,
                                   port=port)
