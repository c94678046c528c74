"""Committed offsets: OffsetCommit / OffsetFetch / OffsetDelete, expiry and deleted topics.

Kafka's `OffsetMetadataManager`: the offset half of a `GroupCoordinatorShard`. It owns the shard's
`OffsetStore` (the image of the offset records of one `__consumer_offsets` partition) and writes
offset records through the shard's `RecordWriter`; the store follows only writes that succeeded (a
failed append leaves every offset as it was). Commits are validated against the group they belong
to, which the `GroupMetadataManager` owns (a classic member's generation, a consumer-group member's
epoch, KIP-848); a commit counts as a heartbeat of a classic member.

Pure: no asyncio, no I/O. Must not import asyncio, kbroker.net or kbroker.api.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kbroker.coord.config import map_append_error
from kbroker.coord.consumer_group import ConsumerGroup
from kbroker.coord.group import ClassicGroup, ClassicGroupMember, GroupState
from kbroker.coord.offsets import OffsetStore
from kbroker.coord.records import OffsetCommitValue, encode_offset_commit_key, encode_offset_commit_value
from kbroker.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kbroker.coord.config import CoordinatorConfig, RecordWriter
    from kbroker.coord.group_metadata_manager import GroupMetadataManager

log = logging.getLogger(__name__)
S = GroupState


@dataclass(slots=True)
class CommitRequestPartition:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


@dataclass(slots=True)
class FetchedOffset:
    topic: str
    partition: int
    offset: int = -1
    leader_epoch: int = -1
    metadata: str = ""
    error: ErrorCode = ErrorCode.NONE


class OffsetMetadataManager:
    """The committed offsets of the groups of one `__consumer_offsets` partition."""

    def __init__(self, config: CoordinatorConfig, store: OffsetStore, group_manager: GroupMetadataManager,
                 writer: RecordWriter, time_ms: Callable[[], int],
                 group_status: Callable[[str], ErrorCode]) -> None:
        self.config = config
        self.store = store
        self.gm = group_manager
        self.writer = writer
        self.time_ms = time_ms
        self.group_status = group_status
        # TxnOffsetCommit: producer id -> group -> (topic, partition) -> the offset its open
        # transaction committed. Written to the log as a transactional batch of the producer; made
        # visible by its COMMIT marker, dropped by ABORT (also when the log is loaded again).
        self.pending_txn_offsets: dict[int, dict[str, dict[tuple[str, int], OffsetCommitValue]]] = {}
        # Appends records as a transactional batch of (producer id, epoch); set by the shard.
        self.txn_writer: Callable[[list[tuple[bytes, bytes | None]], int, int], ErrorCode] | None = None

    # -- OffsetCommit ---------------------------------------------------------------------------------

    def commit_offsets(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                       retention_ms: int, partitions: list[CommitRequestPartition],
                       api_version: int = 8) -> list[ErrorCode]:
        """One error per partition, in request order."""
        error = self.group_status(group_id)
        if error != ErrorCode.NONE:
            return [error] * len(partitions)
        consumer_group = self.gm.consumer_groups.get(group_id)
        if consumer_group is not None:
            checked = self.gm.validate_consumer_offset_commit(consumer_group, member_id, generation_id, api_version,
                                                           [(p.topic, p.partition) for p in partitions])
            allowed = [p for p, e in zip(partitions, checked, strict=True) if e == ErrorCode.NONE]
            written = iter(self._write_offsets(group_id, retention_ms, allowed) if allowed else [])
            return [next(written) if e == ErrorCode.NONE else e for e in checked]
        group = self.gm.groups.get(group_id)
        created = False
        if group is None:
            if generation_id >= 0:
                return [ErrorCode.ILLEGAL_GENERATION] * len(partitions)
            # A "simple" group: manual assignment or an admin client, committing with generation -1.
            group = self.gm.groups[group_id] = ClassicGroup(group_id, state_timestamp_ms=self.time_ms())
            created = True
        try:
            group.validate_offset_commit(member_id, group_instance_id, generation_id)
        except KafkaError as e:
            return [e.error_code] * len(partitions)
        member: ClassicGroupMember | None = group.members.get(member_id)
        if member is not None and generation_id >= 0:
            # Kafka: an offset commit counts as a heartbeat for a classic group member.
            self.gm.schedule_heartbeat(group, member_id, member.session_timeout_ms)
        results = self._write_offsets(group_id, retention_ms, partitions)
        if created and not self.store.has_offsets(group_id):
            del self.gm.groups[group_id]
        return results

    def _offset_commit_records(
        self, group_id: str, partitions: list[CommitRequestPartition], now: int, expire: int,
    ) -> tuple[list[ErrorCode], list[tuple[bytes, bytes | None]], list[tuple[CommitRequestPartition, OffsetCommitValue]]]:
        """The OffsetCommit records of `partitions` (metadata over offset.metadata.max.bytes:
        OFFSET_METADATA_TOO_LARGE, no record): a result per partition, the records, the values."""
        results: list[ErrorCode] = []
        records: list[tuple[bytes, bytes | None]] = []
        values: list[tuple[CommitRequestPartition, OffsetCommitValue]] = []
        for p in partitions:
            metadata = p.metadata or ""
            if len(metadata.encode()) > self.config.offset_metadata_max_bytes:
                results.append(ErrorCode.OFFSET_METADATA_TOO_LARGE)
                continue
            value = OffsetCommitValue(offset=p.offset, leader_epoch=p.leader_epoch, metadata=metadata,
                                      commit_timestamp=now, expire_timestamp=expire)
            records.append((encode_offset_commit_key(group_id, p.topic, p.partition),
                            encode_offset_commit_value(value)))
            values.append((p, value))
            results.append(ErrorCode.NONE)
        return results, records, values

    def _write_offsets(self, group_id: str, retention_ms: int,
                       partitions: list[CommitRequestPartition]) -> list[ErrorCode]:
        now = self.time_ms()
        expire = now + retention_ms if retention_ms >= 0 else -1
        results, records, values = self._offset_commit_records(group_id, partitions, now, expire)
        if records:
            write_error = self.writer(group_id, records)
            if write_error != ErrorCode.NONE:
                mapped = map_append_error(write_error, for_commit=True)
                results = [mapped if r == ErrorCode.NONE else r for r in results]
                values = []
        for p, value in values:
            self.store.replay(group_id, p.topic, p.partition, value)
        return results

    # -- TxnOffsetCommit ------------------------------------------------------------------------------

    def txn_commit_offsets(self, group_id: str, producer_id: int, producer_epoch: int, generation_id: int,
                           member_id: str, group_instance_id: str | None,
                           partitions: list[CommitRequestPartition]) -> list[ErrorCode]:
        """Kafka's TxnOffsetCommit: the offsets are written in a transactional batch of the producer
        and wait for the transaction's marker."""
        error = self.group_status(group_id)
        if error != ErrorCode.NONE:
            return [error] * len(partitions)
        group = self.gm.groups.get(group_id)
        if group is not None and generation_id >= 0:
            try:
                group.validate_offset_commit(member_id, group_instance_id, generation_id)
            except KafkaError as e:
                return [e.error_code] * len(partitions)
        results, records, values = self._offset_commit_records(group_id, partitions, self.time_ms(), -1)
        if records and self.txn_writer is not None:
            write_error = self.txn_writer(records, producer_id, producer_epoch)
            if write_error != ErrorCode.NONE:
                mapped = map_append_error(write_error, for_commit=True)
                return [mapped if r == ErrorCode.NONE else r for r in results]
        pending = self.pending_txn_offsets.setdefault(producer_id, {}).setdefault(group_id, {})
        for p, value in values:
            pending[(p.topic, p.partition)] = value
        return results

    def replay_pending(self, producer_id: int, group_id: str, topic: str, partition: int,
                       value: OffsetCommitValue) -> None:
        """A transactional offset record read back from the log."""
        self.pending_txn_offsets.setdefault(producer_id, {}).setdefault(group_id, {})[(topic, partition)] = value

    def complete_txn(self, producer_id: int, commit: bool) -> None:
        """The transaction's marker is in this partition: its pending offsets become committed
        offsets (COMMIT) or are dropped (ABORT). Nothing is written: the marker is the record."""
        groups = self.pending_txn_offsets.pop(producer_id, {})
        if not commit:
            return
        for group_id, offsets in groups.items():
            for (topic, partition), value in offsets.items():
                self.store.replay(group_id, topic, partition, value)
            if group_id not in self.gm.groups and group_id not in self.gm.consumer_groups:
                self.gm.groups[group_id] = ClassicGroup(group_id, state_timestamp_ms=self.time_ms())

    def has_pending_txn_offsets(self, group_id: str, topic: str, partition: int) -> bool:
        return any((topic, partition) in groups.get(group_id, {}) for groups in self.pending_txn_offsets.values())

    # -- OffsetFetch ----------------------------------------------------------------------------------

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None,
                      member_id: str | None = None, member_epoch: int = -1,
                      require_stable: bool = False) -> tuple[ErrorCode, list[FetchedOffset]]:
        """All committed offsets (`partitions` None) or the requested ones (-1 when none). A consumer
        group member (OffsetFetch v9+) must be at its current epoch. With `require_stable` (KIP-447)
        a requested partition with a pending transactional commit answers UNSTABLE_OFFSET_COMMIT."""
        error = self.group_status(group_id)
        if error == ErrorCode.NONE:
            error = self.gm.validate_offset_fetch(group_id, member_id, member_epoch)
        if error != ErrorCode.NONE:
            return error, []
        group = self.gm.groups.get(group_id)
        if group is not None and group.state == S.DEAD:
            return ErrorCode.NONE, [FetchedOffset(t, p) for t, p in partitions or []]
        if partitions is None:
            stored = self.store.group_offsets(group_id)
            out_all = []
            for (t, p), committed in sorted(stored.items()):
                if require_stable and self.has_pending_txn_offsets(group_id, t, p):
                    out_all.append(FetchedOffset(t, p, error=ErrorCode.UNSTABLE_OFFSET_COMMIT))
                else:
                    out_all.append(FetchedOffset(t, p, committed.offset, committed.leader_epoch, committed.metadata))
            if require_stable:
                # Partitions with only a pending transactional offset are listed too (Kafka's fetchAllOffsets).
                for groups in self.pending_txn_offsets.values():
                    for (t, p) in sorted(groups.get(group_id, {})):
                        if (t, p) not in stored:
                            out_all.append(FetchedOffset(t, p, error=ErrorCode.UNSTABLE_OFFSET_COMMIT))
            return ErrorCode.NONE, out_all
        out = []
        for t, p in partitions:
            if require_stable and self.has_pending_txn_offsets(group_id, t, p):
                out.append(FetchedOffset(t, p, error=ErrorCode.UNSTABLE_OFFSET_COMMIT))
                continue
            v = self.store.get(group_id, t, p)
            out.append(FetchedOffset(t, p) if v is None else FetchedOffset(t, p, v.offset, v.leader_epoch, v.metadata))
        return ErrorCode.NONE, out

    # -- OffsetDelete ---------------------------------------------------------------------------------

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> tuple[ErrorCode, list[ErrorCode]]:
        error = self.group_status(group_id)
        if error != ErrorCode.NONE:
            return error, []
        group: ClassicGroup | ConsumerGroup | None = self.gm.consumer_groups.get(group_id)
        if group is None:
            group = self.gm.groups.get(group_id)
            if group is None or group.state == S.DEAD:
                return ErrorCode.GROUP_ID_NOT_FOUND, []
            if group.state != S.EMPTY and group.protocol_type != "consumer":
                return ErrorCode.NON_EMPTY_GROUP, []
        results: list[ErrorCode] = []
        records: list[tuple[bytes, bytes | None]] = []
        deleted = []
        active = not group.is_empty() if isinstance(group, ConsumerGroup) else group.state != S.EMPTY
        for t, p in partitions:
            if active and group.is_subscribed_to_topic(t):
                results.append(ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)
                continue
            results.append(ErrorCode.NONE)
            if self.store.get(group_id, t, p) is not None:
                records.append((encode_offset_commit_key(group_id, t, p), None))
                deleted.append((t, p))
        if records:
            write_error = self.writer(group_id, records)
            if write_error != ErrorCode.NONE:
                return map_append_error(write_error), []
        for t, p in deleted:
            self.store.replay(group_id, t, p, None)
        return ErrorCode.NONE, results

    # -- expiry and deleted topics -------------------------------------------------------------------

    def expire_group_offsets(self, group_id: str, base_timestamp_ms: int | None) -> int:
        """Tombstone the offsets of `group_id` past `offsets.retention.minutes` (Kafka's
        cleanupExpiredOffsets); how many were removed (0 when the write failed)."""
        expired = self.store.expired(group_id, self.time_ms(), self.config.offsets_retention_ms, base_timestamp_ms)
        if not expired:
            return 0
        records: list[tuple[bytes, bytes | None]] = [
            (encode_offset_commit_key(group_id, t, p), None) for t, p in expired
        ]
        if self.writer(group_id, records) != ErrorCode.NONE:
            return 0
        for t, p in expired:
            self.store.replay(group_id, t, p, None)
        log.info("Removed %d expired offsets of group %s", len(expired), group_id)
        return len(expired)

    def remove_offsets_of_topics(self, topics: set[str]) -> int:
        """Tombstone every committed offset of deleted `topics` in every group (Kafka's
        onPartitionsDeleted); returns how many were removed."""
        removed = 0
        for gid in sorted(self.store.groups()):
            if self.group_status(gid) != ErrorCode.NONE:
                continue
            gone = [tp for tp in sorted(self.store.group_offsets(gid)) if tp[0] in topics]
            if not gone:
                continue
            records: list[tuple[bytes, bytes | None]] = [(encode_offset_commit_key(gid, t, p), None) for t, p in gone]
            if self.writer(gid, records) != ErrorCode.NONE:
                continue
            for t, p in gone:
                self.store.replay(gid, t, p, None)
            removed += len(gone)
        return removed

    def tombstones(self, group_id: str) -> list[tuple[bytes, bytes | None]]:
        """Tombstones for every offset of `group_id` (the group is being deleted)."""
        return [(encode_offset_commit_key(group_id, t, p), None) for t, p in sorted(self.store.group_offsets(group_id))]
