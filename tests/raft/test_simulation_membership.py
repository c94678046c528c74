"""The deterministic simulation with KIP-853 membership changes under faults.

A kraft.version 1 quorum of 3 (or 5) voters and 2 observers; every ~300 ms of simulated time (1 s at
Kafka's default timeouts) an operator sends AddRaftVoter (a node that is not a voter) or
RemoveRaftVoter (a voter, down to one) to a node that believes it leads, while nodes crash, restart,
resign and are partitioned and messages are dropped, delayed and duplicated. On every step
(tests/raft/simulation.py): at most one leader per epoch, committed entries never lost or changed,
every listener applies exactly the committed prefix, each committed VotersRecord changes the set by
one voter, and every leader was granted by a majority of its own (latest) voter set. After each
healthy stretch there is a leader, new commits, and every node caught up.

Snapshots are off in these runs: the simulation's snapshots are digests, not Kafka snapshots, so they
cannot carry the voter set in their header as real ones do (kbroker/server/kraft_controller.py).
"""

from __future__ import annotations

import logging

import pytest

from tests.raft.simulation import run_seed


@pytest.fixture(autouse=True)
def _quiet_raft_logs() -> None:
    logging.getLogger("kbroker.raft").setLevel(logging.ERROR)


@pytest.mark.parametrize(("voters", "seeds"), [
    (3, 30), (5, 10),
    pytest.param(3, 1500, marks=pytest.mark.slow), pytest.param(5, 500, marks=pytest.mark.slow),
])
def test_membership_changes_under_faults(voters: int, seeds: int) -> None:
    results: dict[str, int] = {}
    changes = 0
    for seed in range(seeds):
        sim = run_seed(seed, voters, observers=2, membership=True)
        for k, v in sim.admin_results.items():
            results[k] = results.get(k, 0) + v
        changes += len(sim.committed_voter_sets) - 1
    # The operations did happen and most were applied (the rest: REQUEST_TIMED_OUT / NOT_LEADER_OR_FOLLOWER
    # under faults, as Kafka answers them).
    assert results.get("add:0", 0) >= seeds // 3 and results.get("remove:0", 0) >= seeds // 3, results
    assert changes >= seeds, changes
