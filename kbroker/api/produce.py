"""Produce (key 0): per-partition validation, append through the replica manager, the response.

Versions: 0 is *advertised* but 0-2 are refused by closing the connection (Kafka 4.0 removed them;
KAFKA-18659: librdkafka < 2.11.1 stops compressing when the advertised minimum is 3, so Kafka
keeps 0 in ApiVersions). The codec rejects v0-2 frames and the dispatcher closes the connection.
Up to v13, as Kafka 4.3.1 advertises. v12 has v11's schema; to a transactional producer it means
transactions V2's implicit AddPartitionsToTxn (KIP-890 part 2, with `transaction.version` 2 finalized):
the partition leader adds the partition to the transaction itself (`_verify`). v13 names topics by id (KIP-516): an id absent from the metadata image answers
UNKNOWN_TOPIC_ID for each of its partitions, and the response echoes the ids (as Kafka 4.3.1 does).

Kafka's request-level checks (`KafkaApis.handleProduceRequest` + `ProduceRequest.validateRecords`):
each partition must carry exactly one magic-2 batch (INVALID_RECORD otherwise), zstd needs v7+
(UNSUPPORTED_COMPRESSION_TYPE), internal topics are refused to clients (INVALID_TOPIC_EXCEPTION,
from ReplicaManager), unknown partitions get UNKNOWN_TOPIC_OR_PARTITION, and the request may
partly succeed. acks=0: no response at all; if any partition failed the connection is closed so
the producer refreshes its metadata. Transactional batches without a transactional id fail the
whole request with TRANSACTIONAL_ID_AUTHORIZATION_FAILED (as Kafka). With one, and
`transaction.partition.verification.enable` (KIP-890 part 1), a transactional batch for a partition
that is not in the producer's Ongoing transaction (asked of the transaction coordinator: in-process, or
with AddPartitionsToTxn v4 `verify_only` on the coordinator's broker, the append waiting for it) is
refused (NOT_ENOUGH_REPLICAS while the coordinator is unavailable, INVALID_PRODUCER_ID_MAPPING /
INVALID_PRODUCER_EPOCH for a producer that is not the transaction's current one, INVALID_TXN_STATE
for a partition not added), so a late produce after an abort cannot open a hanging transaction.
The records inside each batch are checked by ``log.validator`` (Kafka's LogValidator); the replica
manager runs the expensive checks on a worker pool (``offload=True``), so the response, acks=0's
included, may wait for a future.
"""

from __future__ import annotations

import asyncio
import struct
from typing import TypeAlias

from kbroker.api._authz import authorize
from kbroker.api._futures import chain_future
from kbroker.api.context import NO_RESPONSE, BrokerServices, CloseConnection, NoResponse, RequestContext
from kbroker.protocol.compression import CompressionType
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.produce import ProduceRequest, ProduceResponse
from kbroker.protocol.record_format import (
    COMPRESSION_CODEC_MASK,
    INT8,
    INT32,
    LENGTH_OFFSET,
    MAGIC_OFFSET,
    TRANSACTIONAL_FLAG_MASK,
)
from kbroker.protocol.records import LOG_OVERHEAD, MAGIC_V2, RECORD_BATCH_OVERHEAD, RecordBatch
from kbroker.replica.replica_manager import ProducePartitionResult
from kbroker.security.acl import TOPIC, TRANSACTIONAL_ID, WRITE

API_KEY = 0
MIN_VERSION = 3
VERSION_NOTES = (
    "0-2 advertised but refused by closing the connection (removed in Kafka 4.0; KAFKA-18659: librdkafka "
    "< 2.11.1 stops compressing if the minimum is 3). v11: TRANSACTION_ABORTABLE for a partition not in the "
    "transaction; v12 (transaction.version 2 finalized): the leader adds a transactional batch's partition to "
    "the transaction (KIP-890 part 2); v13 names topics by id (KIP-516, UNKNOWN_TOPIC_ID for an unknown id)."
)
MAX_VERSION = 13
# The first version that names topics by id instead of by name (KIP-516).
TOPIC_ID_VERSION = 13
# KIP-890: v11 answers TRANSACTION_ABORTABLE for a partition not in the transaction; v12 is a
# transactions-version-2 producer's (its partitions are added by the leader).
ABORTABLE_ERROR_VERSION = 11
TRANSACTION_V2_VERSION = 12
ADVERTISED_MIN_VERSION = 0

