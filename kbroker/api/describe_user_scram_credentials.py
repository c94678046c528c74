"""DescribeUserScramCredentials (key 50, v0; KIP-554): mechanisms and iterations of users' SCRAM credentials.

Answered from the metadata image's `ScramImage`, as Kafka's broker does (`ScramImage.describe`): no
users named (null or empty) lists every user with a credential; a user named twice is
DUPLICATE_RESOURCE, a user without credentials RESOURCE_NOT_FOUND. Never the salt or the keys.
"""

from __future__ import annotations

from kbroker.api._authz import authorize_cluster
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.describe_user_scram_credentials import (
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from kbroker.security.acl import DESCRIBE

API_KEY = 50
MIN_VERSION = 0
MAX_VERSION = 0

Result = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
Info = DescribeUserScramCredentialsResponse.CredentialInfo


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
           request: DescribeUserScramCredentialsRequest) -> DescribeUserScramCredentialsResponse:
    if not authorize_cluster(services, ctx, DESCRIBE):
        # KafkaApis: DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
        return error_response(request, header.api_version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    credentials = services.metadata.image.scram.credentials
    by_user: dict[str, list[Info]] = {}
    for (mechanism, user), cred in sorted(credentials.items()):
        by_user.setdefault(user, []).append(Info(mechanism=mechanism, iterations=cred.iterations))
    results = []
    if not request.users:
        results = [Result(user=u, error_code=0, error_message=None, credential_infos=infos)
                   for u, infos in sorted(by_user.items())]
    else:
        names = [u.name for u in request.users]
        for name in dict.fromkeys(names):
            if names.count(name) > 1:
                results.append(Result(user=name, error_code=int(ErrorCode.DUPLICATE_RESOURCE),
                                      error_message="Cannot describe SCRAM credentials for the same user twice "
                                                    "in a single request", credential_infos=[]))
            elif name not in by_user:
                results.append(Result(user=name, error_code=int(ErrorCode.RESOURCE_NOT_FOUND),
                                      error_message="Attempt to describe a user credential that does not exist",
                                      credential_infos=[]))
            else:
                results.append(Result(user=name, error_code=0, error_message=None,
                                      credential_infos=by_user[name]))
    return DescribeUserScramCredentialsResponse(throttle_time_ms=0, error_code=0, error_message=None,
                                                results=results)


def error_response(request: DescribeUserScramCredentialsRequest, version: int,
                   error: ErrorCode) -> DescribeUserScramCredentialsResponse:
    return DescribeUserScramCredentialsResponse(throttle_time_ms=0, error_code=int(error),
                                                error_message=error.message, results=[])
