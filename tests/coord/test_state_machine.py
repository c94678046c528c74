"""The classic group state machine: the transition table, and every request path through it
(JoinGroup, SyncGroup, Heartbeat, LeaveGroup, session/join/sync expiry, static membership), with
a fake clock and no sockets."""

from __future__ import annotations

import itertools

import pytest

from kbroker.coord.group import (
    VALID_PREVIOUS_STATES,
    ClassicGroup,
    GroupState,
    IllegalGroupStateError,
)
from kbroker.coord.records import GroupMetadataKey, decode_group_metadata_value, decode_key
from kbroker.protocol.errors import ErrorCode
from tests.coord.support import PROTOCOLS, Harness, subscription, sync_ok

S = GroupState
E = ErrorCode

# -- the table -------------------------------------------------------------------------------------

EXPECTED_ALLOWED = {
    (S.PREPARING_REBALANCE, S.EMPTY),
    (S.STABLE, S.PREPARING_REBALANCE),
    (S.COMPLETING_REBALANCE, S.PREPARING_REBALANCE),
    (S.EMPTY, S.PREPARING_REBALANCE),
    (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE),
    (S.COMPLETING_REBALANCE, S.STABLE),
    *((s, S.DEAD) for s in S),
}


@pytest.mark.parametrize("source,target", list(itertools.product(S, S)))
def test_transition_table(source: GroupState, target: GroupState) -> None:
    group = ClassicGroup("g", state=source)
    assert (source in VALID_PREVIOUS_STATES[target]) == ((source, target) in EXPECTED_ALLOWED)
    if (source, target) in EXPECTED_ALLOWED:
        group.transition_to(target, 42)
        assert group.state == target and group.previous_state == source and group.state_timestamp_ms == 42
    else:
        with pytest.raises(IllegalGroupStateError):
            group.transition_to(target, 42)
        assert group.state == source


# -- JoinGroup / SyncGroup -------------------------------------------------------------------------


def test_two_step_join_initial_delay_and_sync() -> None:
    h = Harness()
    first = h.join().result
    assert first.error == E.MEMBER_ID_REQUIRED and first.member_id.startswith("client-")
    assert h.coord.groups["g"].state == S.EMPTY and first.member_id in h.coord.groups["g"].pending_members
    box = h.join(member_id=first.member_id)
    assert not box.done and h.coord.groups["g"].state == S.PREPARING_REBALANCE
    h.sched.advance(2999)
    assert not box.done  # group.initial.rebalance.delay.ms
    h.sched.advance(1)
    r = box.result
    assert (r.error, r.generation_id, r.leader, r.protocol_name, r.protocol_type) == \
        (E.NONE, 1, first.member_id, "range", "consumer")
    assert r.members == [(first.member_id, None, PROTOCOLS[0][1])]
    assert h.coord.groups["g"].state == S.COMPLETING_REBALANCE
    assert h.coord.heartbeat("g", 1, r.member_id, None) == E.NONE  # allowed while completing
    s = sync_ok(h.sync("g", 1, r.member_id, {r.member_id: b"A"}))
    assert (s.assignment, s.protocol_name, s.protocol_type) == (b"A", "range", "consumer")
    group = h.coord.groups["g"]
    assert group.state == S.STABLE
    # The assignment was written as a GroupMetadataValue before anyone got it.
    gid, key, value = h.log.records[-1]
    assert decode_key(key) == GroupMetadataKey(group="g")
    assert value is not None
    stored = decode_group_metadata_value(value)
    assert stored.generation == 1 and stored.members[0].assignment == b"A"


def test_join_without_known_member_id_v3() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    box = h.join(require_known=False)
    h.sched.advance(0)
    assert box.result.error == E.NONE and box.result.generation_id == 1


def test_initial_delay_extends_for_new_members_up_to_rebalance_timeout() -> None:
    h = Harness(initial_rebalance_delay_ms=100)
    a = h.join_new(rebalance_timeout_ms=250)
    h.sched.advance(90)
    b = h.join_new(rebalance_timeout_ms=250)
    h.sched.advance(10)  # first delay over, but a member was added: wait again
    assert not a.done
    h.sched.advance(90)
    c = h.join_new(rebalance_timeout_ms=250)
    h.sched.advance(10)
    assert not a.done
    h.sched.advance(50)  # remaining time exhausted (250 - 100 - 100)
    assert a.done and b.done and c.done
    assert {r.result.generation_id for r in (a, b, c)} == {1}
    assert len(next(r.result for r in (a, b, c) if r.result.members).members) == 3