# Kafka's AdminUtils.ADMIN_CLIENT_ID: the only client id allowed to write internal topics.
ADMIN_CLIENT_ID = "__admin_client"
# LegacyRecord.RECORD_OVERHEAD_V0: the smallest size field ByteBufferLogInputStream accepts.
_LEGACY_RECORD_OVERHEAD_V0 = 14


# A partition's records as the codec hands them over: a view of the request frame.
Records: TypeAlias = memoryview
# A partition's header checks: an error code, or a future of one while a coordinator verifies (KIP-890).
Verdict: TypeAlias = "ErrorCode | asyncio.Future[ErrorCode]"
# What the handler answers: the response, NO_RESPONSE for acks=0, or a future of either.
ProduceAnswer: TypeAlias = "ProduceResponse | NoResponse"
ProduceOutcome: TypeAlias = "ProduceAnswer | asyncio.Future[ProduceAnswer]"

# batchLength (offset 8), magic (16) and attributes (21) of a v2 batch header, read from offset 8.
_LENGTH_MAGIC_ATTRIBUTES = struct.Struct(">i4xb4xh")


def _framing_error(mv: Records | bytes, n: int) -> ErrorCode:
    """The framing checks' error for records that are not one whole magic-2 batch, in Kafka's order."""
    if n < LOG_OVERHEAD:
        return ErrorCode.INVALID_RECORD  # "must have at least one record batch"
    (batch_length,) = INT32.unpack_from(mv, LENGTH_OFFSET)
    if batch_length < _LEGACY_RECORD_OVERHEAD_V0:
        return ErrorCode.CORRUPT_MESSAGE
    size = batch_length + LOG_OVERHEAD
    if n < MAGIC_OFFSET + 1 or size > n:
        return ErrorCode.INVALID_RECORD  # no complete batch: "must have at least one record batch"
    magic = INT8.unpack_from(mv, MAGIC_OFFSET)[0]
    if magic < 0 or magic > MAGIC_V2:
        return ErrorCode.CORRUPT_MESSAGE  # "Invalid magic found in record"
    if magic != MAGIC_V2:
        return ErrorCode.INVALID_RECORD
    if size < RECORD_BATCH_OVERHEAD:
        return ErrorCode.CORRUPT_MESSAGE
    # A second batch (or trailing bytes that could be one): v3+ allows exactly one. (A single whole
    # magic-2 batch never gets here.)
    return ErrorCode.INVALID_RECORD


def _precheck(records: Records | bytes, version: int, services: BrokerServices | None = None,
              transactional_id: str | None = None, topic: str = "", partition: int = -1) -> Verdict:
    """The header-only checks Kafka does before the log sees the batch (no record is touched):
    an ErrorCode, or a future of one while a coordinator on another broker verifies the transaction.
    ``ProduceRequest.validateRecords`` over ``ByteBufferLogInputStream``'s framing. A size field
    under 14 (LegacyRecord's minimum) or a magic outside 0-2 is CORRUPT_MESSAGE; a whole magic-0/1
    message set is INVALID_RECORD (v3+ only allows magic 2); a magic-2 batch shorter than its 61-byte
    header is CORRUPT_MESSAGE (DefaultRecordBatch.ensureValid). A null records field is the caller's
    to answer (INVALID_RECORD, before this)."""
    n = len(records)
    if n < RECORD_BATCH_OVERHEAD:
        return _framing_error(records, n)
    # One read for the usual request (this runs once per partition): a single whole magic-2 batch is
    # exactly what passes every check of _framing_error; anything else gets one of its errors.
    batch_length, magic, attributes = _LENGTH_MAGIC_ATTRIBUTES.unpack_from(records, LENGTH_OFFSET)
    if batch_length + LOG_OVERHEAD != n or magic != MAGIC_V2:
        return _framing_error(records, n)
    if attributes & COMPRESSION_CODEC_MASK == CompressionType.ZSTD and version < 7:
        return ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    if attributes & TRANSACTIONAL_FLAG_MASK:
        if transactional_id is None:
            return ErrorCode.INVALID_TXN_STATE
        batch = RecordBatch(memoryview(records))
        return _verify(services, transactional_id, batch.producer_id, batch.producer_epoch, topic, partition, version,
                       batch.base_sequence)
    return ErrorCode.NONE


