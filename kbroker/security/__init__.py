"""Authentication, sans-IO: principals, the SSL principal mapping, the SASL server state machines.

Owns what a listener needs to decide who a connection is: `KafkaPrincipal` (Kafka's "User:alice"),
`SslPrincipalMapper` (`ssl.principal.mapping.rules`) with the RFC 2253 distinguished name of a peer
certificate, the JAAS parsing of `sasl.jaas.config` (PlainLoginModule / ScramLoginModule options),
SCRAM credentials (RFC 5802 / 7677, Kafka's `ScramFormatter`), and `SaslServerAuthenticator`: the
SaslHandshake / SaslAuthenticate exchange as a state machine (tokens in, tokens or a failure out) that
the api/ handlers drive and that tests drive directly.

Never imports asyncio, sockets or ssl (the TLS context is built by kbroker.net.tls), nor anything of
kbroker above kbroker.protocol: net/ and api/ import it, and it runs unchanged under unit tests.
"""

from kbroker.security.principal import ANONYMOUS, KafkaPrincipal, SslPrincipalMapper, dn_from_peercert

__all__ = ["ANONYMOUS", "KafkaPrincipal", "SslPrincipalMapper", "dn_from_peercert"]
