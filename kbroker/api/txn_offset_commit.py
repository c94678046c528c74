"""TxnOffsetCommit (key 28): a transactional producer commits a group's offsets inside its transaction.

Versions 0-5 (v3 adds the group's generation / member / instance, checked like OffsetCommit's when
the generation is set). The group coordinator writes the offsets to `__consumer_offsets` in a
transactional batch of the producer and holds them as pending; the transaction's COMMIT marker on
that partition makes them the committed offsets, ABORT drops them (on load too) (`OffsetMetadataManager.txn_commit_offsets` / `complete_txn`). The producer
must be the transaction's current incarnation (checked with the transaction coordinator first:
PRODUCER_FENCED / INVALID_PRODUCER_EPOCH below v3).

v5 with `transaction.version` 2 finalized (KIP-890 part 2): the client skips AddOffsetsToTxn, and the
group's `__consumer_offsets` partition is added to the transaction here (in-process or with
AddPartitionsToTxn v5 to the transaction coordinator's broker) before the offsets are written.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from kbroker.api._authz import authorize, filter_authorized
from kbroker.api._groups import coordinator, then
from kbroker.api._txn import fenced_for
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.coord.offset_metadata_manager import CommitRequestPartition
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.txn_offset_commit import TxnOffsetCommitRequest, TxnOffsetCommitResponse
from kbroker.protocol.topic import GROUP_METADATA_TOPIC_NAME
from kbroker.security.acl import GROUP, READ, TOPIC, TRANSACTIONAL_ID, WRITE

API_KEY = 28
MIN_VERSION = 0
MAX_VERSION = 5
# v5 is a transactions-version-2 client's (KIP-890 part 2): no AddOffsetsToTxn precedes it.
TRANSACTION_V2_VERSION = 5

R = TxnOffsetCommitResponse


def _response(request: TxnOffsetCommitRequest, errors: dict[tuple[str, int], ErrorCode]) -> TxnOffsetCommitResponse:
    return R(throttle_time_ms=0, topics=[R.TxnOffsetCommitResponseTopic(name=t.name, partitions=[
        R.TxnOffsetCommitResponsePartition(partition_index=p.partition_index, error_code=errors[(t.name, p.partition_index)])
        for p in t.partitions]) for t in request.topics])


def error_response(request: TxnOffsetCommitRequest, version: int, error: ErrorCode) -> TxnOffsetCommitResponse:
    return _response(request, {(t.name, p.partition_index): error for t in request.topics for p in t.partitions})


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
           request: TxnOffsetCommitRequest) -> Any:
    version = header.api_version
    errors: dict[tuple[str, int], ErrorCode] = {}
    allowed: set[str] | None = None
    if services.authorizer is not None:
        # KafkaApis.handleTxnOffsetCommitRequest: WRITE on the transactional id, READ on the group,
        # then READ on each topic (TOPIC_AUTHORIZATION_FAILED on its partitions, existing or not).
        if not authorize(services, ctx, WRITE, TRANSACTIONAL_ID, request.transactional_id):
            return error_response(request, version, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if not authorize(services, ctx, READ, GROUP, request.group_id):
            return error_response(request, version, ErrorCode.GROUP_AUTHORIZATION_FAILED)
        allowed = filter_authorized(services, ctx, READ, TOPIC, (t.name for t in request.topics))
    valid: list[CommitRequestPartition] = []
    for t in request.topics:
        info = services.metadata.topic(t.name)
        for p in t.partitions:
            if allowed is not None and t.name not in allowed:
                errors[(t.name, p.partition_index)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            if info is None or not 0 <= p.partition_index < info.num_partitions:
                errors[(t.name, p.partition_index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            valid.append(CommitRequestPartition(t.name, p.partition_index, p.committed_offset,
                                                p.committed_leader_epoch if version >= 2 else -1,
                                                p.committed_metadata))
    if valid and version >= TRANSACTION_V2_VERSION and services.transaction_coordinator.transaction_version() >= 2:
        # Transactions version 2 (KIP-890 part 2): the client sent no AddOffsetsToTxn; the group's
        # `__consumer_offsets` partition joins the transaction here (Kafka's `addPartition` operation
        # of the group coordinator's transactional write), wherever its coordinator is.
        return _commit_v2(services, request, version, errors, valid)
    if valid:
        return _commit_v1(services, request, version, errors, valid)
    return _response(request, errors)


async def _commit_v1(services: BrokerServices, request: TxnOffsetCommitRequest, version: int,
                     errors: dict[tuple[str, int], ErrorCode],
                     valid: list[CommitRequestPartition]) -> TxnOffsetCommitResponse:
    """Transactions version 1: AddOffsetsToTxn put the group's `__consumer_offsets` partition in the
    transaction; the transaction coordinator confirms it (and the producer's id and epoch) before the
    offsets are written, in-process when this broker coordinates the transactional id, else with
    AddPartitionsToTxn v4 `verify_only` to the broker that does (Kafka's group coordinator verifies the
    transactional write the same way, KIP-890 part 1). The group coordinator and the transaction
    coordinator are on different brokers whenever `__consumer_offsets` and `__transaction_state` are
    led apart: asking only the local coordinator answered INVALID_PRODUCER_ID_MAPPING there, a fatal
    error for the client (found by tests/transactions/test_txn_jepsen.py). With
    `transaction.partition.verification.enable=false` Kafka starts no verification
    (ReplicaManager.maybeStartTransactionVerificationForPartition hands back the sentinel guard) and
    writes the offsets as they come; so does kbroker."""
    if not services.config["transaction.partition.verification.enable"]:
        answer = _commit(services, request, version, errors, valid, ErrorCode.NONE)
        return cast(TxnOffsetCommitResponse, await answer if isinstance(answer, asyncio.Future) else answer)
    verified = services.transaction_coordinator.verify_transaction(
        request.transactional_id, request.producer_id, request.producer_epoch, GROUP_METADATA_TOPIC_NAME,
        coordinator(services).partition_for(request.group_id))
    error = await verified if isinstance(verified, asyncio.Future) else verified
    answer = _commit(services, request, version, errors, valid, _verify_error(error, version))
    return cast(TxnOffsetCommitResponse, await answer if isinstance(answer, asyncio.Future) else answer)


def _verify_error(error: ErrorCode, version: int) -> ErrorCode:
    """A verification answer, as TxnOffsetCommit v0-4 answers it: a fenced epoch is PRODUCER_FENCED
    (INVALID_PRODUCER_EPOCH below v3), an unreachable or loading coordinator COORDINATOR_NOT_AVAILABLE
    (retried by the client, as Kafka's GroupCoordinatorService maps NOT_ENOUGH_REPLICAS)."""
    if error == ErrorCode.INVALID_PRODUCER_EPOCH:
        return fenced_for("TxnOffsetCommit", version, ErrorCode.PRODUCER_FENCED)
    if error == ErrorCode.NOT_ENOUGH_REPLICAS:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return error


async def _commit_v2(services: BrokerServices, request: TxnOffsetCommitRequest, version: int,
                     errors: dict[tuple[str, int], ErrorCode],
                     valid: list[CommitRequestPartition]) -> TxnOffsetCommitResponse:
    added = services.transaction_coordinator.add_partition_implicitly(
        request.transactional_id, request.producer_id, request.producer_epoch, GROUP_METADATA_TOPIC_NAME,
        coordinator(services).partition_for(request.group_id))
    error = await added if isinstance(added, asyncio.Future) else added
    answer = _commit(services, request, version, errors, valid, _commit_error(error))
    return cast(TxnOffsetCommitResponse, await answer if isinstance(answer, asyncio.Future) else answer)


def _commit_error(add_error: ErrorCode) -> ErrorCode:
    """A failed implicit add, as TxnOffsetCommit answers it (Kafka's GroupCoordinatorService maps a
    NOT_ENOUGH_REPLICAS of the verification to COORDINATOR_NOT_AVAILABLE, which the client retries;
    a fenced producer is INVALID_PRODUCER_EPOCH, as Kafka 4.3.1 answers it at v5)."""
    if add_error == ErrorCode.NOT_ENOUGH_REPLICAS:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return add_error


def _commit(services: BrokerServices, request: TxnOffsetCommitRequest, version: int,
            errors: dict[tuple[str, int], ErrorCode], valid: list[CommitRequestPartition],
            state_error: ErrorCode) -> Any:
    if state_error != ErrorCode.NONE:
        for c in valid:
            errors[(c.topic, c.partition)] = state_error
        valid = []
    if not valid:
        return _response(request, errors)
    generation = request.generation_id if version >= 3 else -1
    answer = coordinator(services).txn_commit_offsets(
        request.group_id, request.producer_id, request.producer_epoch, generation, request.member_id if version >= 3 else "",
        request.group_instance_id if version >= 3 else None, valid)

    def respond(results: list[ErrorCode]) -> TxnOffsetCommitResponse:
        for p, error in zip(valid, results, strict=True):
            errors[(p.topic, p.partition)] = error
        return _response(request, errors)

    return then(answer, respond)
