"""CreateTopics (API key 19, v2-7): create topics through the controller, one result per topic.

Kafka's `ControllerApis.createTopics` shape: a name sent twice is answered once, at the end, with
INVALID_REQUEST "Duplicate topic name." and not created; every other topic gets its own error code
and message. From v5 a successful (or validate-only) result carries the partition count, replication
factor and every config of the topic (KIP-525); v7 adds the topic id. A request whose topics add up
to more than Kafka's MAX_RECORDS_PER_USER_OP (10,000) partitions is refused as a whole: every topic
gets POLICY_VIOLATION "Excessively large number of partitions per request." (Kafka 4.3's controller).

A KRaft broker (`process.roles=broker`, or the broker side of a combined node) forwards the request
as one, as Kafka's `ForwardingManager` does (`RemoteController.forward`): the controller runs this same
handler, so the bound, the duplicates and the checks of each topic (a manual assignment with a
partition count or replication factor is INVALID_REQUEST) are the controller's. With an authorizer the
broker first leaves out the topics the client may not CREATE (TOPIC_AUTHORIZATION_FAILED).

The topics that pass the API-level checks go to the controller in one `create_topics` call: the
QuorumController writes them as one batch (Kafka's `ReplicationControlManager.createTopics` returns
`ControllerResult.atomicOf`) and answers after it commits, validate-only writes nothing; the
controller mutation quota (KIP-599) is applied per topic after its checks, as Kafka's
`applyPartitionChangeQuota`.
"""

from __future__ import annotations

import uuid
from typing import Any

from kbroker.api._authz import authorize, authorize_cluster, filter_authorized
from kbroker.api._quotas import controller_mutation_quota, partition_change_quota, topic_error_fields
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.controller.controller import NewTopic
from kbroker.controller.replication_control import validate_total_number_of_partitions
from kbroker.protocol.errors import ErrorCode, KafkaError, error_fields
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.create_topics import CreateTopicsRequest, CreateTopicsResponse
from kbroker.security.acl import CREATE, TOPIC

API_KEY = 19
MIN_VERSION = 2
MAX_VERSION = 7

_ZERO_UUID = uuid.UUID(int=0)
Result = CreateTopicsResponse.CreatableTopicResult
# KIP-599: CreateTopics v6+ refuses topics while the controller mutation quota is exhausted.
STRICT_QUOTA_SINCE_VERSION = 6
ResultConfig = CreateTopicsResponse.CreatableTopicConfigs


def _failed(name: str, code: int, message: str | None) -> Any:
    return Result(name=name, topic_id=_ZERO_UUID, error_code=code, error_message=message, num_partitions=-1,
                  replication_factor=-1, configs=[])


async def _forward(services: BrokerServices, ctx: RequestContext, version: int, request: CreateTopicsRequest) -> CreateTopicsResponse:
    assert services.kraft is not None
    names = list(dict.fromkeys(t.name for t in request.topics))
    if services.authorizer is None or authorize_cluster(services, ctx, CREATE):
        allowed = set(names)
    else:
        allowed = filter_authorized(services, ctx, CREATE, TOPIC, names)
    refused = [_failed(name, int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), "Authorization failed.")
               for name in names if name not in allowed]
    topics = [t for t in request.topics if t.name in allowed]
    if not topics:
        return CreateTopicsResponse(throttle_time_ms=0, topics=refused)
    forwarded = request if not refused else CreateTopicsRequest(
        topics=topics, timeout_ms=request.timeout_ms, validate_only=request.validate_only)
    try:
        resp = await services.kraft.controller.forward(API_KEY, forwarded, CreateTopicsResponse, version=version,
                                                       validate_only=request.validate_only)
    except KafkaError as e:
        code, message = error_fields(e)
        resp = CreateTopicsResponse(throttle_time_ms=0, topics=[_failed(n, code, message)
                                                                for n in dict.fromkeys(t.name for t in topics)])
    resp.topics = [*resp.topics, *refused]
    return resp


