"""DescribeTransactions (key 65): state, producer, timeout and partitions of transactional ids
(kafka-transactions describe).

Version 0. An id this broker does not coordinate is NOT_COORDINATOR, one still loading
COORDINATOR_LOAD_IN_PROGRESS, an unknown one TRANSACTIONAL_ID_NOT_FOUND, as Kafka's
TransactionCoordinator.handleDescribeTransactions.
"""

from __future__ import annotations

from typing import Any

from kbroker.api._authz import authorize
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.coord.transaction_state import TransactionState
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.describe_transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
)
from kbroker.security.acl import DESCRIBE, TOPIC, TRANSACTIONAL_ID

API_KEY = 65
MIN_VERSION = 0
MAX_VERSION = 0

R = DescribeTransactionsResponse


def _error(tid: str, error: ErrorCode) -> R.TransactionState:
    return R.TransactionState(error_code=error, transactional_id=tid, transaction_state="", transaction_timeout_ms=0,
                              transaction_start_time_ms=-1, producer_id=-1, producer_epoch=-1, topics=[])


def error_response(request: DescribeTransactionsRequest, version: int, error: ErrorCode) -> DescribeTransactionsResponse:
    return R(throttle_time_ms=0, transaction_states=[_error(t, error) for t in request.transactional_ids])


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
           request: DescribeTransactionsRequest) -> Any:
    coordinator = services.transaction_coordinator
    out = []
    check = services.authorizer is not None
    for tid in request.transactional_ids:
        if check and not authorize(services, ctx, DESCRIBE, TRANSACTIONAL_ID, tid):
            # KafkaApis.handleDescribeTransactionsRequest: DESCRIBE on each transactional id.
            out.append(_error(tid, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
            continue
        status = coordinator.runtime.status(coordinator.partition_for(tid)) if coordinator.runtime is not None \
            else ErrorCode.NOT_COORDINATOR
        if coordinator.state_topic_status() != ErrorCode.NONE:
            status = ErrorCode.NOT_COORDINATOR
        if status != ErrorCode.NONE:
            out.append(_error(tid, status))
            continue
        m = coordinator.describe(tid)
        if m is None:
            out.append(_error(tid, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND))
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, p in sorted(m.partitions):
            by_topic.setdefault(topic, []).append(p)
        out.append(R.TransactionState(
            error_code=ErrorCode.NONE, transactional_id=tid, transaction_state=m.state.kafka_name,
            transaction_timeout_ms=m.txn_timeout_ms,
            transaction_start_time_ms=m.txn_start_timestamp_ms if m.state == TransactionState.ONGOING else -1,
            producer_id=m.producer_id, producer_epoch=m.producer_epoch,
            # Only the partitions of topics the principal may DESCRIBE (KafkaApis).
            topics=[R.TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()
                    if not check or authorize(services, ctx, DESCRIBE, TOPIC, t)]))
    return R(throttle_time_ms=0, transaction_states=out)
