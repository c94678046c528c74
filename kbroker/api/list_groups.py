"""ListGroups (key 16): every group this broker coordinates, filtered by state (v4+) and type (v5+).

Versions 0-5. Filters are case-insensitive; classic groups are of type "classic", KIP-848 groups of
type "consumer" (protocol type "consumer", states Empty / Assigning / Reconciling / Stable). While a `__consumer_offsets` partition is still loading the answer carries
COORDINATOR_LOAD_IN_PROGRESS with the groups already loaded.
"""

from __future__ import annotations

from typing import Any

from kbroker.api._authz import authorize, authorize_cluster
from kbroker.api._groups import coordinator, runtime, then
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.list_groups import ListGroupsRequest, ListGroupsResponse
from kbroker.security.acl import DESCRIBE, GROUP

API_KEY = 16
MIN_VERSION = 0
MAX_VERSION = 5


def error_response(request: ListGroupsRequest, version: int, error: ErrorCode) -> ListGroupsResponse:
    return ListGroupsResponse(error_code=error)


def handle(services: BrokerServices, ctx: RequestContext, header: Any, request: ListGroupsRequest) -> Any:
    version = header.api_version
    states = list(request.states_filter) if version >= 4 else []
    types = list(request.types_filter) if version >= 5 else []
    error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if runtime(services).loading else ErrorCode.NONE
    # KafkaApis.handleListGroupsRequest: DESCRIBE on the cluster lists every group; otherwise only the
    # groups the principal may DESCRIBE (never an authorization error).
    everything = services.authorizer is None or authorize_cluster(services, ctx, DESCRIBE)
    return then(coordinator(services).list_groups(states, types), lambda listed: ListGroupsResponse(
        error_code=error, groups=[
            ListGroupsResponse.ListedGroup(group_id=g, protocol_type=pt, group_state=state, group_type=gtype)
            for g, pt, state, gtype in listed
            if everything or authorize(services, ctx, DESCRIBE, GROUP, g)
        ]))
