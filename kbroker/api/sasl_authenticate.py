"""SaslAuthenticate (key 36, v0-2) on a PLAINTEXT listener: ILLEGAL_SASL_STATE, with Kafka's message.

Kafka 4.3.1 answers it on a PLAINTEXT listener with error 34 and "SaslAuthenticate request received
after successful authentication" (the connection counts as authenticated: there is nothing to
authenticate on PLAINTEXT); observed against the reference broker. See sasl_handshake.py.
"""

from __future__ import annotations

from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse

API_KEY = 36
MIN_VERSION = 0
MAX_VERSION = 2
MESSAGE = "SaslAuthenticate request received after successful authentication"


def error_response(request: SaslAuthenticateRequest, version: int, error: ErrorCode) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(error_code=error, error_message=None, auth_bytes=b"", session_lifetime_ms=0)


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
           request: SaslAuthenticateRequest) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, error_message=MESSAGE,
                                    auth_bytes=b"", session_lifetime_ms=0)
