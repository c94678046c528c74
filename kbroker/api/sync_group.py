"""SyncGroup (key 14): the leader sends the assignment; every member waits for its own.

Versions 0-5 (v3 group instance id, v5 protocol type/name checked against the group's). The
response waits on a loop future completed by the coordinator when the leader's assignment is stored.
"""

from __future__ import annotations

from typing import Any

from kbroker.api._authz import authorize
from kbroker.api._groups import callback_future, coordinator
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.coord.group import SyncResult
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse
from kbroker.security.acl import GROUP, READ

API_KEY = 14
MIN_VERSION = 0
MAX_VERSION = 5


def error_response(request: SyncGroupRequest, version: int, error: ErrorCode) -> SyncGroupResponse:
    return to_response(SyncResult(error))


def to_response(result: SyncResult) -> SyncGroupResponse:
    return SyncGroupResponse(error_code=result.error, protocol_type=result.protocol_type,
                             protocol_name=result.protocol_name, assignment=result.assignment)


def handle(services: BrokerServices, ctx: RequestContext, header: Any, request: SyncGroupRequest) -> Any:
    if services.authorizer is not None and not authorize(services, ctx, READ, GROUP, request.group_id):
        # KafkaApis: READ on the group, else GROUP_AUTHORIZATION_FAILED.
        return error_response(request, header.api_version, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    version = header.api_version
    future, respond = callback_future(to_response)
    coordinator(services).sync_group(
        request.group_id,
        request.generation_id,
        request.member_id,
        request.group_instance_id if version >= 3 else None,
        request.protocol_type if version >= 5 else None,
        request.protocol_name if version >= 5 else None,
        {a.member_id: bytes(a.assignment) for a in request.assignments},
        respond,
    )
    return future.result() if future.done() else future
