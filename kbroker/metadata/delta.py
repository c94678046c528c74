"""`MetadataDelta`: replay metadata records over an image; `apply()` gives the next image.

Kafka's `MetadataDelta` / `TopicsDelta` / `TopicDelta` and their record semantics:
- `TopicRecord` creates a topic, `PartitionRecord` adds (or re-registers) a partition,
  `PartitionChangeRecord` merges into the registration (null = unchanged, leader -2 = unchanged, a
  new leader bumps the leader epoch, every change the partition epoch), `RemoveTopicRecord` deletes the
  topic and, as Kafka's `ConfigurationsDelta` does, its config overrides.
- `ConfigRecord` sets a key of a resource; a null value removes it.
- `RegisterBrokerRecord` replaces a broker's registration; `UnregisterBrokerRecord`, `FenceBrokerRecord`,
  `UnfenceBrokerRecord` and `BrokerRegistrationChangeRecord` (fenced: 1 fence, -1 unfence, 0 no
  change; in controlled shutdown: 1) change it.
- `FeatureLevelRecord` finalizes a feature level (0 removes it); `ProducerIdsRecord` moves the next
  producer id; `NoOpRecord` and the records of features not built yet (ACLs, quotas, SCRAM,
  delegation tokens) change nothing here.

`TopicsDelta.local_changes(broker_id)` is Kafka's `TopicDelta.localChanges`: the partitions a broker
must lead, follow or delete after this delta, which is all `ReplicaManager.apply_delta` needs.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from kbroker.metadata.image import (
    BrokerEndpoint,
    BrokerRegistration,
    ClusterImage,
    ConfigurationsImage,
    FeaturesImage,
    MetadataImage,
    MetadataProvenance,
    PartitionRegistration,
    ProducerIdsImage,
    TopicImage,
    TopicsImage,
)


@dataclass(frozen=True, slots=True)
class LocalPartitionChange:
    """A partition a broker hosts after a delta, with its registration."""

    topic: str
    topic_id: uuid.UUID
    partition: int
    registration: PartitionRegistration


@dataclass(slots=True)
class LocalReplicaChanges:
    """Kafka's `LocalReplicaChanges`: what one broker must do for a delta."""

    leaders: list[LocalPartitionChange] = field(default_factory=list)
    followers: list[LocalPartitionChange] = field(default_factory=list)
    deletes: list[tuple[str, uuid.UUID, int]] = field(default_factory=list)


class TopicDelta:
    """Changes to one topic (new or existing)."""

    __slots__ = ("image", "name", "id", "partition_changes")

    def __init__(self, image: TopicImage | None, name: str, topic_id: uuid.UUID) -> None:
        self.image = image
        self.name = name
        self.id = topic_id
        self.partition_changes: dict[int, PartitionRegistration] = {}

    @property
    def created(self) -> bool:
        return self.image is None

    def partition(self, p: int) -> PartitionRegistration | None:
        changed = self.partition_changes.get(p)
        if changed is not None:
            return changed
        return None if self.image is None else self.image.partitions.get(p)

    def new_partitions(self) -> list[int]:
        old = self.image.partitions if self.image is not None else {}
        return sorted(p for p in self.partition_changes if p not in old)

    def apply(self) -> TopicImage:
        partitions = dict(self.image.partitions) if self.image is not None else {}
        partitions.update(self.partition_changes)
        return TopicImage(self.name, self.id, MappingProxyType(partitions))


