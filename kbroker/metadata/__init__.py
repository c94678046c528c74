"""Cluster metadata as Kafka models it: an immutable image, deltas between images, publishers.

Owns ``MetadataImage`` (image.py: topics, partitions, brokers, configs, features, producer ids, and
the log position it reflects), ``MetadataDelta`` (delta.py: replaying Kafka's own metadata records,
``kbroker.protocol.metadata_records``, and telling what changed, down to one broker's
``local_changes``), ``image_records`` (image_writer.py: an image as the records that rebuild it) and
``MetadataLoader`` with the ``MetadataPublisher`` protocol (loader.py: committed batches -> delta ->
new image -> publishers, in order).

Why: replication, the controller and the coordinators react to metadata changes (become leader,
become follower, stop, load a coordinator partition) instead of being called by the topic code; the
shapes and names are Kafka's (``MetadataImage``, ``MetadataDelta``, ``TopicDelta.localChanges``,
``MetadataPublisher``, ``MetadataLoader``) so Kafka's design notes and KIPs apply (KIP-500, KIP-631
records, KIP-704 leader recovery, KIP-858 directories, KIP-966 ELR).

Sans-IO and synchronous: no asyncio, no sockets, no files. Must not import net/, api/, replica/,
coord/, cluster/, log/ (or controller/): they depend on this package, not the other way round. Imports
only the standard library and ``kbroker.protocol``.
"""

from kbroker.metadata.delta import (
    ClusterDelta,
    ConfigurationsDelta,
    FeaturesDelta,
    LocalReplicaChanges,
    MetadataDelta,
    PartitionInfo,
    ProducerIdsDelta,
    TopicDelta,
    TopicsDelta,
)
from kbroker.metadata.image import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    BrokerRegistration,
    ClusterImage,
    ConfigResource,
    ConfigResourceType,
    ConfigurationsImage,
    ControllerRegistration,
    DirectoryId,
    Endpoint,
    FeaturesImage,
    InvalidReplicaDirectoriesError,
    LeaderRecoveryState,
    MetadataImage,
    MetadataProvenance,
    MetadataReplayError,
    PartitionRegistration,
    ProducerIdsImage,
    TopicIdPartition,
    TopicImage,
    TopicPartition,
    TopicsImage,
    VersionRange,
)
from kbroker.metadata.image_writer import image_records
from kbroker.metadata.loader import (
    LoaderManifest,
    LogDeltaManifest,
    MetadataBatch,
    MetadataLoader,
    MetadataPublisher,
    SnapshotManifest,
)

__all__ = [
    "NO_LEADER",
    "NO_LEADER_CHANGE",
    "BrokerRegistration",
    "ClusterDelta",
    "ClusterImage",
    "ConfigResource",
    "ConfigResourceType",
    "ConfigurationsDelta",
    "ConfigurationsImage",
    "ControllerRegistration",
    "DirectoryId",
    "Endpoint",
    "FeaturesDelta",
    "FeaturesImage",
    "InvalidReplicaDirectoriesError",
    "LeaderRecoveryState",
    "LoaderManifest",
    "LocalReplicaChanges",
    "LogDeltaManifest",
    "MetadataBatch",
    "MetadataDelta",
    "MetadataImage",
    "MetadataLoader",
    "MetadataProvenance",
    "MetadataPublisher",
    "MetadataReplayError",
    "PartitionInfo",
    "PartitionRegistration",
    "ProducerIdsDelta",
    "ProducerIdsImage",
    "SnapshotManifest",
    "TopicDelta",
    "TopicIdPartition",
    "TopicImage",
    "TopicPartition",
    "TopicsDelta",
    "TopicsImage",
    "VersionRange",
    "image_records",
]
