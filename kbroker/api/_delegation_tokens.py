"""What the four delegation token APIs share (KIP-48): Kafka's `KafkaApis.allowTokenRequests` and the
route of a token change to the controller.

Token requests are refused (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED) on a connection that authenticated
with a delegation token (a token cannot mint tokens), on a PLAINTEXT listener, and on an SSL listener
without a client certificate (ANONYMOUS): only an authenticated identity may own tokens. A request a
broker forwarded to the controller (an Envelope, KIP-590) is judged by the broker, so the controller
allows it whatever its own listener is (Kafka's `ControllerApis.allowTokenRequests`).
"""

from __future__ import annotations

from kbroker.api.context import BrokerServices, RequestContext

ANONYMOUS = "User:ANONYMOUS"


def allow_token_requests(services: BrokerServices, ctx: RequestContext) -> bool:
    sasl = ctx.sasl
    if sasl is not None and sasl.token_authenticated:
        return False
    if ctx.forwarded:
        return True
    name = ctx.listener_name.upper()
    protocol = services.config.security_protocol_map.get(name, name)
    if protocol == "PLAINTEXT":
        return False
    return not (protocol == "SSL" and ctx.principal == ANONYMOUS)


def tokens_enabled(services: BrokerServices) -> bool:
    """`delegation.token.secret.key` is set (Kafka's `KafkaConfig.tokenAuthEnabled`)."""
    return bool(services.config["delegation.token.secret.key"])
