"""DeleteGroups (key 42): delete empty groups and their committed offsets (tombstones in the log).

Versions 0-2. GROUP_ID_NOT_FOUND for unknown groups, NON_EMPTY_GROUP while the group has members.
"""

from __future__ import annotations

from typing import Any

from kbroker.api._authz import filter_authorized
from kbroker.api._groups import coordinator, then
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from kbroker.security.acl import DELETE, GROUP

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2

R = DeleteGroupsResponse


def error_response(request: DeleteGroupsRequest, version: int, error: ErrorCode) -> DeleteGroupsResponse:
    return R(results=[R.DeletableGroupResult(group_id=g, error_code=error) for g in request.groups_names])


def handle(services: BrokerServices, ctx: RequestContext, header: Any, request: DeleteGroupsRequest) -> Any:
    # KafkaApis.handleDeleteGroupsRequest: each group once, DELETE on it; the authorized groups'
    # results first, then GROUP_AUTHORIZATION_FAILED for the others.
    distinct = list(dict.fromkeys(request.groups_names))
    if services.authorizer is None:
        names, denied = distinct, []
    else:
        allowed = filter_authorized(services, ctx, DELETE, GROUP, distinct)
        names = [g for g in distinct if g in allowed]
        denied = [g for g in distinct if g not in allowed]
    refused = [R.DeletableGroupResult(group_id=g, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED) for g in denied]
    if not names:
        return R(results=refused)
    return then(coordinator(services).delete_groups(names), lambda errors: R(results=[
        R.DeletableGroupResult(group_id=g, error_code=e) for g, e in zip(names, errors, strict=True)] + refused))
