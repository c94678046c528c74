"""The immutable cluster metadata image (Kafka's ``MetadataImage`` and its parts).

An image is what the metadata log says after replaying it up to some offset (``MetadataProvenance``):
topics with their partitions (``TopicsImage``), brokers and controllers (``ClusterImage``), dynamic
configs (``ConfigurationsImage``), finalized features (``FeaturesImage``) and the next producer-id block
(``ProducerIdsImage``). Images are never changed: a ``MetadataDelta`` (delta.py) replays records on top
of one and ``apply()`` builds the next image, sharing every unchanged part with the old one.

Every class is a frozen dataclass; collections are tuples and read-only mappings
(``types.MappingProxyType``), so a publisher may keep an image without copying it.

Kafka's semantics kept here:
- ``PartitionRegistration.merge(PartitionChangeRecord)``: a null array field means "no change", leader
  -2 means "no change" (any other value, even the same leader, bumps the leader epoch), leader recovery
  state -1 means "no change"; every merge bumps the partition epoch. Directories (KIP-858) change only
  when the record carries them (Kafka's controller sends them with every replica change); directories
  that are all ``DirectoryId.MIGRATING`` (or none) stretch to the new replica count.
- A ``PartitionRecord`` without directories (v0) has ``DirectoryId.MIGRATING`` for every replica; a
  record whose non-empty directories do not match its replicas is rejected (Kafka's
  InvalidReplicaDirectoriesException).
- A ``ConfigResource`` of type BROKER with name ``""`` holds the cluster-wide broker defaults.

Imports only the standard library, ``kbroker.protocol`` record classes (for type hints) and the ACL
value type of the sans-IO ``kbroker.security.acl``. Must not
import net/, api/, replica/, coord/, cluster/, log/, asyncio: it is sans-IO.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, ClassVar, NamedTuple

from kbroker.security.acl import StandardAcl

if TYPE_CHECKING:
    from kbroker.protocol.metadata_records.partition_change_record import PartitionChangeRecord
    from kbroker.protocol.metadata_records.partition_record import PartitionRecord
    from kbroker.protocol.metadata_records.register_broker_record import RegisterBrokerRecord
    from kbroker.protocol.metadata_records.register_controller_record import RegisterControllerRecord

NO_LEADER = -1
NO_LEADER_CHANGE = -2


class MetadataReplayError(ValueError):
    """A record that cannot apply to the image (unknown topic id, stale broker epoch...)."""


class InvalidReplicaDirectoriesError(MetadataReplayError):
    """Directories that do not pair up with the replicas (Kafka's InvalidReplicaDirectoriesException)."""


def _check_directories(replicas: list[int] | None, directories: list[uuid.UUID] | None) -> None:
    if replicas is not None and directories and len(replicas) != len(directories):
        raise InvalidReplicaDirectoriesError(
            f"{len(directories)} directories for {len(replicas)} replicas ({replicas}, {directories})"
        )


def _default_to_migrating(directories: tuple[uuid.UUID, ...], replicas: int) -> tuple[uuid.UUID, ...]:
    if all(d == DirectoryId.MIGRATING for d in directories):
        return (DirectoryId.MIGRATING,) * replicas
    return directories


def frozen_map(d: Mapping | None = None) -> Mapping:  # type: ignore[type-arg]
    """A read-only view of a fresh dict (the image owns it; nobody else holds the dict)."""
    return MappingProxyType(dict(d or {}))


_EMPTY_MAP: Mapping = MappingProxyType({})  # type: ignore[type-arg]


class DirectoryId:
    """Kafka's reserved log-directory ids (KIP-858)."""

    MIGRATING = uuid.UUID(int=0)  # replica placed before directories were tracked
    UNASSIGNED = uuid.UUID(int=1)  # not yet placed on a directory
    LOST = uuid.UUID(int=2)  # its directory went offline


class LeaderRecoveryState(enum.IntEnum):
    """Kafka's LeaderRecoveryState (KIP-704); -1 in a PartitionChangeRecord is "no change"."""

    RECOVERED = 0
    RECOVERING = 1

    @classmethod
    def of(cls, value: int) -> LeaderRecoveryState:
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"unknown leader recovery state {value}") from None

    def change_to(self, value: int) -> LeaderRecoveryState:
        return self if value == -1 else LeaderRecoveryState.of(value)