class TopicsDelta:
    __slots__ = ("image", "changed_topics", "deleted_topic_ids")

    def __init__(self, image: TopicsImage) -> None:
        self.image = image
        self.changed_topics: dict[uuid.UUID, TopicDelta] = {}
        self.deleted_topic_ids: dict[uuid.UUID, str] = {}

    def _topic_delta(self, topic_id: uuid.UUID) -> TopicDelta:
        delta = self.changed_topics.get(topic_id)
        if delta is None:
            existing = self.image.topics_by_id.get(topic_id)
            if existing is None:
                raise ValueError(f"metadata record for unknown topic id {topic_id}")
            delta = self.changed_topics[topic_id] = TopicDelta(existing, existing.name, topic_id)
        return delta

    def replay_topic(self, name: str, topic_id: uuid.UUID) -> None:
        self.changed_topics[topic_id] = TopicDelta(None, name, topic_id)
        self.deleted_topic_ids.pop(topic_id, None)

    def replay_partition(self, topic_id: uuid.UUID, partition: int, registration: PartitionRegistration) -> None:
        self._topic_delta(topic_id).partition_changes[partition] = registration

    def replay_partition_change(self, record: Any) -> None:
        delta = self._topic_delta(record.topic_id)
        current = delta.partition(record.partition_id)
        if current is None:
            raise ValueError(f"PartitionChangeRecord for unknown partition {record.topic_id}:{record.partition_id}")
        delta.partition_changes[record.partition_id] = current.merge(record)

    def replay_remove_topic(self, topic_id: uuid.UUID) -> str:
        delta = self.changed_topics.pop(topic_id, None)
        existing = self.image.topics_by_id.get(topic_id)
        name = existing.name if existing is not None else (delta.name if delta is not None else "")
        if existing is not None:
            self.deleted_topic_ids[topic_id] = name
        elif delta is None:
            raise ValueError(f"RemoveTopicRecord for unknown topic id {topic_id}")
        return name

    def topic_was_deleted(self, name: str) -> bool:
        return name in self.deleted_topic_ids.values()

    def apply(self) -> TopicsImage:
        if not self.changed_topics and not self.deleted_topic_ids:
            return self.image
        by_id = dict(self.image.topics_by_id)
        by_name = dict(self.image.topics_by_name)
        for topic_id, name in self.deleted_topic_ids.items():
            by_id.pop(topic_id, None)
            if by_name.get(name) is not None and by_name[name].id == topic_id:
                del by_name[name]
        for topic_id, delta in self.changed_topics.items():
            topic = delta.apply()
            by_id[topic_id] = topic
            by_name[topic.name] = topic
        return TopicsImage(MappingProxyType(by_id), MappingProxyType(by_name))

    def local_changes(self, broker_id: int) -> LocalReplicaChanges:
        """Kafka's `TopicsDelta.localChanges`: deleted topics' local partitions are deletes; a changed
        partition this broker is a replica of is a leader or follower change; one it left is a delete."""
        changes = LocalReplicaChanges()
        for topic_id, name in self.deleted_topic_ids.items():
            old = self.image.topics_by_id[topic_id]
            for p, reg in old.partitions.items():
                if broker_id in reg.replicas:
                    changes.deletes.append((name, topic_id, p))
        for topic_id, delta in self.changed_topics.items():
            old_topic = delta.image
            for p, reg in sorted(delta.partition_changes.items()):
                if broker_id in reg.replicas:
                    change = LocalPartitionChange(delta.name, topic_id, p, reg)
                    (changes.leaders if reg.leader == broker_id else changes.followers).append(change)
                elif old_topic is not None:
                    prev = old_topic.partitions.get(p)
                    if prev is not None and broker_id in prev.replicas:
                        changes.deletes.append((delta.name, topic_id, p))
        return changes


