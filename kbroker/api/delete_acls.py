"""DeleteAcls (API key 31, v1-3): remove the ACLs each filter matches, through the controller; ALTER on the cluster.

With StandardAuthorizer each filter's result lists the ACLs it removed (RemoveAccessControlEntryRecord);
a principal without ALTER on the cluster gets CLUSTER_AUTHORIZATION_FAILED per filter. Without an
authorizer: SECURITY_DISABLED per filter, as Kafka 4.3.1 (see _acls).
"""

from __future__ import annotations

from typing import Any

from kbroker.api._acls import NO_AUTHORIZER, SECURITY_DISABLED, UNKNOWN
from kbroker.api._authz import authorize_cluster
from kbroker.api.context import BrokerServices, CloseConnection, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.delete_acls import DeleteAclsRequest, DeleteAclsResponse
from kbroker.security.acl import ALTER, AclFilter

API_KEY = 31
MIN_VERSION = 1
MAX_VERSION = 3
VERSION_NOTES = ("With StandardAuthorizer: removes the matching ACLs; without an authorizer each filter gets "
                 "SECURITY_DISABLED \"No Authorizer is configured.\", as Kafka 4.3.1.")

Result = DeleteAclsResponse.DeleteAclsFilterResult
Matching = DeleteAclsResponse.DeleteAclsMatchingAcl


def error_response(request: DeleteAclsRequest, version: int, error: ErrorCode) -> DeleteAclsResponse:
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
        Result(error_code=int(error), error_message=error.message, matching_acls=[]) for _ in request.filters])


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
           request: DeleteAclsRequest) -> Any:
    for f in request.filters:
        if UNKNOWN in (f.resource_type_filter, f.pattern_type_filter, f.operation, f.permission_type):
            raise CloseConnection("DeleteAcls filter with UNKNOWN elements (Kafka's DeleteAclsRequest.validate)")
    if services.kraft is not None:
        # A KRaft broker forwards it as it came (KafkaApis.forwardToController): the controller
        # authorizes the client's principal and writes the records; the image brings them back.
        return services.kraft.controller.forward_request(ctx, header, request)
    if services.authorizer is None:
        return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
            Result(error_code=int(SECURITY_DISABLED), error_message=NO_AUTHORIZER, matching_acls=[])
            for _ in request.filters])
    if not authorize_cluster(services, ctx, ALTER):
        return error_response(request, header.api_version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    filters = [AclFilter(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter, f.principal_filter,
                         f.host_filter, f.operation, f.permission_type) for f in request.filters]
    return _delete(services, filters)


async def _delete(services: BrokerServices, filters: list[AclFilter]) -> DeleteAclsResponse:
    results = await services.controller.delete_acls(filters)
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
        Result(error_code=int(r.error_code), error_message=r.error_message, matching_acls=[
            Matching(error_code=0, error_message=None, resource_type=a.resource_type,
                     resource_name=a.resource_name, pattern_type=a.pattern_type, principal=a.principal,
                     host=a.host, operation=a.operation, permission_type=a.permission_type)
            for a in r.deleted]) for r in results])
