"""RenewDelegationToken (key 39, v1-2; KIP-48): the owner or a renewer pushes a token's expiry forward.

`kafka-delegation-tokens.sh --renew --hmac <HMAC> --renew-time-period -1` sends this. Refused with
DELEGATION_TOKEN_REQUEST_NOT_ALLOWED (expiry -1) on a token-authenticated or non-SASL connection;
otherwise the controller decides (kbroker/controller/delegation_token_control.py): a KRaft broker
forwards the request as it came.
"""

from __future__ import annotations

from kbroker.api._delegation_tokens import allow_token_requests
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.renew_delegation_token import (
    RenewDelegationTokenRequest,
    RenewDelegationTokenResponse,
)
from kbroker.security.delegation_token import ERROR_TIMESTAMP

API_KEY = 39
MIN_VERSION = 1
MAX_VERSION = 2


async def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
                 request: RenewDelegationTokenRequest) -> RenewDelegationTokenResponse:
    if not allow_token_requests(services, ctx):
        return error_response(request, header.api_version, ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)
    if services.kraft is not None:
        response = await services.kraft.controller.forward_request(ctx, header, request)
        assert isinstance(response, RenewDelegationTokenResponse)
        return response
    return await services.controller.renew_delegation_token(ctx.principal, request)


def error_response(request: RenewDelegationTokenRequest, version: int,
                   error: ErrorCode) -> RenewDelegationTokenResponse:
    return RenewDelegationTokenResponse(error_code=int(error), expiry_timestamp_ms=ERROR_TIMESTAMP,
                                        throttle_time_ms=0)
