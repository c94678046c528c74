"""The network layer's own settings: `SocketServerConfig` and `ListenerEndpoint`, frozen and typed.

Owns the values kbroker.net reads, one field per broker key (the key is named beside each field).
Built from `KafkaConfig` by the wiring in `kbroker.broker` (`socket_server_config`), so the network
layer never imports `kbroker.config`: it depends only on kbroker.protocol and the API dispatcher
interface. Pure data: imports nothing from kbroker at run time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import socket
    import ssl

    from kbroker.security.sasl import SaslServerConfig


@dataclass(frozen=True)
class ListenerEndpoint:
    """One listener to bind (Kafka's `EndPoint`): an empty host binds every interface, port 0 any port."""

    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"
    # SSL / SASL_SSL: the listener's server context (kbroker.net.tls); None on plaintext listeners.
    ssl_context: ssl.SSLContext | None = field(default=None, compare=False, repr=False)
    # ssl.principal.mapping.rules of this listener (the principal of an SSL client certificate).
    principal_mapping_rules: str = "DEFAULT"
    # SASL_PLAINTEXT / SASL_SSL: mechanisms and credentials; None on the others.
    sasl: SaslServerConfig | None = field(default=None, compare=False, repr=False)
    # connection.failed.authentication.delay.ms: a failed SASL authentication's response waits this long.
    failed_authentication_delay_ms: int = 100
    # A socket already bound and listening on this endpoint (kbroker's implicit controller listener, held
    # since its port was picked): served as is instead of binding host:port again.
    sock: socket.socket | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


@dataclass(frozen=True)
class SocketServerConfig:
    """Everything `KafkaServer` and its connections are configured with (Kafka's SocketServer keys).

    A value <= 0 for a time bound disables it; `queued_max_request_bytes` <= 0 means no byte bound.
    """

    listeners: tuple[ListenerEndpoint, ...]
    socket_request_max_bytes: int  # socket.request.max.bytes
    socket_send_buffer_bytes: int  # socket.send.buffer.bytes (-1: OS default)
    socket_receive_buffer_bytes: int  # socket.receive.buffer.bytes (-1: OS default)
    socket_listen_backlog_size: int  # socket.listen.backlog.size
    queued_max_requests: int  # queued.max.requests: complete requests not yet handled
    queued_max_request_bytes: int  # queued.max.request.bytes: the memory pool of request buffers
    max_connections: int  # max.connections
    max_connections_per_ip: int  # max.connections.per.ip
    connections_max_idle_ms: int  # connections.max.idle.ms
    request_receive_timeout_ms: int  # kbroker.request.receive.timeout.ms: one frame's receive deadline
    sendfile_enable: bool  # kbroker.sendfile.enable
