"""AddOffsetsToTxn (key 25): the group's `__consumer_offsets` partition joins the transaction, so that
its TxnOffsetCommit offsets become visible with the transaction's COMMIT marker.

Versions 0-4 (v3 flexible; v4 is transactions version 2's, with the same schema).
"""

from __future__ import annotations

from typing import Any

from kbroker.api._authz import authorize
from kbroker.api._groups import then
from kbroker.api._txn import fenced_for
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.add_offsets_to_txn import AddOffsetsToTxnRequest, AddOffsetsToTxnResponse
from kbroker.security.acl import GROUP, READ, TRANSACTIONAL_ID, WRITE

API_KEY = 25
MIN_VERSION = 0
MAX_VERSION = 4


def error_response(request: AddOffsetsToTxnRequest, version: int, error: ErrorCode) -> AddOffsetsToTxnResponse:
    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=error)


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
           request: AddOffsetsToTxnRequest) -> Any:
    version = header.api_version
    if services.authorizer is not None:
        # KafkaApis.handleAddOffsetsToTxnRequest: WRITE on the transactional id, then READ on the group.
        if not authorize(services, ctx, WRITE, TRANSACTIONAL_ID, request.transactional_id):
            return error_response(request, version, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if not authorize(services, ctx, READ, GROUP, request.group_id):
            return error_response(request, version, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    answer = services.transaction_coordinator.add_offsets(request.transactional_id, request.producer_id,
                                                          request.producer_epoch, request.group_id)
    return then(answer, lambda error: error_response(request, version, fenced_for("AddOffsetsToTxn", version, error)))
