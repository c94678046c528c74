"""DeleteTopics (API key 20, v1-6): delete topics by name (v1-5) or by name or topic id (v6).

Follows Kafka's `ControllerApis.deleteTopics` checks for v6 rows: neither name nor id, both, a
duplicated name or id, and a name whose id another row already names are INVALID_REQUEST with
Kafka's messages; unknown names answer UNKNOWN_TOPIC_OR_PARTITION, unknown ids UNKNOWN_TOPIC_ID.

The topics that pass go to the controller together (`Controller.delete_topics`): Kafka's
`QuorumController.deleteTopics` is one write, their RemoveTopicRecords one batch. A KRaft broker
(`process.roles=broker`, or the broker side of a combined node) forwards the whole request in one
Envelope, as Kafka's `KafkaApis` does (`RemoteController.forward`): the controller runs this handler.
"""

from __future__ import annotations

import uuid
from typing import Any

from kbroker.api._authz import authorize
from kbroker.api._quotas import controller_mutation_quota
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.cluster.quotas import ThrottlingQuotaExceeded
from kbroker.protocol.errors import ErrorCode, KafkaError, error_fields
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.delete_topics import DeleteTopicsRequest, DeleteTopicsResponse
from kbroker.security.acl import DELETE, TOPIC

API_KEY = 20
MIN_VERSION = 1
# KIP-599: from v5 a topic is refused while the controller mutation quota is exhausted.
STRICT_QUOTA_SINCE_VERSION = 5
MAX_VERSION = 6

_ZERO_UUID = uuid.UUID(int=0)
Result = DeleteTopicsResponse.DeletableTopicResult


def _row(name: str | None, topic_id: uuid.UUID, code: int, message: str | None) -> Any:
    return Result(name=name, topic_id=topic_id, error_code=code, error_message=message)


