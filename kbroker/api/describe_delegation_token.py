"""DescribeDelegationToken (key 41, v1-3; KIP-48, KIP-373): the tokens a principal may see, with HMACs.

`kafka-delegation-tokens.sh --describe [--owner-principal User:alice]` sends this. Answered by the
broker from its metadata image (Kafka's `KafkaApis.handleDescribeTokensRequest`): refused with
DELEGATION_TOKEN_REQUEST_NOT_ALLOWED on a token-authenticated or non-SASL connection,
DELEGATION_TOKEN_AUTH_DISABLED without `delegation.token.secret.key`; owners null lists every token,
an empty list none. A token is shown to its owner, requester and renewers, and to whoever may DESCRIBE its
DELEGATION_TOKEN resource (the token id) or DESCRIBE_TOKENS its owner's USER resource
(`DelegationTokenManager.filterToken`). The HMAC is recomputed from the secret key.
"""

from __future__ import annotations

from kbroker.api._authz import authorize
from kbroker.api._delegation_tokens import allow_token_requests, tokens_enabled
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.describe_delegation_token import (
    DescribeDelegationTokenRequest,
    DescribeDelegationTokenResponse,
)
from kbroker.security.acl import DELEGATION_TOKEN, DESCRIBE, DESCRIBE_TOKENS, USER
from kbroker.security.delegation_token import create_hmac, filter_token

API_KEY = 41
MIN_VERSION = 1
MAX_VERSION = 3
# Kafka's controller does not answer it: the broker holds the tokens (its metadata image).
LISTENERS = ("broker",)

Token = DescribeDelegationTokenResponse.DescribedDelegationToken
Renewer = DescribeDelegationTokenResponse.DescribedDelegationTokenRenewer


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
           request: DescribeDelegationTokenRequest) -> DescribeDelegationTokenResponse:
    if not allow_token_requests(services, ctx):
        return error_response(request, header.api_version, ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)
    if not tokens_enabled(services):
        return error_response(request, header.api_version, ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED)
    if request.owners is not None and not request.owners:
        return DescribeDelegationTokenResponse(error_code=0, tokens=[], throttle_time_ms=0)
    owners = None if request.owners is None else [f"{o.principal_type}:{o.principal_name}" for o in request.owners]
    secret = str(services.config["delegation.token.secret.key"])
    tokens = []
    for token in services.metadata.image.delegation_tokens.tokens.values():
        if not filter_token(ctx.principal, owners, token.token_id, token.owner, token.requester, token.renewers,
                            lambda token_id: authorize(services, ctx, DESCRIBE, DELEGATION_TOKEN, token_id),
                            lambda owner: authorize(services, ctx, DESCRIBE_TOKENS, USER, owner)):
            continue
        owner_type, _, owner_name = token.owner.partition(":")
        requester_type, _, requester_name = token.requester.partition(":")
        renewers = [Renewer(principal_type=t, principal_name=n)
                    for t, _, n in (r.partition(":") for r in token.renewers)]
        if header.api_version < 3:  # the requester fields are v3+ (KIP-373)
            requester_type = requester_name = ""
        tokens.append(Token(principal_type=owner_type, principal_name=owner_name,
                            token_requester_principal_type=requester_type,
                            token_requester_principal_name=requester_name,
                            issue_timestamp=token.issue_timestamp, expiry_timestamp=token.expiration_timestamp,
                            max_timestamp=token.max_timestamp, token_id=token.token_id,
                            hmac=create_hmac(token.token_id, secret), renewers=renewers))
    return DescribeDelegationTokenResponse(error_code=0, tokens=tokens, throttle_time_ms=0)


def error_response(request: DescribeDelegationTokenRequest, version: int,
                   error: ErrorCode) -> DescribeDelegationTokenResponse:
    return DescribeDelegationTokenResponse(error_code=int(error), tokens=[], throttle_time_ms=0)
