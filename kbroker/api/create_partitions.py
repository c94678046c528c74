"""CreatePartitions (API key 37, v0-3): grow topics through the controller, one result per topic.

As in Kafka's `ControllerApis.createPartitions`, a topic named twice is answered once (ahead of the
others) with INVALID_REQUEST "Duplicate topic name." and not grown. The partitions one request adds
are bounded by Kafka's MAX_RECORDS_PER_USER_OP (10,000), counted across its topics: the topic that
crosses it fails with UNKNOWN_SERVER_ERROR, as in Kafka 4.3 (controller/replication_control.py).

A KRaft broker (`process.roles=broker`, or the broker side of a combined node) forwards the request
as one, as Kafka's `ForwardingManager` does (`RemoteController.forward`): the controller runs this same
handler over all its topics, so the bound and the duplicates are counted there. With an authorizer the
broker leaves out the topics the client may not ALTER (TOPIC_AUTHORIZATION_FAILED) before forwarding.

The topics that pass go to the controller in one `create_partitions_all` call: the QuorumController
writes them as one batch (Kafka's `ReplicationControlManager.createPartitions`,
`ControllerResult.atomicOf`), answers after it commits, and validate-only writes nothing (Kafka's
`withoutRecords()`); the mutation quota is applied per topic after its checks.
"""

from __future__ import annotations

from typing import Any

from kbroker.api._authz import check_topic, filter_authorized
from kbroker.api._quotas import controller_mutation_quota, partition_change_quota, topic_error_fields
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.controller.controller import CreatePartitionsTopic
from kbroker.protocol.errors import ErrorCode, KafkaError, error_fields
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.create_partitions import CreatePartitionsRequest, CreatePartitionsResponse
from kbroker.security.acl import ALTER, TOPIC

API_KEY = 37
MIN_VERSION = 0
# KIP-599: from v3 a topic is refused while the controller mutation quota is exhausted.
STRICT_QUOTA_SINCE_VERSION = 3
MAX_VERSION = 3

Result = CreatePartitionsResponse.CreatePartitionsTopicResult


async def _forward(services: BrokerServices, ctx: RequestContext, version: int,
                   request: CreatePartitionsRequest) -> CreatePartitionsResponse:
    assert services.kraft is not None
    allowed = filter_authorized(services, ctx, ALTER, TOPIC, (t.name for t in request.topics))
    refused = [Result(name=name, error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                      error_message=ErrorCode.TOPIC_AUTHORIZATION_FAILED.message)
               for name in dict.fromkeys(t.name for t in request.topics) if name not in allowed]
    topics = [t for t in request.topics if t.name in allowed]
    if not topics:
        return CreatePartitionsResponse(throttle_time_ms=0, results=refused)
    forwarded = request if not refused else CreatePartitionsRequest(
        topics=topics, timeout_ms=request.timeout_ms, validate_only=request.validate_only)
    try:
        resp = await services.kraft.controller.forward(API_KEY, forwarded, CreatePartitionsResponse, version=version,
                                                       validate_only=request.validate_only)
    except KafkaError as e:
        code, message = error_fields(e)
        resp = CreatePartitionsResponse(throttle_time_ms=0, results=[
            Result(name=name, error_code=code, error_message=message) for name in dict.fromkeys(t.name for t in topics)])
    resp.results = [*resp.results, *refused]
    return resp


async def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader, request: CreatePartitionsRequest) -> CreatePartitionsResponse:
    if services.kraft is not None:
        return await _forward(services, ctx, header.api_version, request)
    controller = services.controller
    counts: dict[str, int] = {}
    for t in request.topics:
        counts[t.name] = counts.get(t.name, 0) + 1
    # Kafka answers the duplicates first, then the topics the controller handled.
    results: list[Any] = [
        Result(name=name, error_code=int(ErrorCode.INVALID_REQUEST), error_message="Duplicate topic name.")
        for name, n in counts.items() if n > 1
    ]
    quota = controller_mutation_quota(services, ctx, header, STRICT_QUOTA_SINCE_VERSION)
    slots: list[Any] = []
    wanted: list[CreatePartitionsTopic] = []
    for t in request.topics:
        if counts[t.name] > 1:
            continue
        try:
            check_topic(services, ctx, ALTER, t.name)  # KafkaApis: ALTER on the topic
        except Exception as e:  # noqa: BLE001 - every failure becomes this topic's error
            code, message = error_fields(e)
            slots.append(Result(name=t.name, error_code=code, error_message=message))
            continue
        assignments = None if t.assignments is None else [list(a.broker_ids) for a in t.assignments]
        slots.append(len(wanted))
        wanted.append(CreatePartitionsTopic(t.name, t.count, assignments))

    try:
        outcomes: list[Any] = list(await controller.create_partitions_all(wanted, request.validate_only,
                                   partition_change_quota(quota, request.validate_only))
                                   if wanted else [])
    except Exception as e:  # noqa: BLE001 - the whole write failed: every topic gets its error
        outcomes = [e] * len(wanted)
    for slot in slots:
        if not isinstance(slot, int):
            results.append(slot)
            continue
        outcome = outcomes[slot]
        if isinstance(outcome, Exception):
            code, message = topic_error_fields(outcome)
            results.append(Result(name=wanted[slot].name, error_code=code, error_message=message))
        else:
            results.append(Result(name=wanted[slot].name, error_code=0, error_message=None))
    return CreatePartitionsResponse(throttle_time_ms=quota.throttle_time_ms, results=results)


def error_response(request: CreatePartitionsRequest, version: int, error: Any) -> CreatePartitionsResponse:
    return CreatePartitionsResponse(throttle_time_ms=0, results=[
        Result(name=t.name, error_code=int(error), error_message=error.message or None) for t in request.topics
    ])
