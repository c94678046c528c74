"""Kafka's internal topic names and `is_internal` (Kafka's `org.apache.kafka.common.internals.Topic`),
defined once for every layer.

Kafka keeps these in its clients library, beside the protocol; so does kbroker, so the storage,
metadata, replica, cluster and coordinator layers all read the same set (protocol/ imports nothing
above it). Kafka 4.3's set is the three coordinator-owned topics: `__consumer_offsets`,
`__transaction_state` and `__share_group_state` (KIP-932). `__cluster_metadata` is not in it: that
topic is the KRaft log, never visible to clients as a topic at all.
"""

from __future__ import annotations

GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"
TRANSACTION_STATE_TOPIC_NAME = "__transaction_state"
SHARE_GROUP_STATE_TOPIC_NAME = "__share_group_state"
CLUSTER_METADATA_TOPIC_NAME = "__cluster_metadata"

INTERNAL_TOPICS = frozenset({GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME, SHARE_GROUP_STATE_TOPIC_NAME})


def is_internal(topic: str) -> bool:
    """Kafka's `Topic.isInternal`: a topic its coordinators own, refused to ordinary producers."""
    return topic in INTERNAL_TOPICS
