"""Metadata (key 3): brokers, cluster id, controller, topics with ids, partitions, leaders and ISR.

Versions 0-13 (Kafka 4.x kept 0-3 for old clients such as kafka-python, KIP-896). v13's
top-level error code is only ever NONE here (REBOOTSTRAP_REQUIRED is for multi-node clusters).

Auto-creation (`auto.create.topics.enable` and the request's `allow_auto_topic_creation`, v4+;
always allowed below v4) goes through the topic manager. Kafka's controller creates the topic
asynchronously and answers LEADER_NOT_AVAILABLE until it exists; our creation is synchronous, so
the response already carries the new topic's partitions (a state Kafka's clients see on retry).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable
from typing import Any

from kbroker.api._authz import (
    authorize,
    authorize_cluster,
    authorized_operations,
    cluster_authorized_operations,
)
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.metadata import MetadataRequest, MetadataResponse
from kbroker.security.acl import CREATE, DESCRIBE, TOPIC

API_KEY = 3
MIN_VERSION = 0
MAX_VERSION = 13
VERSION_NOTES = (
    "0-3 kept by Kafka 4.x for old clients (kafka-python). v13 adds the top-level error code (KIP-1102)."
)

# Kafka's "authorized operations not requested" value (Integer.MIN_VALUE).
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
# No authorizer: every operation a resource type supports is allowed. Bits are AclOperation codes:
# TOPIC = READ(3) WRITE(4) CREATE(5) DELETE(6) ALTER(7) DESCRIBE(8) DESCRIBE_CONFIGS(10) ALTER_CONFIGS(11).
TOPIC_AUTHORIZED_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
# CLUSTER = CREATE(5) ALTER(7) DESCRIBE(8) CLUSTER_ACTION(9) DESCRIBE_CONFIGS(10) ALTER_CONFIGS(11)
# IDEMPOTENT_WRITE(12).
CLUSTER_AUTHORIZED_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))
_NO_OPERATIONS = (ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.UNKNOWN_TOPIC_ID)

ZERO_UUID = uuid.UUID(int=0)


def registered_rack(services: BrokerServices) -> str | None:
    """This broker's rack as registered in the metadata image (`broker.rack`), as Kafka's metadata
    cache reports it; None before registration or without `broker.rack`."""
    registration = services.metadata.image.cluster.broker(services.node_id)
    return None if registration is None else registration.rack


def in_cluster(services: BrokerServices) -> bool:
    """Whether answers come from the image's registrations: a KRaft broker, or any node whose image
    registers brokers other than itself (replication, issue 12); False on the single node, whose
    answers come from its own listeners and hosted partitions."""
    return services.kraft is not None or any(b != services.node_id for b in services.metadata.image.cluster.brokers)


def alive_brokers(services: BrokerServices, listener_name: str) -> list[tuple[int, str, int, str | None]]:
    """(id, host, port, rack) of every unfenced registered broker with an endpoint on `listener_name`,
    by id (Kafka's KRaftMetadataCache.getAliveBrokerNodes): the brokers of a KRaft cluster, or this node
    alone on a single node."""
    out = []
    for b in sorted(services.metadata.image.cluster.brokers.values(), key=lambda b: b.id):
        e = b.endpoint(listener_name)
        if not b.fenced and e is not None:
            out.append((b.id, e.host, e.port, b.rack))
    return out


def _brokers(services: BrokerServices, ctx: RequestContext) -> list[Any]:
    if in_cluster(services):
        return [MetadataResponse.MetadataResponseBroker(node_id=i, host=h, port=p, rack=r)
                for i, h, p, r in alive_brokers(services, ctx.listener_name)]
    endpoints = list(services.config.advertised_listeners)
    chosen = [e for e in endpoints if e.name == ctx.listener_name] or endpoints[:1]
    rack = registered_rack(services)
    return [
        MetadataResponse.MetadataResponseBroker(node_id=services.node_id, host=e.host, port=e.port, rack=rack)
        for e in chosen[:1]
    ]


def _remote_partition(services: BrokerServices, index: int, reg: Any, listener_name: str, version: int) -> Any:
    """A partition led by another broker (or by none), as the image says (Kafka's
    KRaftMetadataCache.partitionMetadata): no reachable leader -> LEADER_NOT_AVAILABLE with leader -1;
    replicas whose broker is fenced, unregistered or without this listener are offline."""
    brokers = services.metadata.image.cluster.brokers

    def reachable(node: int) -> bool:
        b = brokers.get(node)
        return b is not None and not b.fenced and b.endpoint(listener_name) is not None

    leader = brokers.get(reg.leader)
    leader_ok = leader is not None and leader.endpoint(listener_name) is not None
    return MetadataResponse.MetadataResponsePartition(
        error_code=ErrorCode.NONE if leader_ok else ErrorCode.LEADER_NOT_AVAILABLE,
        partition_index=index,
        leader_id=reg.leader if leader_ok else -1,
        leader_epoch=reg.leader_epoch,
        replica_nodes=list(reg.replicas),
        isr_nodes=list(reg.isr),
        offline_replicas=[r for r in reg.replicas if not reachable(r)] if version >= 5 else [],
    )


def _topic_metadata(services: BrokerServices, info: Any, version: int, include_ops: bool,
                    listener_name: str = "PLAINTEXT") -> Any:
    rm = services.replica_manager
    partitions = []
    node = services.node_id
    topic_image = services.metadata.image.topics.get_topic(info.topic_id) if in_cluster(services) else None
    for p in range(info.num_partitions):
        reg = topic_image.partition(p) if topic_image is not None else None
        if reg is not None and reg.leader != node:
            partitions.append(_remote_partition(services, p, reg, listener_name, version))
            continue
        partition = rm.get_partition(info.name, p)
        if partition is None:
            # Known to the image but not (yet/any more) hosted: Kafka reports the leader as absent.
            partitions.append(
                MetadataResponse.MetadataResponsePartition(
                    error_code=ErrorCode.LEADER_NOT_AVAILABLE,
                    partition_index=p,
                    leader_id=-1,
                    leader_epoch=-1,
                    replica_nodes=[node],
                    isr_nodes=[],
                    offline_replicas=[],
                )
            )
            continue
        offline = partition.is_offline
        replicas = list(reg.replicas) if reg is not None else [node]
        isr = list(reg.isr) if reg is not None else [node]
        partitions.append(
            MetadataResponse.MetadataResponsePartition(
                # A failed log directory: the controller drops the replica from leadership, so Kafka's
                # metadata shows no leader (LEADER_NOT_AVAILABLE) and the replica as offline.
                error_code=ErrorCode.LEADER_NOT_AVAILABLE if offline else ErrorCode.NONE,
                partition_index=p,
                leader_id=-1 if offline else node,
                leader_epoch=partition.leader_epoch,
                replica_nodes=replicas,
                isr_nodes=[] if offline else isr,
                offline_replicas=[node] if offline and version >= 5 else [],
            )
        )
    topic = MetadataResponse.MetadataResponseTopic(
        error_code=ErrorCode.NONE,
        name=info.name,
        is_internal=info.is_internal,
        partitions=partitions,
        topic_authorized_operations=TOPIC_AUTHORIZED_OPERATIONS if include_ops else AUTHORIZED_OPERATIONS_OMITTED,
    )
    if version >= 10:
        topic.topic_id = info.topic_id
    return topic


def _error_topic(name: str | None, error: ErrorCode, version: int, topic_id: uuid.UUID | None = None) -> Any:
    topic = MetadataResponse.MetadataResponseTopic(
        error_code=error,
        name=name,
        is_internal=False,
        partitions=[],
        topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )
    if version >= 10 and topic_id is not None:
        topic.topic_id = topic_id
    return topic


def _controller_id(services: BrokerServices, ctx: RequestContext) -> int:
    """A KRaft broker names an alive broker as the controller (KIP-590: clients send controller-bound
    admin requests to a broker, which forwards them); Kafka picks one at random, kbroker itself."""
    if services.kraft is None:
        return services.node_id
    alive = [b[0] for b in alive_brokers(services, ctx.listener_name)]
    if services.node_id in alive or not alive:
        return services.node_id if alive else -1
    return alive[0]


def error_response(request: Any, version: int, error: ErrorCode) -> MetadataResponse:
    topics = [
        _error_topic(t.name, error, version, t.topic_id) for t in (request.topics or [])
    ]
    resp = MetadataResponse(brokers=[], topics=topics, controller_id=-1, cluster_id=None)
    if version >= 13:
        resp.error_code = error
    return resp


def handle(
    services: BrokerServices, ctx: RequestContext, header: RequestHeader, request: MetadataRequest
) -> MetadataResponse | Awaitable[MetadataResponse]:
    version = header.api_version
    requested = request.topics
    errors: dict[str, ErrorCode] = {}
    if requested and not (version == 0 and not requested):
        if services.authorizer is not None:
            # KafkaApis.handleTopicMetadataRequest: DESCRIBE on each topic asked for, else
            # TOPIC_AUTHORIZATION_FAILED (whether it exists or not), and it is never auto-created.
            for t in requested:
                if t.name is not None and not authorize(services, ctx, DESCRIBE, TOPIC, t.name):
                    errors[t.name] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        allow_auto = bool(services.config["auto.create.topics.enable"]) and (
            version < 4 or bool(request.allow_auto_topic_creation)
        )
        missing = [t.name for t in requested if t.name is not None and t.name not in errors
                   and services.metadata.topic(t.name) is None]
        if allow_auto and missing and services.authorizer is not None:
            # Auto-creation needs CREATE on the cluster or on the topic.
            if not authorize_cluster(services, ctx, CREATE):
                for name in missing:
                    if not authorize(services, ctx, CREATE, TOPIC, name):
                        errors[name] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            missing = [name for name in missing if name not in errors]
        if allow_auto and missing:
            return _create_then_answer(services, ctx, header, request, list(dict.fromkeys(missing)), errors)
    return _answer(services, ctx, header, request, errors)


async def _create_then_answer(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
                              request: MetadataRequest, missing: list[str],
                              auth_errors: dict[str, ErrorCode]) -> MetadataResponse:
    """Kafka's auto topic creation: the missing topics are created through the controller (with the
    broker's defaults) before the answer; a topic whose creation failed gets that error."""
    errors: dict[str, ErrorCode] = dict(auth_errors)
    # A KRaft broker asks the controller with its own num.partitions / default.replication.factor, as
    # Kafka's AutoTopicCreationManager does (-1 would take the controller's).
    explicit = services.kraft is not None
    partitions = int(services.config["num.partitions"]) if explicit else -1
    replication = int(services.config["default.replication.factor"]) if explicit else -1
    for name in missing:
        try:
            await services.controller.create_topic(name, partitions, replication)
        except KafkaError as exc:
            if exc.error_code != ErrorCode.TOPIC_ALREADY_EXISTS:  # raced with another creation
                errors[name] = exc.error_code
    return _answer(services, ctx, header, request, errors)


def _answer(services: BrokerServices, ctx: RequestContext, header: RequestHeader, request: MetadataRequest,
            creation_errors: dict[str, ErrorCode]) -> MetadataResponse:
    version = header.api_version
    store = services.metadata
    include_ops = bool(version >= 8 and request.include_topic_authorized_operations)
    topics_out: list[Any] = []

    requested = request.topics
    # v0: an empty list means "all topics"; v1+: null means all, empty means none.
    all_topics = requested is None or (version == 0 and not requested)
    if all_topics or requested is None:
        for listed in sorted(store.topics(), key=lambda t: t.name):
            # With an authorizer, the topics the principal may not DESCRIBE are left out (not errors).
            if services.authorizer is None or authorize(services, ctx, DESCRIBE, TOPIC, listed.name):
                topics_out.append(_topic_metadata(services, listed, version, include_ops, ctx.listener_name))
    else:
        seen: set[str] = set()
        for t in requested:
            name = t.name
            topic_id = t.topic_id if version >= 10 else ZERO_UUID
            if name is None:
                # v12+: lookup by topic id (Kafka answers UNKNOWN_TOPIC_ID for an id it lacks).
                by_id = store.topic_by_id(topic_id) if topic_id != ZERO_UUID else None
                if by_id is None:
                    topics_out.append(_error_topic(None, ErrorCode.UNKNOWN_TOPIC_ID, version, topic_id))
                elif services.authorizer is not None and not authorize(services, ctx, DESCRIBE, TOPIC, by_id.name):
                    # KafkaApis: ids are not sensitive, so a refused topic keeps its id (and no name).
                    topics_out.append(_error_topic(None, ErrorCode.TOPIC_AUTHORIZATION_FAILED, version, topic_id))
                else:
                    topics_out.append(_topic_metadata(services, by_id, version, include_ops, ctx.listener_name))
                continue
            if name in seen:
                continue
            seen.add(name)
            info = store.topic(name)
            if name in creation_errors:
                topics_out.append(_error_topic(name, creation_errors[name], version))
                continue
            if info is None:
                topics_out.append(_error_topic(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, version))
                continue
            topics_out.append(_topic_metadata(services, info, version, include_ops, ctx.listener_name))

    response = MetadataResponse(
        throttle_time_ms=0,
        brokers=_brokers(services, ctx),
        cluster_id=services.cluster_id,
        controller_id=_controller_id(services, ctx),
        topics=topics_out,
    )
    if include_ops:
        # KIP-430 (KafkaApis): the principal's operations on each topic it may describe, existing or
        # not (all of TOPIC's without an authorizer); none on refused topics and unknown ids.
        for t in topics_out:
            if t.name is not None and t.error_code not in _NO_OPERATIONS:
                t.topic_authorized_operations = authorized_operations(services, ctx, TOPIC, t.name)
    if 8 <= version <= 10 and request.include_cluster_authorized_operations:
        # 0 unless the principal may DESCRIBE the cluster (KafkaApis.handleTopicMetadataRequest).
        response.cluster_authorized_operations = cluster_authorized_operations(services, ctx)
    elif 8 <= version <= 10:
        response.cluster_authorized_operations = AUTHORIZED_OPERATIONS_OMITTED
    if version >= 13:
        response.error_code = ErrorCode.NONE
    return response
