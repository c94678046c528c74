"""Writing KIP-848 consumer groups to `__consumer_offsets` and loading them back.

After every change the coordinator writes the difference between the group's records now
(`kbroker.coord.consumer_records.group_records`) and what it last wrote: new or changed records, and
tombstones for records that no longer exist (members first, the group last). A failed write leaves
the last-written image unchanged, so the next change writes the difference again. Loading replays the
records into `ConsumerGroup`s; when a partition is loaded the derived state (partition owners, static
members, subscribed topic metadata) is rebuilt and every member must heartbeat within its session
timeout. A part of `kbroker.coord.group_metadata_manager.GroupMetadataManager`.

Must not import asyncio, kbroker.net or kbroker.api.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.coord.consumer_group import ConsumerGroup
from kbroker.coord.consumer_records import ConsumerGroupRecordKey, group_records, replay, tombstone_order
from kbroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kbroker.coord.group_metadata_manager import GroupMetadataManager


class ConsumerGroupPersistence:
    """The consumer-group records of a GroupMetadataManager's consumer groups."""

    def __init__(self, gm: GroupMetadataManager) -> None:
        self.gm = gm

    def persist_consumer_group(self, group: ConsumerGroup) -> ErrorCode:
        now = group_records(group)
        old = self.gm.consumer_written.get(group.group_id, {})
        gone = sorted((k for k in old if k not in now), key=tombstone_order)
        batch: list[tuple[bytes, bytes | None]] = [(k, None) for k in gone if tombstone_order(k) < 3]
        batch += [(k, v) for k, v in now.items() if old.get(k) != v]
        batch += [(k, None) for k in gone if tombstone_order(k) >= 3]
        if not batch:
            return ErrorCode.NONE
        error = self.gm.writer(group.group_id, batch)
        if error == ErrorCode.NONE:
            self.gm.consumer_written[group.group_id] = now
        return error

    def delete_consumer_group_records(self, group_id: str) -> ErrorCode:
        """Tombstones for every record of the group (deleted, or converted to a classic group)."""
        old = self.gm.consumer_written.get(group_id, {})
        if not old:
            return ErrorCode.NONE
        error = self.gm.writer(group_id, [(k, None) for k in sorted(old, key=tombstone_order)])
        if error == ErrorCode.NONE:
            del self.gm.consumer_written[group_id]
        return error

    def replay_consumer_record(self, key: ConsumerGroupRecordKey, value: Any) -> None:
        replay(self.gm.consumer_groups, key, value)

    def finish_consumer_load(self, group_ids: list[str]) -> None:
        """Rebuild what is derived from the loaded records and start the members' sessions."""
        for gid in group_ids:
            group = self.gm.consumer_groups.get(gid)
            if group is None:
                continue
            placeholder = self.gm.groups.get(gid)
            if placeholder is not None and placeholder.is_empty() and placeholder.protocol_type is None:
                del self.gm.groups[gid]  # made by an offset record of this consumer group
            group.state_timestamp_ms = self.gm.time_ms()
            group.static_members.clear()
            group.partition_owner.clear()
            for member in group.members.values():
                if member.instance_id is not None:
                    group.static_members[member.instance_id] = member.member_id
                group.set_member_assignment(member, member.assigned, member.pending_revocation)
            self.gm.consumer.refresh_subscribed_metadata(group)
            expected = {(tid, p) for tid, n in group.subscribed_metadata.values() for p in range(n)}
            covered = {(tid, p) for a in group.target_assignment.values() for tid, ps in a.items() for p in ps}
            if group.members and covered != expected:
                # Topics changed while the broker was down: the next heartbeat computes a new target.
                group.subscribed_metadata = {}
            self.gm.consumer_written[gid] = group_records(group)
            for member in group.members.values():
                self.gm.consumer.schedule_session(group, member)
