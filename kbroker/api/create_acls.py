"""CreateAcls (API key 30, v1-3): SECURITY_DISABLED per creation, as Kafka 4.3.1 without an authorizer (see _acls)."""

from __future__ import annotations

from typing import Any

from kbroker.api._acls import ANY, MATCH, NO_AUTHORIZER, SECURITY_DISABLED, UNKNOWN
from kbroker.api.context import BrokerServices, CloseConnection, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.create_acls import CreateAclsRequest, CreateAclsResponse

API_KEY = 30
MIN_VERSION = 1
MAX_VERSION = 3
VERSION_NOTES = "No authorizer: each creation gets SECURITY_DISABLED \"No Authorizer is configured.\", as Kafka 4.3.1."

Result = CreateAclsResponse.AclCreationResult


def error_response(request: CreateAclsRequest, version: int, error: ErrorCode) -> CreateAclsResponse:
    return CreateAclsResponse(throttle_time_ms=0, results=[
        Result(error_code=int(error), error_message=error.message) for _ in request.creations])


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
           request: CreateAclsRequest) -> Any:
    for c in request.creations:
        # An AclBinding cannot hold UNKNOWN or ANY (nor a MATCH pattern): Kafka's request fails to parse.
        if (c.resource_type in (UNKNOWN, ANY) or c.resource_pattern_type in (UNKNOWN, ANY, MATCH)
                or c.operation in (UNKNOWN, ANY) or c.permission_type in (UNKNOWN, ANY)):
            raise CloseConnection("CreateAcls binding with UNKNOWN/ANY elements (Kafka's CreateAclsRequest.validate)")
    return CreateAclsResponse(throttle_time_ms=0, results=[
        Result(error_code=int(SECURITY_DISABLED), error_message=NO_AUTHORIZER) for _ in request.creations])
