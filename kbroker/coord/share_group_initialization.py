"""Which share-partitions of each share group have a state at the share coordinator: Kafka's
`ShareGroupStatePartitionMetadata` record (group coordinator record type 15) and the flows around it.

Kafka 4.3's `GroupMetadataManager` keeps, per share group, three sets in that record:

- `InitializingTopics`: subscribed partitions whose state the group coordinator is initializing
  (InitializeShareGroupState with start offset -1 and the group epoch as state epoch, sent through the
  persister after the heartbeat that found them);
- `InitializedTopics`: partitions whose state exists (the initialize answered NONE, or
  AlterShareGroupOffsets initialized them);
- `DeletingTopics`: topics whose states DeleteGroups is deleting.

The flows (the async halves, the persister calls, are `kbroker.coord.service`'s):

- heartbeat: `maybe_initialize` (Kafka's `subscribedTopicsChangeMap` + `addInitializingTopicsRecords`)
  writes the subscribed partitions neither initialized nor initializing (or initializing for longer than
  `group.share.initialize.retry.interval.ms`, an internal Kafka config, 30 s) as initializing; the
  persister's answer moves them to initialized (`initialize_succeeded`, Kafka's
  `initializeShareGroupState`) or drops them from initializing (`initialize_failed`, Kafka's
  `uninitializeShareGroupState`) so a later heartbeat retries. Only initialized partitions are
  assigned (`kbroker.coord.share_group_protocol`'s gating, Kafka's `initializedAssignmentPending`): the
  heartbeat does not wait for the initialization; the next one after it bumps the group epoch.
- DeleteGroups: `prepare_delete` (Kafka's `shareGroupBuildPartitionDeleteRequest`) moves initialized and
  initializing topics to deleting and answers exactly the partitions whose state the persister must
  delete (a topic still deleting from an earlier attempt is retried with all its partitions); the
  group's tombstones then include this record's (`on_group_deleted`).
- DescribeShareGroupOffsets without topics: `initialized_partitions` (Kafka's
  `initializedShareGroupPartitions`).
- topic deletion: `on_topics_deleted` (Kafka's `maybeCleanupShareGroupState`) removes the topic from
  every group's three sets.

Each change is written first and applied when the write succeeded (the records are the truth; loading
replays them: `replay`). Replayed initializing entries take the load time as their timestamp, as in
Kafka. Sans-IO: a writer, a clock and the topic lookup in; no asyncio.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kbroker.coord.config import RecordWriter, TopicLookup
from kbroker.coord.share_records import STATE_PARTITION_METADATA, encode_key
from kbroker.protocol.coordinator_records import Coordinator
from kbroker.protocol.coordinator_records.serde import decode_coordinator_value, encode_coordinator_value
from kbroker.protocol.coordinator_records.share_group_state_partition_metadata import (
    ShareGroupStatePartitionMetadataValue,
)
from kbroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

# Kafka's GroupCoordinatorConfig.SHARE_GROUP_INITIALIZE_RETRY_INTERVAL_MS_DEFAULT (an internal config).
SHARE_GROUP_INITIALIZE_RETRY_INTERVAL_MS = 30_000
UNKNOWN_TOPIC_NAME = "<UNKNOWN>"

TopicPartitions = dict[uuid.UUID, set[int]]
_V = ShareGroupStatePartitionMetadataValue


@dataclass(frozen=True, slots=True)
class InitMapValue:
    """Kafka's `ShareGroup.InitMapValue`: a topic's name, partitions and when they were last set."""

    name: str
    partitions: frozenset[int]
    timestamp_ms: int


@dataclass(slots=True)
class ShareGroupStatePartitionMetadataInfo:
    """One share group's record, decoded."""

    initializing: dict[uuid.UUID, InitMapValue] = field(default_factory=dict)
    initialized: dict[uuid.UUID, InitMapValue] = field(default_factory=dict)
    deleting: dict[uuid.UUID, str] = field(default_factory=dict)  # topic id -> name

    def empty(self) -> bool:
        return not self.initializing and not self.initialized and not self.deleting


@dataclass(frozen=True, slots=True)
class InitializeRequest:
    """What the persister must initialize after a heartbeat: start offset -1, state epoch = group epoch."""

    group_id: str
    group_epoch: int
    partitions: dict[uuid.UUID, frozenset[int]]


def combine_init_maps(a: dict[uuid.UUID, InitMapValue], b: dict[uuid.UUID, InitMapValue]
                      ) -> dict[uuid.UUID, InitMapValue]:
    """Kafka's `combineInitMaps`: the union of the partitions per topic; `b`'s name and timestamp win."""
    out = dict(a)
    for tid, v in b.items():
        old = out.get(tid)
        out[tid] = v if old is None else InitMapValue(v.name, old.partitions | v.partitions, v.timestamp_ms)
    return out


