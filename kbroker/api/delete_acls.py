"""DeleteAcls (API key 31, v1-3): SECURITY_DISABLED per filter, as Kafka 4.3.1 without an authorizer (see _acls)."""

from __future__ import annotations

from typing import Any

from kbroker.api._acls import NO_AUTHORIZER, SECURITY_DISABLED, UNKNOWN
from kbroker.api.context import BrokerServices, CloseConnection, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.delete_acls import DeleteAclsRequest, DeleteAclsResponse

API_KEY = 31
MIN_VERSION = 1
MAX_VERSION = 3
VERSION_NOTES = "No authorizer: each filter gets SECURITY_DISABLED \"No Authorizer is configured.\", as Kafka 4.3.1."

Result = DeleteAclsResponse.DeleteAclsFilterResult


def error_response(request: DeleteAclsRequest, version: int, error: ErrorCode) -> DeleteAclsResponse:
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
        Result(error_code=int(error), error_message=error.message, matching_acls=[]) for _ in request.filters])


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
           request: DeleteAclsRequest) -> Any:
    for f in request.filters:
        if UNKNOWN in (f.resource_type_filter, f.pattern_type_filter, f.operation, f.permission_type):
            raise CloseConnection("DeleteAcls filter with UNKNOWN elements (Kafka's DeleteAclsRequest.validate)")
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
        Result(error_code=int(SECURITY_DISABLED), error_message=NO_AUTHORIZER, matching_acls=[])
        for _ in request.filters])
