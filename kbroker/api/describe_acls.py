"""DescribeAcls (API key 29, v1-3): SECURITY_DISABLED, as Kafka 4.3.1 answers without an authorizer (see _acls)."""

from __future__ import annotations

from typing import Any

from kbroker.api._acls import NO_AUTHORIZER_DESCRIBE, SECURITY_DISABLED, UNKNOWN
from kbroker.api.context import BrokerServices, CloseConnection, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.describe_acls import DescribeAclsRequest, DescribeAclsResponse

API_KEY = 29
MIN_VERSION = 1
MAX_VERSION = 3
VERSION_NOTES = "No authorizer: SECURITY_DISABLED \"No Authorizer is configured on the broker\", as Kafka 4.3.1 without one."


def error_response(request: Any, version: int, error: ErrorCode) -> DescribeAclsResponse:
    return DescribeAclsResponse(throttle_time_ms=0, error_code=int(error), error_message=error.message, resources=[])


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
           request: DescribeAclsRequest) -> DescribeAclsResponse:
    if UNKNOWN in (request.resource_type_filter, request.pattern_type_filter, request.operation,
                   request.permission_type):
        raise CloseConnection("DescribeAcls filter with UNKNOWN elements (Kafka's DescribeAclsRequest.validate)")
    return DescribeAclsResponse(throttle_time_ms=0, error_code=int(SECURITY_DISABLED),
                                error_message=NO_AUTHORIZER_DESCRIBE, resources=[])