def _minus(m: dict[uuid.UUID, InitMapValue], remove: TopicPartitions) -> dict[uuid.UUID, InitMapValue]:
    out: dict[uuid.UUID, InitMapValue] = {}
    for tid, v in m.items():
        left = v.partitions - frozenset(remove.get(tid, set()))
        if left:
            out[tid] = InitMapValue(v.name, left, v.timestamp_ms)
    return out


def encode_value(info: ShareGroupStatePartitionMetadataInfo) -> bytes:
    def topics(m: dict[uuid.UUID, InitMapValue]) -> list[_V.TopicPartitionsInfo]:
        return [_V.TopicPartitionsInfo(topic_id=tid, topic_name=v.name, partitions=sorted(v.partitions))
                for tid, v in sorted(m.items(), key=lambda e: str(e[0]))]

    return encode_coordinator_value(_V(
        initializing_topics=topics(info.initializing), initialized_topics=topics(info.initialized),
        deleting_topics=[_V.TopicInfo(topic_id=tid, topic_name=name)
                         for tid, name in sorted(info.deleting.items(), key=lambda e: str(e[0]))]), 0)


def decode_value(value: bytes | memoryview, now_ms: int) -> ShareGroupStatePartitionMetadataInfo:
    v, _version = decode_coordinator_value(Coordinator.GROUP, STATE_PARTITION_METADATA, value)
    if not isinstance(v, _V):
        raise ValueError(f"not a ShareGroupStatePartitionMetadataValue: {type(v).__name__}")
    return ShareGroupStatePartitionMetadataInfo(
        {t.topic_id: InitMapValue(t.topic_name, frozenset(t.partitions), now_ms) for t in v.initializing_topics},
        {t.topic_id: InitMapValue(t.topic_name, frozenset(t.partitions), now_ms) for t in v.initialized_topics},
        {t.topic_id: t.topic_name for t in v.deleting_topics})


