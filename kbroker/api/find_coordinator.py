"""FindCoordinator (key 10): which broker coordinates a group or a transactional id.

Versions 0-6 (v4 batches keys, KIP-699; v5 only allows the TRANSACTION_ABORTABLE error, KIP-890, which
needs transactions and so never occurs here; v6 adds the SHARE key type, KIP-932). A GROUP key
maps to partition `abs(hashCode(group)) % partitions` of `__consumer_offsets`, created here on first
use as Kafka does; this node leads every partition, so it is always the answer. A TRANSACTION key maps
to partition `abs(hashCode(transactional.id)) % partitions` of `__transaction_state`, created on first
use the same way (the transaction coordinator, `TransactionCoordinatorService`). A SHARE key answers INVALID_REQUEST below v6 and
from v6 names the leader of the key's `__share_group_state` partition (`abs(hashCode("group:topicId:
partition")) % partitions`, Kafka's ShareCoordinatorService.partitionFor), whose share coordinator
serves InitializeShareGroupState / Read / Write / Delete / ReadShareGroupStateSummary (83-87); the topic
is created on first use and COORDINATOR_NOT_AVAILABLE answered meanwhile, as Kafka does; a malformed
key answers INVALID_REQUEST. Share consumers find their group coordinator with a GROUP key. librdkafka only enables LZ4 when this API is
advertised.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Awaitable

from kbroker.api._authz import authorize
from kbroker.api._groups import runtime
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.coord.share_coordinator import SharePartitionKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from kbroker.protocol.topic import (
    GROUP_METADATA_TOPIC_NAME,
    SHARE_GROUP_STATE_TOPIC_NAME,
    TRANSACTION_STATE_TOPIC_NAME,
)
from kbroker.security.acl import DESCRIBE, GROUP, TRANSACTIONAL_ID

API_KEY = 10
MIN_VERSION = 0
MAX_VERSION = 6
VERSION_NOTES = ("GROUP keys (creates __consumer_offsets on first use); TRANSACTION keys (creates "
                 "__transaction_state on first use); SHARE keys (v6): the leader of the key's __share_group_state partition (created on first use).")

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
SHARE_KEY_TYPE = 2


def _message(error: ErrorCode) -> str | None:
    return None if error == ErrorCode.NONE else error.message


def error_response(request: FindCoordinatorRequest, version: int, error: ErrorCode) -> FindCoordinatorResponse:
    if version >= 4:
        return FindCoordinatorResponse(coordinators=[
            FindCoordinatorResponse.Coordinator(key=k, node_id=-1, host="", port=-1, error_code=error,
                                                error_message=_message(error))
            for k in request.coordinator_keys
        ])
    return FindCoordinatorResponse(error_code=error, error_message=_message(error), node_id=-1, host="", port=-1)


def _share_key(key: str) -> SharePartitionKey | None:
    """Kafka's SharePartitionKey.getInstance(String): three ':'-separated parts, a topic id in Kafka's
    base64 form and an int partition; None when malformed."""
    parts = key.split(":")
    if len(parts) != 3 or not parts[0]:
        return None
    try:
        raw = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))
        partition = int(parts[2])
    except (ValueError, binascii.Error):
        return None
    if len(raw) != 16 or not -(2**31) <= partition < 2**31:
        return None
    return parts[0], uuid.UUID(bytes=raw), partition


def _lookup(services: BrokerServices, ctx: RequestContext, key_type: int,
            version: int, key: str = "") -> tuple[ErrorCode, int, str, int]:
    if services.authorizer is not None:
        # KafkaApis.getCoordinator: DESCRIBE on the group / transactional id, checked first.
        if key_type == GROUP_KEY_TYPE and not authorize(services, ctx, DESCRIBE, GROUP, key):
            return ErrorCode.GROUP_AUTHORIZATION_FAILED, -1, "", -1
        if key_type == TRANSACTION_KEY_TYPE and not authorize(services, ctx, DESCRIBE, TRANSACTIONAL_ID, key):
            return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, "", -1
    share_partition: int | None = None
    if key_type == GROUP_KEY_TYPE:
        error = runtime(services).offsets_topic_status()
    elif key_type == TRANSACTION_KEY_TYPE:
        error = services.transaction_coordinator.state_topic_status()
        if error == ErrorCode.NONE and services.kraft is None:
            # On a single node this broker is every id's coordinator; in a cluster the answer is the
            # leader of the id's __transaction_state partition, from the image (below), as Kafka's.
            error = services.transaction_coordinator.coordinator_status(key)
    elif key_type == SHARE_KEY_TYPE:
        # KafkaApis.getCoordinator: the SHARE type needs v6; the key must be "group:topicId:partition"
        # (SharePartitionKey.getInstance, else INVALID_REQUEST); the coordinator is the leader of the
        # key's __share_group_state partition, created on first use (COORDINATOR_NOT_AVAILABLE until then).
        share_key = _share_key(key) if version >= 6 else None
        sc = services.share_coordinator
        if share_key is None:
            error = ErrorCode.INVALID_REQUEST
        elif sc is None or not sc.active:
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        else:
            share_partition = sc.coordinator_partition(share_key)
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE if share_partition is None else ErrorCode.NONE
    else:
        error = ErrorCode.INVALID_REQUEST
    if error != ErrorCode.NONE:
        return error, -1, "", -1
    if services.kraft is not None:
        # In a KRaft cluster the coordinator is the leader of the group's __consumer_offsets partition.
        image = services.metadata.image
        if key_type == TRANSACTION_KEY_TYPE:
            reg = image.partition(TRANSACTION_STATE_TOPIC_NAME, services.transaction_coordinator.partition_for(key))
        elif key_type == SHARE_KEY_TYPE:
            reg = image.partition(SHARE_GROUP_STATE_TOPIC_NAME, share_partition or 0)
        else:
            reg = image.partition(GROUP_METADATA_TOPIC_NAME, runtime(services).partition_for(key))
        leader = image.cluster.broker(reg.leader) if reg is not None else None
        endpoint = leader.endpoint(ctx.listener_name) if leader is not None and not leader.fenced else None
        if reg is None or endpoint is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        return ErrorCode.NONE, reg.leader, endpoint.host, endpoint.port
    endpoints = list(services.config.advertised_listeners)
    chosen = [e for e in endpoints if e.name == ctx.listener_name] or endpoints[:1]
    if not chosen:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
    return ErrorCode.NONE, services.node_id, chosen[0].host, chosen[0].port


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
           request: FindCoordinatorRequest) -> FindCoordinatorResponse | Awaitable[FindCoordinatorResponse]:
    key_type = request.key_type if header.api_version >= 1 else GROUP_KEY_TYPE
    if key_type == GROUP_KEY_TYPE and runtime(services).offsets_topic_status() == ErrorCode.COORDINATOR_NOT_AVAILABLE:
        # First group request: create __consumer_offsets through the controller, then answer.
        return _after_creating_offsets_topic(services, ctx, header, request)
    if key_type == TRANSACTION_KEY_TYPE and \
            services.transaction_coordinator.state_topic_status() == ErrorCode.COORDINATOR_NOT_AVAILABLE:
        return _after_creating_state_topic(services, ctx, header, request)
    return _answer(services, ctx, header, request)


async def _after_creating_offsets_topic(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
                                        request: FindCoordinatorRequest) -> FindCoordinatorResponse:
    await runtime(services).create_offsets_topic()
    return _answer(services, ctx, header, request)


async def _after_creating_state_topic(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
                                      request: FindCoordinatorRequest) -> FindCoordinatorResponse:
    await services.transaction_coordinator.create_state_topic()
    return _answer(services, ctx, header, request)


def _answer(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
            request: FindCoordinatorRequest) -> FindCoordinatorResponse:
    version = header.api_version
    if version >= 4:
        coordinators = []
        for key in request.coordinator_keys:
            error, node, host, port = _lookup(services, ctx, request.key_type, version, key)
            # Kafka answers SHARE keys with an empty error message, whatever the error.
            message = "" if request.key_type == SHARE_KEY_TYPE else _message(error)
            coordinators.append(FindCoordinatorResponse.Coordinator(
                key=key, node_id=node, host=host, port=port, error_code=error, error_message=message))
        return FindCoordinatorResponse(coordinators=coordinators)
    key_type = request.key_type if version >= 1 else GROUP_KEY_TYPE
    error, node, host, port = _lookup(services, ctx, key_type, version, request.key)
    return FindCoordinatorResponse(error_code=error, error_message=_message(error), node_id=node, host=host,
                                   port=port)