VERIFICATION_UNAVAILABLE = ("Unable to verify the partition has been added to the transaction. "
                            "Underlying error: COORDINATOR_NOT_AVAILABLE")


def _verify(services: BrokerServices | None, transactional_id: str, producer_id: int, epoch: int, topic: str,
            partition: int, version: int = TRANSACTION_V2_VERSION - 1, sequence: int | None = None) -> Verdict:
    """KIP-890 part 1: the partition must be in the producer's Ongoing transaction, asked of the
    transaction coordinator (in-process, or on the broker that owns the id: an ErrorCode or a future).
    The answers are Kafka's AddPartitionsToTxnManager's: an unreachable coordinator NOT_ENOUGH_REPLICAS,
    an unknown id or producer INVALID_PRODUCER_ID_MAPPING, a fenced epoch INVALID_PRODUCER_EPOCH, a
    partition not in the transaction INVALID_TXN_STATE through v10 and TRANSACTION_ABORTABLE from v11
    (Kafka's `genericError` operation, KIP-890).

    KIP-890 part 2: with `transaction.version` 2 finalized, a v12+ produce is a transactions-version-2
    client's, which never sends AddPartitionsToTxn: the partition is added to its transaction here
    (Kafka's `addPartition` operation: `if (version > 11) addPartition`).

    Before asking, the partition's producer state learns the batch's sequence (``sequence``, Kafka's
    VerificationStateEntry): the append then refuses a sequence above the lowest one verified and,
    to a v12+ producer (which bumps its epoch every transaction), any but 0 from a producer with no
    batch in the partition."""
    if services is None or not services.config["transaction.partition.verification.enable"]:
        return ErrorCode.NONE
    if sequence is not None:
        services.replica_manager.maybe_start_transaction_verification(
            topic, partition, producer_id, sequence, epoch, version >= TRANSACTION_V2_VERSION)
    coordinator = services.transaction_coordinator
    if version >= TRANSACTION_V2_VERSION and coordinator.transaction_version() >= 2:
        return coordinator.add_partition_implicitly(transactional_id, producer_id, epoch, topic, partition)
    answer = coordinator.verify_transaction(transactional_id, producer_id, epoch, topic, partition)
    if version < ABORTABLE_ERROR_VERSION:
        return answer
    if isinstance(answer, asyncio.Future):
        return chain_future(answer, _abortable)
    return _abortable(answer)


def _abortable(error: ErrorCode) -> ErrorCode:
    """A partition not in the transaction, to a v11+ producer: TRANSACTION_ABORTABLE (it aborts and goes
    on with the same transactional id) rather than INVALID_TXN_STATE."""
    return ErrorCode.TRANSACTION_ABORTABLE if error == ErrorCode.INVALID_TXN_STATE else error


def _topic_names(services: BrokerServices | None, request: ProduceRequest, version: int) -> list[str]:
    """The topic name of each `topic_data` entry. From v13 entries carry topic ids: an id the image does
    not know maps to a name no topic can have ("" + the id), whose partitions are answered
    UNKNOWN_TOPIC_ID by `_response`."""
    if version < TOPIC_ID_VERSION:
        return [td.name for td in request.topic_data]
    names = []
    for td in request.topic_data:
        info = None if services is None else services.metadata.topic_by_id(td.topic_id)
        names.append(info.name if info is not None else f"{_UNKNOWN_ID_PREFIX}{td.topic_id}")
    return names


# Topic names are at least one legal character, so this prefix never clashes with a real topic.
_UNKNOWN_ID_PREFIX = "\0unknown-topic-id:"


