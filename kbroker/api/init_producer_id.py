"""InitProducerId (key 22): producer ids for idempotent producers.

Versions 0-5 (v6 adds two-phase commit, KIP-939). Without a transactional id Kafka's transaction
coordinator "blindly accepts" the request: a fresh producer id with epoch 0, whatever id/epoch a
v3+ client sent back (TransactionCoordinator.handleInitProducerId). Ids come from blocks
the controller hands out as `ProducerIdsRecord`s (`ProducerIdManager`), so no id is reused after a restart.

A transactional id needs the transaction coordinator, which does not exist yet (the transactions
issue adds it as a typed field of `BrokerServices`); until then the answer is
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, which every client treats as fatal
(a retriable code such as COORDINATOR_NOT_AVAILABLE would make producers spin until
max.block.ms). Documented in docs/compatibility.md.
"""

from __future__ import annotations

from typing import Any

from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.init_producer_id import InitProducerIdRequest, InitProducerIdResponse

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 5
VERSION_NOTES = (
    "Idempotent producers only; a transactional id is refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED "
    "until the transaction coordinator exists. v6 adds two-phase commit (KIP-939)."
)


def error_response(request: InitProducerIdRequest, version: int, error: ErrorCode) -> InitProducerIdResponse:
    return InitProducerIdResponse(throttle_time_ms=0, error_code=error, producer_id=-1, producer_epoch=-1)


def handle(
    services: BrokerServices, ctx: RequestContext, header: RequestHeader, request: InitProducerIdRequest
) -> Any:
    if request.transactional_id is not None:
        return error_response(request, header.api_version, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if header.api_version >= 3 and (request.producer_id == -1) != (request.producer_epoch == -1):
        # KafkaApis: a producer id without an epoch (or the reverse) is malformed.
        return error_response(request, header.api_version, ErrorCode.INVALID_REQUEST)
    return _fresh_producer_id(services)


async def _fresh_producer_id(services: BrokerServices) -> InitProducerIdResponse:
    producer_id = await services.producer_id_manager.generate_producer_id()
    return InitProducerIdResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, producer_id=producer_id, producer_epoch=0)