def test_new_member_joining_stable_group_triggers_rebalance() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    (first,) = h.stable_group(1)
    second = h.join_new()
    assert h.coord.groups["g"].state == S.PREPARING_REBALANCE
    assert not second.done
    assert h.coord.heartbeat("g", 1, first.member_id, None) == E.REBALANCE_IN_PROGRESS
    rejoin = h.join(member_id=first.member_id)
    r1, r2 = rejoin.result, second.result  # completes as soon as every known member rejoined
    assert r1.generation_id == r2.generation_id == 2
    assert r1.leader == first.member_id and len(r1.members) == 2 and r2.members == []
    # A follower's SyncGroup waits for the leader's.
    follower = h.sync("g", 2, r2.member_id)
    assert not follower.done
    leader = h.sync("g", 2, r1.member_id, {r1.member_id: b"1", r2.member_id: b"2"})
    assert sync_ok(leader).assignment == b"1" and sync_ok(follower).assignment == b"2"
    # A late SyncGroup in Stable gets the stored assignment.
    assert sync_ok(h.sync("g", 2, r2.member_id)).assignment == b"2"


def test_member_that_does_not_rejoin_is_removed_at_join_timeout() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    a, b = h.stable_group(2, rebalance_timeout_ms=5000, session_timeout_ms=60000)
    h.join(member_id=a.member_id, rebalance_timeout_ms=5000, session_timeout_ms=60000)  # same protocols
    group = h.coord.groups["g"]
    if a.member_id != a.leader:
        # A follower rejoining with the same protocols in Stable is a no-op; make the leader rejoin.
        box = h.join(member_id=b.member_id, rebalance_timeout_ms=5000, session_timeout_ms=60000)
        rejoined = b.member_id
    else:
        box = None
        rejoined = a.member_id
    assert group.state == S.PREPARING_REBALANCE
    h.sched.advance(5000)
    assert list(group.members) == [rejoined]
    assert group.state == S.COMPLETING_REBALANCE and group.generation_id == 2
    if box is not None:
        assert box.result.generation_id == 2


def test_session_expiry_removes_member_and_rebalances() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    a, b = h.stable_group(2, session_timeout_ms=10000)
    for _ in range(2):
        h.sched.advance(4000)
        assert h.coord.heartbeat("g", 1, a.member_id, None) == E.NONE
    group = h.coord.groups["g"]
    assert b.member_id in group.members
    h.sched.advance(2000)
    assert b.member_id not in group.members  # silent for 10 s
    assert group.state == S.PREPARING_REBALANCE
    assert h.coord.heartbeat("g", 1, a.member_id, None) == E.REBALANCE_IN_PROGRESS
    assert h.coord.heartbeat("g", 1, b.member_id, None) == E.UNKNOWN_MEMBER_ID
    r = h.join(member_id=a.member_id, session_timeout_ms=10000).result
    assert r.generation_id == 2 and r.leader == a.member_id


def test_last_member_leaving_empties_group_and_writes_it() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    (a,) = h.stable_group(1)
    assert h.coord.leave_group("g", [(a.member_id, None)]) == (E.NONE, [E.NONE])
    group = h.coord.groups["g"]
    assert group.state == S.EMPTY and group.generation_id == 2 and group.protocol_name is None
    value = h.log.records[-1][2]
    assert value is not None and decode_group_metadata_value(value).members == []


def test_leave_errors_and_batched_leave() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    a, b = h.stable_group(2)
    assert h.coord.leave_group("nope", [("x", None)]) == (E.NONE, [E.UNKNOWN_MEMBER_ID])
    err, results = h.coord.leave_group("g", [(a.member_id, None), ("ghost", None), (b.member_id, "wrong")])
    assert (err, results) == (E.NONE, [E.NONE, E.UNKNOWN_MEMBER_ID, E.UNKNOWN_MEMBER_ID])
    assert list(h.coord.groups["g"].members) == [b.member_id]


