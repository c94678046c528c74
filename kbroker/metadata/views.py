"""Query views over a `MetadataImage`: what handlers, the controller's checks and the replica manager ask.

Owns `TopicInfo` (one topic as the admin and data APIs see it: name, id, partition count, replication
factor, config overrides, internal flag) and `MetadataView`, which answers `topic(name)`,
`topic_by_id(id)`, `topics()` and the dynamic broker configs of one node from one immutable image.
The `TopicInfo`s are built once per image (metadata changes are rare, lookups are per request), so a
lookup is a dict access. Kafka's `KRaftMetadataCache` plays this part on a broker.

Sans-IO; imports only metadata/ and protocol/.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

from kbroker.metadata.image import ConfigResourceType, MetadataImage
from kbroker.protocol.topic import INTERNAL_TOPICS

# ConfigResource.Type as metadata records store it (ConfigRecord.ResourceType).
TOPIC_RESOURCE = int(ConfigResourceType.TOPIC)
BROKER_RESOURCE = int(ConfigResourceType.BROKER)

# Cluster-wide dynamic broker defaults (resource name "") are shown in the one `broker_configs` map
# with this prefix, per-broker ones under their plain key (config names never contain '<' or '/').
DYNAMIC_DEFAULT_PREFIX = "<default>/"


@dataclass
class TopicInfo:
    """One topic as the metadata image knows it. `configs` holds only the topic's overrides."""

    name: str
    topic_id: uuid.UUID
    num_partitions: int
    replication_factor: int = 1
    configs: dict[str, str] = field(default_factory=dict)
    is_internal: bool = False


class MetadataView:
    """Topic and config lookups over one image, as seen by broker `node_id`."""

    __slots__ = ("image", "node_id", "_by_name", "_by_id", "_broker_configs")

    def __init__(self, image: MetadataImage, node_id: int) -> None:
        self.image = image
        self.node_id = node_id
        self._by_name: dict[str, TopicInfo] = {}
        self._by_id: dict[uuid.UUID, TopicInfo] = {}
        configs = image.configs
        for topic in image.topics.topics_by_id.values():
            replicas = [len(p.replicas) for p in topic.partitions.values()]
            info = TopicInfo(
                name=topic.name,
                topic_id=topic.id,
                num_partitions=len(topic.partitions),
                replication_factor=replicas[0] if replicas else 1,
                configs=dict(configs.topic_config(topic.name)),
                is_internal=topic.name in INTERNAL_TOPICS,
            )
            self._by_name[info.name] = info
            self._by_id[info.topic_id] = info
        stored = {DYNAMIC_DEFAULT_PREFIX + k: v for k, v in configs.cluster_broker_config().items()}
        stored.update(configs.broker_config(node_id))
        self._broker_configs = stored

    def topic(self, name: str) -> TopicInfo | None:
        return self._by_name.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._by_id.get(topic_id)

    def topics(self) -> list[TopicInfo]:
        return list(self._by_name.values())

    def __iter__(self) -> Iterator[TopicInfo]:
        return iter(list(self._by_name.values()))

    @property
    def broker_configs(self) -> dict[str, str]:
        """Dynamic broker configs of this node; cluster-wide defaults carry `DYNAMIC_DEFAULT_PREFIX`."""
        return dict(self._broker_configs)

    @property
    def next_producer_id(self) -> int:
        return int(self.image.producer_ids.next_producer_id)