def _response(request: ProduceRequest, results: dict[tuple[str, int], ProducePartitionResult], version: int,
              names: list[str]) -> ProduceResponse:
    topics = []
    # KIP-951's current_leader stays at its default (no leader hint): one read-only instance for every
    # partition of the response rather than one each (a request may name thousands of partitions).
    no_leader_hint = ProduceResponse.LeaderIdAndEpoch()
    partition_response = ProduceResponse.PartitionProduceResponse
    named = 0
    for td in request.topic_data:
        named += len(td.partition_data)
    # A partition named twice, in one topic entry or in two entries of its topic: Kafka's handler keys
    # its answers by partition, so it answers each partition once, in one entry per topic (checked
    # against Kafka 4.3.1: tests/differential/scenario.py). Only such a request pays for the check.
    answered: set[tuple[str, int]] | None = set() if named != len(results) else None
    entries: dict[str, list[ProduceResponse.PartitionProduceResponse]] = {}
    for td, name in zip(request.topic_data, names, strict=True):
        parts: list[ProduceResponse.PartitionProduceResponse] = []
        again = False
        if answered is not None:
            again = name in entries
            if again:
                parts = entries[name]  # the topic's first entry answers for both
            else:
                entries[name] = parts
        for pd in td.partition_data:
            if answered is not None:
                if (name, pd.index) in answered:
                    continue
                answered.add((name, pd.index))
            r = results.get((name, pd.index))
            if r is None:
                continue
            p = partition_response(
                index=pd.index,
                error_code=r.error,
                base_offset=r.base_offset,
                log_append_time_ms=r.log_append_time_ms,
                log_start_offset=r.log_start_offset,
                current_leader=no_leader_hint,
            )
            if version >= 8:
                if r.record_errors:
                    p.record_errors = [
                        ProduceResponse.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m)
                        for i, m in r.record_errors
                    ]
                p.error_message = r.error_message
            parts.append(p)
        if again:
            continue  # a topic named again: its partitions went into its first entry
        if version >= TOPIC_ID_VERSION:
            topics.append(ProduceResponse.TopicProduceResponse(topic_id=td.topic_id, partition_responses=parts))
        else:
            topics.append(ProduceResponse.TopicProduceResponse(name=td.name, partition_responses=parts))
    return ProduceResponse(responses=topics, throttle_time_ms=0)


def error_response(request: ProduceRequest, version: int, error: ErrorCode) -> ProduceResponse:
    names = [td.name if version < TOPIC_ID_VERSION else str(td.topic_id) for td in request.topic_data]
    results = {
        (name, pd.index): ProducePartitionResult(error)
        for td, name in zip(request.topic_data, names, strict=True)
        for pd in td.partition_data
    }
    return _response(request, results, version, names)


