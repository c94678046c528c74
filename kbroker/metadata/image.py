"""`MetadataImage` and its parts: an immutable picture of the cluster's metadata at one log offset.

Kafka's `MetadataImage` (`TopicsImage`, `ClusterImage`, `ConfigurationsImage`, `FeaturesImage`,
`ProducerIdsImage`, `MetadataProvenance`), with Kafka's field names. Images are never changed: a
`MetadataDelta` builds the next one, sharing every unchanged part (a topic untouched by a delta is
the same `TopicImage` object in both images).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from kbroker.protocol.metadata_records import PartitionChangeRecord, PartitionRecord

_EMPTY_MAP: Mapping[Any, Any] = MappingProxyType({})

# PartitionChangeRecord's "no change" markers (Kafka's `LeaderConstants.NO_LEADER_CHANGE` and
# `LeaderRecoveryState.NO_CHANGE`).
NO_LEADER_CHANGE = -2
NO_LEADER = -1
NO_LEADER_RECOVERY_CHANGE = -1


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    """One partition as the controller registered it (Kafka's `PartitionRegistration`)."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader_recovery_state: int = 0
    directories: tuple[uuid.UUID, ...] = ()
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()

    @classmethod
    def from_record(cls, r: PartitionRecord) -> PartitionRegistration:
        return cls(
            replicas=tuple(r.replicas), isr=tuple(r.isr), leader=int(r.leader),
            leader_epoch=int(r.leader_epoch), partition_epoch=int(r.partition_epoch),
            removing_replicas=tuple(r.removing_replicas or ()), adding_replicas=tuple(r.adding_replicas or ()),
            leader_recovery_state=int(r.leader_recovery_state), directories=tuple(r.directories or ()),
            elr=tuple(r.eligible_leader_replicas or ()), last_known_elr=tuple(r.last_known_elr or ()),
        )

    def merge(self, c: PartitionChangeRecord) -> PartitionRegistration:
        """Kafka's `PartitionRegistration.merge(PartitionChangeRecord)`: null fields keep their value, a
        leader change bumps the leader epoch, every change bumps the partition epoch."""
        leader, leader_epoch = self.leader, self.leader_epoch
        if c.leader != NO_LEADER_CHANGE:
            leader, leader_epoch = int(c.leader), self.leader_epoch + 1
        recovery = self.leader_recovery_state
        if c.leader_recovery_state != NO_LEADER_RECOVERY_CHANGE:
            recovery = int(c.leader_recovery_state)

        def pick(name: str, current: tuple) -> tuple:  # type: ignore[type-arg]
            value = getattr(c, name, None)
            return current if value is None else tuple(value)

        return PartitionRegistration(
            replicas=pick("replicas", self.replicas), isr=pick("isr", self.isr), leader=leader,
            leader_epoch=leader_epoch, partition_epoch=self.partition_epoch + 1,
            removing_replicas=pick("removing_replicas", self.removing_replicas),
            adding_replicas=pick("adding_replicas", self.adding_replicas), leader_recovery_state=recovery,
            directories=pick("directories", self.directories), elr=pick("eligible_leader_replicas", self.elr),
            last_known_elr=pick("last_known_elr", self.last_known_elr),
        )

    def has_leader(self) -> bool:
        return self.leader != NO_LEADER


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    id: uuid.UUID
    partitions: Mapping[int, PartitionRegistration]


@dataclass(frozen=True, slots=True)
class TopicsImage:
    topics_by_id: Mapping[uuid.UUID, TopicImage] = field(default_factory=lambda: _EMPTY_MAP)
    topics_by_name: Mapping[str, TopicImage] = field(default_factory=lambda: _EMPTY_MAP)

    def get_topic(self, name: str) -> TopicImage | None:
        return self.topics_by_name.get(name)

    def get_partition(self, topic_id: uuid.UUID, partition: int) -> PartitionRegistration | None:
        topic = self.topics_by_id.get(topic_id)
        return None if topic is None else topic.partitions.get(partition)


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    name: str
    host: str
    port: int
    security_protocol: int


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    id: int
    epoch: int
    incarnation_id: uuid.UUID
    listeners: tuple[BrokerEndpoint, ...]
    supported_features: Mapping[str, tuple[int, int]]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool = False


@dataclass(frozen=True, slots=True)
class ClusterImage:
    brokers: Mapping[int, BrokerRegistration] = field(default_factory=lambda: _EMPTY_MAP)


@dataclass(frozen=True, slots=True)
class ConfigurationsImage:
    """Config overrides by resource: (ConfigResource type, name) -> key -> value."""

    data: Mapping[tuple[int, str], Mapping[str, str]] = field(default_factory=lambda: _EMPTY_MAP)

    def config_map(self, resource_type: int, resource_name: str) -> Mapping[str, str]:
        return self.data.get((resource_type, resource_name), _EMPTY_MAP)


@dataclass(frozen=True, slots=True)
class FeaturesImage:
    finalized_versions: Mapping[str, int] = field(default_factory=lambda: _EMPTY_MAP)

    @property
    def metadata_version(self) -> int:
        return int(self.finalized_versions.get("metadata.version", 0))


@dataclass(frozen=True, slots=True)
class ProducerIdsImage:
    """The first producer id of the next block the controller will hand out."""

    next_producer_id: int = -1


@dataclass(frozen=True, slots=True)
class MetadataProvenance:
    """Where an image comes from: the offset and epoch of the last record applied."""

    last_contained_offset: int = -1
    last_contained_epoch: int = -1
    last_contained_log_time_ms: int = -1


@dataclass(frozen=True, slots=True)
class MetadataImage:
    provenance: MetadataProvenance = field(default_factory=MetadataProvenance)
    features: FeaturesImage = field(default_factory=FeaturesImage)
    cluster: ClusterImage = field(default_factory=ClusterImage)
    topics: TopicsImage = field(default_factory=TopicsImage)
    configs: ConfigurationsImage = field(default_factory=ConfigurationsImage)
    producer_ids: ProducerIdsImage = field(default_factory=ProducerIdsImage)

    EMPTY: ClassVar[MetadataImage]

    def with_provenance(self, provenance: MetadataProvenance) -> MetadataImage:
        return replace(self, provenance=provenance)


MetadataImage.EMPTY = MetadataImage()