def test_pending_member_expires_after_session_timeout() -> None:
    h = Harness()
    first = h.join(session_timeout_ms=7000).result
    h.sched.advance(7000)
    assert first.member_id not in h.coord.groups["g"].pending_members
    r = h.join(member_id=first.member_id).result
    assert r.error == E.UNKNOWN_MEMBER_ID


def test_member_that_never_syncs_is_removed_after_rebalance_timeout() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    a = h.join_new(rebalance_timeout_ms=8000)
    b = h.join_new(rebalance_timeout_ms=8000)
    h.sched.advance(0)
    ra, rb = a.result, b.result
    leader = ra if ra.members else rb
    other = rb if leader is ra else ra
    sync_ok(h.sync("g", 1, leader.member_id, {leader.member_id: b"x"}))
    h.sched.advance(8000)
    group = h.coord.groups["g"]
    assert other.member_id not in group.members and group.state == S.PREPARING_REBALANCE


def test_join_errors() -> None:
    h = Harness()
    assert h.join("").result.error == E.INVALID_GROUP_ID
    assert h.join(session_timeout_ms=10).result.error == E.INVALID_SESSION_TIMEOUT
    assert h.join(session_timeout_ms=1800001).result.error == E.INVALID_SESSION_TIMEOUT
    assert h.join(member_id="someone").result.error == E.UNKNOWN_MEMBER_ID
    assert "g" not in h.coord.groups  # nothing was created by failed joins
    h.status["g"] = E.COORDINATOR_LOAD_IN_PROGRESS
    assert h.join().result.error == E.COORDINATOR_LOAD_IN_PROGRESS
    h.status["g"] = E.NOT_COORDINATOR
    assert h.join().result.error == E.NOT_COORDINATOR


def test_inconsistent_protocols() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    h.stable_group(1)
    assert h.join(protocol_type="connect").result.error == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.join(protocols=[("sticky", b"")]).result.error == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.join(protocols=[("roundrobin", b""), ("sticky", b"")]).result.error == E.MEMBER_ID_REQUIRED


def test_group_max_size() -> None:
    h = Harness(initial_rebalance_delay_ms=0, max_size=1)
    h.stable_group(1)
    assert h.join().result.error == E.GROUP_MAX_SIZE_REACHED


def test_protocol_selection_by_vote() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    boxes = [
        h.join_new(protocols=[("range", b""), ("roundrobin", b"")]),
        h.join_new(protocols=[("roundrobin", b""), ("range", b"")]),
        h.join_new(protocols=[("roundrobin", b""), ("range", b""), ("sticky", b"")]),
    ]
    h.sched.advance(0)
    assert {b.result.protocol_name for b in boxes} == {"roundrobin"}


def test_sync_errors() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    (a,) = h.stable_group(1)
    assert h.sync("nope", 1, a.member_id).result.error == E.UNKNOWN_MEMBER_ID
    assert h.sync("g", 1, "ghost").result.error == E.UNKNOWN_MEMBER_ID
    assert h.sync("g", 7, a.member_id).result.error == E.ILLEGAL_GENERATION
    assert h.sync("g", 1, a.member_id, protocol_type="connect").result.error == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.sync("g", 1, a.member_id, protocol_name="sticky").result.error == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.sync("g", 1, a.member_id, protocol_type="consumer", protocol_name="range").result.error == E.NONE
    h.join_new()  # rebalance starts
    assert h.sync("g", 1, a.member_id).result.error == E.REBALANCE_IN_PROGRESS


def test_rebalance_during_completing_answers_waiting_syncs() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    a = h.join_new()
    b = h.join_new()
    h.sched.advance(0)
    follower = a.result if not a.result.members else b.result
    waiting = h.sync("g", 1, follower.member_id)
    h.join_new()  # a third member: back to PreparingRebalance
    assert waiting.result.error == E.REBALANCE_IN_PROGRESS


def test_heartbeat_errors() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    (a,) = h.stable_group(1)
    assert h.coord.heartbeat("nope", 1, a.member_id, None) == E.UNKNOWN_MEMBER_ID
    assert h.coord.heartbeat("g", 1, "ghost", None) == E.UNKNOWN_MEMBER_ID
    assert h.coord.heartbeat("g", 2, a.member_id, None) == E.ILLEGAL_GENERATION
    assert h.coord.heartbeat("g", 1, a.member_id, "some-instance") == E.UNKNOWN_MEMBER_ID
    h.status["g"] = E.COORDINATOR_LOAD_IN_PROGRESS
    assert h.coord.heartbeat("g", 1, a.member_id, None) == E.COORDINATOR_LOAD_IN_PROGRESS


