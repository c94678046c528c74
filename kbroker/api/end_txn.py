"""EndTxn (key 26): commit or abort the producer's transaction.

Versions 0-5. The coordinator writes PrepareCommit/PrepareAbort, the COMMIT/ABORT markers to every
partition of the transaction, then CompleteCommit/CompleteAbort, and answers once all of it is
written (Kafka answers after PrepareX and sends the markers asynchronously; on a single node the
markers are local appends, so the client's next transaction never meets CONCURRENT_TRANSACTIONS).

v5 is transactions version 2 (KIP-890 part 2; a client sends it only when `transaction.version` 2 is
finalized): every end of a transaction bumps the producer epoch (the markers carry the bumped epoch)
and the response returns the producer id and epoch the client goes on with (a new producer id at
epoch 0 when the bump exhausted the epochs); a retry (the epoch one below the current one) of an
EndTxn that completed is answered NONE with the current id and epoch
(`TransactionStateShard.end_transaction_v2`). v0-4 keep the epoch.
"""

from __future__ import annotations

from typing import Any

from kbroker.api._authz import authorize
from kbroker.api._groups import then
from kbroker.api._txn import fenced_for
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.end_txn import EndTxnRequest, EndTxnResponse
from kbroker.security.acl import TRANSACTIONAL_ID, WRITE

API_KEY = 26
MIN_VERSION = 0
MAX_VERSION = 5
# The first version of transactions version 2 (Kafka's TransactionVersion.transactionVersionForEndTxn).
TRANSACTION_V2_VERSION = 5


def error_response(request: EndTxnRequest, version: int, error: ErrorCode) -> EndTxnResponse:
    return EndTxnResponse(throttle_time_ms=0, error_code=error, producer_id=-1, producer_epoch=-1)


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader, request: EndTxnRequest) -> Any:
    version = header.api_version
    if services.authorizer is not None and not authorize(services, ctx, WRITE, TRANSACTIONAL_ID,
                                                         request.transactional_id):
        # KafkaApis.handleEndTxnRequest: WRITE on the transactional id.
        return error_response(request, version, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if version >= TRANSACTION_V2_VERSION:
        return _end_v2(services, request, version)
    answer = services.transaction_coordinator.end_transaction(request.transactional_id, request.producer_id,
                                                              request.producer_epoch, request.committed)

    def respond(error: ErrorCode) -> EndTxnResponse:
        error = fenced_for("EndTxn", version, error)
        if error != ErrorCode.NONE:
            return error_response(request, version, error)
        return EndTxnResponse(throttle_time_ms=0, error_code=error, producer_id=request.producer_id,
                              producer_epoch=request.producer_epoch)

    return then(answer, respond)


async def _end_v2(services: BrokerServices, request: EndTxnRequest, version: int) -> EndTxnResponse:
    result = await services.transaction_coordinator.end_transaction_v2(
        request.transactional_id, request.producer_id, request.producer_epoch, request.committed)
    if result.error != ErrorCode.NONE:
        return error_response(request, version, result.error)
    return EndTxnResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, producer_id=result.producer_id,
                          producer_epoch=result.producer_epoch)