async def _forward(services: BrokerServices, version: int, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
    """Kafka's KafkaApis: a KRaft broker forwards DeleteTopics to the controller as it came, in one
    Envelope; the controller's answer is the client's."""
    assert services.kraft is not None
    try:
        return await services.kraft.controller.forward(API_KEY, request, DeleteTopicsResponse, version=version,
                                                       validate_only=False)
    except KafkaError as e:
        code, message = error_fields(e)
        if version < 6:
            rows = [_row(n, _ZERO_UUID, code, message) for n in request.topic_names]
        else:
            rows = [_row(t.name, t.topic_id or _ZERO_UUID, code, message) for t in request.topics]
        return DeleteTopicsResponse(throttle_time_ms=0, responses=rows)


async def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
    version = header.api_version
    if services.kraft is not None:
        return await _forward(services, version, request)
    if not services.config["delete.topic.enable"]:
        # Kafka's ControllerApis refuses the whole request: INVALID_REQUEST before v3, which lacked
        # TOPIC_DELETION_DISABLED.
        refusal = ErrorCode.INVALID_REQUEST if version < 3 else ErrorCode.TOPIC_DELETION_DISABLED
        return error_response(request, version, refusal)
    invalid = int(ErrorCode.INVALID_REQUEST)
    responses: list[Any] = []
    if version < 6:
        rows: list[tuple[str | None, uuid.UUID]] = [(n, _ZERO_UUID) for n in request.topic_names]
    else:
        rows = [(t.name, t.topic_id or _ZERO_UUID) for t in request.topics]

    names: list[str] = []
    ids: list[uuid.UUID] = []
    dup_names: list[str] = []
    dup_ids: list[uuid.UUID] = []
    for name, tid in rows:
        if name is None and tid == _ZERO_UUID:
            responses.append(_row(None, tid, invalid, "Neither topic name nor id were specified."))
        elif name is not None and tid != _ZERO_UUID:
            responses.append(_row(name, tid, invalid, "You may not specify both topic name and topic id."))
        elif name is not None:
            if name in names:
                if name not in dup_names:
                    dup_names.append(name)
            else:
                names.append(name)
        else:
            if tid in ids:
                if tid not in dup_ids:
                    dup_ids.append(tid)
            else:
                ids.append(tid)
    for name in dup_names:
        names.remove(name)
        responses.append(_row(name, _ZERO_UUID, invalid, "Duplicate topic name."))
    for tid in dup_ids:
        ids.remove(tid)
        responses.append(_row(None, tid, invalid, "Duplicate topic id."))

    targets: list[tuple[str, uuid.UUID]] = []
    by_id_names: set[str] = set()
    for tid in ids:
        info = services.metadata.topic_by_id(tid)
        if info is None:
            code = int(ErrorCode.UNKNOWN_TOPIC_ID)
            responses.append(_row(None, tid, code, "This server does not host this topic ID."))
        else:
            targets.append((info.name, tid))
            by_id_names.add(info.name)
    if services.authorizer is not None:
        # ControllerApis.deleteTopics: DELETE on each topic; refused ones are TOPIC_AUTHORIZATION_FAILED
        # (asked by id: the name is not revealed).
        denied = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        denied_message = ErrorCode.TOPIC_AUTHORIZATION_FAILED.message
        kept = []
        for name, tid in targets:
            if authorize(services, ctx, DELETE, TOPIC, name):
                kept.append((name, tid))
            else:
                responses.append(_row(None, tid, denied, denied_message))
        targets = kept
        allowed_names = []
        for name in names:
            if authorize(services, ctx, DELETE, TOPIC, name):
                allowed_names.append(name)
            else:
                responses.append(_row(name, _ZERO_UUID, denied, denied_message))
        names = allowed_names
    for name in names:
        if name in by_id_names:
            responses.append(_row(name, _ZERO_UUID, invalid,
                                  "The provided topic name maps to an ID that was already supplied."))
            continue
        info = services.metadata.topic(name)
        if info is None:
            code = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            responses.append(_row(name, _ZERO_UUID, code, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.message))
            continue
        targets.append((name, info.topic_id))

    # KIP-599, as Kafka's ReplicationControlManager charges each topic while it generates the records:
    # a topic past the quota is refused, the others are charged their partitions and deleted together.
    quota = controller_mutation_quota(services, ctx, header, STRICT_QUOTA_SINCE_VERSION)
    deleted: list[tuple[str, uuid.UUID]] = []
    slots: list[Any] = []
    for name, tid in targets:
        info = services.metadata.topic(name)
        try:
            quota.check()
        except ThrottlingQuotaExceeded as e:
            slots.append(_row(name, tid, int(ErrorCode.THROTTLING_QUOTA_EXCEEDED), str(e)))
            continue
        quota.record(info.num_partitions if info is not None else 0)
        slots.append(None)
        deleted.append((name, tid))
    outcomes: list[Exception | None] = []
    if deleted:
        try:
            outcomes = list(await services.controller.delete_topics([n for n, _ in deleted]))
        except Exception as e:  # noqa: BLE001 - the whole write failed (NOT_CONTROLLER, a fault): every topic's error
            outcomes = [e] * len(deleted)
    results = iter(zip(deleted, outcomes, strict=True))
    for slot in slots:
        if slot is not None:
            responses.append(slot)
            continue
        (name, tid), error = next(results)
        code, message = (0, None) if error is None else error_fields(error)
        responses.append(_row(name, tid, code, message))
    return DeleteTopicsResponse(throttle_time_ms=quota.throttle_time_ms, responses=responses)


def error_response(request: DeleteTopicsRequest, version: int, error: Any) -> DeleteTopicsResponse:
    """Kafka's `DeleteTopicsRequest.getErrorResponse`: every named topic (or id) gets the error."""
    if version < 6:
        rows = [_row(n, _ZERO_UUID, int(error), error.message or None) for n in request.topic_names]
    else:
        rows = [_row(t.name, t.topic_id or _ZERO_UUID, int(error), error.message or None) for t in request.topics]
    return DeleteTopicsResponse(throttle_time_ms=0, responses=rows)
