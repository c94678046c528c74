"""Committed offsets: the in-memory image of the offset records in `__consumer_offsets`.

Kafka's `OffsetMetadataManager` state: group -> (topic, partition) -> OffsetCommitValue. The image is
changed only by `replay` (a record written or loaded), so what the log holds and what OffsetFetch
answers never diverge. Expiry (`offsets.retention.minutes`) is decided here; the coordinator writes the
tombstones.

Pure: no asyncio, no I/O. Must not import kbroker.net or kbroker.api.
"""

from __future__ import annotations

from collections.abc import Iterable

from kbroker.coord.records import OffsetCommitValue

TopicPartition = tuple[str, int]


class OffsetStore:
    """Committed offsets of every group this coordinator has loaded."""

    def __init__(self) -> None:
        self._offsets: dict[str, dict[TopicPartition, OffsetCommitValue]] = {}

    def replay(self, group: str, topic: str, partition: int, value: OffsetCommitValue | None) -> None:
        """Apply one offset record (None: a tombstone)."""
        if value is None:
            offsets = self._offsets.get(group)
            if offsets is not None:
                offsets.pop((topic, partition), None)
                if not offsets:
                    del self._offsets[group]
            return
        self._offsets.setdefault(group, {})[(topic, partition)] = value

    def get(self, group: str, topic: str, partition: int) -> OffsetCommitValue | None:
        offsets = self._offsets.get(group)
        return None if offsets is None else offsets.get((topic, partition))

    def group_offsets(self, group: str) -> dict[TopicPartition, OffsetCommitValue]:
        return dict(self._offsets.get(group, {}))

    def has_offsets(self, group: str) -> bool:
        return bool(self._offsets.get(group))

    def groups(self) -> Iterable[str]:
        return list(self._offsets)

    def remove_group(self, group: str) -> list[TopicPartition]:
        """Forget every offset of `group`; the partitions whose tombstones must be written."""
        return sorted(self._offsets.pop(group, {}))

    def expired(self, group: str, now_ms: int, retention_ms: int, base_timestamp_ms: int | None,
                keep: Iterable[str] = ()) -> list[TopicPartition]:
        """Offsets of `group` past retention (Kafka's OffsetExpirationCondition).

        An explicit expire timestamp (OffsetCommit v1-v4 retention) wins. Otherwise the clock starts at
        `base_timestamp_ms` (when the group became empty) if given, else at the commit itself (simple
        groups). Offsets of topics in `keep` (still subscribed) never expire.
        """
        kept = set(keep)
        out = []
        for tp, value in self._offsets.get(group, {}).items():
            if tp[0] in kept:
                continue
            if value.expire_timestamp >= 0:
                if now_ms >= value.expire_timestamp:
                    out.append(tp)
                continue
            base = value.commit_timestamp if base_timestamp_ms is None else base_timestamp_ms
            if now_ms - base >= retention_ms:
                out.append(tp)
        return sorted(out)
