"""Outbound Kafka connections: what a node uses to talk to other nodes (Kafka's `NetworkClient`).

Owns: an asyncio connection to one node that sends requests encoded by the generated codecs, matches
responses by correlation id (several requests may be in flight, as Kafka's in-flight requests), and
negotiates versions with ApiVersions; TLS and the SASL login of a
secured channel (`ClientSecurity`, kbroker/client/security.py). Used by the broker-to-controller channel, the replica fetchers
and the Raft driver.

Must not import any kbroker package other than `kbroker.protocol` and `kbroker.clock`: it is plumbing
below every domain package (replica/, controller/, raft/, server/), none of which may be imported here.
"""

from kbroker.client.network_client import (
    AuthenticationError,
    ConnectionClosedError,
    NodeConnection,
    RequestTimeoutError,
)
from kbroker.client.security import (
    PLAINTEXT_SECURITY,
    ClientSecurity,
    SaslClientCredentials,
    TlsClientSettings,
    build_client_context,
)

__all__ = ["PLAINTEXT_SECURITY", "AuthenticationError", "ClientSecurity", "ConnectionClosedError", "NodeConnection",
           "RequestTimeoutError", "SaslClientCredentials", "TlsClientSettings", "build_client_context"]
