"""The KIP-932 share group: members, epochs and the target assignment of partitions they *share*.

Kafka's `ShareGroup`, `ShareGroupMember` and the share group's `SimpleAssignor`. A share group is a
KIP-848 group without reconciliation: a partition may belong to several members at once (the records,
not the partitions, are divided between members: `kbroker.coord.share_partition`), so a member gets its
target assignment in the heartbeat that computed it, with no revocation step, and the member epoch
jumps straight to the group epoch.

A `kbroker.coord.modern_group.ModernGroup`, as consumer groups are (members, epochs, target
assignment and subscribed-topic metadata are defined there, once): the *group epoch* goes up on every
change calling for a new assignment (a member joins, leaves or is fenced, a subscription changes, a
subscribed topic gains partitions or appears); the target assignment is recomputed at once, so the
target assignment epoch follows the group epoch. What is only a share group's is here: its states and
the `simple` assignor.

Group states (Kafka's `ShareGroup.ShareGroupState`): Empty (no members), Stable, Dead (deleted).

Pure: no asyncio, no I/O. Must not import kbroker.net, kbroker.api, the consumer-group modules or the
protocol modules (`share_group_protocol`, `modern_group_protocol`).
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass

from kbroker.coord.assignors import Assignment
from kbroker.coord.modern_group import LEAVE_GROUP_MEMBER_EPOCH as LEAVE_GROUP_MEMBER_EPOCH
from kbroker.coord.modern_group import ModernGroup, ModernGroupMember

SHARE_ASSIGNOR_NAME = "simple"


class ShareGroupState(enum.Enum):
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


@dataclass(slots=True)
class ShareGroupMember(ModernGroupMember):
    """Kafka's ShareGroupMember: a ModernGroupMember and nothing more (no instance id, no rebalance
    timeout, no partitions pending revocation: a share member is given its target at once)."""


@dataclass(slots=True)
class ShareGroup(ModernGroup[ShareGroupMember]):
    """Kafka's ShareGroup: a ModernGroup whose state is only Empty / Stable / Dead (members always
    hold their target assignment, so it is never Assigning or Reconciling)."""

    @property
    def state(self) -> ShareGroupState:
        if self.dead:
            return ShareGroupState.DEAD
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY


def simple_assign(subscriptions: dict[str, set[uuid.UUID]], partitions: dict[uuid.UUID, int]) -> dict[str, Assignment]:
    """The share group's `simple` assignor over every partition of the subscribed topics
    (`simple_assign_partitions` with each topic's partitions 0..count-1)."""
    return simple_assign_partitions(subscriptions, {tid: list(range(n)) for tid, n in partitions.items()})


def simple_assign_partitions(subscriptions: dict[str, set[uuid.UUID]], partitions: dict[uuid.UUID, list[int]]
                             ) -> dict[str, Assignment]:
    """The share group's `simple` assignor over the assignable partitions of each topic (Kafka's
    `SubscribedTopicDescriberImpl` with a topic partitions filter: only initialized share-partitions):
    every assignable partition of a subscribed topic goes to at least one member subscribed to it, and
    every subscribed member gets at least one partition of its topics when there are any, even when
    members outnumber partitions (partitions are then shared).

    Per topic, in sorted member-id order over the members subscribed to it and in partition order: with
    fewer members than partitions, the i-th partition goes to member i mod members; with more, member j
    gets the (j mod partitions)-th partition. Members subscribed to several topics get partitions of each.
    Deterministic, not sticky (Kafka 4.3's SimpleAssignor also keeps the current assignment where it
    stays balanced)."""
    result: dict[str, Assignment] = {mid: {} for mid in subscriptions}
    for tid in sorted(partitions, key=str):
        assignable = sorted(set(partitions[tid]))
        count = len(assignable)
        members = sorted(mid for mid, topics in subscriptions.items() if tid in topics)
        if not members or count <= 0:
            continue
        if len(members) <= count:
            for i, p in enumerate(assignable):
                result[members[i % len(members)]].setdefault(tid, set()).add(p)
        else:
            for j, mid in enumerate(members):
                result[mid].setdefault(tid, set()).add(assignable[j % count])
    return result
