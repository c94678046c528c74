"""SaslHandshake (key 17, v0-1): choose the SASL mechanism of a connection on a SASL listener.

On a SASL_PLAINTEXT / SASL_SSL listener the connection's `SaslServerAuthenticator` (kbroker.security.sasl)
answers: the enabled mechanisms (`sasl.enabled.mechanisms`) and NONE, or UNSUPPORTED_SASL_MECHANISM and
a close. Elsewhere (PLAINTEXT, SSL, or a SASL connection already authenticated) Kafka 4.3.1 answers
ILLEGAL_SASL_STATE with an empty mechanism list (observed against the reference broker, v0 and v1):
the client fails at once with a clear error instead of reconnecting forever after a silent close.
"""

from __future__ import annotations

import logging

from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse

API_KEY = 17
MIN_VERSION = 0
MAX_VERSION = 1

log = logging.getLogger(__name__)


def error_response(request: SaslHandshakeRequest, version: int, error: ErrorCode) -> SaslHandshakeResponse:
    return SaslHandshakeResponse(error_code=error, mechanisms=[])


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
           request: SaslHandshakeRequest) -> SaslHandshakeResponse:
    sasl = ctx.sasl
    if sasl is None or sasl.complete:
        return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
    result = sasl.handshake(request.mechanism)
    if result.error_code != ErrorCode.NONE:
        log.info("Failed authentication with %s (channelId=%s) (Unsupported SASL mechanism %s)",
                 ctx.peer[0], ctx.connection_id, request.mechanism)
        ctx.close_after_response = True
    return SaslHandshakeResponse(error_code=result.error_code, mechanisms=result.mechanisms)
