"""InitProducerId (key 22): producer ids for idempotent and transactional producers.

Versions 0-5 (v6 adds two-phase commit, KIP-939). Without a transactional id Kafka's transaction
coordinator "blindly accepts" the request: a fresh producer id with epoch 0, whatever id/epoch a
v3+ client sent back (TransactionCoordinator.handleInitProducerId). Ids come from blocks
the controller hands out as `ProducerIdsRecord`s (`ProducerIdManager`), so no id is reused after a restart.

With a transactional id the transaction coordinator (`TransactionCoordinatorService`) answers: a new
id gets a producer id and epoch 0; a known one its epoch bumped, fencing the older incarnation (an
open transaction of it is aborted first). `transaction.timeout.ms` above `transaction.max.timeout.ms`
(or not positive) is INVALID_TRANSACTION_TIMEOUT; a v3+ client re-initialising with an id/epoch that
is no longer current is PRODUCER_FENCED (INVALID_PRODUCER_EPOCH below v4).
"""

from __future__ import annotations

from typing import Any

from kbroker.api._authz import authorize, authorize_by_resource_type, authorize_cluster
from kbroker.api._txn import fenced_for
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from kbroker.security.acl import IDEMPOTENT_WRITE, TOPIC, TRANSACTIONAL_ID, WRITE

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 5
VERSION_NOTES = "Idempotent and transactional producers (transactions versions 1 and 2). v6 adds two-phase commit (KIP-939)."


def error_response(request: InitProducerIdRequest, version: int, error: ErrorCode) -> InitProducerIdResponse:
    return InitProducerIdResponse(throttle_time_ms=0, error_code=error, producer_id=-1, producer_epoch=-1)


def handle(
    services: BrokerServices, ctx: RequestContext, header: RequestHeader, request: InitProducerIdRequest
) -> Any:
    if services.authorizer is not None:
        # KafkaApis.handleInitProducerIdRequest: WRITE on the transactional id; without one (an
        # idempotent producer) IDEMPOTENT_WRITE on the cluster or WRITE on any topic (KIP-679).
        tid = request.transactional_id
        if tid is not None:
            if not authorize(services, ctx, WRITE, TRANSACTIONAL_ID, tid):
                return error_response(request, header.api_version, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        elif not authorize_cluster(services, ctx, IDEMPOTENT_WRITE) \
                and not authorize_by_resource_type(services, ctx, WRITE, TOPIC):
            return error_response(request, header.api_version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if header.api_version >= 3 and (request.producer_id == -1) != (request.producer_epoch == -1):
        # KafkaApis: a producer id without an epoch (or the reverse) is malformed.
        return error_response(request, header.api_version, ErrorCode.INVALID_REQUEST)
    if request.transactional_id is not None:
        return _transactional(services, request, header.api_version)
    return _fresh_producer_id(services)


async def _fresh_producer_id(services: BrokerServices) -> InitProducerIdResponse:
    producer_id = await services.producer_id_manager.generate_producer_id()
    return InitProducerIdResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, producer_id=producer_id, producer_epoch=0)


async def _transactional(services: BrokerServices, request: InitProducerIdRequest,
                         version: int) -> InitProducerIdResponse:
    assert request.transactional_id is not None
    if request.transactional_id == "":
        return error_response(request, version, ErrorCode.INVALID_REQUEST)
    pid, epoch = (request.producer_id, request.producer_epoch) if version >= 3 else (-1, -1)
    result = await services.transaction_coordinator.init_producer_id(
        request.transactional_id, request.transaction_timeout_ms, pid, epoch)
    return InitProducerIdResponse(throttle_time_ms=0, error_code=fenced_for("InitProducerId", version, result.error),
                                  producer_id=result.producer_id, producer_epoch=result.producer_epoch)
