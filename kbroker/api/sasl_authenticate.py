"""SaslAuthenticate (key 36, v0-2): one SASL token of the exchange on a SASL listener (KIP-152).

The connection's `SaslServerAuthenticator` (kbroker.security.sasl) evaluates the token. A failure
answers SASL_AUTHENTICATION_FAILED with Kafka's message after `connection.failed.authentication.delay.ms`
(Kafka delays the response and the close, KIP-306, so a password guesser gets one try per delay),
logs "Failed authentication with <ip> (...)" at INFO as Kafka's Selector does, and closes the
connection. Success sets the connection's principal (`User:<name>`).

Elsewhere (PLAINTEXT, SSL, or after a completed authentication) Kafka 4.3.1 answers error 34 with
"SaslAuthenticate request received after successful authentication" (observed against the reference
broker with re-authentication off).

KIP-368: the response's `session_lifetime_ms` (v1+) is the session's lifetime
(`connections.max.reauth.ms`, bounded by an OAUTHBEARER token's expiry), 0 when it has none; a
re-authentication (a new SaslHandshake before then, see the dispatcher) ends here too.
"""

from __future__ import annotations

import asyncio
import logging

from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse

API_KEY = 36
MIN_VERSION = 0
MAX_VERSION = 2
MESSAGE = "SaslAuthenticate request received after successful authentication"

log = logging.getLogger(__name__)


def error_response(request: SaslAuthenticateRequest, version: int, error: ErrorCode) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(error_code=error, error_message=None, auth_bytes=b"", session_lifetime_ms=0)


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
           request: SaslAuthenticateRequest) -> SaslAuthenticateResponse | asyncio.Future[SaslAuthenticateResponse]:
    sasl = ctx.sasl
    if sasl is None or sasl.complete:
        return SaslAuthenticateResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, error_message=MESSAGE,
                                        auth_bytes=b"", session_lifetime_ms=0)
    result = sasl.authenticate(bytes(request.auth_bytes), services.time_ms())
    # Kafka leaves ErrorMessage at its generated default, "", on success (checked against 4.3.1).
    response = SaslAuthenticateResponse(error_code=result.error_code, error_message=result.error_message or "",
                                        auth_bytes=result.auth_bytes, session_lifetime_ms=result.session_lifetime_ms)
    if sasl.complete:
        if sasl.reauthentications and ctx.principal == str(sasl.principal):
            log.info("Connection %s re-authenticated as %s (%s), session lifetime %d ms", ctx.connection_id,
                     ctx.principal, sasl.mechanism, result.session_lifetime_ms)
        ctx.principal = str(sasl.principal)
        log.debug("Connection %s authenticated as %s (%s)", ctx.connection_id, ctx.principal, sasl.mechanism)
        return response
    if not result.close:
        return response
    log.info("Failed authentication with %s (channelId=%s) (%s)", ctx.peer[0], ctx.connection_id,
             sasl.failure_message)
    ctx.close_after_response = True
    delay = ctx.failed_authentication_delay_ms
    if delay <= 0:
        return response
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[SaslAuthenticateResponse] = loop.create_future()

    def answer() -> None:
        if not fut.done():
            fut.set_result(response)

    loop.call_later(delay / 1000, answer)
    return fut
