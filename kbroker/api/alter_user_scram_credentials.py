"""AlterUserScramCredentials (key 51, v0; KIP-554): store SCRAM credentials through the controller.

`kafka-configs --alter --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret]'
--entity-type users --entity-name alice` sends this (the admin client salts and hashes the password;
the controller derives the keys, kbroker/controller/scram_control.py). The credentials are
`UserScramCredentialRecord`s in the metadata image, which SASL/SCRAM listeners read at once.
"""

from __future__ import annotations

from kbroker.api._authz import authorize_cluster
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
)
from kbroker.security.acl import ALTER

API_KEY = 51
MIN_VERSION = 0
MAX_VERSION = 0

Result = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult


async def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
                 request: AlterUserScramCredentialsRequest) -> AlterUserScramCredentialsResponse:
    if services.kraft is not None:
        # A KRaft broker forwards it as it came (KafkaApis.forwardToController): the controller
        # authorizes the client's principal and writes the records; the image brings them back.
        response = await services.kraft.controller.forward_request(ctx, header, request)
        assert isinstance(response, AlterUserScramCredentialsResponse)
        return response
    if not authorize_cluster(services, ctx, ALTER):
        # ControllerApis: ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED for every user.
        return error_response(request, header.api_version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    return await services.controller.alter_user_scram_credentials(request)


def error_response(request: AlterUserScramCredentialsRequest, version: int,
                   error: ErrorCode) -> AlterUserScramCredentialsResponse:
    users = dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions])
    return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[
        Result(user=u, error_code=int(error), error_message=error.message) for u in users])
