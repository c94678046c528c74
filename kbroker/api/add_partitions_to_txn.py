"""AddPartitionsToTxn (key 24): partitions join the producer's transaction.

Versions 0-5. v0-3 are the client's (one transaction, `v3_and_below_*` fields, results by topic);
v4+ batch transactions and carry `verify_only` (KIP-890 part 1: a partition leader asks the coordinator
whether a partition is already in the transaction before it appends a transactional batch; a leader
whose coordinator is in-process asks it directly, the others send this request to the coordinator's
broker (`kbroker/coord/transaction_verifier.py`): a partition not in the transaction is
INVALID_TXN_STATE). Unknown topics or partitions get
UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED, as Kafka.
"""

from __future__ import annotations

from typing import Any

from kbroker.api._groups import gather, then
from kbroker.api._txn import fenced_for
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.add_partitions_to_txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
)

API_KEY = 24
MIN_VERSION = 0
MAX_VERSION = 5

R = AddPartitionsToTxnResponse
Topics = list[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic]


def _topic_results(topics: Topics, errors: dict[tuple[str, int], ErrorCode]) -> list[R.AddPartitionsToTxnTopicResult]:
    return [R.AddPartitionsToTxnTopicResult(name=t.name, results_by_partition=[
        R.AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=errors[(t.name, p)])
        for p in t.partitions]) for t in topics]


def error_response(request: AddPartitionsToTxnRequest, version: int, error: ErrorCode) -> AddPartitionsToTxnResponse:
    if version < 4:
        topics = request.v3_and_below_topics or []
        return R(throttle_time_ms=0, results_by_topic_v3_and_below=_topic_results(
            topics, {(t.name, p): error for t in topics for p in t.partitions}))
    return R(throttle_time_ms=0, error_code=error, results_by_transaction=[])


def _one(services: BrokerServices, api_version: int, transactional_id: str, producer_id: int, epoch: int,
         topics: Topics, verify_only: bool) -> Any:
    """The per-partition errors of one transaction: {(topic, partition): error} (or a future of it)."""
    requested = {(t.name, p) for t in topics for p in t.partitions}
    unknown = set()
    for t in topics:
        info = services.metadata.topic(t.name)
        for p in t.partitions:
            if info is None or not 0 <= p < info.num_partitions:
                unknown.add((t.name, p))
    if unknown:
        return {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED
                for tp in requested}
    answer = services.transaction_coordinator.add_partitions(transactional_id, producer_id, epoch, requested,
                                                             verify_only)
    return then(answer, lambda error: {tp: fenced_for("AddPartitionsToTxn", api_version, error) for tp in requested})


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
           request: AddPartitionsToTxnRequest) -> Any:
    version = header.api_version
    if version < 4:
        topics = request.v3_and_below_topics or []
        answer = _one(services, version, request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                      request.v3_and_below_producer_epoch, topics, False)
        return then(answer, lambda errors: R(throttle_time_ms=0,
                                             results_by_topic_v3_and_below=_topic_results(topics, errors)))
    txns = request.transactions or []
    answers = [_one(services, version, t.transactional_id, t.producer_id, t.producer_epoch, t.topics, t.verify_only)
               for t in txns]
    return then(gather(answers), lambda all_errors: R(throttle_time_ms=0, error_code=ErrorCode.NONE, results_by_transaction=[
        R.AddPartitionsToTxnResult(transactional_id=t.transactional_id, topic_results=_topic_results(t.topics, errors))
        for t, errors in zip(txns, all_errors, strict=True)]))