class MetadataDelta:
    """Records replayed over `image`; `apply(provenance)` builds the next image."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.topics_delta: TopicsDelta | None = None
        # (resource type, name) -> key -> value (None = removed).
        self.config_changes: dict[tuple[int, str], dict[str, str | None]] = {}
        self.broker_changes: dict[int, BrokerRegistration | None] = {}
        self.feature_changes: dict[str, int] = {}
        self.next_producer_id: int | None = None

    # -- replay ----------------------------------------------------------------------------------

    def _topics(self) -> TopicsDelta:
        if self.topics_delta is None:
            self.topics_delta = TopicsDelta(self.image.topics)
        return self.topics_delta

    def _broker(self, broker_id: int) -> BrokerRegistration | None:
        if broker_id in self.broker_changes:
            return self.broker_changes[broker_id]
        return self.image.cluster.brokers.get(broker_id)

    def replay(self, record: Any) -> None:
        kind = type(record).__name__
        handler = _REPLAY.get(kind)
        if handler is not None:
            handler(self, record)

    def _replay_topic(self, r: Any) -> None:
        self._topics().replay_topic(r.name, r.topic_id)

    def _replay_partition(self, r: Any) -> None:
        self._topics().replay_partition(r.topic_id, r.partition_id, PartitionRegistration.from_record(r))

    def _replay_partition_change(self, r: Any) -> None:
        self._topics().replay_partition_change(r)

    def _replay_remove_topic(self, r: Any) -> None:
        name = self._topics().replay_remove_topic(r.topic_id)
        # Kafka's ConfigurationsDelta drops the removed topic's overrides with it.
        current = self.image.configs.config_map(2, name)
        pending = self.config_changes.get((2, name), {})
        self.config_changes[(2, name)] = dict.fromkeys(set(current) | set(pending))

    def _replay_config(self, r: Any) -> None:
        self.config_changes.setdefault((int(r.resource_type), r.resource_name), {})[r.name] = r.value

    def _replay_register_broker(self, r: Any) -> None:
        self.broker_changes[r.broker_id] = BrokerRegistration(
            id=r.broker_id, epoch=r.broker_epoch, incarnation_id=r.incarnation_id,
            listeners=tuple(BrokerEndpoint(e.name, e.host, e.port, e.security_protocol) for e in r.end_points),
            supported_features=MappingProxyType({f.name: (f.min_supported_version, f.max_supported_version)
                                                 for f in r.features}),
            rack=r.rack, fenced=bool(r.fenced), in_controlled_shutdown=bool(r.in_controlled_shutdown),
        )

    def _replay_unregister_broker(self, r: Any) -> None:
        self.broker_changes[r.broker_id] = None

    def _set_fenced(self, broker_id: int, fenced: bool | None, shutdown: bool | None = None) -> None:
        current = self._broker(broker_id)
        if current is None:
            raise ValueError(f"broker {broker_id} is not registered")
        from dataclasses import replace

        self.broker_changes[broker_id] = replace(
            current,
            fenced=current.fenced if fenced is None else fenced,
            in_controlled_shutdown=current.in_controlled_shutdown if shutdown is None else shutdown,
        )

    def _replay_fence_broker(self, r: Any) -> None:
        self._set_fenced(r.id, True)

    def _replay_unfence_broker(self, r: Any) -> None:
        self._set_fenced(r.id, False)

    def _replay_registration_change(self, r: Any) -> None:
        fenced = {1: True, -1: False}.get(int(r.fenced))
        shutdown = True if int(r.in_controlled_shutdown) == 1 else None
        self._set_fenced(r.broker_id, fenced, shutdown)

    def _replay_feature_level(self, r: Any) -> None:
        self.feature_changes[r.name] = int(r.feature_level)

    def _replay_producer_ids(self, r: Any) -> None:
        self.next_producer_id = int(r.next_producer_id)

    # -- results ---------------------------------------------------------------------------------

    def changed_topic_configs(self) -> set[str]:
        """Names of topics whose config overrides changed."""
        return {name for (rtype, name) in self.config_changes if rtype == 2}

    def broker_configs_changed(self) -> bool:
        return any(rtype == 4 for (rtype, _) in self.config_changes)

    def apply(self, provenance: MetadataProvenance) -> MetadataImage:
        image = self.image
        topics = self.topics_delta.apply() if self.topics_delta is not None else image.topics
        configs = image.configs
        if self.config_changes:
            data: dict[tuple[int, str], Mapping[str, str]] = dict(configs.data)
            for resource, changes in self.config_changes.items():
                merged = dict(data.get(resource, {}))
                for key, value in changes.items():
                    if value is None:
                        merged.pop(key, None)
                    else:
                        merged[key] = value
                if merged:
                    data[resource] = MappingProxyType(merged)
                else:
                    data.pop(resource, None)
            configs = ConfigurationsImage(MappingProxyType(data))
        cluster = image.cluster
        if self.broker_changes:
            brokers = dict(cluster.brokers)
            for broker_id, reg in self.broker_changes.items():
                if reg is None:
                    brokers.pop(broker_id, None)
                else:
                    brokers[broker_id] = reg
            cluster = ClusterImage(MappingProxyType(brokers))
        features = image.features
        if self.feature_changes:
            levels = dict(features.finalized_versions)
            for name, level in self.feature_changes.items():
                if level == 0:
                    levels.pop(name, None)
                else:
                    levels[name] = level
            features = FeaturesImage(MappingProxyType(levels))
        producer_ids = image.producer_ids
        if self.next_producer_id is not None:
            producer_ids = ProducerIdsImage(self.next_producer_id)
        return MetadataImage(provenance=provenance, features=features, cluster=cluster, topics=topics,
                             configs=configs, producer_ids=producer_ids)


_REPLAY = {
    "TopicRecord": MetadataDelta._replay_topic,
    "PartitionRecord": MetadataDelta._replay_partition,
    "PartitionChangeRecord": MetadataDelta._replay_partition_change,
    "RemoveTopicRecord": MetadataDelta._replay_remove_topic,
    "ConfigRecord": MetadataDelta._replay_config,
    "RegisterBrokerRecord": MetadataDelta._replay_register_broker,
    "UnregisterBrokerRecord": MetadataDelta._replay_unregister_broker,
    "FenceBrokerRecord": MetadataDelta._replay_fence_broker,
    "UnfenceBrokerRecord": MetadataDelta._replay_unfence_broker,
    "BrokerRegistrationChangeRecord": MetadataDelta._replay_registration_change,
    "FeatureLevelRecord": MetadataDelta._replay_feature_level,
    "ProducerIdsRecord": MetadataDelta._replay_producer_ids,
}
