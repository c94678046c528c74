"""`KRaftBrokerSettings`: what the broker's cluster links read from the config, as typed values.

Why its own module: server/ sits below the wiring layer and must not import `kbroker.config`; the
wiring (services.py) reads `KafkaConfig` once and hands these frozen values down (as net/ gets its
`SocketServerConfig`). Key names and defaults are Kafka's (`controller.quorum.voters`,
`controller.quorum.bootstrap.servers`, `broker.heartbeat.interval.ms`, ...); see docs/cluster.md.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from kbroker.client.security import PLAINTEXT_SECURITY, ClientSecurity
from kbroker.raft.metadata_log import MetadataLogRetention

_VOTER = re.compile(r"^(\d+)@(\[[0-9A-Fa-f:.]+\]|[^:\[\]@]+):(\d+)$")
_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[^:\[\]@]+):(\d+)$")


@dataclass(frozen=True, slots=True)
class QuorumNode:
    """A controller address: a voter (`node_id` >= 0) or a bootstrap server (`node_id` -1)."""

    node_id: int
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.node_id}@{self.host}:{self.port}" if self.node_id >= 0 else f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class BrokerListener:
    """One advertised listener, as BrokerRegistration sends it (security protocol as Kafka's id)."""

    name: str
    host: str
    port: int
    security_protocol: int


def parse_voters(items: Sequence[str]) -> tuple[QuorumNode, ...]:
    """`controller.quorum.voters` (id@host:port,...); ValueError on a malformed entry."""
    out = []
    for item in items:
        m = _VOTER.match(item.strip())
        if m is None:
            raise ValueError(f"invalid controller.quorum.voters entry {item!r}: expected id@host:port")
        out.append(QuorumNode(int(m.group(1)), m.group(2).strip("[]"), int(m.group(3))))
    return tuple(out)


def parse_bootstrap_servers(items: Sequence[str]) -> tuple[QuorumNode, ...]:
    """`controller.quorum.bootstrap.servers` (host:port,...); ValueError on a malformed entry."""
    out = []
    for item in items:
        m = _HOST_PORT.match(item.strip())
        if m is None:
            raise ValueError(f"invalid controller.quorum.bootstrap.servers entry {item!r}: expected host:port")
        out.append(QuorumNode(-1, m.group(1).strip("[]"), int(m.group(2))))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class KRaftBrokerSettings:
    node_id: int
    cluster_id: str
    # Where Raft requests go first: the voters when listed (their ids let a leader id be resolved without
    # NodeEndpoints), else the bootstrap servers.
    voters: tuple[QuorumNode, ...]
    bootstrap_servers: tuple[QuorumNode, ...]
    controller_listener_name: str
    rack: str | None
    # directory.id of each log dir (meta.properties) and of the metadata log's dir (the Raft replica's
    # directory id, KIP-853).
    log_dir_ids: tuple[uuid.UUID, ...]
    metadata_directory_id: uuid.UUID
    heartbeat_interval_ms: int = 2000
    initial_registration_timeout_ms: int = 60000
    quorum_request_timeout_ms: int = 2000
    quorum_fetch_timeout_ms: int = 2000
    quorum_retry_backoff_ms: int = 20
    controller_socket_timeout_ms: int = 30000
    controlled_shutdown_enable: bool = True
    # How to reach the controller listener (its protocol, ssl.*, sasl.mechanism.controller.protocol).
    controller_security: ClientSecurity = PLAINTEXT_SECURITY
    # KIP-966: the broker epoch of the previous run's clean shutdown (its clean-shutdown markers), -1 if
    # it did not shut down cleanly; sent in BrokerRegistration so the controller keeps it in the ELRs.
    previous_broker_epoch: int = -1
    # The broker's own copy of __cluster_metadata: snapshots of its image (Kafka's brokers run a
    # SnapshotGenerator too) and Kafka's retention behind them. None: no snapshots, trimmed only when a
    # snapshot is fetched from the leader.
    metadata_retention: MetadataLogRetention | None = None
    max_bytes_between_snapshots: int = 20 * 1024 * 1024
    max_snapshot_interval_ms: int = 3600000

    @property
    def quorum_bootstrap(self) -> tuple[QuorumNode, ...]:
        return self.voters or self.bootstrap_servers

    def voter(self, node_id: int) -> QuorumNode | None:
        for v in self.voters:
            if v.node_id == node_id:
                return v
        return None
