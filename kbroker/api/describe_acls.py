"""DescribeAcls (API key 29, v1-3): the image's ACLs a filter matches, grouped by resource; DESCRIBE on the cluster.

With StandardAuthorizer: read from the metadata image (AclsImage), CLUSTER_AUTHORIZATION_FAILED for a
principal without DESCRIBE on the cluster. Without an authorizer: SECURITY_DISABLED, as Kafka 4.3.1
answers (see _acls).
"""

from __future__ import annotations

from typing import Any

from kbroker.api._acls import NO_AUTHORIZER_DESCRIBE, SECURITY_DISABLED, UNKNOWN
from kbroker.api._authz import authorize_cluster
from kbroker.api.context import BrokerServices, CloseConnection, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.describe_acls import DescribeAclsRequest, DescribeAclsResponse
from kbroker.security.acl import DESCRIBE, AclFilter

API_KEY = 29
MIN_VERSION = 1
MAX_VERSION = 3
VERSION_NOTES = ("With StandardAuthorizer: the matching ACLs from the image; without an authorizer SECURITY_DISABLED "
                 "\"No Authorizer is configured on the broker\", as Kafka 4.3.1 without one.")


def error_response(request: Any, version: int, error: ErrorCode) -> DescribeAclsResponse:
    return DescribeAclsResponse(throttle_time_ms=0, error_code=int(error), error_message=error.message, resources=[])


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
           request: DescribeAclsRequest) -> DescribeAclsResponse:
    if UNKNOWN in (request.resource_type_filter, request.pattern_type_filter, request.operation,
                   request.permission_type):
        raise CloseConnection("DescribeAcls filter with UNKNOWN elements (Kafka's DescribeAclsRequest.validate)")
    if services.authorizer is None:
        return DescribeAclsResponse(throttle_time_ms=0, error_code=int(SECURITY_DISABLED),
                                    error_message=NO_AUTHORIZER_DESCRIBE, resources=[])
    if not authorize_cluster(services, ctx, DESCRIBE):
        return error_response(request, header.api_version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    f = AclFilter(request.resource_type_filter, request.resource_name_filter, request.pattern_type_filter,
                  request.principal_filter, request.host_filter, request.operation, request.permission_type)
    grouped: dict[tuple[int, str, int], list[DescribeAclsResponse.AclDescription]] = {}
    for acl in services.metadata.image.acls.acls.values():
        if f.matches(acl):
            grouped.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), []).append(
                DescribeAclsResponse.AclDescription(principal=acl.principal, host=acl.host,
                                                    operation=acl.operation, permission_type=acl.permission_type))
    resources = [DescribeAclsResponse.DescribeAclsResource(resource_type=t, resource_name=n, pattern_type=p, acls=acls)
                 for (t, n, p), acls in sorted(grouped.items())]
    return DescribeAclsResponse(throttle_time_ms=0, error_code=0, error_message=None, resources=resources)
