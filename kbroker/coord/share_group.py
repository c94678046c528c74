"""The KIP-932 share group: members, epochs and the target assignment of partitions they *share*.

Kafka's `ShareGroup`, `ShareGroupMember` and the share group's `SimpleAssignor`. A share group is a
KIP-848 group without reconciliation: a partition may belong to several members at once (the records,
not the partitions, are divided between members: `kbroker.coord.share_partition`), so a member gets its
target assignment in the heartbeat that computed it, with no revocation step, and the member epoch
jumps straight to the group epoch.

Epochs as in consumer groups (`kbroker.coord.consumer_group`): the *group epoch* goes up on every change
calling for a new assignment (a member joins, leaves or is fenced, a subscription changes, a subscribed
topic gains partitions or appears); the target assignment is recomputed at once, so the assignment
epoch follows the group epoch.

Group states (Kafka's `ShareGroup.ShareGroupState`): Empty (no members), Stable, Dead (deleted).

Pure: no asyncio, no I/O. Must not import kbroker.net or kbroker.api.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field

from kbroker.coord.assignors import Assignment

SHARE_ASSIGNOR_NAME = "simple"
LEAVE_GROUP_MEMBER_EPOCH = -1


class ShareGroupState(enum.Enum):
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


@dataclass(slots=True)
class ShareGroupMember:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: list[str] = field(default_factory=list)
    member_epoch: int = 0
    previous_member_epoch: int = 0
    assigned: Assignment = field(default_factory=dict)


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignment_timestamp_ms: int = 0
    members: dict[str, ShareGroupMember] = field(default_factory=dict)
    target_assignment: dict[str, Assignment] = field(default_factory=dict)
    # subscribed topic name -> (topic id, partition count) the target assignment was computed from
    subscribed_metadata: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)
    state_timestamp_ms: int = -1
    dead: bool = False

    @property
    def state(self) -> ShareGroupState:
        if self.dead:
            return ShareGroupState.DEAD
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY

    def subscribed_topic_names(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed_topic_names}


def simple_assign(subscriptions: dict[str, set[uuid.UUID]], partitions: dict[uuid.UUID, int]) -> dict[str, Assignment]:
    """The share group's `simple` assignor: every partition of a subscribed topic goes to at least one
    member subscribed to it, and every subscribed member gets at least one partition of its topics
    when there are any, even when members outnumber partitions (partitions are then shared).

    Per topic, in sorted member-id order over the members subscribed to it: with fewer members than
    partitions, partition i goes to member i mod members; with more, member j gets partition j mod
    partitions. Members subscribed to several topics get partitions of each. Deterministic, not sticky
    (Kafka 4.3's SimpleAssignor also keeps the current assignment where it stays balanced)."""
    result: dict[str, Assignment] = {mid: {} for mid in subscriptions}
    for tid in sorted(partitions, key=str):
        count = partitions[tid]
        members = sorted(mid for mid, topics in subscriptions.items() if tid in topics)
        if not members or count <= 0:
            continue
        if len(members) <= count:
            for p in range(count):
                result[members[p % len(members)]].setdefault(tid, set()).add(p)
        else:
            for j, mid in enumerate(members):
                result[mid].setdefault(tid, set()).add(j % count)
    return result
