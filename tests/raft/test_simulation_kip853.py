"""The deterministic simulation with a kraft.version 1 quorum (KIP-853 ReplicaKeys) and wiped disks.

Voters are ReplicaKeys (id + directory id). A fault is added: a crashed voter may come back on a wiped,
re-formatted disk (empty log and quorum-state, a new directory id; at most one voter per run). Raft
assumes durable votes and logs, so such a voter must neither vote as the old one (it forgot its vote
and its log) nor be counted for the high watermark: Kafka's ReplicaKey checks (INVALID_VOTER_KEY,
INCONSISTENT_VOTER_SET, a fetch from another directory counted as an observer's) keep it out until an
operator removes and re-adds it. Every safety check of tests/raft/simulation.py holds on every step.

The planted bug `ignore_directory_ids` drops those checks: the wiped voter votes again in an epoch it
already voted in, with an empty log, and the simulation catches leaders that lack committed entries.
"""

from __future__ import annotations

import logging

import pytest

from kbroker.raft.client import PlantedBugs
from tests.raft.simulation import SafetyViolation, run_seed

DISK_LOSS = 0.5


@pytest.fixture(autouse=True)
def _quiet_raft_logs() -> None:
    logging.getLogger("kbroker.raft").setLevel(logging.ERROR)


@pytest.mark.parametrize(("voters", "seeds"), [
    (3, 300), (5, 100),
    pytest.param(3, 3000, marks=pytest.mark.slow), pytest.param(5, 1000, marks=pytest.mark.slow),
])
def test_kraft_v1_quorum_survives_wiped_disks(voters: int, seeds: int) -> None:
    wiped = 0
    for seed in range(seeds):
        sim = run_seed(seed, voters, kraft_version=1, disk_loss=DISK_LOSS)
        wiped += any(n.wiped for n in sim.nodes.values())
    assert wiped > seeds // 2, wiped  # the fault did happen, in most runs


def test_planted_ignore_directory_ids_is_caught() -> None:
    caught: dict[int, str] = {}
    for seed in range(400):
        try:
            run_seed(seed, 3, kraft_version=1, disk_loss=DISK_LOSS, planted=PlantedBugs(ignore_directory_ids=True))
        except SafetyViolation as e:
            caught[seed] = str(e)
            if len(caught) == 3:
                break
    assert len(caught) == 3, caught
    assert all("lacks committed" in v or "below the committed end" in v or "changed" in v or "two leaders" in v
               for v in caught.values()), caught
    for seed in caught:
        run_seed(seed, 3, kraft_version=1, disk_loss=DISK_LOSS)  # clean with the checks
