"""Changes to a metadata image (Kafka's ``MetadataDelta`` and its per-part deltas).

``MetadataDelta(image)`` replays metadata records (``replay(record)``) and ``apply(provenance)`` builds
the next ``MetadataImage``. Between the two, the accessors tell a publisher what changed: created,
deleted and changed topics (``TopicsDelta``), per-topic partition changes (``TopicDelta``) and, for
one broker, which replicas it must lead, follow or delete (``local_changes(broker_id)``, Kafka's
``TopicDelta.localChanges``), and which configs, brokers and features changed.

Kafka's replay semantics kept here:
- ``RemoveTopicRecord`` also removes the topic's configs; a topic created and removed in the same
  delta is simply gone; a name deleted and re-created in one delta is both deleted (old id) and
  created (new id).
- ``ConfigRecord`` with a null value deletes the key; a resource left with no key leaves the image.
- ``FeatureLevelRecord`` for ``metadata.version`` sets the metadata version (level 7, 3.3-IV3, at
  least); ``kraft.version`` is ignored (the raft layer owns it); for another feature level 0 removes it.
- Broker records carry the broker epoch: fencing, unfencing, changing or unregistering a broker with a
  different epoch than registered is an error (``MetadataReplayError``), like Kafka's
  ``getBrokerOrThrow``. So is a partition record for an unknown topic id, or removing an unknown topic.
- ``UserScramCredentialRecord`` / ``RemoveUserScramCredentialRecord`` upsert and remove one user's
  credential for one mechanism (``ScramImage``).
- ``AccessControlEntryRecord`` / ``RemoveAccessControlEntryRecord`` add and remove an ACL by id
  (``AclsImage``); removing an unknown id is an error, as in Kafka's ``AclsDelta``.
- ``ClientQuotaRecord`` sets one quota key of one client quota entity, or removes it (``remove``);
  an entity left with no key disappears (``ClientQuotasImage``, Kafka's ``ClientQuotasDelta``).
- ``DelegationTokenRecord`` upserts a delegation token (created, renewed or given a new expiry) and
  ``RemoveDelegationTokenRecord`` removes it (``DelegationTokenImage``, Kafka's ``DelegationTokenDelta``);
  removing an unknown token is ignored, as Kafka's delta does.
- Records this image does not model (ZK
  migration state, transaction markers of the migration) are accepted and ignored; ``NoOpRecord`` too.

Sans-IO; imports only ``kbroker.metadata.image`` and the generated record registry.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from kbroker.metadata.image import (
    KRAFT_VERSION,
    METADATA_VERSION,
    MINIMUM_METADATA_VERSION,
    AclsImage,
    BrokerRegistration,
    ClientQuotaEntityKey,
    ClientQuotasImage,
    ClusterImage,
    ConfigResource,
    ConfigResourceType,
    ConfigurationsImage,
    ControllerRegistration,
    DelegationTokenData,
    DelegationTokenImage,
    FeaturesImage,
    MetadataImage,
    MetadataProvenance,
    MetadataReplayError,
    PartitionRegistration,
    ProducerIdsImage,
    ScramCredentialData,
    ScramImage,
    TopicIdPartition,
    TopicImage,
    TopicPartition,
    TopicsImage,
    frozen_map,
    quota_entity_key,
)
from kbroker.protocol.metadata_records import METADATA_RECORDS_BY_NAME, MetadataRecordType
from kbroker.security.acl import StandardAcl

if TYPE_CHECKING:
    from kbroker.protocol.metadata_records.access_control_entry_record import AccessControlEntryRecord
    from kbroker.protocol.metadata_records.broker_registration_change_record import (
        BrokerRegistrationChangeRecord,
    )
    from kbroker.protocol.metadata_records.clear_elr_record import ClearElrRecord
    from kbroker.protocol.metadata_records.client_quota_record import ClientQuotaRecord
    from kbroker.protocol.metadata_records.config_record import ConfigRecord
    from kbroker.protocol.metadata_records.delegation_token_record import DelegationTokenRecord
    from kbroker.protocol.metadata_records.feature_level_record import FeatureLevelRecord
    from kbroker.protocol.metadata_records.fence_broker_record import FenceBrokerRecord
    from kbroker.protocol.metadata_records.partition_change_record import PartitionChangeRecord
    from kbroker.protocol.metadata_records.partition_record import PartitionRecord
    from kbroker.protocol.metadata_records.producer_ids_record import ProducerIdsRecord
    from kbroker.protocol.metadata_records.register_broker_record import RegisterBrokerRecord
    from kbroker.protocol.metadata_records.register_controller_record import RegisterControllerRecord
    from kbroker.protocol.metadata_records.remove_access_control_entry_record import (
        RemoveAccessControlEntryRecord,
    )
    from kbroker.protocol.metadata_records.remove_delegation_token_record import RemoveDelegationTokenRecord
    from kbroker.protocol.metadata_records.remove_topic_record import RemoveTopicRecord
    from kbroker.protocol.metadata_records.remove_user_scram_credential_record import (
        RemoveUserScramCredentialRecord,
    )
    from kbroker.protocol.metadata_records.topic_record import TopicRecord
    from kbroker.protocol.metadata_records.unfence_broker_record import UnfenceBrokerRecord
    from kbroker.protocol.metadata_records.unregister_broker_record import UnregisterBrokerRecord
    from kbroker.protocol.metadata_records.user_scram_credential_record import UserScramCredentialRecord


# -- topics --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """A partition a broker must act on, with its topic id (Kafka's LocalReplicaChanges.PartitionInfo)."""

    topic_id: uuid.UUID
    partition: PartitionRegistration


@dataclass(slots=True)
class LocalReplicaChanges:
    """What one broker must do for a delta (Kafka's LocalReplicaChanges).

    ``leaders``: partitions it leads whose registration changed (new leader epoch or ISR...);
    ``elected_leaders``: those of them whose leader epoch changed (it just became leader);
    ``followers``: partitions it is a follower of whose registration changed;
    ``deletes``: partitions it no longer hosts (removed from the replicas, or the topic was deleted).
    """

    deletes: set[TopicPartition] = field(default_factory=set)
    elected_leaders: dict[TopicPartition, PartitionInfo] = field(default_factory=dict)
    leaders: dict[TopicPartition, PartitionInfo] = field(default_factory=dict)
    followers: dict[TopicPartition, PartitionInfo] = field(default_factory=dict)
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    directory_ids: dict[TopicIdPartition, uuid.UUID] = field(default_factory=dict)

    def update(self, other: LocalReplicaChanges) -> None:
        self.deletes |= other.deletes
        self.elected_leaders.update(other.elected_leaders)
        self.leaders.update(other.leaders)
        self.followers.update(other.followers)
        for name, tid in other.topic_ids.items():
            self.topic_ids.setdefault(name, tid)
        self.directory_ids.update(other.directory_ids)


class TopicDelta:
    """Partition changes of one topic (Kafka's TopicDelta)."""

    __slots__ = ("image", "partition_changes")

    def __init__(self, image: TopicImage) -> None:
        self.image = image
        self.partition_changes: dict[int, PartitionRegistration] = {}

    @property
    def name(self) -> str:
        return self.image.name

    @property
    def id(self) -> uuid.UUID:
        return self.image.id

    def partition(self, index: int) -> PartitionRegistration | None:
        """The partition as of this delta (changed or unchanged)."""
        p = self.partition_changes.get(index)
        return self.image.partitions.get(index) if p is None else p

    def replay_partition(self, record: PartitionRecord) -> None:
        self.partition_changes[record.partition_id] = PartitionRegistration.from_record(record)

    def replay_partition_change(self, record: PartitionChangeRecord) -> None:
        prev = self.partition(record.partition_id)
        if prev is None:
            raise MetadataReplayError(
                f"PartitionChangeRecord for unknown partition {record.partition_id} of topic {self.name}"
            )
        self.partition_changes[record.partition_id] = prev.merge(record)

    def clear_elr(self) -> None:
        """ClearElrRecord: empty ELR and last known ELR of every partition that has any (KIP-966)."""
        indexes = set(self.image.partitions) | set(self.partition_changes)
        for index in sorted(indexes):
            p = self.partition(index)
            if p is not None and (p.elr or p.last_known_elr):
                self.partition_changes[index] = _cleared_elr(p)

    def new_partitions(self) -> list[int]:
        """Partitions this delta creates (Kafka's TopicDelta.newPartitions)."""
        return sorted(i for i in self.partition_changes if i not in self.image.partitions)

    def has_partitions_with_assignment_changes(self) -> bool:
        for index, p in self.partition_changes.items():
            prev = self.image.partitions.get(index)
            if prev is None or prev.replicas != p.replicas:
                return True
        return False

    def apply(self) -> TopicImage:
        if not self.partition_changes:
            return self.image
        partitions = dict(self.image.partitions)
        partitions.update(self.partition_changes)
        return TopicImage(self.image.name, self.image.id, frozen_map(partitions))

    def local_changes(self, broker_id: int) -> LocalReplicaChanges:
        """What ``broker_id`` must do for this topic (Kafka's TopicDelta.localChanges)."""
        out = LocalReplicaChanges()
        name, tid = self.image.name, self.image.id
        for index, p in self.partition_changes.items():
            tp = TopicPartition(name, index)
            prev = self.image.partitions.get(index)
            if broker_id not in p.replicas:
                if prev is not None and broker_id in prev.replicas:
                    out.deletes.add(tp)
            elif p.leader == broker_id:
                if prev is None or prev.partition_epoch != p.partition_epoch:
                    info = PartitionInfo(tid, p)
                    out.leaders[tp] = info
                    if prev is None or prev.leader_epoch != p.leader_epoch:
                        out.elected_leaders[tp] = info
                    out.topic_ids.setdefault(name, tid)
            elif prev is None or prev.partition_epoch != p.partition_epoch:
                out.followers[tp] = PartitionInfo(tid, p)
                out.topic_ids.setdefault(name, tid)
            # A replica's directory, when it was already a replica and moved, or the partition is new.
            if broker_id in p.replicas and (prev is None or broker_id in prev.replicas):
                directory = p.directory(broker_id)
                if directory is not None and (prev is None or prev.directory(broker_id) != directory):
                    out.directory_ids[TopicIdPartition(tid, index)] = directory
        return out


def _cleared_elr(p: PartitionRegistration) -> PartitionRegistration:
    """``p.merge`` of a PartitionChangeRecord that only empties the ELR and last known ELR."""
    return replace(p, elr=(), last_known_elr=(), partition_epoch=p.partition_epoch + 1)


class TopicsDelta:
    """Created, deleted and changed topics (Kafka's TopicsDelta)."""

    __slots__ = ("image", "changed_topics", "deleted_topic_ids", "created_topics")

    def __init__(self, image: TopicsImage) -> None:
        self.image = image
        self.changed_topics: dict[uuid.UUID, TopicDelta] = {}
        self.deleted_topic_ids: set[uuid.UUID] = set()
        self.created_topics: dict[str, uuid.UUID] = {}

    def _topic_delta(self, topic_id: uuid.UUID, what: str) -> TopicDelta:
        delta = self.changed_topics.get(topic_id)
        if delta is None:
            image = self.image.topics_by_id.get(topic_id)
            if image is None:
                raise MetadataReplayError(f"{what} for unknown topic id {topic_id}")
            delta = self.changed_topics[topic_id] = TopicDelta(image)
        return delta

    def replay_topic(self, record: TopicRecord) -> None:
        if record.topic_id in self.changed_topics or record.topic_id in self.image.topics_by_id:
            raise MetadataReplayError(f"TopicRecord for existing topic id {record.topic_id} ({record.name})")
        self.changed_topics[record.topic_id] = TopicDelta(TopicImage(record.name, record.topic_id))
        self.created_topics[record.name] = record.topic_id

    def replay_partition(self, record: PartitionRecord) -> None:
        self._topic_delta(record.topic_id, "PartitionRecord").replay_partition(record)

    def replay_partition_change(self, record: PartitionChangeRecord) -> None:
        self._topic_delta(record.topic_id, "PartitionChangeRecord").replay_partition_change(record)

    def replay_remove_topic(self, record: RemoveTopicRecord) -> str:
        """Remove the topic; return its name (the caller drops its configs)."""
        delta = self.changed_topics.pop(record.topic_id, None)
        if delta is not None:
            name = delta.image.name
            if record.topic_id in self.image.topics_by_id:
                self.deleted_topic_ids.add(record.topic_id)
        else:
            image = self.image.topics_by_id.get(record.topic_id)
            if image is None:
                raise MetadataReplayError(f"RemoveTopicRecord for unknown topic id {record.topic_id}")
            name = image.name
            self.deleted_topic_ids.add(record.topic_id)
        if self.created_topics.get(name) == record.topic_id:
            del self.created_topics[name]
        return name

    def replay_clear_elr(self, record: ClearElrRecord) -> None:
        if record.topic_name:
            tid = self.created_topics.get(record.topic_name)
            if tid is None:
                image = self.image.topics_by_name.get(record.topic_name)
                if image is None or image.id in self.deleted_topic_ids:
                    raise MetadataReplayError(f"ClearElrRecord for unknown topic {record.topic_name}")
                tid = image.id
            self._topic_delta(tid, "ClearElrRecord").clear_elr()
            return
        for tid in list(self.image.topics_by_id):
            if tid not in self.deleted_topic_ids:
                self._topic_delta(tid, "ClearElrRecord").clear_elr()
        for delta in self.changed_topics.values():
            delta.clear_elr()

    # -- what changed ----------------------------------------------------------------------------------

    def changed_topic(self, topic_id: uuid.UUID) -> TopicDelta | None:
        return self.changed_topics.get(topic_id)

    def created_topic_ids(self) -> set[uuid.UUID]:
        return set(self.created_topics.values())

    def topic_was_created(self, name: str) -> bool:
        return name in self.created_topics

    def topic_was_deleted(self, name: str) -> bool:
        image = self.image.topics_by_name.get(name)
        return image is not None and image.id in self.deleted_topic_ids

    def deleted_topics(self) -> list[TopicImage]:
        return [self.image.topics_by_id[tid] for tid in sorted(self.deleted_topic_ids, key=str)]

    def apply(self) -> TopicsImage:
        if not self.changed_topics and not self.deleted_topic_ids:
            return self.image
        by_id = dict(self.image.topics_by_id)
        by_name = dict(self.image.topics_by_name)
        for tid in self.deleted_topic_ids:
            gone = by_id.pop(tid)
            if by_name.get(gone.name) is gone:
                del by_name[gone.name]
        for tid, delta in self.changed_topics.items():
            old = by_id.get(tid)
            new = delta.apply()
            if old is not None and old.name != new.name:
                by_name.pop(old.name, None)
            by_id[tid] = new
            by_name[new.name] = new
        return TopicsImage(frozen_map(by_id), frozen_map(by_name))

    def local_changes(self, broker_id: int) -> LocalReplicaChanges:
        """What ``broker_id`` must do for this delta (Kafka's TopicsDelta.localChanges): the replicas it
        hosted of deleted topics are deletes; changed topics add their own local changes."""
        out = LocalReplicaChanges()
        for topic in self.deleted_topics():
            for index, p in topic.partitions.items():
                if broker_id in p.replicas:
                    out.deletes.add(TopicPartition(topic.name, index))
        for delta in self.changed_topics.values():
            out.update(delta.local_changes(broker_id))
        return out


# -- cluster -------------------------------------------------------------------------------------------

class ClusterDelta:
    """Broker and controller registrations (Kafka's ClusterDelta); a None change unregisters."""

    __slots__ = ("image", "changed_brokers", "changed_controllers")

    def __init__(self, image: ClusterImage) -> None:
        self.image = image
        self.changed_brokers: dict[int, BrokerRegistration | None] = {}
        self.changed_controllers: dict[int, ControllerRegistration | None] = {}

    def broker(self, node_id: int) -> BrokerRegistration | None:
        if node_id in self.changed_brokers:
            return self.changed_brokers[node_id]
        return self.image.brokers.get(node_id)

    def _broker_or_raise(self, node_id: int, epoch: int, action: str) -> BrokerRegistration:
        b = self.broker(node_id)
        if b is None:
            raise MetadataReplayError(f"tried to {action} broker {node_id}, but that broker was not registered")
        if b.epoch != epoch:
            raise MetadataReplayError(
                f"tried to {action} broker {node_id}, but the given epoch, {epoch}, did not match the current "
                f"broker epoch, {b.epoch}"
            )
        return b

    def _set(self, b: BrokerRegistration, new: BrokerRegistration) -> None:
        if new != b:
            self.changed_brokers[new.id] = new

    def replay_register_broker(self, record: RegisterBrokerRecord) -> None:
        self.changed_brokers[record.broker_id] = BrokerRegistration.from_record(record)

    def replay_unregister_broker(self, record: UnregisterBrokerRecord) -> None:
        self._broker_or_raise(record.broker_id, record.broker_epoch, "unregister")
        self.changed_brokers[record.broker_id] = None

    def replay_fence_broker(self, record: FenceBrokerRecord) -> None:
        b = self._broker_or_raise(record.id, record.epoch, "fence")
        self._set(b, b.clone_with(fenced=True))

    def replay_unfence_broker(self, record: UnfenceBrokerRecord) -> None:
        b = self._broker_or_raise(record.id, record.epoch, "unfence")
        self._set(b, b.clone_with(fenced=False))

    def replay_broker_registration_change(self, record: BrokerRegistrationChangeRecord) -> None:
        b = self._broker_or_raise(record.broker_id, record.broker_epoch, "change")
        fencing = {-1: False, 0: None, 1: True}
        if record.fenced not in fencing:
            raise MetadataReplayError(f"invalid fencing change {record.fenced} for broker {record.broker_id}")
        shutdown = {0: None, 1: True}
        if record.in_controlled_shutdown not in shutdown:
            raise MetadataReplayError(
                f"invalid in-controlled-shutdown change {record.in_controlled_shutdown} for broker {record.broker_id}"
            )
        directories = tuple(record.log_dirs) if record.log_dirs else None
        cordoned = None if record.cordoned_log_dirs is None else tuple(record.cordoned_log_dirs)
        self._set(
            b, b.clone_with(fencing[record.fenced], shutdown[record.in_controlled_shutdown], directories, cordoned)
        )

    def replay_register_controller(self, record: RegisterControllerRecord) -> None:
        self.changed_controllers[record.controller_id] = ControllerRegistration.from_record(record)

    def apply(self) -> ClusterImage:
        if not self.changed_brokers and not self.changed_controllers:
            return self.image
        brokers = dict(self.image.brokers)
        for node_id, b in self.changed_brokers.items():
            if b is None:
                brokers.pop(node_id, None)
            else:
                brokers[node_id] = b
        controllers = dict(self.image.controllers)
        for node_id, c in self.changed_controllers.items():
            if c is None:
                controllers.pop(node_id, None)
            else:
                controllers[node_id] = c
        return ClusterImage(frozen_map(brokers), frozen_map(controllers))


# -- configs, features, producer ids -------------------------------------------------------------------


class ConfigurationsDelta:
    """Config changes by resource; a None value deletes the key (Kafka's ConfigurationsDelta)."""

    __slots__ = ("image", "changes")

    def __init__(self, image: ConfigurationsImage) -> None:
        self.image = image
        self.changes: dict[ConfigResource, dict[str, str | None]] = {}

    def replay_config(self, record: ConfigRecord) -> None:
        try:
            rtype = ConfigResourceType(record.resource_type)
        except ValueError:
            raise MetadataReplayError(f"ConfigRecord with unknown resource type {record.resource_type}") from None
        self.changes.setdefault(ConfigResource(rtype, record.resource_name), {})[record.name] = record.value

    def delete_all(self, resource: ConfigResource) -> None:
        """Every key of ``resource`` goes (a removed topic's configs)."""
        changes = self.changes.setdefault(resource, {})
        for key in self.image.config_map(resource):
            changes[key] = None
        for key in changes:
            changes[key] = None

    def changed_resources(self) -> set[ConfigResource]:
        return set(self.changes)

    def apply(self) -> ConfigurationsImage:
        if not self.changes:
            return self.image
        configs = dict(self.image.configs)
        for resource, changes in self.changes.items():
            merged = dict(configs.get(resource, {}))
            for key, value in changes.items():
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = value
            if merged:
                configs[resource] = frozen_map(merged)
            else:
                configs.pop(resource, None)
        return ConfigurationsImage(frozen_map(configs))


class FeaturesDelta:
    """Finalized feature level changes (Kafka's FeaturesDelta); None removes a feature."""

    __slots__ = ("image", "changes", "metadata_version_change")

    def __init__(self, image: FeaturesImage) -> None:
        self.image = image
        self.changes: dict[str, int | None] = {}
        self.metadata_version_change: int | None = None

    def replay_feature_level(self, record: FeatureLevelRecord) -> None:
        if record.name == METADATA_VERSION:
            if record.feature_level < MINIMUM_METADATA_VERSION:
                raise MetadataReplayError(
                    f"metadata.version feature level {record.feature_level} is below the minimum "
                    f"{MINIMUM_METADATA_VERSION} (3.3-IV3)"
                )
            self.metadata_version_change = record.feature_level
        elif record.name == KRAFT_VERSION:
            return  # the raft layer's feature (KRaftVersionRecord), not part of this image, as in Kafka
        else:
            self.changes[record.name] = None if record.feature_level == 0 else record.feature_level

    def apply(self) -> FeaturesImage:
        if not self.changes and self.metadata_version_change is None:
            return self.image
        finalized = dict(self.image.finalized_versions)
        for name, level in self.changes.items():
            if level is None:
                finalized.pop(name, None)
            else:
                finalized[name] = level
        mv = self.image.metadata_version if self.metadata_version_change is None else self.metadata_version_change
        return FeaturesImage(mv, frozen_map(finalized))


class ProducerIdsDelta:
    __slots__ = ("image", "next_producer_id")

    def __init__(self, image: ProducerIdsImage) -> None:
        self.image = image
        self.next_producer_id = image.next_producer_id

    def replay_producer_ids(self, record: ProducerIdsRecord) -> None:
        self.next_producer_id = record.next_producer_id

    def apply(self) -> ProducerIdsImage:
        if self.next_producer_id == self.image.next_producer_id:
            return self.image
        return ProducerIdsImage(self.next_producer_id)


class ScramDelta:
    """UserScramCredentialRecord upserts, RemoveUserScramCredentialRecord deletes (Kafka's ScramDelta)."""

    def __init__(self, image: ScramImage) -> None:
        self.image = image
        self.changes: dict[tuple[int, str], ScramCredentialData | None] = {}

    def replay_upsert(self, record: UserScramCredentialRecord) -> None:
        self.changes[(record.mechanism, record.name)] = ScramCredentialData(
            bytes(record.salt), bytes(record.stored_key), bytes(record.server_key), record.iterations)

    def replay_remove(self, record: RemoveUserScramCredentialRecord) -> None:
        self.changes[(record.mechanism, record.name)] = None

    def apply(self) -> ScramImage:
        credentials = dict(self.image.credentials)
        for key, value in self.changes.items():
            if value is None:
                credentials.pop(key, None)
            else:
                credentials[key] = value
        return ScramImage(frozen_map(credentials))


class DelegationTokenDelta:
    """DelegationTokenRecord upserts a token, RemoveDelegationTokenRecord removes it (Kafka's DelegationTokenDelta)."""

    def __init__(self, image: DelegationTokenImage) -> None:
        self.image = image
        self.changes: dict[str, DelegationTokenData | None] = {}

    def replay_token(self, record: DelegationTokenRecord) -> None:
        self.changes[record.token_id] = DelegationTokenData(
            record.token_id, record.owner, record.requester, tuple(record.renewers), record.issue_timestamp,
            record.max_timestamp, record.expiration_timestamp)

    def replay_remove_token(self, record: RemoveDelegationTokenRecord) -> None:
        self.changes[record.token_id] = None

    def apply(self) -> DelegationTokenImage:
        tokens = dict(self.image.tokens)
        for token_id, value in self.changes.items():
            if value is None:
                tokens.pop(token_id, None)
            else:
                tokens[token_id] = value
        return DelegationTokenImage(frozen_map(tokens))


class AclsDelta:
    """AccessControlEntryRecord adds an ACL by id, RemoveAccessControlEntryRecord removes it (Kafka's AclsDelta)."""

    def __init__(self, image: AclsImage) -> None:
        self.image = image
        self.changes: dict[uuid.UUID, StandardAcl | None] = {}

    def replay_acl(self, record: AccessControlEntryRecord) -> None:
        self.changes[record.id] = StandardAcl(record.resource_type, record.resource_name, record.pattern_type,
                                              record.principal, record.host, record.operation,
                                              record.permission_type)

    def replay_remove_acl(self, record: RemoveAccessControlEntryRecord) -> None:
        if record.id not in self.changes and record.id not in self.image.acls:
            raise MetadataReplayError(f"Failed to remove ACL {record.id}: no such ACL")
        self.changes[record.id] = None

    def apply(self) -> AclsImage:
        acls = dict(self.image.acls)
        for key, value in self.changes.items():
            if value is None:
                acls.pop(key, None)
            else:
                acls[key] = value
        return AclsImage(frozen_map(acls))


class ClientQuotasDelta:
    """ClientQuotaRecord sets (or, with `remove`, deletes) one key of one entity (Kafka's ClientQuotasDelta)."""

    def __init__(self, image: ClientQuotasImage) -> None:
        self.image = image
        self.changes: dict[ClientQuotaEntityKey, dict[str, float | None]] = {}

    def replay_client_quota(self, record: ClientQuotaRecord) -> None:
        entity = quota_entity_key((e.entity_type, e.entity_name) for e in record.entity)
        self.changes.setdefault(entity, {})[record.key] = None if record.remove else float(record.value)

    def apply(self) -> ClientQuotasImage:
        entities = dict(self.image.entities)
        for entity, changes in self.changes.items():
            quotas = dict(entities.get(entity, {}))
            for key, value in changes.items():
                if value is None:
                    quotas.pop(key, None)
                else:
                    quotas[key] = value
            if quotas:
                entities[entity] = frozen_map(quotas)
            else:
                entities.pop(entity, None)
        return ClientQuotasImage(frozen_map(entities))


# -- the whole delta -----------------------------------------------------------------------------------

# Record types only meaningful during a ZooKeeper migration: accepted, not modelled.
_IGNORED = frozenset(
    {
        MetadataRecordType.NO_OP_RECORD,
        MetadataRecordType.ZK_MIGRATION_STATE_RECORD,
        MetadataRecordType.BEGIN_TRANSACTION_RECORD,
        MetadataRecordType.END_TRANSACTION_RECORD,
        MetadataRecordType.ABORT_TRANSACTION_RECORD,
    }
)


class MetadataDelta:
    """Records replayed on top of ``image``; ``apply()`` gives the next image (Kafka's MetadataDelta).

    Sub-deltas are created on first change: ``topics_delta`` etc. are None when that part of the
    image did not change.
    """

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.features_delta: FeaturesDelta | None = None
        self.cluster_delta: ClusterDelta | None = None
        self.topics_delta: TopicsDelta | None = None
        self.configs_delta: ConfigurationsDelta | None = None
        self.producer_ids_delta: ProducerIdsDelta | None = None
        self.scram_delta: ScramDelta | None = None
        self.acls_delta: AclsDelta | None = None
        self.client_quotas_delta: ClientQuotasDelta | None = None
        self.delegation_tokens_delta: DelegationTokenDelta | None = None
        self._handlers: dict[int, Callable[[Any], None]] = {
            MetadataRecordType.REGISTER_BROKER_RECORD: lambda r: self._cluster().replay_register_broker(r),
            MetadataRecordType.UNREGISTER_BROKER_RECORD: lambda r: self._cluster().replay_unregister_broker(r),
            MetadataRecordType.FENCE_BROKER_RECORD: lambda r: self._cluster().replay_fence_broker(r),
            MetadataRecordType.UNFENCE_BROKER_RECORD: lambda r: self._cluster().replay_unfence_broker(r),
            MetadataRecordType.BROKER_REGISTRATION_CHANGE_RECORD: (
                lambda r: self._cluster().replay_broker_registration_change(r)
            ),
            MetadataRecordType.REGISTER_CONTROLLER_RECORD: lambda r: self._cluster().replay_register_controller(r),
            MetadataRecordType.TOPIC_RECORD: lambda r: self._topics().replay_topic(r),
            MetadataRecordType.PARTITION_RECORD: lambda r: self._topics().replay_partition(r),
            MetadataRecordType.PARTITION_CHANGE_RECORD: lambda r: self._topics().replay_partition_change(r),
            MetadataRecordType.REMOVE_TOPIC_RECORD: self._replay_remove_topic,
            MetadataRecordType.CLEAR_ELR_RECORD: lambda r: self._topics().replay_clear_elr(r),
            MetadataRecordType.CONFIG_RECORD: lambda r: self._configs().replay_config(r),
            MetadataRecordType.FEATURE_LEVEL_RECORD: lambda r: self._features().replay_feature_level(r),
            MetadataRecordType.PRODUCER_IDS_RECORD: lambda r: self._producer_ids().replay_producer_ids(r),
            MetadataRecordType.ACCESS_CONTROL_ENTRY_RECORD: lambda r: self._acls().replay_acl(r),
            MetadataRecordType.REMOVE_ACCESS_CONTROL_ENTRY_RECORD: lambda r: self._acls().replay_remove_acl(r),
            MetadataRecordType.USER_SCRAM_CREDENTIAL_RECORD: lambda r: self._scram().replay_upsert(r),
            MetadataRecordType.REMOVE_USER_SCRAM_CREDENTIAL_RECORD: lambda r: self._scram().replay_remove(r),
            MetadataRecordType.CLIENT_QUOTA_RECORD: lambda r: self._client_quotas().replay_client_quota(r),
            MetadataRecordType.DELEGATION_TOKEN_RECORD: lambda r: self._delegation_tokens().replay_token(r),
            MetadataRecordType.REMOVE_DELEGATION_TOKEN_RECORD: (
                lambda r: self._delegation_tokens().replay_remove_token(r)
            ),
        }

    def _cluster(self) -> ClusterDelta:
        if self.cluster_delta is None:
            self.cluster_delta = ClusterDelta(self.image.cluster)
        return self.cluster_delta

    def _topics(self) -> TopicsDelta:
        if self.topics_delta is None:
            self.topics_delta = TopicsDelta(self.image.topics)
        return self.topics_delta

    def _configs(self) -> ConfigurationsDelta:
        if self.configs_delta is None:
            self.configs_delta = ConfigurationsDelta(self.image.configs)
        return self.configs_delta

    def _features(self) -> FeaturesDelta:
        if self.features_delta is None:
            self.features_delta = FeaturesDelta(self.image.features)
        return self.features_delta

    def _producer_ids(self) -> ProducerIdsDelta:
        if self.producer_ids_delta is None:
            self.producer_ids_delta = ProducerIdsDelta(self.image.producer_ids)
        return self.producer_ids_delta

    def _acls(self) -> AclsDelta:
        if self.acls_delta is None:
            self.acls_delta = AclsDelta(self.image.acls)
        return self.acls_delta

    def _scram(self) -> ScramDelta:
        if self.scram_delta is None:
            self.scram_delta = ScramDelta(self.image.scram)
        return self.scram_delta

    def _client_quotas(self) -> ClientQuotasDelta:
        if self.client_quotas_delta is None:
            self.client_quotas_delta = ClientQuotasDelta(self.image.client_quotas)
        return self.client_quotas_delta

    def _delegation_tokens(self) -> DelegationTokenDelta:
        if self.delegation_tokens_delta is None:
            self.delegation_tokens_delta = DelegationTokenDelta(self.image.delegation_tokens)
        return self.delegation_tokens_delta

    def _replay_remove_topic(self, record: RemoveTopicRecord) -> None:
        name = self._topics().replay_remove_topic(record)
        resource = ConfigResource(ConfigResourceType.TOPIC, name)
        if self.image.configs.config_map(resource) or (
            self.configs_delta is not None and resource in self.configs_delta.changes
        ):
            self._configs().delete_all(resource)

    def replay(self, record: object) -> None:
        """Apply one metadata record (an object of a generated ``metadata_records`` class)."""
        spec = METADATA_RECORDS_BY_NAME.get(type(record).__name__)
        if spec is None:
            raise TypeError(f"{type(record).__name__} is not a metadata record")
        handler = self._handlers.get(spec.api_key)
        if handler is not None:
            handler(record)
        elif spec.api_key not in _IGNORED:
            raise MetadataReplayError(f"no replay for {spec.name}")

    def replay_all(self, records: Iterable[object]) -> None:
        for r in records:
            self.replay(r)

    def apply(self, provenance: MetadataProvenance | None = None) -> MetadataImage:
        """The image after every replayed record; ``provenance`` says up to where (default: unchanged)."""
        image = self.image
        return MetadataImage(
            provenance=image.provenance if provenance is None else provenance,
            features=image.features if self.features_delta is None else self.features_delta.apply(),
            cluster=image.cluster if self.cluster_delta is None else self.cluster_delta.apply(),
            topics=image.topics if self.topics_delta is None else self.topics_delta.apply(),
            configs=image.configs if self.configs_delta is None else self.configs_delta.apply(),
            producer_ids=image.producer_ids if self.producer_ids_delta is None else self.producer_ids_delta.apply(),
            scram=image.scram if self.scram_delta is None else self.scram_delta.apply(),
            acls=image.acls if self.acls_delta is None else self.acls_delta.apply(),
            client_quotas=(image.client_quotas if self.client_quotas_delta is None
                           else self.client_quotas_delta.apply()),
            delegation_tokens=(image.delegation_tokens if self.delegation_tokens_delta is None
                               else self.delegation_tokens_delta.apply()),
        )

    # -- what a publisher asks -------------------------------------------------------------------------

    def local_changes(self, broker_id: int) -> LocalReplicaChanges:
        return LocalReplicaChanges() if self.topics_delta is None else self.topics_delta.local_changes(broker_id)

    def changed_configs(self) -> Mapping[ConfigResource, dict[str, str | None]]:
        return {} if self.configs_delta is None else self.configs_delta.changes