class ConfigResourceType(enum.IntEnum):
    """Kafka's ConfigResource.Type ids (as in ConfigRecord.ResourceType)."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class ConfigResource(NamedTuple):
    type: ConfigResourceType
    name: str


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class TopicIdPartition(NamedTuple):
    topic_id: uuid.UUID
    partition: int


# -- topics ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    """One partition's assignment and leadership (Kafka's PartitionRegistration)."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    leader_recovery_state: LeaderRecoveryState = LeaderRecoveryState.RECOVERED
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    directories: tuple[uuid.UUID, ...] = ()
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()

    @classmethod
    def from_record(cls, record: PartitionRecord) -> PartitionRegistration:
        _check_directories(record.replicas, record.directories)
        replicas = tuple(record.replicas)
        directories = _default_to_migrating(tuple(record.directories), len(replicas))
        return cls(
            replicas=replicas,
            isr=tuple(record.isr),
            leader=record.leader,
            leader_epoch=record.leader_epoch,
            partition_epoch=record.partition_epoch,
            leader_recovery_state=LeaderRecoveryState.of(record.leader_recovery_state),
            removing_replicas=tuple(record.removing_replicas),
            adding_replicas=tuple(record.adding_replicas),
            directories=directories,
            elr=tuple(record.eligible_leader_replicas or ()),
            last_known_elr=tuple(record.last_known_elr or ()),
        )

    def merge(self, record: PartitionChangeRecord) -> PartitionRegistration:
        """This partition after ``record`` (Kafka's ``PartitionRegistration.merge``)."""
        _check_directories(record.replicas, record.directories)
        replicas = self.replicas if record.replicas is None else tuple(record.replicas)
        directories = self.directories if record.directories is None else tuple(record.directories)
        directories = _default_to_migrating(directories, len(replicas))
        if record.leader == NO_LEADER_CHANGE:
            leader, leader_epoch = self.leader, self.leader_epoch
        else:
            leader, leader_epoch = record.leader, self.leader_epoch + 1
        return PartitionRegistration(
            replicas=replicas,
            isr=self.isr if record.isr is None else tuple(record.isr),
            leader=leader,
            leader_epoch=leader_epoch,
            partition_epoch=self.partition_epoch + 1,
            leader_recovery_state=self.leader_recovery_state.change_to(record.leader_recovery_state),
            removing_replicas=(
                self.removing_replicas if record.removing_replicas is None else tuple(record.removing_replicas)
            ),
            adding_replicas=self.adding_replicas if record.adding_replicas is None else tuple(record.adding_replicas),
            directories=directories,
            elr=self.elr if record.eligible_leader_replicas is None else tuple(record.eligible_leader_replicas),
            last_known_elr=self.last_known_elr if record.last_known_elr is None else tuple(record.last_known_elr),
        )

    def has_leader(self) -> bool:
        return self.leader != NO_LEADER

    def is_reassigning(self) -> bool:
        return bool(self.removing_replicas or self.adding_replicas)

    def directory(self, replica: int) -> uuid.UUID | None:
        """The log directory of ``replica`` (None when it is not a replica or directories are unknown)."""
        for r, d in zip(self.replicas, self.directories, strict=False):
            if r == replica:
                return d
        return None


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    id: uuid.UUID
    partitions: Mapping[int, PartitionRegistration] = field(default_factory=lambda: _EMPTY_MAP)

    def partition(self, index: int) -> PartitionRegistration | None:
        return self.partitions.get(index)


@dataclass(frozen=True, slots=True)
class TopicsImage:
    topics_by_id: Mapping[uuid.UUID, TopicImage] = field(default_factory=lambda: _EMPTY_MAP)
    topics_by_name: Mapping[str, TopicImage] = field(default_factory=lambda: _EMPTY_MAP)

    EMPTY: ClassVar[TopicsImage]

    def get_topic(self, key: str | uuid.UUID) -> TopicImage | None:
        if isinstance(key, uuid.UUID):
            return self.topics_by_id.get(key)
        return self.topics_by_name.get(key)

    def get_partition(self, topic_id: uuid.UUID, partition: int) -> PartitionRegistration | None:
        topic = self.topics_by_id.get(topic_id)
        return None if topic is None else topic.partitions.get(partition)

    def is_empty(self) -> bool:
        return not self.topics_by_id

    def __iter__(self) -> Iterator[TopicImage]:
        return iter(self.topics_by_id.values())

    def __len__(self) -> int:
        return len(self.topics_by_id)


