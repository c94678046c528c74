"""Writing KIP-848 consumer groups to `__consumer_offsets` and loading them back.

After every change the coordinator writes the difference between the group's records now
(`kbroker.coord.consumer_records.group_records`) and what it last wrote: new or changed records, and
tombstones for records that no longer exist (members first, the group last) — the writing itself is
`kbroker.coord.modern_group_protocol` (shared with share groups). A failed write leaves
the last-written image unchanged, so the next change writes the difference again. Loading replays the
records into `ConsumerGroup`s; when a partition is loaded the derived state (partition owners, static
members, subscribed topic metadata) is rebuilt and every member must heartbeat within its session
timeout. A part of `kbroker.coord.group_metadata_manager.GroupMetadataManager`.

Must not import asyncio, kbroker.net or kbroker.api.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.coord.consumer_group import ConsumerGroup
from kbroker.coord.consumer_records import ConsumerGroupRecordKey, replay
from kbroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kbroker.coord.group_metadata_manager import GroupMetadataManager


class ConsumerGroupPersistence:
    """The consumer-group records of a GroupMetadataManager's consumer groups."""

    def __init__(self, gm: GroupMetadataManager) -> None:
        self.gm = gm

    def persist_consumer_group(self, group: ConsumerGroup) -> ErrorCode:
        """The difference since the last write (`ModernGroupProtocol.persist`, shared with share groups)."""
        return self.gm.consumer.persist(group)

    def delete_consumer_group_records(self, group_id: str) -> ErrorCode:
        """Tombstones for every record of the group (deleted, or converted to a classic group)."""
        return self.gm.consumer.write_group_tombstones(group_id)

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
            # Metadata re-read (a stale target is recomputed at the next heartbeat), written image,
            # sessions: as for share groups (`ModernGroupProtocol.finish_group_load`).
            self.gm.consumer.finish_group_load(group)
