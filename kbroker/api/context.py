"""The request context and the services every API handler may use.

Owns `RequestContext` (who sent a request, on which listener), `BrokerServices` (the domain objects
the broker wiring hands to the handlers), the `NO_RESPONSE` sentinel and `CloseConnection`.
Imports nothing from net/: the network layer fills the context, handlers only read it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class CloseConnection(Exception):
    """Raised by a handler to make the network layer close the connection without a response.

    Kafka does this for Produce v0-2 (removed in 4.0 but still advertised, KAFKA-18659) and for an
    acks=0 produce that failed: the client gets no response, so closing the connection is the only
    way to make it refresh its metadata.
    """


class _NoResponse:
    """Type of `NO_RESPONSE`: the request is answered by nothing (acks=0 produce)."""

    _instance: _NoResponse | None = None

    def __new__(cls) -> _NoResponse:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NO_RESPONSE"

    def __bool__(self) -> bool:
        return False


NO_RESPONSE = _NoResponse()


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

    def __repr__(self) -> str:
        return (
            f"RequestContext(client_id={self.client_id!r}, software={self.client_software_name!r}/"
            f"{self.client_software_version!r}, listener={self.listener_name!r}, peer={self.peer!r})"
        )


def _wall_clock_ms() -> int:
    import time

    return int(time.time() * 1000)


@dataclass
class BrokerServices:
    """What the handlers may call. Built once by `kbroker.broker.Broker`.

    Fields are typed `Any` where the owning module lives above or beside the api layer's import
    horizon (config in the wiring layer, the topic manager in cluster/), to keep imports downward.
    """

    config: Any
    log_manager: Any
    metadata: Any
    replica_manager: Any
    topic_manager: Any
    cluster_id: str
    node_id: int
    time_ms: Callable[[], int] = field(default=_wall_clock_ms)
    # Filled by the dispatcher: api key -> (advertised min, max) for ApiVersions.
    api_ranges: dict[int, tuple[int, int]] = field(default_factory=dict)
    # Extra services added later (group coordinator, transaction coordinator) without changing the
    # constructor signature every helper depends on.
    extras: dict[str, Any] = field(default_factory=dict)
