"""The deterministic simulation of the Raft layer (tests/raft/simulation.py): thousands of seeds.

Each seed is a 3- or 5-voter quorum plus an observer under its own mix of drops, duplicates, delays,
partitions, crashes and graceful shutdowns, checked after every step. A failure names its seed;
replay it with `python -m tests.raft.simulation --seed N --voters V --trace`.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

from kbroker.raft.client import PlantedBugs
from tests.raft.simulation import SafetyViolation, run_seed

CHUNK = 100


@pytest.fixture(autouse=True)
def _quiet_raft_logs() -> None:
    logging.getLogger("kbroker.raft").setLevel(logging.ERROR)


def _run_chunk(voters: int, first: int, count: int, **kwargs: object) -> tuple[int, int, int, int]:
    steps = elections = committed = installs = 0
    for seed in range(first, first + count):
        sim = run_seed(seed, voters, **kwargs)
        steps += sim.steps
        elections += sim.elections
        committed += sim.committed_end
        installs += sim.snapshots_installed
    return steps, elections, committed, installs


# The default suite runs the first 600 three-voter and 200 five-voter seeds; the slow run sweeps on to
# 2000 and 500 (the same seeds as before the split, so a seed named in a report replays the same run).
DEFAULT_THREE, SWEEP_THREE = 600, 2000
DEFAULT_FIVE, SWEEP_FIVE = 200, 500


def _chunks(default: int, sweep: int) -> list[object]:
    return [first if first < default else pytest.param(first, marks=pytest.mark.slow)
            for first in range(0, sweep, CHUNK)]


@pytest.mark.parametrize("first", _chunks(DEFAULT_THREE, SWEEP_THREE))
def test_three_voters_and_an_observer(first: int) -> None:
    steps, elections, committed, installs = _run_chunk(3, first, CHUNK)
    # The runs did something: leaders elected, entries committed, snapshots fetched, in every chunk.
    assert elections >= CHUNK and committed > 0 and steps > 0 and installs > 0


@pytest.mark.parametrize("first", _chunks(DEFAULT_FIVE, SWEEP_FIVE))
def test_five_voters_and_an_observer(first: int) -> None:
    steps, elections, committed, installs = _run_chunk(5, first, CHUNK)
    assert elections >= CHUNK and committed > 0 and steps > 0 and installs > 0


def test_messages_round_trip_through_the_generated_codecs() -> None:
    """Every message of these seeds is encoded and decoded at the latest version on its way."""
    steps, elections, committed, _ = _run_chunk(3, 5000, 40, roundtrip=True)
    assert elections >= 40 and committed > 0


def test_on_disk_logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same runs over KafkaMetadataLog (UnifiedLog segments, epoch checkpoint, snapshot files). A crash
    here is a process crash (the files stay); fsync is skipped, as durability is what the in-memory runs model."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    installs = 0
    for seed in range(30):
        sim = run_seed(seed, 3, disk_dir=tmp_path / f"seed{seed}")
        installs += sim.snapshots_installed
        sim.close()
    assert installs > 0


def test_same_seed_same_run() -> None:
    a = run_seed(77, 5)
    b = run_seed(77, 5)
    assert (a.steps, a.messages, a.committed_end, a.leaders) == (b.steps, b.messages, b.committed_end, b.leaders)
    assert a.committed == b.committed


@pytest.mark.parametrize(("bug", "wanted", "max_seeds"), [
    # Votes granted without comparing logs elect leaders that lack committed entries.
    ("grant_vote_without_log_check", 5, 200),
    # A leader that counts a follower's fetch offset before checking it against its log (a diverged
    # follower's stale tail) commits entries a majority does not hold.
    ("count_unvalidated_fetch_offsets", 3, 600),
])
def test_planted_bugs_are_caught(bug: str, wanted: int, max_seeds: int) -> None:
    """The simulation catches each planted bug, and the very seeds that catch it pass without it."""
    caught: dict[int, str] = {}
    for seed in range(max_seeds):
        try:
            run_seed(seed, 3, planted=PlantedBugs(**{bug: True}))
        except SafetyViolation as e:
            caught[seed] = str(e)
            if len(caught) == wanted:
                break
    assert len(caught) == wanted, caught
    assert all("lacks committed" in v or "below the committed end" in v or "changed" in v
               for v in caught.values()), caught
    for seed in caught:
        run_seed(seed, 3)  # clean without the bug (raises SafetyViolation otherwise)


@pytest.mark.slow
def test_a_million_steps() -> None:
    total = 0
    seed = 100_000
    t0 = time.perf_counter()
    while total < 1_000_000:
        for voters in (3, 5):
            total += run_seed(seed, voters).steps
        seed += 1
    print(f"{total} steps over {2 * (seed - 100_000)} seeds in {time.perf_counter() - t0:.0f}s")
