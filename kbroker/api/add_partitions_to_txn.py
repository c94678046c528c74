"""AddPartitionsToTxn (key 24): partitions join the producer's transaction.

Versions 0-5. v0-3 are the client's (one transaction, `v3_and_below_*` fields, results by topic);
v4+ batch transactions and carry `verify_only` (KIP-890 part 1: a partition leader asks the coordinator
whether a partition is already in the transaction before it appends a transactional batch; a leader
whose coordinator is in-process asks it directly, the others send this request to the coordinator's
broker (`kbroker/coord/transaction_verifier.py`): a partition not in the transaction is
INVALID_TXN_STATE). v5 with `verify_only=false` is a partition leader (or group coordinator) adding the
partition of a transactions-version-2 producer (KIP-890 part 2). Unknown topics or partitions get
UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED, as Kafka.
"""

from __future__ import annotations

from typing import Any

from kbroker.api._authz import authorize, check_cluster, filter_authorized
from kbroker.api._groups import gather, then
from kbroker.api._txn import fenced_for
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.add_partitions_to_txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
)
from kbroker.protocol.topic import is_internal
from kbroker.security.acl import CLUSTER_ACTION, TOPIC, TRANSACTIONAL_ID, WRITE

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


def _one(services: BrokerServices, ctx: RequestContext, api_version: int, transactional_id: str, producer_id: int,
         epoch: int, topics: Topics, verify_only: bool) -> Any:
    """The per-partition errors of one transaction: {(topic, partition): error} (or a future of it).

    Versions 0-3 come from producers (KafkaApis.handleAddPartitionsToTxnRequest): WRITE on the
    transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition), then WRITE on
    each topic; internal topics are never authorized there (TOPIC_AUTHORIZATION_FAILED, with or
    without an authorizer). Any unauthorized or unknown partition fails the transaction's request:
    the others get OPERATION_NOT_ATTEMPTED. v4+ (brokers) were checked as a whole by the caller."""
    requested = {(t.name, p) for t in topics for p in t.partitions}
    if api_version < 4:
        if not authorize(services, ctx, WRITE, TRANSACTIONAL_ID, transactional_id):
            return {tp: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for tp in requested}
        allowed = filter_authorized(services, ctx, WRITE, TOPIC, (t.name for t in topics if not is_internal(t.name)))
    else:
        allowed = {t.name for t in topics}
    failed: dict[tuple[str, int], ErrorCode] = {}
    for t in topics:
        info = services.metadata.topic(t.name)
        for p in t.partitions:
            if t.name not in allowed:
                failed[(t.name, p)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif info is None or not 0 <= p < info.num_partitions:
                failed[(t.name, p)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if failed:
        return {tp: failed.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in requested}
    # v5 without `verify_only` is a partition leader adding the partition of a transactions-version-2
    # producer (KIP-890 part 2): the transaction records the client's transaction version.
    client_version = 2 if api_version >= 5 and not verify_only else 0
    answer = services.transaction_coordinator.add_partitions(transactional_id, producer_id, epoch, requested,
                                                             verify_only, client_version)
    return then(answer, lambda error: {tp: fenced_for("AddPartitionsToTxn", api_version, error) for tp in requested})


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
           request: AddPartitionsToTxnRequest) -> Any:
    version = header.api_version
    if version < 4:
        topics = request.v3_and_below_topics or []
        answer = _one(services, ctx, version, request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                      request.v3_and_below_producer_epoch, topics, False)
        return then(answer, lambda errors: R(throttle_time_ms=0,
                                             results_by_topic_v3_and_below=_topic_results(topics, errors)))
    # v4+ come from brokers only: CLUSTER_ACTION on the cluster (KafkaApis), else the whole request fails.
    check_cluster(services, ctx, CLUSTER_ACTION)
    txns = request.transactions or []
    answers = [_one(services, ctx, version, t.transactional_id, t.producer_id, t.producer_epoch, t.topics, t.verify_only)
               for t in txns]
    return then(gather(answers), lambda all_errors: R(throttle_time_ms=0, error_code=ErrorCode.NONE, results_by_transaction=[
        R.AddPartitionsToTxnResult(transactional_id=t.transactional_id, topic_results=_topic_results(t.topics, errors))
        for t, errors in zip(txns, all_errors, strict=True)]))