def handle(
    services: BrokerServices, ctx: RequestContext, header: RequestHeader, request: ProduceRequest
) -> ProduceOutcome:
    version = header.api_version
    acks = request.acks
    results: dict[tuple[str, int], ProducePartitionResult] = {}
    entries: dict[tuple[str, int], Records] = {}
    names = _topic_names(services, request, version)
    denied: set[str] = set()
    if services.authorizer is not None:
        # KafkaApis.handleProduceRequest: WRITE on the transactional id (else the whole request fails),
        # then WRITE on each topic (TOPIC_AUTHORIZATION_FAILED before any existence check).
        if request.transactional_id is not None and not authorize(
                services, ctx, WRITE, TRANSACTIONAL_ID, request.transactional_id):
            if acks == 0:
                raise CloseConnection("not authorized for the transactional id")
            return error_response(request, version, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        denied = {n for n in set(names) if not n.startswith(_UNKNOWN_ID_PREFIX)
                  and not authorize(services, ctx, WRITE, TOPIC, n)}
    verifying: dict[tuple[str, int], tuple[asyncio.Future[ErrorCode], Records]] = {}
    for td, name in zip(request.topic_data, names, strict=True):
        for pd in td.partition_data:
            key = (name, pd.index)
            if key in results or key in entries or key in verifying:
                # Named again: the last entry is the one appended and answered, as in Kafka's handler,
                # whose map of partition -> records keeps the last (tests/differential/scenario.py).
                results.pop(key, None)
                entries.pop(key, None)
                verifying.pop(key, None)
            if name.startswith(_UNKNOWN_ID_PREFIX):
                results[key] = ProducePartitionResult(ErrorCode.UNKNOWN_TOPIC_ID)
                continue
            if denied and name in denied:
                results[key] = ProducePartitionResult(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                continue
            records = pd.records
            if records is None:  # a null records field: "must have at least one record batch"
                results[key] = ProducePartitionResult(ErrorCode.INVALID_RECORD)
                continue
            error = _precheck(records, version, services, request.transactional_id, name, pd.index)
            if isinstance(error, asyncio.Future):
                verifying[key] = (error, records)
            elif error == ErrorCode.NOT_ENOUGH_REPLICAS:
                # Only the KIP-890 verification answers this here (its coordinator is unavailable).
                results[key] = ProducePartitionResult(error, error_message=VERIFICATION_UNAVAILABLE)
            elif error != ErrorCode.NONE:
                results[key] = ProducePartitionResult(error)
            else:
                entries[key] = records
    if request.transactional_id is None and any(
        r.error == ErrorCode.INVALID_TXN_STATE for r in results.values()
    ):
        # Transactional records without a transactional id: Kafka fails the whole request with
        # TRANSACTIONAL_ID_AUTHORIZATION_FAILED before looking at any partition.
        if acks == 0:
            raise CloseConnection("transactional records without a transactional id")
        return _response(request, {key: ProducePartitionResult(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                                   for key in (*results, *entries)}, version, names)
    if verifying:
        # A coordinator on another broker is verifying some partitions (KIP-890 part 1): append once
        # every answer is in.
        loop = next(iter(verifying.values()))[0].get_loop()
        out: asyncio.Future[ProduceAnswer] = loop.create_future()

        def verified(_f: object) -> None:
            if out.done() or not all(f.done() for f, _ in verifying.values()):
                return
            for key, (f, records) in verifying.items():
                error = f.result() if not f.cancelled() and f.exception() is None else ErrorCode.NOT_ENOUGH_REPLICAS
                if error == ErrorCode.NONE:
                    entries[key] = records
                elif error == ErrorCode.NOT_ENOUGH_REPLICAS:
                    results[key] = ProducePartitionResult(error, error_message=VERIFICATION_UNAVAILABLE)
                else:
                    results[key] = ProducePartitionResult(error)
            try:
                tail = _append(services, ctx, request, version, names, results, entries)
            except BaseException as exc:  # noqa: BLE001 - CloseConnection and friends go to the network layer
                out.set_exception(exc)
                return
            if isinstance(tail, asyncio.Future):
                tail.add_done_callback(lambda t: _relay(t, out))
            else:
                out.set_result(tail)

        for f, _ in verifying.values():
            f.add_done_callback(verified)
        return out
    return _append(services, ctx, request, version, names, results, entries)


def _relay(source: asyncio.Future[ProduceAnswer], out: asyncio.Future[ProduceAnswer]) -> None:
    if out.done():
        return
    if source.cancelled():
        out.cancel()
    elif (exc := source.exception()) is not None:
        out.set_exception(exc)
    else:
        out.set_result(source.result())


def _append(services: BrokerServices, ctx: RequestContext, request: ProduceRequest, version: int, names: list[str],
            results: dict[tuple[str, int], ProducePartitionResult],
            entries: dict[tuple[str, int], Records]) -> ProduceOutcome:
    acks = request.acks
    internal_allowed = ctx.client_id == ADMIN_CLIENT_ID
    quotas = services.quotas
    if quotas is not None and quotas.produce.quotas_enabled:
        # KafkaApis.handleProduceRequest: the whole request's size against producer_byte_rate; the
        # dispatcher puts the larger of this and the request quota's throttle in the response.
        user, client_id = ctx.principal.partition(":")[2], ctx.client_id or ""
        throttle_ms = quotas.produce.record_and_get_throttle_time_ms(user, client_id, ctx.request_size)
        if throttle_ms:
            quotas.produce.throttle(user, client_id, throttle_ms)
            ctx.throttle_time_ms = max(ctx.throttle_time_ms, throttle_ms)
    outcome = services.replica_manager.append_records(
        timeout_ms=request.timeout_ms,
        required_acks=acks,
        internal_topics_allowed=internal_allowed,
        entries=entries,
        offload=True,
    )
    if acks == 0:
        # No response is expected; an error can only be signalled by closing the connection.
        def no_response(out: dict[tuple[str, int], ProducePartitionResult]) -> ProduceAnswer:
            if any(r.error != ErrorCode.NONE for r in results.values()) or any(
                r.error != ErrorCode.NONE for r in out.values()
            ):
                raise CloseConnection("error during produce request with acks=0")
            return NO_RESPONSE

        if isinstance(outcome, dict):
            return no_response(outcome)
        return chain_future(outcome, no_response)  # an off-loop check is still running
    if isinstance(outcome, dict):
        results.update(outcome)
        return _response(request, results, version, names)

    def respond(delayed: dict[tuple[str, int], ProducePartitionResult]) -> ProduceAnswer:
        results.update(delayed)
        return _response(request, results, version, names)

    # The purgatory completes `outcome`; the response is built in its done-callback (no Task).
    return chain_future(outcome, respond)

