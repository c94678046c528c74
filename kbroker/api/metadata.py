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
from dataclasses import dataclass
from typing import Any

from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.metadata import MetadataRequest, MetadataResponse

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

ZERO_UUID = uuid.UUID(int=0)


def registered_rack(services: BrokerServices) -> str | None:
    """This broker's rack as registered in the metadata image (`broker.rack`), as Kafka's metadata
    cache reports it; None before registration or without `broker.rack`."""
    registration = services.metadata.image.cluster.broker(services.node_id)
    return None if registration is None else registration.rack


def _multi_broker(services: BrokerServices) -> bool:
    """Whether the image registers brokers other than this one (a cluster: replication, issue 12)."""
    return any(b != services.node_id for b in services.metadata.image.cluster.brokers)


@dataclass(frozen=True, slots=True)
class ClusterPartitionView:
    """A partition as the metadata image registers it (Kafka's KRaftMetadataCache view)."""

    error: ErrorCode
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    elr: tuple[int, ...]
    last_known_elr: tuple[int, ...]


def cluster_partition(services: BrokerServices, topic: str, index: int) -> ClusterPartitionView | None:
    """The registration's leader, epochs, replicas and ISR when the image registers other brokers (a
    cluster, issue 12); None on a single node (the answer then comes from the hosted partition). The
    leader is reported only if its broker is registered and unfenced and, when it is this broker, the
    partition is hosted and online (else LEADER_NOT_AVAILABLE, leader -1)."""
    if not _multi_broker(services):
        return None
    image = services.metadata.image
    reg = image.partition(topic, index)
    if reg is None:
        return None
    leader_reg = image.cluster.broker(reg.leader) if reg.leader >= 0 else None
    hosted = services.replica_manager.get_partition(topic, index)
    available = leader_reg is not None and not leader_reg.fenced and (
        reg.leader != services.node_id or (hosted is not None and not hosted.is_offline))
    return ClusterPartitionView(ErrorCode.NONE if available else ErrorCode.LEADER_NOT_AVAILABLE,
                                reg.leader if available else -1, reg.leader_epoch, reg.replicas, reg.isr, reg.elr,
                                reg.last_known_elr)


def _cluster_brokers(services: BrokerServices, ctx: RequestContext) -> list[Any]:
    """Every live (unfenced) registered broker with its endpoint for the request's listener, as
    Kafka's KRaftMetadataCache answers."""
    out = []
    for reg in sorted(services.metadata.image.cluster.brokers.values(), key=lambda b: b.id):
        if reg.fenced:
            continue
        ep = reg.endpoint(ctx.listener_name)
        if ep is None:
            continue
        out.append(MetadataResponse.MetadataResponseBroker(node_id=reg.id, host=ep.host, port=ep.port, rack=reg.rack))
    return out


def _brokers(services: BrokerServices, ctx: RequestContext) -> list[Any]:
    if _multi_broker(services):
        return _cluster_brokers(services, ctx)
    endpoints = list(services.config.advertised_listeners)
    chosen = [e for e in endpoints if e.name == ctx.listener_name] or endpoints[:1]
    rack = registered_rack(services)
    return [
        MetadataResponse.MetadataResponseBroker(node_id=services.node_id, host=e.host, port=e.port, rack=rack)
        for e in chosen[:1]
    ]


def _topic_metadata(services: BrokerServices, info: Any, version: int, include_ops: bool) -> Any:
    rm = services.replica_manager
    partitions = []
    node = services.node_id
    multi = _multi_broker(services)
    for p in range(info.num_partitions):
        partition = rm.get_partition(info.name, p)
        view = cluster_partition(services, info.name, p) if multi else None
        if view is not None:
            partitions.append(
                MetadataResponse.MetadataResponsePartition(
                    error_code=view.error,
                    partition_index=p,
                    leader_id=view.leader,
                    leader_epoch=view.leader_epoch,
                    replica_nodes=list(view.replicas),
                    isr_nodes=list(view.isr),
                    offline_replicas=[],
                )
            )
            continue
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
        partitions.append(
            MetadataResponse.MetadataResponsePartition(
                # A failed log directory: the controller drops the replica from leadership, so Kafka's
                # metadata shows no leader (LEADER_NOT_AVAILABLE) and the replica as offline.
                error_code=ErrorCode.LEADER_NOT_AVAILABLE if offline else ErrorCode.NONE,
                partition_index=p,
                leader_id=-1 if offline else node,
                leader_epoch=partition.leader_epoch,
                replica_nodes=[node],
                isr_nodes=[] if offline else [node],
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
    if requested and not (version == 0 and not requested):
        allow_auto = bool(services.config["auto.create.topics.enable"]) and (
            version < 4 or bool(request.allow_auto_topic_creation)
        )
        missing = [t.name for t in requested if t.name is not None and services.metadata.topic(t.name) is None]
        if allow_auto and missing:
            return _create_then_answer(services, ctx, header, request, list(dict.fromkeys(missing)))
    return _answer(services, ctx, header, request, {})


async def _create_then_answer(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
                              request: MetadataRequest, missing: list[str]) -> MetadataResponse:
    """Kafka's auto topic creation: the missing topics are created through the controller (with the
    broker's defaults) before the answer; a topic whose creation failed gets that error."""
    errors: dict[str, ErrorCode] = {}
    for name in missing:
        try:
            await services.controller.create_topic(name)
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
            topics_out.append(_topic_metadata(services, listed, version, include_ops))
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
                else:
                    topics_out.append(_topic_metadata(services, by_id, version, include_ops))
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
            topics_out.append(_topic_metadata(services, info, version, include_ops))

    response = MetadataResponse(
        throttle_time_ms=0,
        brokers=_brokers(services, ctx),
        cluster_id=services.cluster_id,
        controller_id=services.node_id,
        topics=topics_out,
    )
    if 8 <= version <= 10 and request.include_cluster_authorized_operations:
        response.cluster_authorized_operations = CLUSTER_AUTHORIZED_OPERATIONS
    elif 8 <= version <= 10:
        response.cluster_authorized_operations = AUTHORIZED_OPERATIONS_OMITTED
    if version >= 13:
        response.error_code = ErrorCode.NONE
    return response
