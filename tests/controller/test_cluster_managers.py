"""BrokerHeartbeatManager's state table and sessions, and StripedReplicaPlacer's placement, on a fake clock.

The heartbeat table is Kafka's `calculateNextBrokerState`, row by row; sessions expire after
`broker.session.timeout.ms` counted from the last heartbeat, least recently heard first. The placer's
properties are Kafka's: the first replica is unfenced, replicas of a partition spread over distinct
racks when there are enough, leaders spread evenly, fenced brokers only fill what unfenced ones cannot.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from kbroker.controller.broker_heartbeat_manager import (
    BrokerControlState,
    BrokerHeartbeatManager,
    HeartbeatRequest,
)
from kbroker.controller.replica_placer import (
    InvalidReplicationFactorError,
    StripedReplicaPlacer,
    UsableBroker,
)
from tests.controller.quorum_fakes import FakeClock

S = BrokerControlState

# current state, metadata offset reported (registration at 100), want_fence, want_shut_down,
# has leaderships, lowest active offset above the shutdown offset -> next state
TABLE = [
    (S.FENCED, 99, False, False, False, True, S.FENCED),  # not caught up
    (S.FENCED, 100, False, False, False, True, S.UNFENCED),  # caught up to its registration
    (S.FENCED, 100, True, False, False, True, S.FENCED),  # wants to stay fenced
    (S.FENCED, 50, False, True, True, True, S.SHUTDOWN_NOW),  # fenced: shut down at once
    (S.UNFENCED, 200, False, False, True, True, S.UNFENCED),
    (S.UNFENCED, 200, True, False, True, True, S.FENCED),
    (S.UNFENCED, 200, True, True, True, True, S.SHUTDOWN_NOW),
    (S.UNFENCED, 200, False, True, True, True, S.CONTROLLED_SHUTDOWN),  # leads partitions: move them first
    (S.UNFENCED, 200, False, True, False, True, S.SHUTDOWN_NOW),  # leads nothing
    (S.CONTROLLED_SHUTDOWN, 200, False, True, True, True, S.CONTROLLED_SHUTDOWN),
    (S.CONTROLLED_SHUTDOWN, 200, False, True, False, False, S.CONTROLLED_SHUTDOWN),  # others lag behind
    (S.CONTROLLED_SHUTDOWN, 200, False, True, False, True, S.SHUTDOWN_NOW),
]


@pytest.mark.parametrize(("current", "offset", "want_fence", "want_shut_down", "leads", "others_caught_up",
                          "expected"), TABLE)
def test_next_broker_state(current: S, offset: int, want_fence: bool, want_shut_down: bool, leads: bool,
                           others_caught_up: bool, expected: S) -> None:
    clock = FakeClock()
    m = BrokerHeartbeatManager(clock, 9000)
    m.register(1, fenced=current is S.FENCED)
    m.register(2, fenced=False)
    m.touch(2, False, 300 if others_caught_up else 150)  # another active broker's metadata offset
    if current is S.CONTROLLED_SHUTDOWN:
        m.maybe_update_controlled_shutdown_offset(1, 250)
    assert m.current_broker_state(1) is current
    states = m.calculate_next_broker_state(1, HeartbeatRequest(offset, want_fence, want_shut_down), 100, leads)
    assert (states.current, states.next) == (current, expected)


def test_sessions_expire_least_recently_heard_first_and_fenced_brokers_never_expire() -> None:
    clock = FakeClock()
    m = BrokerHeartbeatManager(clock, 9000)
    m.register(1, fenced=False)
    clock.advance(1000)
    m.register(2, fenced=False)
    m.register(3, fenced=True)
    assert m.next_check_time_ms() == clock() - 1000 + 9000
    clock.advance(8000)
    assert m.find_one_stale_broker() is None  # 9000 ms exactly is still valid
    clock.advance(1)
    assert m.find_one_stale_broker() == 1
    m.fence(1)
    assert m.find_one_stale_broker() is None
    clock.advance(1000)
    assert m.find_one_stale_broker() == 2
    m.touch(2, False, 10)
    assert m.find_one_stale_broker() is None and m.has_valid_session(2) and not m.has_valid_session(3)


def test_lowest_active_offset_ignores_fenced_and_shutting_down_brokers() -> None:
    m = BrokerHeartbeatManager(FakeClock(), 9000)
    for b, offset in ((1, 10), (2, 20), (3, 5)):
        m.register(b, fenced=False)
        m.touch(b, False, offset)
    m.maybe_update_controlled_shutdown_offset(3, 30)
    assert m.lowest_active_offset() == 10
    m.fence(1)
    assert m.lowest_active_offset() == 20
    with pytest.raises(RuntimeError):
        m.maybe_update_controlled_shutdown_offset(1, 40)


# -- placement -------------------------------------------------------------------------------------


def _brokers(racks: dict[int, str | None], fenced: set[int] = frozenset()) -> list[UsableBroker]:  # type: ignore[assignment]
    return [UsableBroker(b, r, b in fenced) for b, r in sorted(racks.items())]


@pytest.mark.parametrize("seed", range(20))
def test_replicas_span_racks_and_leaders_spread(seed: int) -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    placed = StripedReplicaPlacer(random.Random(seed)).place(60, 3, _brokers(racks))
    for replicas in placed:
        assert len(set(replicas)) == 3 and {racks[r] for r in replicas} == {"a", "b", "c"}
    leaders = Counter(r[0] for r in placed)
    assert set(leaders.values()) == {10}  # 60 partitions, 6 brokers: 10 leaders each


def test_fenced_brokers_never_lead_but_fill_replicas() -> None:
    racks: dict[int, str | None] = {1: None, 2: None, 3: None}
    placed = StripedReplicaPlacer(random.Random(1)).place(12, 3, _brokers(racks, fenced={3}))
    assert all(r[0] != 3 for r in placed)
    assert all(sorted(r) == [1, 2, 3] for r in placed)


@pytest.mark.parametrize(("brokers", "rf", "message"), [
    (_brokers({1: None, 2: None}), 3, "The target replication factor of 3 cannot be reached because only 2 "
                                      "broker(s) are registered or some brokers have all their log directories "
                                      "cordoned."),
    (_brokers({1: None}, fenced={1}), 1, "All brokers are currently fenced, or have all their log directories "
                                         "cordoned."),
    (_brokers({1: None}), 0, "Invalid replication factor 0: the replication factor must be positive."),
])
def test_placement_errors_are_kafkas(brokers: list[UsableBroker], rf: int, message: str) -> None:
    with pytest.raises(InvalidReplicationFactorError) as e:
        StripedReplicaPlacer(random.Random(0)).place(1, rf, brokers)
    assert str(e.value) == message
