"""CreateDelegationToken (key 38, v1-3; KIP-48, KIP-373): a token for the requester or, with CreateTokens
on the USER resource of another principal, for that owner.

`kafka-delegation-tokens.sh --create --max-life-time-period -1 [--renewer-principal User:bob]
[--owner-principal User:carol]` sends this. The broker refuses what Kafka's `KafkaApis` refuses
(DELEGATION_TOKEN_REQUEST_NOT_ALLOWED on a token-authenticated or non-SASL connection,
DELEGATION_TOKEN_AUTHORIZATION_FAILED for another owner without CreateTokens, INVALID_PRINCIPAL_TYPE
for a renewer that is not a User), then the controller writes a DelegationTokenRecord
(kbroker/controller/delegation_token_control.py): a KRaft broker forwards the request as it came.
"""

from __future__ import annotations

from kbroker.api._authz import authorize
from kbroker.api._delegation_tokens import allow_token_requests
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.create_delegation_token import (
    CreateDelegationTokenRequest,
    CreateDelegationTokenResponse,
)
from kbroker.security.acl import CREATE_TOKENS, USER

API_KEY = 38
MIN_VERSION = 1
MAX_VERSION = 3


def _owner(request: CreateDelegationTokenRequest, requester: str) -> str:
    if request.owner_principal_name:
        return f"{request.owner_principal_type}:{request.owner_principal_name}"
    return requester


async def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
                 request: CreateDelegationTokenRequest) -> CreateDelegationTokenResponse:
    return _at_version(await _handle(services, ctx, header, request), header.api_version)


async def _handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
                  request: CreateDelegationTokenRequest) -> CreateDelegationTokenResponse:
    requester = ctx.principal
    owner = _owner(request, requester)
    if not allow_token_requests(services, ctx):
        return _error(ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, owner, requester)
    if owner != requester and not authorize(services, ctx, CREATE_TOKENS, USER, owner):
        # The requester may always create a token for itself.
        return _error(ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED, owner, requester)
    if any(r.principal_type != "User" for r in request.renewers):
        return _error(ErrorCode.INVALID_PRINCIPAL_TYPE, owner, requester)
    if services.kraft is not None:
        response = await services.kraft.controller.forward_request(ctx, header, request)
        assert isinstance(response, CreateDelegationTokenResponse)
        return response
    return await services.controller.create_delegation_token(requester, request)


def _at_version(response: CreateDelegationTokenResponse, version: int) -> CreateDelegationTokenResponse:
    """The requester fields exist from v3 (KIP-373): Kafka's `prepareResponse` sets them only then."""
    if version < 3:
        response.token_requester_principal_type = ""
        response.token_requester_principal_name = ""
    return response


def _error(error: ErrorCode, owner: str, requester: str) -> CreateDelegationTokenResponse:
    """Kafka's `CreateDelegationTokenResponse.prepareResponse(version, throttle, error, owner, requester)`."""
    owner_type, _, owner_name = owner.partition(":")
    requester_type, _, requester_name = requester.partition(":")
    return CreateDelegationTokenResponse(
        error_code=int(error), principal_type=owner_type, principal_name=owner_name,
        token_requester_principal_type=requester_type, token_requester_principal_name=requester_name,
        issue_timestamp_ms=-1, expiry_timestamp_ms=-1, max_timestamp_ms=-1, token_id="", hmac=b"",
        throttle_time_ms=0)


def error_response(request: CreateDelegationTokenRequest, version: int,
                   error: ErrorCode) -> CreateDelegationTokenResponse:
    return _at_version(_error(error, _owner(request, "User:ANONYMOUS"), "User:ANONYMOUS"), version)
