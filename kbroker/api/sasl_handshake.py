"""SaslHandshake (key 17, v0-1) on a PLAINTEXT listener: ILLEGAL_SASL_STATE with no mechanisms, as Kafka.

A client configured for SASL (security.protocol=SASL_PLAINTEXT) but pointed at a PLAINTEXT listener sends
SaslHandshake after ApiVersions. Kafka 4.3.1 advertises the API on every broker listener and, on a
PLAINTEXT one (no SASL authenticator in front of KafkaApis), answers it with ILLEGAL_SASL_STATE and an
empty mechanism list (observed against the reference broker: error 34, `mechanisms=[]`, v0 and v1). The
client then fails at once with a clear error (Java: IllegalSaslStateException; librdkafka: "Broker:
Illegal SASL state") instead of reconnecting forever after a silent close. kbroker serves PLAINTEXT
listeners only, so this is the whole of its SASL.
"""

from __future__ import annotations

from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse

API_KEY = 17
MIN_VERSION = 0
MAX_VERSION = 1


def error_response(request: SaslHandshakeRequest, version: int, error: ErrorCode) -> SaslHandshakeResponse:
    return SaslHandshakeResponse(error_code=error, mechanisms=[])


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
           request: SaslHandshakeRequest) -> SaslHandshakeResponse:
    return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