async def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader, request: CreateTopicsRequest) -> CreateTopicsResponse:
    if services.kraft is not None:
        return await _forward(services, ctx, header.api_version, request)
    controller = services.controller
    seen: set[str] = set()
    duplicates: list[str] = []
    for t in request.topics:
        if t.name in seen and t.name not in duplicates:
            duplicates.append(t.name)
        seen.add(t.name)
    results: list[Any] = []
    try:
        validate_total_number_of_partitions(
            ((t.num_partitions, len(t.assignments)) for t in request.topics if t.name not in duplicates),
            int(services.config["num.partitions"]),
        )
    except KafkaError as e:
        code, message = error_fields(e)
        refused = True
    else:
        refused = False
    # ControllerApis.createTopics: CREATE on the cluster, else CREATE on each topic.
    check_topics = services.authorizer is not None and not authorize_cluster(services, ctx, CREATE)
    quota = controller_mutation_quota(services, ctx, header, STRICT_QUOTA_SINCE_VERSION)
    # Kafka answers the refused topics where they stand and the controller's in request order.
    slots: list[Any] = []
    wanted: list[NewTopic] = []
    for t in request.topics:
        if t.name in duplicates:
            continue
        if check_topics and not authorize(services, ctx, CREATE, TOPIC, t.name):
            slots.append(Result(name=t.name, topic_id=_ZERO_UUID, error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                                error_message="Authorization failed.", num_partitions=-1, replication_factor=-1,
                                configs=[]))
            continue
        if refused:
            slots.append(Result(name=t.name, topic_id=_ZERO_UUID, error_code=code, error_message=message,
                                num_partitions=-1, replication_factor=-1, configs=[]))
            continue
        configs = {c.name: c.value for c in t.configs}
        assignments = {a.partition_index: list(a.broker_ids) for a in t.assignments}
        slots.append(len(wanted))
        wanted.append(NewTopic(t.name, t.num_partitions, t.replication_factor, configs, assignments or None))

    try:
        outcomes: list[Any] = list(await controller.create_topics(wanted, request.validate_only,
                                   partition_change_quota(quota, request.validate_only))
                                   if wanted else [])
    except Exception as e:  # noqa: BLE001 - the whole write failed: every topic gets its error
        outcomes = [e] * len(wanted)
    for slot in slots:
        if not isinstance(slot, int):
            results.append(slot)
            continue
        name, outcome = wanted[slot].name, outcomes[slot]
        if isinstance(outcome, Exception):
            code, message = topic_error_fields(outcome)
            results.append(Result(name=name, topic_id=_ZERO_UUID, error_code=code, error_message=message,
                                  num_partitions=-1, replication_factor=-1, configs=[]))
            continue
        info = outcome
        # KIP-525: Kafka describes the new topic's configs from its overrides and the broker's
        # synonyms, sorted by name, sensitive values hidden.
        entries = [
            ResultConfig(name=e.name, value=e.value, read_only=e.read_only, config_source=e.source,
                         is_sensitive=e.sensitive)
            for e in services.configs.describe_configs_for_overrides(info.configs, for_creation=True)
        ]
        results.append(Result(name=name, topic_id=info.topic_id, error_code=0, error_message=None,
                              topic_config_error_code=0, num_partitions=info.num_partitions,
                              replication_factor=info.replication_factor, configs=entries))
    for name in duplicates:
        results.append(Result(name=name, topic_id=_ZERO_UUID, error_code=42,
                              error_message="Duplicate topic name.", num_partitions=-1,
                              replication_factor=-1, configs=[]))
    return CreateTopicsResponse(throttle_time_ms=quota.throttle_time_ms, topics=results)


def error_response(request: CreateTopicsRequest, version: int, error: Any) -> CreateTopicsResponse:
    """Kafka's `CreateTopicsRequest.getErrorResponse`: every topic gets the error."""
    return CreateTopicsResponse(throttle_time_ms=0, topics=[
        Result(name=t.name, topic_id=_ZERO_UUID, error_code=int(error), error_message=error.message or None,
               num_partitions=-1, replication_factor=-1, configs=[])
        for t in request.topics
    ])
