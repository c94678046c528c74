"""The KIP-848 consumer group: members, epochs, target assignment and incremental reconciliation.

Kafka's `ConsumerGroup`, `ConsumerGroupMember`, `MemberState` and `CurrentAssignmentBuilder`. Data and
the rules that only look at one group; the heartbeat protocol that drives them is
`kbroker.coord.consumer_coordinator`.

A `kbroker.coord.modern_group.ModernGroup` (the epochs, members, target assignment and subscribed
topic metadata it shares with share groups are defined there): the *group epoch* goes up on every change
that calls for a new assignment; the *target assignment epoch* is the group epoch the current target
assignment was computed for; each member's *member epoch* reaches the target epoch once it has been
given its target partitions. What only consumer groups have is here: static members (KIP-345),
partition owners, revocation and reconciliation, regex subscriptions, classic members (KIP-848 online
migration), KIP-1251 assignment epochs.

Reconciliation (per member, on each heartbeat), member states::

    STABLE --new target--> UNREVOKED_PARTITIONS  (must give up partitions; keeps its epoch)
       ^                       | ack (partitions no longer owned)
       |                       v
       +-- all free ---- UNRELEASED_PARTITIONS  (at the target epoch, waits for partitions others
                                                 still hold)

A partition is handed to its new owner only once no other member holds it, assigned or pending
revocation: the previous owner must have acknowledged the revocation first.

Group states: Empty (no members), Assigning (group epoch ahead of the target), Reconciling (some
member not at the target epoch or not STABLE), Stable, Dead (deleted).

Pure: no asyncio, no I/O. Must not import kbroker.net, kbroker.api or the protocol modules
(`consumer_coordinator`, `modern_group_protocol`).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from kbroker.coord.assignors import Assignment
from kbroker.coord.modern_group import LEAVE_GROUP_MEMBER_EPOCH as LEAVE_GROUP_MEMBER_EPOCH
from kbroker.coord.modern_group import ModernGroup, ModernGroupMember
from kbroker.coord.modern_group import copy_assignment as copy_assignment

# Topic names in, the ones a principal may DESCRIBE out (set by the API layer, which owns authorization).
TopicFilter = Callable[[set[str]], set[str]]

LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"
    UNKNOWN = "unknown"


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


def assignment_size(a: Assignment) -> int:
    return sum(len(ps) for ps in a.values())


@dataclass(slots=True)
class ClassicMemberMetadata:
    """What a member using the classic protocol inside a consumer group brings along (Kafka's
    ConsumerGroupMemberMetadataValue.ClassicMemberMetadata): its session timeout and the
    (name, ConsumerProtocolSubscription) protocols of its last JoinGroup."""

    session_timeout_ms: int
    supported_protocols: list[tuple[str, bytes]]


@dataclass(slots=True, kw_only=True)
class ConsumerGroupMember(ModernGroupMember):
    """Kafka's ConsumerGroupMember: a ModernGroupMember with what reconciliation, static membership,
    regex subscriptions and classic interop need (fields after `member_id` are keyword-only)."""

    instance_id: str | None = None
    rebalance_timeout_ms: int = 300000
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    state: MemberState = MemberState.STABLE
    pending_revocation: Assignment = field(default_factory=dict)
    # KIP-1251: the member epoch at which each assigned partition was given to the member (a commit
    # with an older member epoch is still valid for partitions assigned at or before it).
    assignment_epochs: dict[tuple[uuid.UUID, int], int] = field(default_factory=dict)
    # Set for a member that talks the classic protocol (JoinGroup/SyncGroup/Heartbeat); None for a
    # ConsumerGroupHeartbeat member. `awaiting_rejoin`: it was told REBALANCE_IN_PROGRESS.
    classic: ClassicMemberMetadata | None = None
    awaiting_rejoin: bool = False
    # The topics of its regex subscription this member's principal may DESCRIBE (Kafka's
    # TopicRegexResolver.filterTopicDescribeAuthorizedTopics, with the context of the member's last
    # heartbeat); None without an authorizer. Not persisted: the next heartbeat sets it again.
    topic_describe_filter: TopicFilter | None = None

    def owns(self, tid: uuid.UUID, p: int) -> bool:
        return p in self.assigned.get(tid, ()) or p in self.pending_revocation.get(tid, ())


@dataclass(slots=True, kw_only=True)
class ConsumerGroup(ModernGroup[ConsumerGroupMember]):
    """Kafka's ConsumerGroup: a ModernGroup with static members and partition owners (fields after
    `group_id` are keyword-only)."""

    # group.instance.id -> member id (KIP-345 static membership)
    static_members: dict[str, str] = field(default_factory=dict)
    # (topic id, partition) -> member holding it (assigned or pending revocation): Kafka's
    # currentPartitionEpoch map.
    partition_owner: dict[tuple[uuid.UUID, int], str] = field(default_factory=dict)

    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.target_assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for m in self.members.values():
            if m.member_epoch != self.target_assignment_epoch or m.state != MemberState.STABLE:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def subscribed_regexes(self) -> set[str]:
        return {m.subscribed_topic_regex for m in self.members.values() if m.subscribed_topic_regex}

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return topic in self.subscribed_metadata or topic in self.subscribed_topic_names()

    def add_member(self, member: ConsumerGroupMember) -> None:
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def remove_member(self, member_id: str) -> ConsumerGroupMember | None:
        member = ModernGroup.remove_member(self, member_id)
        if member is None:
            return None
        self._release(member)
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        return member

    def _release(self, member: ConsumerGroupMember) -> None:
        for a in (member.assigned, member.pending_revocation):
            for tid, ps in a.items():
                for p in ps:
                    if self.partition_owner.get((tid, p)) == member.member_id:
                        del self.partition_owner[(tid, p)]

    def set_member_assignment(self, member: ConsumerGroupMember, assigned: Assignment, pending: Assignment,
                              new_epoch: int | None = None) -> None:
        """Partitions newly assigned get `new_epoch` (default: the member's epoch) as assignment epoch."""
        self._release(member)
        member.assigned = copy_assignment(assigned)
        member.pending_revocation = copy_assignment(pending)
        epoch = member.member_epoch if new_epoch is None else new_epoch
        member.assignment_epochs = {
            (tid, p): member.assignment_epochs.get((tid, p), epoch)
            for a in (member.assigned, member.pending_revocation) for tid, ps in a.items() for p in ps
        }
        for a in (member.assigned, member.pending_revocation):
            for tid, ps in a.items():
                for p in ps:
                    self.partition_owner[(tid, p)] = member.member_id

    def replace_static_member(self, old: ConsumerGroupMember, new_member_id: str) -> ConsumerGroupMember:
        """A static member restarted: the new member id takes over the old one's assignment."""
        assigned, pending = old.assigned, old.pending_revocation
        self.remove_member(old.member_id)
        target = self.target_assignment.get(old.member_id)
        old.member_id = new_member_id
        self.add_member(old)
        self.set_member_assignment(old, assigned, pending)
        self.target_assignment[new_member_id] = target if target is not None else copy_assignment(assigned)
        return old


def reconcile(group: ConsumerGroup, member: ConsumerGroupMember, owned: Assignment | None) -> None:
    """Kafka's CurrentAssignmentBuilder: move `member` towards its target assignment.

    `owned` is what the member said it owns in this heartbeat (None: not sent, so unchanged)."""
    target_epoch = group.target_assignment_epoch
    target = group.target_assignment.get(member.member_id, {})
    if member.state == MemberState.UNREVOKED_PARTITIONS:
        if owned is None or _owns_any(owned, member.pending_revocation):
            # Still waiting for the revocation; a newer target is looked at once it is acknowledged.
            return
        group.set_member_assignment(member, member.assigned, {})
        _compute_next(group, member, target_epoch, target, owned)
        return
    if member.state == MemberState.UNRELEASED_PARTITIONS or member.member_epoch != target_epoch:
        _compute_next(group, member, target_epoch, target, owned)


def _owns_any(owned: Assignment, partitions: Assignment) -> bool:
    return any(p in owned.get(tid, ()) for tid, ps in partitions.items() for p in ps)


def _compute_next(group: ConsumerGroup, member: ConsumerGroupMember, target_epoch: int, target: Assignment,
                  owned: Assignment | None) -> None:
    kept: Assignment = {}  # current and target: stays with the member whatever happens
    gained: Assignment = {}  # target only, and free: given once nothing is left to revoke
    revoke: Assignment = {}
    unreleased = False
    for tid in set(member.assigned) | set(target):
        current = member.assigned.get(tid, set())
        wanted = target.get(tid, set())
        if current & wanted:
            kept[tid] = current & wanted
        if current - wanted:
            revoke[tid] = current - wanted
        for p in sorted(wanted - current):
            holder = group.partition_owner.get((tid, p))
            if holder is None or holder == member.member_id:
                gained.setdefault(tid, set()).add(p)
            else:
                unreleased = True
    if revoke and (owned is None or _owns_any(owned, revoke)):
        # As Kafka's CurrentAssignmentBuilder: the member keeps its epoch and only the partitions it
        # keeps; new ones wait until it has acknowledged the revocation (next heartbeat).
        group.set_member_assignment(member, kept, revoke, member.member_epoch)
        member.state = MemberState.UNREVOKED_PARTITIONS
        return
    for tid, ps in gained.items():
        kept.setdefault(tid, set()).update(ps)
    group.set_member_assignment(member, kept, {}, target_epoch)
    member.advance_epoch(target_epoch)
    member.state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