def test_failed_assignment_write_resets_and_rebalances() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    a = h.join_new()
    h.sched.advance(0)
    h.log.fail_with = E.NOT_ENOUGH_REPLICAS
    s = h.sync("g", 1, a.result.member_id, {a.result.member_id: b"x"})
    assert s.result.error == E.COORDINATOR_NOT_AVAILABLE
    assert h.coord.groups["g"].state == S.PREPARING_REBALANCE


# -- static membership (KIP-345) -------------------------------------------------------------------


def _static_group(h: Harness, *instances: str, session_timeout_ms: int = 10000) -> list:
    boxes = [h.join(instance_id=i, client_id=i, session_timeout_ms=session_timeout_ms) for i in instances]  # static members skip MEMBER_ID_REQUIRED
    h.sched.advance(h.coord.config.initial_rebalance_delay_ms)
    results = [b.result for b in boxes]
    leader = next(r for r in results if r.members)
    for r in results:
        sync_ok(h.sync("g", 1, r.member_id, {x.member_id: x.member_id.encode() for x in results}
                       if r is leader else None, instance_id=instances[results.index(r)]))
    return results


def test_static_member_restart_causes_no_rebalance() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    a, b = _static_group(h, "ia", "ib")
    follower, finst = (b, "ib") if a.members else (a, "ia")
    r = h.join(instance_id=finst, client_id=finst).result  # restarted: empty member id, same instance
    group = h.coord.groups["g"]
    assert r.error == E.NONE and r.generation_id == 1 and group.state == S.STABLE
    assert r.member_id != follower.member_id and r.leader != r.member_id
    # The old incarnation is fenced; the new one carries on with the stored assignment.
    assert h.coord.heartbeat("g", 1, follower.member_id, finst) == E.FENCED_INSTANCE_ID
    assert h.coord.heartbeat("g", 1, r.member_id, finst) == E.NONE
    assert sync_ok(h.sync("g", 1, r.member_id, instance_id=finst)).assignment == follower.member_id.encode()
    assert h.coord.commit_offsets("g", 1, follower.member_id, finst, -1, []) == []


def test_static_leader_restart_gets_skip_assignment_in_v9() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    a, b = _static_group(h, "ia", "ib")
    leader, linst = (a, "ia") if a.members else (b, "ib")
    r = h.join(instance_id=linst, client_id=linst, skip_assignment=True).result
    assert r.skip_assignment and r.leader == r.member_id and len(r.members) == 2
    assert h.coord.groups["g"].state == S.STABLE


def test_static_member_leave_by_instance_id() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    a, b = _static_group(h, "ia", "ib")
    assert h.coord.leave_group("g", [("", "ia")]) == (E.NONE, [E.NONE])
    assert h.coord.leave_group("g", [("", "nope")]) == (E.NONE, [E.UNKNOWN_MEMBER_ID])
    assert h.coord.leave_group("g", [("wrong-id", "ib")]) == (E.NONE, [E.FENCED_INSTANCE_ID])
    assert h.coord.groups["g"].state == S.PREPARING_REBALANCE


def test_static_member_with_changed_protocols_rebalances() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    _static_group(h, "ia", "ib")
    box = h.join(instance_id="ia", client_id="ia", protocols=[("roundrobin", subscription("t"))])
    assert not box.done and h.coord.groups["g"].state == S.PREPARING_REBALANCE


def test_static_member_that_does_not_rejoin_keeps_its_place() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    _static_group(h, "ia", "ib", session_timeout_ms=60000)
    group = h.coord.groups["g"]
    leader = group.leader_id
    assert leader is not None
    new = h.join_new(session_timeout_ms=60000)  # a dynamic member: rebalance
    rejoin = h.join(member_id=leader, instance_id=group.members[leader].group_instance_id,
                    client_id=group.members[leader].client_id, session_timeout_ms=60000)
    # The other static member never rejoins: the join completes at the rebalance timeout (30 s, inside
    # its 60 s session) and keeps it.
    h.sched.advance(30000)
    assert new.done and rejoin.done
    assert len(group.members) == 3 and group.generation_id == 2
    assert len(rejoin.result.members) == 3