TopicsImage.EMPTY = TopicsImage()


# -- cluster -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A listener of a broker or controller (Kafka's Endpoint); security_protocol is Kafka's id."""

    listener_name: str
    security_protocol: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class VersionRange:
    min: int
    max: int


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A registered broker (Kafka's BrokerRegistration)."""

    id: int
    epoch: int
    incarnation_id: uuid.UUID
    listeners: Mapping[str, Endpoint] = field(default_factory=lambda: _EMPTY_MAP)
    supported_features: Mapping[str, VersionRange] = field(default_factory=lambda: _EMPTY_MAP)
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False
    is_migrating_zk_broker: bool = False
    directories: tuple[uuid.UUID, ...] = ()
    # KIP-1066, in the order reported (directories are sorted, these are not: as in Kafka); None until
    # the broker first reports them (Kafka keeps that null too).
    cordoned_directories: tuple[uuid.UUID, ...] | None = None

    @classmethod
    def from_record(cls, record: RegisterBrokerRecord) -> BrokerRegistration:
        return cls(
            id=record.broker_id,
            epoch=record.broker_epoch,
            incarnation_id=record.incarnation_id,
            listeners=frozen_map(
                {e.name: Endpoint(e.name, e.security_protocol, e.host, e.port) for e in record.end_points}
            ),
            supported_features=frozen_map(
                {f.name: VersionRange(f.min_supported_version, f.max_supported_version) for f in record.features}
            ),
            rack=record.rack,
            fenced=record.fenced,
            in_controlled_shutdown=record.in_controlled_shutdown,
            is_migrating_zk_broker=record.is_migrating_zk_broker,
            directories=tuple(sorted(record.log_dirs)),
            cordoned_directories=(
                None if record.cordoned_log_dirs is None else tuple(record.cordoned_log_dirs)
            ),
        )

    def endpoint(self, listener_name: str) -> Endpoint | None:
        return self.listeners.get(listener_name)

    def clone_with(
        self,
        fenced: bool | None = None,
        in_controlled_shutdown: bool | None = None,
        directories: tuple[uuid.UUID, ...] | None = None,
        cordoned_directories: tuple[uuid.UUID, ...] | None = None,
    ) -> BrokerRegistration:
        return replace(
            self,
            fenced=self.fenced if fenced is None else fenced,
            in_controlled_shutdown=(
                self.in_controlled_shutdown if in_controlled_shutdown is None else in_controlled_shutdown
            ),
            directories=self.directories if directories is None else tuple(sorted(directories)),
            cordoned_directories=(
                self.cordoned_directories if cordoned_directories is None else tuple(cordoned_directories)
            ),
        )


@dataclass(frozen=True, slots=True)
class ControllerRegistration:
    """A registered KRaft controller (Kafka's ControllerRegistration)."""

    id: int
    incarnation_id: uuid.UUID
    zk_migration_ready: bool
    listeners: Mapping[str, Endpoint] = field(default_factory=lambda: _EMPTY_MAP)
    supported_features: Mapping[str, VersionRange] = field(default_factory=lambda: _EMPTY_MAP)

    @classmethod
    def from_record(cls, record: RegisterControllerRecord) -> ControllerRegistration:
        return cls(
            id=record.controller_id,
            incarnation_id=record.incarnation_id,
            zk_migration_ready=record.zk_migration_ready,
            listeners=frozen_map(
                {e.name: Endpoint(e.name, e.security_protocol, e.host, e.port) for e in record.end_points}
            ),
            supported_features=frozen_map(
                {f.name: VersionRange(f.min_supported_version, f.max_supported_version) for f in record.features}
            ),
        )


@dataclass(frozen=True, slots=True)
class ClusterImage:
    brokers: Mapping[int, BrokerRegistration] = field(default_factory=lambda: _EMPTY_MAP)
    controllers: Mapping[int, ControllerRegistration] = field(default_factory=lambda: _EMPTY_MAP)

    EMPTY: ClassVar[ClusterImage]

    def broker(self, node_id: int) -> BrokerRegistration | None:
        return self.brokers.get(node_id)

    def unfenced_brokers(self) -> list[BrokerRegistration]:
        return [b for b in self.brokers.values() if not b.fenced]

    def is_empty(self) -> bool:
        return not self.brokers and not self.controllers


ClusterImage.EMPTY = ClusterImage()


# -- configs, features, producer ids -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigurationsImage:
    """Dynamic configs by resource; a resource with no config left is not in the map."""

    configs: Mapping[ConfigResource, Mapping[str, str]] = field(default_factory=lambda: _EMPTY_MAP)

    EMPTY: ClassVar[ConfigurationsImage]

    def config_map(self, resource: ConfigResource) -> Mapping[str, str]:
        return self.configs.get(resource, _EMPTY_MAP)

    def topic_config(self, topic: str) -> Mapping[str, str]:
        """The topic's config overrides."""
        return self.config_map(ConfigResource(ConfigResourceType.TOPIC, topic))

    def broker_config(self, node_id: int) -> Mapping[str, str]:
        """Dynamic configs set for one broker."""
        return self.config_map(ConfigResource(ConfigResourceType.BROKER, str(node_id)))

    def cluster_broker_config(self) -> Mapping[str, str]:
        """The cluster-wide dynamic broker defaults (resource name ``""``)."""
        return self.config_map(ConfigResource(ConfigResourceType.BROKER, ""))

    def is_empty(self) -> bool:
        return not self.configs


ConfigurationsImage.EMPTY = ConfigurationsImage()

METADATA_VERSION = "metadata.version"
KRAFT_VERSION = "kraft.version"
MINIMUM_METADATA_VERSION = 7  # 3.3-IV3, the oldest metadata.version Kafka 4 reads


@dataclass(frozen=True, slots=True)
class FeaturesImage:
    """Finalized feature levels: ``metadata_version`` (the metadata.version feature level, None before
    the bootstrap record) and every other finalized feature (level 0 means absent)."""

    metadata_version: int | None = None
    finalized_versions: Mapping[str, int] = field(default_factory=lambda: _EMPTY_MAP)

    EMPTY: ClassVar[FeaturesImage]

    def level(self, feature: str) -> int:
        if feature == METADATA_VERSION:
            return self.metadata_version or 0
        return self.finalized_versions.get(feature, 0)

    def is_empty(self) -> bool:
        return self.metadata_version is None and not self.finalized_versions


FeaturesImage.EMPTY = FeaturesImage()


@dataclass(frozen=True, slots=True)
class ProducerIdsImage:
    """The first producer id not yet handed out in a block (-1: none handed out yet)."""

    next_producer_id: int = -1

    EMPTY: ClassVar[ProducerIdsImage]

    def is_empty(self) -> bool:
        return self.next_producer_id == -1


ProducerIdsImage.EMPTY = ProducerIdsImage()


@dataclass(frozen=True, slots=True)
class AclsImage:
    """Every ACL by its id (Kafka's `AclsImage`; AccessControlEntryRecord / RemoveAccessControlEntryRecord)."""

    acls: Mapping[uuid.UUID, StandardAcl] = field(default_factory=lambda: frozen_map({}))

    EMPTY: ClassVar[AclsImage]

    def is_empty(self) -> bool:
        return not self.acls


AclsImage.EMPTY = AclsImage()


@dataclass(frozen=True, slots=True)
class ScramCredentialData:
    """One user's SCRAM credential for one mechanism (Kafka's `ScramCredentialData`): never the password."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


@dataclass(frozen=True, slots=True)
class ScramImage:
    """SCRAM credentials by (mechanism type, user) (Kafka's `ScramImage`; UserScramCredentialRecord).

    Mechanism types are Kafka's `ScramMechanism` numbers: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512.
    """

    credentials: Mapping[tuple[int, str], ScramCredentialData] = field(default_factory=lambda: frozen_map({}))

    EMPTY: ClassVar[ScramImage]

    def is_empty(self) -> bool:
        return not self.credentials

    def get(self, mechanism: int, user: str) -> ScramCredentialData | None:
        return self.credentials.get((mechanism, user))


ScramImage.EMPTY = ScramImage()


@dataclass(frozen=True, slots=True)
class DelegationTokenData:
    """One delegation token (Kafka's `DelegationTokenData` / `TokenInformation`; DelegationTokenRecord).

    Principals are "Type:name" strings as the record stores them; never the HMAC (every node derives it
    from `delegation.token.secret.key` and the token id). Times are wall-clock ms.
    """

    token_id: str
    owner: str
    requester: str
    renewers: tuple[str, ...]
    issue_timestamp: int
    max_timestamp: int
    expiration_timestamp: int


@dataclass(frozen=True, slots=True)
class DelegationTokenImage:
    """Delegation tokens by token id (Kafka's `DelegationTokenImage`; KIP-48)."""

    tokens: Mapping[str, DelegationTokenData] = field(default_factory=lambda: frozen_map({}))

    EMPTY: ClassVar[DelegationTokenImage]

    def is_empty(self) -> bool:
        return not self.tokens


DelegationTokenImage.EMPTY = DelegationTokenImage()


# A client quota entity (Kafka's `ClientQuotaEntity`): its (entity type, entity name) pairs sorted by
# type; types "user", "client-id", "ip"; a None name is the type's default entity (`--entity-default`).
ClientQuotaEntityKey = tuple[tuple[str, str | None], ...]


def quota_entity_key(pairs: Iterable[tuple[str, str | None]]) -> ClientQuotaEntityKey:
    return tuple(sorted(pairs, key=lambda p: p[0]))


@dataclass(frozen=True, slots=True)
class ClientQuotasImage:
    """Client quotas by entity (Kafka's `ClientQuotasImage`; ClientQuotaRecord): key -> value, e.g.
    {"producer_byte_rate": 1024.0}. An entity whose last key was removed is gone."""

    entities: Mapping[ClientQuotaEntityKey, Mapping[str, float]] = field(default_factory=lambda: frozen_map({}))

    EMPTY: ClassVar[ClientQuotasImage]

    def is_empty(self) -> bool:
        return not self.entities

    def quotas(self, entity: ClientQuotaEntityKey) -> Mapping[str, float]:
        return self.entities.get(entity, {})


ClientQuotasImage.EMPTY = ClientQuotasImage()


@dataclass(frozen=True, slots=True)
class MetadataProvenance:
    """Where an image comes from: the offset, epoch and append time of the last record it contains."""

    last_contained_offset: int = -1
    last_contained_epoch: int = -1
    last_contained_log_time_ms: int = -1
    is_offset_batch_aligned: bool = True

    EMPTY: ClassVar[MetadataProvenance]


MetadataProvenance.EMPTY = MetadataProvenance()


@dataclass(frozen=True, slots=True)
class MetadataImage:
    provenance: MetadataProvenance = MetadataProvenance.EMPTY
    features: FeaturesImage = FeaturesImage.EMPTY
    cluster: ClusterImage = ClusterImage.EMPTY
    topics: TopicsImage = TopicsImage.EMPTY
    configs: ConfigurationsImage = ConfigurationsImage.EMPTY
    producer_ids: ProducerIdsImage = ProducerIdsImage.EMPTY
    scram: ScramImage = ScramImage.EMPTY
    acls: AclsImage = AclsImage.EMPTY
    client_quotas: ClientQuotasImage = ClientQuotasImage.EMPTY
    delegation_tokens: DelegationTokenImage = DelegationTokenImage.EMPTY

    EMPTY: ClassVar[MetadataImage]

    @property
    def offset(self) -> int:
        return self.provenance.last_contained_offset

    def is_empty(self) -> bool:
        return (
            self.features.is_empty()
            and self.cluster.is_empty()
            and self.topics.is_empty()
            and self.configs.is_empty()
            and self.producer_ids.is_empty()
            and self.scram.is_empty()
            and self.acls.is_empty()
            and self.client_quotas.is_empty()
            and self.delegation_tokens.is_empty()
        )

    # -- the queries the broker needs ------------------------------------------------------------------

    def topic(self, name: str) -> TopicImage | None:
        return self.topics.topics_by_name.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicImage | None:
        return self.topics.topics_by_id.get(topic_id)

    def partition(self, topic: str, partition: int) -> PartitionRegistration | None:
        t = self.topics.topics_by_name.get(topic)
        return None if t is None else t.partitions.get(partition)

    def topic_config(self, topic: str) -> Mapping[str, str]:
        return self.configs.topic_config(topic)

    def broker_config(self, node_id: int) -> Mapping[str, str]:
        return self.configs.broker_config(node_id)

    def cluster_broker_config(self) -> Mapping[str, str]:
        return self.configs.cluster_broker_config()


MetadataImage.EMPTY = MetadataImage()
