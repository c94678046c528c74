"""LeaveGroup (key 13): members leave a classic group (one member in v0-2, a batch from v3, KIP-345).

Versions 0-5 (v5 adds a reason per member). In v0-2 the member's own error is the top-level error.
"""

from __future__ import annotations

from typing import Any

from kbroker.api._authz import authorize
from kbroker.api._groups import coordinator, then
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse
from kbroker.security.acl import GROUP, READ

API_KEY = 13
MIN_VERSION = 0
MAX_VERSION = 5


def error_response(request: LeaveGroupRequest, version: int, error: ErrorCode) -> LeaveGroupResponse:
    return LeaveGroupResponse(error_code=error)


def handle(services: BrokerServices, ctx: RequestContext, header: Any, request: LeaveGroupRequest) -> Any:
    if services.authorizer is not None and not authorize(services, ctx, READ, GROUP, request.group_id):
        # KafkaApis: READ on the group, else GROUP_AUTHORIZATION_FAILED.
        return error_response(request, header.api_version, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    version = header.api_version
    if version <= 2:
        identities: list[tuple[str, str | None]] = [(request.member_id, None)]
    else:
        identities = [(m.member_id, m.group_instance_id) for m in request.members]
    answer = coordinator(services).leave_group(request.group_id, identities)
    return then(answer, lambda a: to_response(version, identities, *a))


def to_response(version: int, identities: list[tuple[str, str | None]], error: ErrorCode,
                results: list[ErrorCode]) -> LeaveGroupResponse:
    if version <= 2:
        if error == ErrorCode.NONE and results:
            error = results[0]
        return LeaveGroupResponse(error_code=error)
    if error != ErrorCode.NONE:
        return LeaveGroupResponse(error_code=error)
    return LeaveGroupResponse(
        error_code=ErrorCode.NONE,
        members=[
            LeaveGroupResponse.MemberResponse(member_id=m, group_instance_id=i, error_code=e)
            for (m, i), e in zip(identities, results, strict=True)
        ],
    )
