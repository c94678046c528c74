"""What KIP-848 consumer groups and KIP-932 share groups have in common: Kafka's `ModernGroup` and
`ModernGroupMember` (org.apache.kafka.coordinator.group.modern).

Both are "modern" groups: the coordinator owns the assignment (server-side assignor), and three epochs
order every change:

- the *group epoch* goes up on every change calling for a new assignment (a member joins, leaves or is
  fenced, a subscription changes, a subscribed topic gains partitions or appears);
- the *target assignment epoch* is the group epoch the current target assignment was computed for;
- each member's *member epoch* reaches the target assignment epoch once the member has its target
  (at once for a share group; after revocations for a consumer group).

This module holds the data both group types share (members with their client attributes,
subscription and epochs; the group's epochs, target assignment and the subscribed-topic metadata it
was computed from) and the rules on it that do not depend on the group type. What differs stays in
`kbroker.coord.consumer_group` (reconciliation, revocation, static members, regex subscriptions,
classic members) and `kbroker.coord.share_group` (the `simple` assignor, shared partitions). The
protocol machinery shared by both (session timers, metadata refresh, epoch bump + target assignment,
fencing, persisting with rollback) is `kbroker.coord.modern_group_protocol`.

Subclasses are `slots=True` dataclasses: call a base method as `ModernGroup.method(self, ...)`, not
`super()` (a slotted dataclass is a new class object, so the zero-argument `super()` cell is stale).

Pure: no asyncio, no I/O. Must not import kbroker.net, kbroker.api or any other kbroker.coord module
but `assignors`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from kbroker.coord.assignors import Assignment

# A member leaving the group sends this epoch (both protocols); answered with it.
LEAVE_GROUP_MEMBER_EPOCH = -1


def copy_assignment(a: Assignment) -> Assignment:
    """A deep copy without the topics that have no partitions."""
    return {t: set(ps) for t, ps in a.items() if ps}


@dataclass(slots=True)
class ModernGroupMember:
    """Kafka's ModernGroupMember: what every member of a consumer or share group has."""

    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: list[str] = field(default_factory=list)
    member_epoch: int = 0
    previous_member_epoch: int = 0
    assigned: Assignment = field(default_factory=dict)

    def update_subscribed_topic_names(self, names: list[str] | None) -> bool:
        """Apply the heartbeat's SubscribedTopicNames (None: unchanged); True when the subscription changed
        (duplicates and order do not count)."""
        if names is None:
            return False
        wanted = sorted(set(names))
        if wanted == self.subscribed_topic_names:
            return False
        self.subscribed_topic_names = wanted
        return True

    def update_client(self, rack_id: str | None, client_id: str, client_host: str) -> None:
        """The attributes every heartbeat carries (RackId only when set)."""
        if rack_id is not None:
            self.rack_id = rack_id
        self.client_id, self.client_host = client_id, client_host

    def advance_epoch(self, epoch: int) -> None:
        """Move the member to `epoch`, remembering the one it had (a retry with the previous epoch is
        recognised by the consumer protocol)."""
        if self.member_epoch != epoch:
            self.previous_member_epoch, self.member_epoch = self.member_epoch, epoch


# Covariant: a ModernGroup[ConsumerGroupMember] is a ModernGroup[ModernGroupMember] to the shared code,
# which only reads members and removes them (never inserts a member of its own making).
M_co = TypeVar("M_co", bound=ModernGroupMember, covariant=True)


@dataclass(slots=True)
class ModernGroup(Generic[M_co]):
    """Kafka's ModernGroup<T extends ModernGroupMember>: epochs, members, target assignment."""

    group_id: str
    group_epoch: int = 0
    target_assignment_epoch: int = 0
    target_assignment_timestamp_ms: int = 0
    members: dict[str, M_co] = field(default_factory=dict)
    target_assignment: dict[str, Assignment] = field(default_factory=dict)
    # subscribed topic name -> (topic id, partition count) the target assignment was computed from
    subscribed_metadata: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)
    state_timestamp_ms: int = -1
    dead: bool = False

    @property
    def assignment_epoch(self) -> int:
        """The describe responses' AssignmentEpoch: the target assignment epoch."""
        return self.target_assignment_epoch

    @assignment_epoch.setter
    def assignment_epoch(self, epoch: int) -> None:
        self.target_assignment_epoch = epoch

    def is_empty(self) -> bool:
        return not self.members

    def subscribed_topic_names(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed_topic_names}

    def remove_member(self, member_id: str) -> M_co | None:
        """Drop the member and its target assignment (subclasses also drop what they derive from it)."""
        member = self.members.pop(member_id, None)
        if member is not None:
            self.target_assignment.pop(member_id, None)
        return member

    def bump_group_epoch(self, now_ms: int) -> None:
        """A change calling for a new target assignment."""
        self.group_epoch += 1
        self.state_timestamp_ms = now_ms

    def set_target_assignment(self, assignment: dict[str, Assignment], now_ms: int) -> None:
        """Kafka's TargetAssignmentBuilder result: every member's target (empty for one the assignor
        left out), stamped with the group epoch it was computed for."""
        self.target_assignment = {mid: assignment.get(mid, {}) for mid in self.members}
        self.target_assignment_epoch = self.group_epoch
        self.target_assignment_timestamp_ms = now_ms

    def assignment_covers_subscriptions(self) -> bool:
        """Whether the target assignment hands out exactly the subscribed topics' partitions (after a
        load: False when topics changed while the broker was down)."""
        expected = {(tid, p) for tid, n in self.subscribed_metadata.values() for p in range(n)}
        covered = {(tid, p) for a in self.target_assignment.values() for tid, ps in a.items() for p in ps}
        return covered == expected
