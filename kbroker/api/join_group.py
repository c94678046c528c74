"""JoinGroup (key 11): join a classic group and wait for the rebalance's join phase to complete.

Versions 0-9. v0 has no rebalance timeout (the session timeout is used), v4+ gets the KIP-394
MEMBER_ID_REQUIRED two-step join, v5+ static membership (KIP-345), v7+ protocol type/name in the
response, v8 a reason, v9 `skip_assignment` for a static leader rejoining a stable group (KIP-814).
The response waits on a loop future completed by the coordinator (no task per request).
"""

from __future__ import annotations

from typing import Any

from kbroker.api._authz import authorize
from kbroker.api._groups import callback_future, client_host, coordinator
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.coord.group import JoinResult
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from kbroker.security.acl import GROUP, READ

API_KEY = 11
MIN_VERSION = 0
MAX_VERSION = 9
VERSION_NOTES = "Classic protocol: MEMBER_ID_REQUIRED (v4+), static membership (v5+), skip_assignment (v9)."


def error_response(request: JoinGroupRequest, version: int, error: ErrorCode) -> JoinGroupResponse:
    return to_response(JoinResult(error, request.member_id), version)


def to_response(result: JoinResult, version: int) -> JoinGroupResponse:
    protocol_name = result.protocol_name
    if version < 7 and protocol_name is None:
        protocol_name = ""  # nullable only from v7
    return JoinGroupResponse(
        error_code=result.error,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=protocol_name,
        leader=result.leader,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=[
            JoinGroupResponse.JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=meta)
            for m, i, meta in result.members
        ],
    )


def handle(services: BrokerServices, ctx: RequestContext, header: Any, request: JoinGroupRequest) -> Any:
    if services.authorizer is not None and not authorize(services, ctx, READ, GROUP, request.group_id):
        # KafkaApis: READ on the group, else GROUP_AUTHORIZATION_FAILED.
        return error_response(request, header.api_version, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    version = header.api_version

    def convert(result: JoinResult) -> JoinGroupResponse:
        return to_response(result, version)

    future, respond = callback_future(convert)
    rebalance_timeout = request.rebalance_timeout_ms if version >= 1 else request.session_timeout_ms
    coordinator(services).join_group(
        request.group_id,
        request.member_id,
        request.group_instance_id if version >= 5 else None,
        request.protocol_type,
        [(p.name, bytes(p.metadata)) for p in request.protocols],
        request.session_timeout_ms,
        rebalance_timeout,
        ctx.client_id or "",
        client_host(ctx),
        version >= 4,
        respond,
        supports_skip_assignment=version >= 9,
    )
    return future.result() if future.done() else future
