"""CreateAcls (API key 30, v1-3): ACLs through the controller (AccessControlEntryRecord), ALTER on the cluster.

With `authorizer.class.name` set (StandardAuthorizer) the controller's AclControlManager validates and
stores each ACL; a principal without ALTER on the cluster gets CLUSTER_AUTHORIZATION_FAILED on every
creation. Without an authorizer: SECURITY_DISABLED per creation, as Kafka 4.3.1 (see _acls).
"""

from __future__ import annotations

from typing import Any

from kbroker.api._acls import ANY, MATCH, NO_AUTHORIZER, SECURITY_DISABLED, UNKNOWN
from kbroker.api._authz import authorize_cluster
from kbroker.api.context import BrokerServices, CloseConnection, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.create_acls import CreateAclsRequest, CreateAclsResponse
from kbroker.security.acl import ALTER, StandardAcl

API_KEY = 30
MIN_VERSION = 1
MAX_VERSION = 3
VERSION_NOTES = ("With StandardAuthorizer: ACLs stored as metadata records; without an authorizer each creation "
                 "gets SECURITY_DISABLED \"No Authorizer is configured.\", as Kafka 4.3.1.")

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
    if services.kraft is not None:
        # A KRaft broker forwards it as it came (KafkaApis.forwardToController): the controller
        # authorizes the client's principal and writes the records; the image brings them back.
        return services.kraft.controller.forward_request(ctx, header, request)
    if services.authorizer is None:
        return CreateAclsResponse(throttle_time_ms=0, results=[
            Result(error_code=int(SECURITY_DISABLED), error_message=NO_AUTHORIZER) for _ in request.creations])
    if not authorize_cluster(services, ctx, ALTER):
        return error_response(request, header.api_version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    acls = [StandardAcl(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host,
                        c.operation, c.permission_type) for c in request.creations]
    return _create(services, acls)


async def _create(services: BrokerServices, acls: list[StandardAcl]) -> CreateAclsResponse:
    results = await services.controller.create_acls(acls)
    return CreateAclsResponse(throttle_time_ms=0, results=[
        Result(error_code=int(r.error_code), error_message=r.error_message) for r in results])
