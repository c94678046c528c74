"""The request context and the services every API handler may use.

Owns `RequestContext` (who sent a request, on which listener), `BrokerServices` (the domain objects
the broker wiring hands to the handlers), the `NO_RESPONSE` sentinel, `CloseConnection` and
`is_awaitable_result` (what a handler returned: an answer now or later).
Imports nothing from net/: the network layer fills the context, handlers only read it.

`BrokerServices` names every service with its real type, but imports those types only for the type
checker: net/ imports this module, and must not pull the domain packages (or the broker config, which
lives in the wiring layer above) in with it. One builder fills it: `kbroker.services.build_services`.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import GeneratorType
from typing import TYPE_CHECKING, TypeGuard

from kbroker.clock import Clock, wall_clock_ms
from kbroker.metrics.meters import BrokerMetrics

if TYPE_CHECKING:
    from kbroker.cluster.configs import ConfigHelper
    from kbroker.cluster.quotas import QuotaManagers
    from kbroker.config import KafkaConfig
    from kbroker.controller.controller import Controller
    from kbroker.coord.producer_id_manager import ProducerIdManager
    from kbroker.coord.service import GroupCoordinatorService
    from kbroker.coord.share_coordinator import ShareCoordinatorService
    from kbroker.coord.share_partition_manager import SharePartitionManager
    from kbroker.coord.transaction_coordinator import TransactionCoordinatorService
    from kbroker.log.manager import LogManager
    from kbroker.metadata.cache import MetadataCache
    from kbroker.replica.replica_manager import ReplicaManager
    from kbroker.security.acl import StandardAuthorizer
    from kbroker.security.sasl import SaslServerAuthenticator
    from kbroker.server.kraft_broker import KRaftBrokerLinks
    from kbroker.server.kraft_controller import KRaftControllerLinks


class CloseConnection(Exception):
    """Raised by a handler to make the network layer close the connection without a response.

    Kafka does this for Produce v0-2 (removed in 4.0 but still advertised, KAFKA-18659) and for an
    acks=0 produce that failed: the client gets no response, so closing the connection is the only
    way to make it refresh its metadata.
    """


class NoResponse:
    """Type of `NO_RESPONSE`: the request is answered by nothing (acks=0 produce)."""

    _instance: NoResponse | None = None

    def __new__(cls) -> NoResponse:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NO_RESPONSE"

    def __bool__(self) -> bool:
        return False


NO_RESPONSE = NoResponse()

# Types of handler results found not awaitable: the response classes, lists (tests). Generators are not
# remembered (a generator-based coroutine is awaitable, a plain generator is not); the set is bounded.
_PLAIN_RESULT_TYPES: set[type] = set()
_MAX_PLAIN_RESULT_TYPES = 1024


def is_awaitable_result(result: object) -> TypeGuard[Awaitable[object]]:
    """Whether a handler's result is awaitable (a loop future, a coroutine), as `inspect.isawaitable`.

    Asked of every request's result, twice (the dispatcher, the connection). For a plain response object
    `inspect.isawaitable`, `asyncio.isfuture` and `asyncio.iscoroutine` cost about 0.7 µs each here (an
    abstract-class check, a missing attribute looked up); a response class seen once is then a set lookup.
    """
    kind = type(result)
    if kind in _PLAIN_RESULT_TYPES:
        return False
    if inspect.isawaitable(result):
        return True
    if kind is not GeneratorType and len(_PLAIN_RESULT_TYPES) < _MAX_PLAIN_RESULT_TYPES:
        _PLAIN_RESULT_TYPES.add(kind)
    return False


@dataclass(frozen=True, slots=True)
class RequestOrigin:
    """Who sent the request being handled: what a broker forwarding it to the controller puts in the
    Envelope (KIP-590), so the controller authorizes and throttles the client, not the broker."""

    principal: str  # "User:alice"
    host: str  # the client's address
    client_id: str


# Set by the dispatcher in the task of each asynchronous request (a Task copies the context it is
# created in, so concurrent requests never see each other's); read by `RemoteController`.
CURRENT_REQUEST_ORIGIN: ContextVar[RequestOrigin | None] = ContextVar("kbroker_request_origin", default=None)


class RequestContext:
    """Per-connection facts about the sender, filled by the network layer and updated by ApiVersions."""

    __slots__ = (
        "client_id",
        "client_software_name",
        "client_software_version",
        "listener_name",
        "peer",
        "connection_id",
        "principal",
        "sasl",
        "close_after_response",
        "failed_authentication_delay_ms",
        "request_size",
        "throttle_time_ms",
        "forwarded",
    )

    def __init__(
        self,
        *,
        client_id: str | None = None,
        client_software_name: str | None = None,
        client_software_version: str | None = None,
        listener_name: str = "PLAINTEXT",
        peer: tuple[str, int] = ("", 0),
        connection_id: str = "",
        principal: str = "User:ANONYMOUS",
    ) -> None:
        self.client_id = client_id
        self.client_software_name = client_software_name
        self.client_software_version = client_software_version
        self.listener_name = listener_name
        self.peer = peer
        self.connection_id = connection_id
        self.principal = principal
        # SASL listeners: the connection's SaslServerAuthenticator (None elsewhere: no cost there).
        self.sasl: SaslServerAuthenticator | None = None
        # Set by a handler: close the connection once this response is written.
        self.close_after_response = False
        self.failed_authentication_delay_ms = 100
        # The request being dispatched: its size in bytes (the produce quota counts it), and how long the
        # network layer must stop reading this connection after it (client quotas, KIP-219; set by the
        # dispatcher and the handlers, read and reset by the connection once the handler returns).
        self.request_size = 0
        self.throttle_time_ms = 0
        # The request came in an Envelope from a broker (KIP-590): Kafka's `RequestChannel.Request.isForwarded`.
        self.forwarded = False

    def __repr__(self) -> str:
        return (
            f"RequestContext(client_id={self.client_id!r}, software={self.client_software_name!r}/"
            f"{self.client_software_version!r}, listener={self.listener_name!r}, peer={self.peer!r})"
        )


@dataclass
class BrokerServices:
    """What the handlers may call: one field per service, each with its type. Built once, by
    `kbroker.services.build_services` (the broker and the in-process test stacks alike)."""

    config: KafkaConfig
    log_manager: LogManager
    # The current metadata image (read side); every change goes through `controller`.
    metadata: MetadataCache
    configs: ConfigHelper
    controller: Controller
    producer_id_manager: ProducerIdManager
    replica_manager: ReplicaManager
    group_coordinator: GroupCoordinatorService
    transaction_coordinator: TransactionCoordinatorService
    cluster_id: str
    node_id: int
    time_ms: Clock = field(default=wall_clock_ms)
    # KIP-932 share partitions and share sessions (ShareFetch / ShareAcknowledge); None on a controller.
    share_partition_manager: SharePartitionManager | None = None
    # The share coordinator on __share_group_state (the share-partitions' durable state).
    share_coordinator: ShareCoordinatorService | None = None
    # process.roles=broker: the links to the KRaft cluster (metadata fetcher, lifecycle, controller
    # channel); None on kbroker's single node.
    kraft: KRaftBrokerLinks | None = None
    # process.roles=controller: the Raft client, its driver and the QuorumController; None otherwise.
    kraft_controller: KRaftControllerLinks | None = None
    # authorizer.class.name=...StandardAuthorizer: the ACL checks of every API (kbroker/api/_authz.py);
    # None without an authorizer (Kafka's default): handlers then skip authorization entirely.
    authorizer: StandardAuthorizer | None = None
    # Client quotas (kbroker/cluster/quotas.py): the Produce, Fetch, Request and ControllerMutation
    # managers, fed from the image's client quotas; None only in stacks built without them.
    quotas: QuotaManagers | None = None
    # Filled by the dispatcher: api key -> (advertised min, max) for ApiVersions.
    api_ranges: dict[int, tuple[int, int]] = field(default_factory=dict)
    # The meters the network layer and the replica manager record into (None: kbroker.metrics.enable=false).
    metrics: BrokerMetrics | None = None
