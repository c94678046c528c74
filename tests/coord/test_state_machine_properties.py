"""Random sequences of group requests and clock advances keep the group's invariants: every waiting
request is answered exactly once, waiting requests exist only in the states that allow them, the
leader is a member, and no illegal transition is ever attempted."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kbroker.coord.group import GroupState
from kbroker.protocol.errors import ErrorCode
from tests.coord.support import Box, Harness

S = GroupState

OPS = st.lists(
    st.tuples(
        st.sampled_from(["join_new", "join_static", "rejoin", "sync", "sync_all", "heartbeat", "leave", "commit",
                         "advance"]),
        st.integers(min_value=0, max_value=7),
    ),
    max_size=40,
)


def check_invariants(h: Harness, boxes: list[Box]) -> None:
    for box in boxes:
        assert len(box.results) <= 1, f"a request was answered twice: {box.results}"
    group = h.coord.groups.get("g")
    if group is None:
        return
    members = group.members
    assert group.leader_id is None or group.leader_id in members
    assert (group.leader_id is None) == (not members)
    assert group.pending_sync_members <= set(members)
    assert set(group.static_members.values()) <= set(members)
    if group.state == S.EMPTY:
        assert not members
    if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
        assert members and group.protocol_name is not None
    for m in members.values():
        if m.is_awaiting_join:
            assert group.state == S.PREPARING_REBALANCE
        if m.is_awaiting_sync:
            assert group.state == S.COMPLETING_REBALANCE


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_random_request_sequences_keep_invariants(ops: list[tuple[str, int]]) -> None:
    h = Harness(initial_rebalance_delay_ms=100)
    boxes: list[Box] = []
    known: list[str] = []  # member ids handed out
    instances = ["i0", "i1", "i2"]

    def remember(box: Box) -> Box:
        boxes.append(box)
        return box

    def latest_result_for(member_id: str) -> int:
        group = h.coord.groups.get("g")
        return group.generation_id if group is not None else -1

    for op, n in ops:
        if op == "join_new":
            box = remember(h.join(session_timeout_ms=6000, rebalance_timeout_ms=1000))
            if box.done and box.result.member_id:
                known.append(box.result.member_id)
        elif op == "join_static":
            box = remember(h.join(instance_id=instances[n % 3], client_id=instances[n % 3],
                                  session_timeout_ms=6000, rebalance_timeout_ms=1000))
        elif op == "rejoin" and known:
            remember(h.join(member_id=known[n % len(known)], session_timeout_ms=6000, rebalance_timeout_ms=1000))
        elif op == "sync" and known:
            member = known[n % len(known)]
            remember(h.sync("g", latest_result_for(member), member, {k: b"a" for k in known}))
        elif op == "sync_all":
            group = h.coord.groups.get("g")
            if group is not None:
                for member_id, gm in list(group.members.items()):
                    remember(h.sync("g", group.generation_id, member_id, {m: b"a" for m in group.members},
                                    instance_id=gm.group_instance_id))
        elif op == "heartbeat" and known:
            member = known[n % len(known)]
            assert isinstance(h.coord.heartbeat("g", latest_result_for(member), member, None), ErrorCode)
        elif op == "leave" and known:
            h.coord.leave_group("g", [(known[n % len(known)], None)])
        elif op == "commit" and known:
            member = known[n % len(known)]
            h.coord.commit_offsets("g", latest_result_for(member), member, None, -1, [])
        elif op == "advance":
            h.sched.advance(n * 400)
        for box in boxes:
            for result in box.results:
                member_id = getattr(result, "member_id", "")
                if member_id and member_id not in known:
                    known.append(member_id)
        check_invariants(h, boxes)
    # Eventually every waiting request is answered: members stop heartbeating and expire.
    h.sched.advance(10 * 60 * 1000)
    check_invariants(h, boxes)
    group = h.coord.groups.get("g")
    assert group is None or not group.members
    assert all(box.done for box in boxes), "a JoinGroup/SyncGroup request was never answered"
