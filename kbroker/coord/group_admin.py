"""Offset commits and group administration of the group coordinator.

OffsetCommit / OffsetFetch / OffsetDelete, DescribeGroups / ListGroups / DeleteGroups, offset expiry
(`offsets.retention.minutes`) and the replay of loaded `__consumer_offsets` records: Kafka's
`OffsetMetadataManager` plus the admin half of `GroupMetadataManager`. A mixin of
`kbroker.coord.coordinator.GroupCoordinator`, split out only to keep modules small.

Must not import asyncio, kbroker.net or kbroker.api.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kbroker.coord.config import heartbeat_key, map_append_error
from kbroker.coord.consumer_group import ConsumerGroup
from kbroker.coord.consumer_records import ConsumerGroupRecordKey
from kbroker.coord.group import ClassicGroup, ClassicGroupMember, GroupState
from kbroker.coord.offsets import OffsetStore
from kbroker.coord.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from kbroker.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kbroker.coord.config import CoordinatorConfig, RecordWriter, Scheduler

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


@dataclass(slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol_data: str
    # (member id, instance id, client id, client host, metadata, assignment)
    members: list[tuple[str, str | None, str, str, bytes, bytes]]


class GroupAdminMixin:
    if TYPE_CHECKING:
        config: CoordinatorConfig
        scheduler: Scheduler
        writer: RecordWriter
        time_ms: Callable[[], int]
        group_status: Callable[[str], ErrorCode]
        groups: dict[str, ClassicGroup]
        consumer_groups: dict[str, ConsumerGroup]
        offsets: OffsetStore

        def validate_consumer_offset_commit(self, group: ConsumerGroup, member_id: str, member_epoch: int,
                                            api_version: int, partitions: list[tuple[str, int]]) -> list[ErrorCode]: ...
        def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode: ...
        def _delete_consumer_group_records(self, group_id: str) -> ErrorCode: ...
        def replay_consumer_record(self, key: ConsumerGroupRecordKey, value: Any) -> None: ...

        def _schedule_heartbeat(self, group: ClassicGroup, member_id: str, timeout_ms: int) -> None: ...
        def _load_group(self, group_id: str, value: Any) -> None: ...

    # -- OffsetCommit ---------------------------------------------------------------------------------

    def commit_offsets(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                       retention_ms: int, partitions: list[CommitRequestPartition],
                       api_version: int = 8) -> list[ErrorCode]:
        """One error per partition, in request order."""
        error = self.group_status(group_id)
        if error != ErrorCode.NONE:
            return [error] * len(partitions)
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            checked = self.validate_consumer_offset_commit(consumer_group, member_id, generation_id, api_version,
                                                           [(p.topic, p.partition) for p in partitions])
            allowed = [p for p, e in zip(partitions, checked, strict=True) if e == ErrorCode.NONE]
            written = iter(self._write_offsets(group_id, retention_ms, allowed) if allowed else [])
            return [next(written) if e == ErrorCode.NONE else e for e in checked]
        group = self.groups.get(group_id)
        created = False
        if group is None:
            if generation_id >= 0:
                return [ErrorCode.ILLEGAL_GENERATION] * len(partitions)
            # A "simple" group: manual assignment or an admin client, committing with generation -1.
            group = self.groups[group_id] = ClassicGroup(group_id, state_timestamp_ms=self.time_ms())
            created = True
        try:
            group.validate_offset_commit(member_id, group_instance_id, generation_id)
        except KafkaError as e:
            return [e.error_code] * len(partitions)
        member: ClassicGroupMember | None = group.members.get(member_id)
        if member is not None and generation_id >= 0:
            # Kafka: an offset commit counts as a heartbeat for a classic group member.
            self._schedule_heartbeat(group, member_id, member.session_timeout_ms)
        results = self._write_offsets(group_id, retention_ms, partitions)
        if created and not self.offsets.has_offsets(group_id):
            del self.groups[group_id]
        return results

    def _write_offsets(self, group_id: str, retention_ms: int,
                       partitions: list[CommitRequestPartition]) -> list[ErrorCode]:
        now = self.time_ms()
        expire = now + retention_ms if retention_ms >= 0 else -1
        results: list[ErrorCode] = []
        records: list[tuple[bytes, bytes | None]] = []
        values: list[tuple[CommitRequestPartition, OffsetCommitValue]] = []
        for p in partitions:
            metadata = p.metadata or ""
            if len(metadata.encode()) > self.config.offset_metadata_max_bytes:
                results.append(ErrorCode.OFFSET_METADATA_TOO_LARGE)
                continue
            value = OffsetCommitValue(p.offset, metadata, now, p.leader_epoch, expire)
            records.append((encode_offset_commit_key(group_id, p.topic, p.partition),
                            encode_offset_commit_value(value)))
            values.append((p, value))
            results.append(ErrorCode.NONE)
        if records:
            write_error = self.writer(group_id, records)
            if write_error != ErrorCode.NONE:
                mapped = map_append_error(write_error, for_commit=True)
                results = [mapped if r == ErrorCode.NONE else r for r in results]
                values = []
        for p, value in values:
            self.offsets.replay(group_id, p.topic, p.partition, value)
        return results

    # -- OffsetFetch ----------------------------------------------------------------------------------

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None,
                      member_id: str | None = None, member_epoch: int = -1) -> tuple[ErrorCode, list[FetchedOffset]]:
        """All committed offsets (`partitions` None) or the requested ones (-1 when none). A consumer
        group member (OffsetFetch v9+) must be at its current epoch."""
        error = self.group_status(group_id)
        if error == ErrorCode.NONE:
            error = self.validate_offset_fetch(group_id, member_id, member_epoch)
        if error != ErrorCode.NONE:
            return error, []
        group = self.groups.get(group_id)
        if group is not None and group.state == S.DEAD:
            return ErrorCode.NONE, [FetchedOffset(t, p) for t, p in partitions or []]
        if partitions is None:
            stored = self.offsets.group_offsets(group_id)
            return ErrorCode.NONE, [
                FetchedOffset(t, p, v.offset, v.leader_epoch, v.metadata) for (t, p), v in sorted(stored.items())
            ]
        out = []
        for t, p in partitions:
            v = self.offsets.get(group_id, t, p)
            out.append(FetchedOffset(t, p) if v is None else FetchedOffset(t, p, v.offset, v.leader_epoch, v.metadata))
        return ErrorCode.NONE, out

    # -- OffsetDelete ---------------------------------------------------------------------------------

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> tuple[ErrorCode, list[ErrorCode]]:
        error = self.group_status(group_id)
        if error != ErrorCode.NONE:
            return error, []
        group: ClassicGroup | ConsumerGroup | None = self.consumer_groups.get(group_id)
        if group is None:
            group = self.groups.get(group_id)
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
            if self.offsets.get(group_id, t, p) is not None:
                records.append((encode_offset_commit_key(group_id, t, p), None))
                deleted.append((t, p))
        if records:
            write_error = self.writer(group_id, records)
            if write_error != ErrorCode.NONE:
                return map_append_error(write_error), []
        for t, p in deleted:
            self.offsets.replay(group_id, t, p, None)
        return ErrorCode.NONE, results

    # -- DescribeGroups / ListGroups / DeleteGroups ---------------------------------------------------

    def describe_group(self, group_id: str) -> tuple[ErrorCode, GroupDescription]:
        error = self.group_status(group_id)
        group = self.groups.get(group_id)
        if error != ErrorCode.NONE or group is None:
            return error, GroupDescription(group_id, str(S.DEAD), "", "", [])
        stable = group.state == S.STABLE
        members = [
            (m.member_id, m.group_instance_id, m.client_id, m.client_host,
             m.metadata(group.protocol_name) if stable else b"", m.assignment if stable else b"")
            for m in group.members.values()
        ]
        return ErrorCode.NONE, GroupDescription(group_id, str(group.state), group.protocol_type or "",
                                                (group.protocol_name or "") if stable else "", members)

    def list_groups(self, states: list[str], types: list[str]) -> list[tuple[str, str, str, str]]:
        """(group id, protocol type, state, type) of the groups whose state/type pass the filters
        (case-insensitive, as Kafka's ListGroups v4/v5)."""
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        listed: list[tuple[str, str, str, str]] = []
        if not wanted_types or "classic" in wanted_types:
            listed += [(gid, g.protocol_type or "", str(g.state), "classic") for gid, g in self.groups.items()
                       if g.state != S.DEAD]
        if not wanted_types or "consumer" in wanted_types:
            listed += [(gid, "consumer", str(g.state), "consumer") for gid, g in self.consumer_groups.items()]
        return sorted(entry for entry in listed if self.group_status(entry[0]) == ErrorCode.NONE
                      and (not wanted_states or entry[2].lower() in wanted_states))

    def delete_groups(self, group_ids: list[str]) -> list[ErrorCode]:
        results: list[ErrorCode] = []
        for gid in group_ids:
            error = self.group_status(gid)
            if error != ErrorCode.NONE:
                results.append(error)
                continue
            consumer_group = self.consumer_groups.get(gid)
            if consumer_group is not None:
                if not consumer_group.is_empty():
                    results.append(ErrorCode.NON_EMPTY_GROUP)
                    continue
                error = self._delete_consumer_group_records(gid)
                if error == ErrorCode.NONE:
                    error = self._delete_group(ClassicGroup(gid, state_timestamp_ms=self.time_ms()))
                if error == ErrorCode.NONE:
                    consumer_group.dead = True
                    del self.consumer_groups[gid]
                results.append(error)
                continue
            group = self.groups.get(gid)
            if group is None or group.state == S.DEAD:
                results.append(ErrorCode.GROUP_ID_NOT_FOUND)
                continue
            if group.state != S.EMPTY:
                results.append(ErrorCode.NON_EMPTY_GROUP)
                continue
            results.append(self._delete_group(group))
        return results

    def _delete_group(self, group: ClassicGroup) -> ErrorCode:
        """Tombstones for every offset and for the group itself; the group becomes Dead."""
        gid = group.group_id
        records: list[tuple[bytes, bytes | None]] = [
            (encode_offset_commit_key(gid, t, p), None) for t, p in sorted(self.offsets.group_offsets(gid))
        ]
        records.append((encode_group_metadata_key(gid), None))
        error = self.writer(gid, records)
        if error != ErrorCode.NONE:
            return map_append_error(error)
        self.offsets.remove_group(gid)
        for member_id in list(group.pending_members):
            self.scheduler.cancel(heartbeat_key(gid, member_id))
        group.transition_to(S.DEAD, self.time_ms())
        self.groups.pop(gid, None)
        return ErrorCode.NONE

    # -- offset expiry --------------------------------------------------------------------------------

    def expire_offsets(self) -> int:
        """Remove offsets past `offsets.retention.minutes` of groups without members, then the groups
        left with nothing. Returns how many offsets were removed."""
        now = self.time_ms()
        removed = 0
        for gid in sorted(set(self.groups) | set(self.offsets.groups())):
            if self.group_status(gid) != ErrorCode.NONE:
                continue
            consumer_group = self.consumer_groups.get(gid)
            if consumer_group is not None and not consumer_group.is_empty():
                continue
            group = self.groups.get(gid)
            if group is not None and group.state != S.EMPTY:
                continue
            base = None
            if group is not None and group.protocol_type and group.state_timestamp_ms >= 0:
                base = group.state_timestamp_ms
            expired = self.offsets.expired(gid, now, self.config.offsets_retention_ms, base)
            if expired:
                records: list[tuple[bytes, bytes | None]] = [
                    (encode_offset_commit_key(gid, t, p), None) for t, p in expired
                ]
                if self.writer(gid, records) != ErrorCode.NONE:
                    continue
                for t, p in expired:
                    self.offsets.replay(gid, t, p, None)
                removed += len(expired)
                log.info("Removed %d expired offsets of group %s", len(expired), gid)
            if group is not None and group.is_empty() and not group.pending_members \
                    and not self.offsets.has_offsets(gid):
                self._delete_group(group)
            elif consumer_group is not None and not self.offsets.has_offsets(gid) \
                    and self._delete_consumer_group_records(gid) == ErrorCode.NONE \
                    and self._delete_group(ClassicGroup(gid)) == ErrorCode.NONE:
                del self.consumer_groups[gid]
        return removed

    def remove_offsets_of_topics(self, topics: set[str]) -> int:
        """Tombstone every committed offset of deleted `topics` in every group (Kafka's
        onPartitionsDeleted); returns how many were removed."""
        removed = 0
        for gid in sorted(self.offsets.groups()):
            if self.group_status(gid) != ErrorCode.NONE:
                continue
            gone = [tp for tp in sorted(self.offsets.group_offsets(gid)) if tp[0] in topics]
            if not gone:
                continue
            records: list[tuple[bytes, bytes | None]] = [(encode_offset_commit_key(gid, t, p), None) for t, p in gone]
            if self.writer(gid, records) != ErrorCode.NONE:
                continue
            for t, p in gone:
                self.offsets.replay(gid, t, p, None)
            removed += len(gone)
        return removed

    # -- loading ------------------------------------------------------------------------------------

    def replay_record(self, key: bytes | memoryview | None, value: bytes | memoryview | None) -> None:
        """Apply one `__consumer_offsets` record read back from the log."""
        if key is None:
            return
        k = decode_key(key)
        if isinstance(k, OffsetCommitKey):
            v = None if value is None else decode_offset_commit_value(value)
            self.offsets.replay(k.group, k.topic, k.partition, v)
            if v is not None and k.group not in self.groups and k.group not in self.consumer_groups:
                self.groups[k.group] = ClassicGroup(k.group)
        elif isinstance(k, ConsumerGroupRecordKey):
            self.replay_consumer_record(k, value)
        elif isinstance(k, GroupMetadataKey):
            self._load_group(k.group, None if value is None else decode_group_metadata_value(value))
            if value is None and self.offsets.has_offsets(k.group):
                self.groups[k.group] = ClassicGroup(k.group)
