"""The server-side assignors (`uniform`, `range`): properties over random groups, and stickiness."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from kbroker.coord.assignors import Assignment, MemberSpec, range_assign, uniform_assign

TOPICS = [uuid.UUID(int=i + 1) for i in range(3)]


def _owners(result: dict[str, Assignment]) -> dict[tuple[uuid.UUID, int], list[str]]:
    out: dict[tuple[uuid.UUID, int], list[str]] = {}
    for m, a in result.items():
        for t, ps in a.items():
            for p in ps:
                out.setdefault((t, p), []).append(m)
    return out


def _sizes(result: dict[str, Assignment]) -> dict[str, int]:
    return {m: sum(len(ps) for ps in a.values()) for m, a in result.items()}


groups = st.tuples(
    st.integers(1, 8),  # members
    st.lists(st.integers(0, 12), min_size=1, max_size=3),  # partitions per topic
    st.booleans(),  # identical subscriptions?
    st.randoms(use_true_random=False),
)


def _build(n: int, counts: list[int], same: bool, rnd) -> tuple[dict[str, MemberSpec], dict[uuid.UUID, int]]:  # type: ignore[no-untyped-def]
    partitions = {TOPICS[i]: c for i, c in enumerate(counts)}
    members = {}
    for i in range(n):
        subscribed = set(partitions) if same else {t for t in partitions if rnd.random() < 0.6}
        members[f"m{i}"] = MemberSpec(subscribed)
    return members, partitions


@settings(max_examples=60, deadline=None)
@given(groups)
def test_every_partition_has_exactly_one_subscribed_owner(g) -> None:  # type: ignore[no-untyped-def]
    members, partitions = _build(*g)
    for assign in (uniform_assign, range_assign):
        result = assign(members, partitions)
        owners = _owners(result)
        for t, count in partitions.items():
            subscribed = [m for m, s in members.items() if t in s.subscribed]
            for p in range(count):
                holders = owners.get((t, p), [])
                assert len(holders) == (1 if subscribed else 0), (assign.__name__, t, p, holders)
                assert all(t in members[h].subscribed for h in holders)
        assert set(owners) <= {(t, p) for t, c in partitions.items() for p in range(c)}


@settings(max_examples=60, deadline=None)
@given(groups)
def test_uniform_balance_within_one_for_identical_subscriptions(g) -> None:  # type: ignore[no-untyped-def]
    n, counts, _, rnd = g
    members, partitions = _build(n, counts, True, rnd)
    sizes = _sizes(uniform_assign(members, partitions))
    assert max(sizes.values()) - min(sizes.values()) <= 1


@settings(max_examples=60, deadline=None)
@given(groups, st.integers(0, 7))
def test_uniform_is_sticky_when_a_member_joins_or_leaves(g, drop: int) -> None:  # type: ignore[no-untyped-def]
    n, counts, _, rnd = g
    members, partitions = _build(n, counts, True, rnd)
    first = uniform_assign(members, partitions)
    total = sum(partitions.values())
    # A member joins: only partitions needed to fill the newcomer's quota move.
    joined = {m: MemberSpec(s.subscribed, first[m]) for m, s in members.items()}
    joined["new"] = MemberSpec(set(partitions))
    second = uniform_assign(joined, partitions)
    moved = sum(len(first[m].get(t, set()) - second[m].get(t, set())) for m in first for t in partitions)
    assert moved == _sizes(second)["new"] <= total // (n + 1) + 1
    # A member leaves: the others keep everything they had.
    if n > 1:
        gone = f"m{drop % n}"
        left = {m: MemberSpec(s.subscribed, first[m]) for m, s in members.items() if m != gone}
        third = uniform_assign(left, partitions)
        for m in left:
            for t, ps in first[m].items():
                assert ps <= third[m].get(t, set())


def test_range_gives_contiguous_ranges_and_co_partitions() -> None:
    members = {m: MemberSpec({TOPICS[0], TOPICS[1]}) for m in ("b", "a", "c")}
    result = range_assign(members, {TOPICS[0]: 7, TOPICS[1]: 7})
    assert result["a"][TOPICS[0]] == {0, 1, 2} and result["b"][TOPICS[0]] == {3, 4}
    assert result["c"][TOPICS[0]] == {5, 6}
    for m in members:
        assert result[m][TOPICS[0]] == result[m][TOPICS[1]]


def test_range_is_not_sticky_but_ordered_like_kafka() -> None:
    # Kafka 4.3's RangeAssignor ignores the current assignment: members in order take contiguous
    # ranges, so a joining member can move partitions between the others (12 partitions, 3 -> 4
    # members: 0-3/4-7/8-11 become 0-2/3-5/6-8/9-11).
    t = TOPICS[0]
    members = {"a": MemberSpec({t}, {t: {3, 4, 5}}), "b": MemberSpec({t}, {t: {0, 1, 2}})}
    assert range_assign(members, {t: 6}) == {"a": {t: {0, 1, 2}}, "b": {t: {3, 4, 5}}}
    three = {m: MemberSpec({t}) for m in ("m1", "m2", "m3")}
    first = range_assign(three, {t: 12})
    assert [first[m][t] for m in ("m1", "m2", "m3")] == [set(range(0, 4)), set(range(4, 8)), set(range(8, 12))]
    four = {m: MemberSpec({t}, first.get(m, {})) for m in ("m1", "m2", "m3", "m4")}
    second = range_assign(four, {t: 12})
    assert [second[m][t] for m in ("m1", "m2", "m3", "m4")] == [
        set(range(0, 3)), set(range(3, 6)), set(range(6, 9)), set(range(9, 12))]


def test_range_orders_static_members_first_by_instance_id() -> None:
    t = TOPICS[0]
    members = {"a": MemberSpec({t}), "z1": MemberSpec({t}, instance_id="i2"), "z2": MemberSpec({t}, instance_id="i1")}
    result = range_assign(members, {t: 3})
    assert result == {"z2": {t: {0}}, "z1": {t: {1}}, "a": {t: {2}}}
