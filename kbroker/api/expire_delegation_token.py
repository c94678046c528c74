"""ExpireDelegationToken (key 40, v1-2; KIP-48): the owner or a renewer sets a token's expiry, or
removes the token at once (a negative period).

`kafka-delegation-tokens.sh --expire --hmac <HMAC> --expiry-time-period -1` sends this. Refused with
DELEGATION_TOKEN_REQUEST_NOT_ALLOWED (expiry -1) on a token-authenticated or non-SASL connection;
otherwise the controller decides (kbroker/controller/delegation_token_control.py): a KRaft broker
forwards the request as it came.
"""

from __future__ import annotations

from kbroker.api._delegation_tokens import allow_token_requests
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.expire_delegation_token import (
    ExpireDelegationTokenRequest,
    ExpireDelegationTokenResponse,
)
from kbroker.security.delegation_token import ERROR_TIMESTAMP

API_KEY = 40
MIN_VERSION = 1
MAX_VERSION = 2


async def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
                 request: ExpireDelegationTokenRequest) -> ExpireDelegationTokenResponse:
    if not allow_token_requests(services, ctx):
        return error_response(request, header.api_version, ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)
    if services.kraft is not None:
        response = await services.kraft.controller.forward_request(ctx, header, request)
        assert isinstance(response, ExpireDelegationTokenResponse)
        return response
    return await services.controller.expire_delegation_token(ctx.principal, request)


def error_response(request: ExpireDelegationTokenRequest, version: int,
                   error: ErrorCode) -> ExpireDelegationTokenResponse:
    return ExpireDelegationTokenResponse(error_code=int(error), expiry_timestamp_ms=ERROR_TIMESTAMP,
                                        throttle_time_ms=0)