class ShareGroupStatePartitionMetadataManager:
    """The ShareGroupStatePartitionMetadata of the share groups of one `__consumer_offsets` partition."""

    def __init__(self, writer: RecordWriter, time_ms: Callable[[], int], topics: TopicLookup | None,
                 retry_interval_ms: int = SHARE_GROUP_INITIALIZE_RETRY_INTERVAL_MS) -> None:
        self.writer = writer
        self.time_ms = time_ms
        self.topics = topics
        self.retry_interval_ms = retry_interval_ms
        self.metadata: dict[str, ShareGroupStatePartitionMetadataInfo] = {}

    # -- records -------------------------------------------------------------------------------------

    def replay(self, group_id: str, value: bytes | memoryview | None) -> None:
        if value is None:
            self.metadata.pop(group_id, None)
        else:
            self.metadata[group_id] = decode_value(value, self.time_ms())

    def _write(self, group_id: str, info: ShareGroupStatePartitionMetadataInfo) -> ErrorCode:
        error = self.writer(group_id, [(encode_key(STATE_PARTITION_METADATA, group_id), encode_value(info))])
        if error == ErrorCode.NONE:
            self.metadata[group_id] = info
        else:
            log.warning("Cannot write the share-partition state metadata of share group %s: %s", group_id, error.name)
        return error

    def _name(self, topic_id: uuid.UUID) -> str:
        info = self.topics.topic_by_id(topic_id) if self.topics is not None else None
        return UNKNOWN_TOPIC_NAME if info is None else str(info.name)

    # -- heartbeat: initialize the subscribed partitions ---------------------------------------------

    def subscribed_topics_change_map(self, group_id: str, subscribed: Iterable[str]) -> dict[uuid.UUID, InitMapValue]:
        """Kafka's `subscribedTopicsChangeMap`: the subscribed partitions neither initialized nor
        initializing for less than the retry interval."""
        if self.topics is None:
            return {}
        now = self.time_ms()
        info = self.metadata.get(group_id)
        known: dict[uuid.UUID, InitMapValue] = {}
        if info is not None:
            fresh = {tid: v for tid, v in info.initializing.items() if now - v.timestamp_ms < self.retry_interval_ms}
            known = combine_init_maps(info.initialized, fresh)
        change: dict[uuid.UUID, InitMapValue] = {}
        for name in sorted(set(subscribed)):
            topic = self.topics.topic(name)
            if topic is None:
                continue
            done = known[topic.topic_id].partitions if topic.topic_id in known else frozenset()
            missing = frozenset(range(int(topic.num_partitions))) - done
            if missing:
                change[topic.topic_id] = InitMapValue(str(topic.name), missing, now)
        return change

    def maybe_initialize(self, group_id: str, group_epoch: int, subscribed: Iterable[str]) -> InitializeRequest | None:
        """After a heartbeat: record the partitions to initialize as initializing (Kafka's
        `maybeCreateInitializeShareGroupStateRequest`); the request for the persister, or None."""
        change = self.subscribed_topics_change_map(group_id, subscribed)
        if not change:
            return None
        current = self.metadata.get(group_id) or ShareGroupStatePartitionMetadataInfo()
        deleting = dict(current.deleting)
        for tid in change:
            if deleting.pop(tid, None) is not None:
                log.warning("Initializing topic %s for share group %s found in deleting state as well, "
                            "removing from deleting.", self._name(tid), group_id)
        info = ShareGroupStatePartitionMetadataInfo(combine_init_maps(current.initializing, change),
                                                    dict(current.initialized), deleting)
        if self._write(group_id, info) != ErrorCode.NONE:
            return None
        return InitializeRequest(group_id, group_epoch, {tid: v.partitions for tid, v in change.items()})

    def initialize_succeeded(self, group_id: str, partitions: TopicPartitions) -> ErrorCode:
        """Kafka's `initializeShareGroupState`: the partitions move from initializing to initialized
        (also what AlterShareGroupOffsets records once the persister initialized them)."""
        if not partitions:
            return ErrorCode.NONE
        now = self.time_ms()
        current = self.metadata.get(group_id) or ShareGroupStatePartitionMetadataInfo()
        added = {tid: InitMapValue(self._name(tid), frozenset(ps), now) for tid, ps in partitions.items() if ps}
        info = ShareGroupStatePartitionMetadataInfo(_minus(current.initializing, partitions),
                                                    combine_init_maps(current.initialized, added),
                                                    dict(current.deleting))
        return self._write(group_id, info)

    def initialize_failed(self, group_id: str, partitions: TopicPartitions) -> ErrorCode:
        """Kafka's `uninitializeShareGroupState`: the partitions leave initializing (retried by a later
        heartbeat)."""
        current = self.metadata.get(group_id)
        if current is None or not current.initializing or not partitions:
            return ErrorCode.NONE
        info = ShareGroupStatePartitionMetadataInfo(_minus(current.initializing, partitions),
                                                    dict(current.initialized), dict(current.deleting))
        return self._write(group_id, info)

    # -- DeleteGroups, DescribeShareGroupOffsets, topic deletion -------------------------------------

    def initialized_partitions(self, group_id: str) -> TopicPartitions:
        info = self.metadata.get(group_id)
        return {} if info is None else {tid: set(v.partitions) for tid, v in info.initialized.items()}

    def prepare_delete(self, group_id: str) -> tuple[ErrorCode, TopicPartitions]:
        """Kafka's `shareGroupBuildPartitionDeleteRequest`: initialized and initializing topics move to
        deleting; answers the partitions whose state must be deleted (topics still deleting from an
        earlier attempt: all their partitions, when the topic still exists)."""
        current = self.metadata.get(group_id)
        if current is None:
            return ErrorCode.NONE, {}
        candidates = combine_init_maps(current.initialized, current.initializing)
        for tid, name in current.deleting.items():
            topic = self.topics.topic_by_id(tid) if self.topics is not None else None
            if topic is None:
                log.warning("Topic %s of share group %s was not found in the metadata image", tid, group_id)
                continue
            candidates = combine_init_maps(candidates, {tid: InitMapValue(
                name, frozenset(range(int(topic.num_partitions))), -1)})
        info = ShareGroupStatePartitionMetadataInfo({}, {}, {tid: v.name for tid, v in candidates.items()})
        error = self._write(group_id, info)
        if error != ErrorCode.NONE:
            return error, {}
        return ErrorCode.NONE, {tid: set(v.partitions) for tid, v in candidates.items()}

    def remove_topics(self, group_id: str, topic_ids: set[uuid.UUID]) -> ErrorCode:
        """The topics' states were deleted (DeleteShareGroupOffsets): they leave the three sets."""
        current = self.metadata.get(group_id)
        if current is None or not topic_ids:
            return ErrorCode.NONE
        info = ShareGroupStatePartitionMetadataInfo(
            {t: v for t, v in current.initializing.items() if t not in topic_ids},
            {t: v for t, v in current.initialized.items() if t not in topic_ids},
            {t: n for t, n in current.deleting.items() if t not in topic_ids})
        if info == current:
            return ErrorCode.NONE
        return self._write(group_id, info)

    def on_group_deleted(self, group_id: str) -> ErrorCode:
        """The share group was deleted: its record's tombstone."""
        if group_id not in self.metadata:
            return ErrorCode.NONE
        error = self.writer(group_id, [(encode_key(STATE_PARTITION_METADATA, group_id), None)])
        if error == ErrorCode.NONE:
            del self.metadata[group_id]
        return error

    def on_topics_deleted(self, topic_ids: set[uuid.UUID]) -> None:
        """Kafka's `maybeCleanupShareGroupState`: deleted topics leave every group's record."""
        for group_id in sorted(self.metadata):
            self.remove_topics(group_id, topic_ids)
