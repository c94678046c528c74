"""Server-side partition assignors of the KIP-848 consumer protocol: `uniform` and `range`.

Kafka's `UniformAssignor` (the default) and `RangeAssignor` of the group-coordinator module. An
assignor sees each member's subscribed topic ids, static instance id and current target assignment,
and the partition count of every subscribed topic; it returns the new target assignment of every
member. `uniform` is sticky: a member keeps what it had as long as the result stays balanced.

- `uniform`: every partition of the subscribed topics goes to exactly one member subscribed to its
  topic; partitions move only to restore balance. With identical subscriptions the members' partition
  counts differ by at most one; with different subscriptions, no partition can move from a member with
  n partitions to an eligible member with fewer than n - 1.
- `range`: Kafka 4.3's range assignor is deliberately not sticky. Members are ordered static first
  (by `group.instance.id`), then by member id; per topic, each subscribed member in that order takes
  the next contiguous range of partitions/members partitions, the first partitions%members of them one
  more. With equal partition counts the same member gets the same partition numbers of every topic
  (co-partitioning, for joins). A member joining can therefore move partitions between existing
  members; static membership keeps the order, and so the assignment, stable across restarts.

Pure: no I/O. Must not import kbroker.net or kbroker.api.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

Assignment = dict[uuid.UUID, set[int]]


@dataclass(slots=True)
class MemberSpec:
    subscribed: set[uuid.UUID]
    current: Assignment = field(default_factory=dict)
    instance_id: str | None = None


class PartitionAssignorError(ValueError):
    """The assignor cannot produce an assignment (unknown name)."""


def uniform_assign(members: dict[str, MemberSpec], partitions: dict[uuid.UUID, int]) -> dict[str, Assignment]:
    if not members:
        return {}
    owned: dict[str, set[tuple[uuid.UUID, int]]] = {m: set() for m in members}
    taken: set[tuple[uuid.UUID, int]] = set()
    # Stickiness: every still-valid partition stays with its current owner (first claimant wins).
    for mid in sorted(members):
        spec = members[mid]
        for tid, parts in spec.current.items():
            if tid not in spec.subscribed or tid not in partitions:
                continue
            for p in parts:
                tp = (tid, p)
                if p < partitions[tid] and tp not in taken:
                    owned[mid].add(tp)
                    taken.add(tp)
    eligible: dict[uuid.UUID, list[str]] = {
        tid: sorted(m for m, s in members.items() if tid in s.subscribed) for tid in partitions
    }
    # Unassigned partitions go to the least loaded subscribed member.
    for tid in sorted(partitions, key=str):
        candidates = eligible[tid]
        if not candidates:
            continue
        for p in range(partitions[tid]):
            if (tid, p) in taken:
                continue
            best = min(candidates, key=lambda m: (len(owned[m]), m))
            owned[best].add((tid, p))
            taken.add((tid, p))
    _rebalance(owned, eligible)
    out: dict[str, Assignment] = {}
    for mid, tps in owned.items():
        a: Assignment = {}
        for tid, p in tps:
            a.setdefault(tid, set()).add(p)
        out[mid] = a
    return out


def _rebalance(owned: dict[str, set[tuple[uuid.UUID, int]]], eligible: dict[uuid.UUID, list[str]]) -> None:
    """Move partitions from the most loaded members to eligible members with at least two fewer,
    until no such move exists (balance within one for identical subscriptions)."""
    moved = True
    while moved:
        moved = False
        for heavy in sorted(owned, key=lambda m: (-len(owned[m]), m)):
            load = len(owned[heavy])
            for tp in sorted(owned[heavy], key=lambda x: (str(x[0]), -x[1])):
                light = min((m for m in eligible[tp[0]] if len(owned[m]) <= load - 2),
                            key=lambda m: (len(owned[m]), m), default=None)
                if light is not None:
                    owned[heavy].discard(tp)
                    owned[light].add(tp)
                    moved = True
                    break
            if moved:
                break


def range_assign(members: dict[str, MemberSpec], partitions: dict[uuid.UUID, int]) -> dict[str, Assignment]:
    # Static members first, ordered by instance id, then the others by member id (Kafka's
    # RangeAssignor.sortMemberIds): restarts of static members keep the order and so the ranges.
    order = sorted(members, key=lambda m: (members[m].instance_id is None, members[m].instance_id or "", m))
    subscribers = {tid: sum(1 for s in members.values() if tid in s.subscribed) for tid in partitions}
    next_start = dict.fromkeys(partitions, 0)
    extra = {tid: count % subscribers[tid] for tid, count in partitions.items() if subscribers[tid]}
    out: dict[str, Assignment] = {}
    for mid in order:
        assignment: Assignment = {}
        for tid in sorted(members[mid].subscribed, key=str):
            count = partitions.get(tid)
            if count is None:
                continue
            quota = count // subscribers[tid]
            if extra[tid] > 0:
                quota += 1
                extra[tid] -= 1
            start = next_start[tid]
            end = min(start + quota, count)
            next_start[tid] = end
            if start < end:
                assignment[tid] = set(range(start, end))
        out[mid] = assignment
    return out


ASSIGNORS: dict[str, Callable[[dict[str, MemberSpec], dict[uuid.UUID, int]], dict[str, Assignment]]] = {
    "uniform": uniform_assign,
    "range": range_assign,
}


def assignor(name: str) -> Callable[[dict[str, MemberSpec], dict[uuid.UUID, int]], dict[str, Assignment]]:
    try:
        return ASSIGNORS[name]
    except KeyError:
        raise PartitionAssignorError(f"unknown assignor {name}") from None
