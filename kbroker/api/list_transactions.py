"""ListTransactions (key 66): the transactional ids this broker coordinates (kafka-transactions list).

Versions 0-2 (v1 adds the duration filter, KIP-994: transactions running longer than it; v2 the
transactional id pattern, a regular expression matched against the whole id). State filters use
Kafka's state names; unknown names are echoed in `unknown_state_filters`. While a
`__transaction_state` partition loads the answer is COORDINATOR_LOAD_IN_PROGRESS.
"""

from __future__ import annotations

import re
from typing import Any

from kbroker.api._authz import authorize
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.coord.transaction_state import TransactionState
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.list_transactions import ListTransactionsRequest, ListTransactionsResponse
from kbroker.security.acl import DESCRIBE, TRANSACTIONAL_ID

API_KEY = 66
MIN_VERSION = 0
MAX_VERSION = 2

_NAMES = {s.kafka_name for s in TransactionState}


def error_response(request: ListTransactionsRequest, version: int, error: ErrorCode) -> ListTransactionsResponse:
    return ListTransactionsResponse(throttle_time_ms=0, error_code=error, unknown_state_filters=[],
                                    transaction_states=[])


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
           request: ListTransactionsRequest) -> Any:
    version = header.api_version
    coordinator = services.transaction_coordinator
    if coordinator.runtime is not None and any(
            coordinator.runtime.status(p) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            for p in coordinator.runtime.partitions()):
        return error_response(request, version, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    states = set(request.state_filters or [])
    unknown = sorted(states - _NAMES)
    pids = set(request.producer_id_filters or [])
    duration = request.duration_filter if version >= 1 else -1
    pattern = None
    if version >= 2 and request.transactional_id_pattern:
        try:
            pattern = re.compile(request.transactional_id_pattern)
        except re.error:
            return error_response(request, version, ErrorCode.INVALID_REGULAR_EXPRESSION)
    now = services.time_ms()
    out = []
    for m in sorted(coordinator.all_transactions(), key=lambda t: t.transactional_id):
        if states and m.state.kafka_name not in states:
            continue
        if pids and m.producer_id not in pids:
            continue
        if duration >= 0 and (m.state != TransactionState.ONGOING or now - m.txn_start_timestamp_ms < duration):
            continue
        if pattern is not None and not pattern.fullmatch(m.transactional_id):
            continue
        if services.authorizer is not None and not authorize(services, ctx, DESCRIBE, TRANSACTIONAL_ID,
                                                             m.transactional_id):
            continue  # KafkaApis: only the transactional ids the principal may DESCRIBE

        out.append(ListTransactionsResponse.TransactionState(
            transactional_id=m.transactional_id, producer_id=m.producer_id, transaction_state=m.state.kafka_name))
    return ListTransactionsResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, unknown_state_filters=unknown,
                                    transaction_states=out)
