"""Smoke test of benchmarks/bench_rebalance.py (with benchmarks/groups_load.py) against kbroker only.

It runs the benchmark end to end as a user would, at the smallest scale (one round, one 4th-member
join per assignor, no initial rebalance delay), and checks that every figure was measured by the
clients and cross-checked by the broker's view. It proves the harness works, not how fast kbroker is:
the side-by-side figures come from a full run (docs/benchmarks.md, "Rebalance latency").
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.bench_rebalance import summarize
from benchmarks.groups_load import balanced

ROOT = Path(__file__).resolve().parents[2]
METRICS = {"first_join_ms", "first_join_broker_ms", "join_ms", "join_broker_ms", "leave_ms", "leave_broker_ms"}


def test_balanced_needs_every_partition_once_and_even_sizes() -> None:
    assert balanced([{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9, 10, 11}], 12)
    assert balanced([{0, 1, 2}, {3, 4, 5}, {6, 7}, {8, 9}, {10, 11}], 12)  # 12 over 5 members
    assert not balanced([{0, 1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10, 11}], 12)  # sizes 5 and 3
    assert not balanced([{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, set()], 12)  # the 4th has nothing yet
    assert not balanced([{0, 1, 2}, {2, 3, 4}, {5, 6, 7, 8, 9, 10, 11}], 12)  # partition 2 owned twice
    assert not balanced([{0, 1}, {2, 3}], 12)
    assert not balanced([], 12)


def test_summarize_pools_rounds_and_divides_medians() -> None:
    runs = {"kbroker": [{"range": {"join_ms": [100.0, 300.0]}}, {"range": {"join_ms": [200.0]}}],
            "kafka": [{"range": {"join_ms": [400.0]}}]}
    row = summarize(runs)["range"]["join_ms"]
    assert (row["kbroker_p50"], row["kbroker_min"], row["kbroker_max"], row["kbroker_n"]) == (200.0, 100.0, 300.0, 3)
    assert row["ratio"] == pytest.approx(0.5)


@pytest.mark.interop
@pytest.mark.timeout(90)
def test_bench_rebalance_runs_against_kbroker(tmp_path: Path) -> None:
    out = tmp_path / "rebalance.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_rebalance.py"), "--brokers", "kbroker",
         "--initial-delays", "0", "--rounds", "1", "--iterations", "1", "--first-joins", "1",
         "--out", str(out)],
        capture_output=True, text=True, timeout=80, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())["runs"]["classic"]
    by_delay = result["by_initial_delay_ms"]["0"]
    assert by_delay["broker_overrides"] == {"group.initial.rebalance.delay.ms": "0"}
    assert result["clients"]["heartbeat.interval.ms"] == 250
    table = by_delay["table"]
    assert set(table) == {"range", "cooperative-sticky"}
    for assignor, metrics in table.items():
        assert set(metrics) == METRICS, assignor
        for metric, row in metrics.items():
            assert row["kbroker_n"] == 1, (assignor, metric)
            # Positive and well under the phase timeout: a rebalance on loopback takes at most seconds.
            assert 0 < row["kbroker_p50"] < 30_000, (assignor, metric, row)
            assert "kafka_p50" not in row and "ratio" not in row
    assert "group.initial.rebalance.delay.ms=0" in proc.stdout


@pytest.mark.interop
@pytest.mark.timeout(90)
def test_bench_rebalance_consumer_protocol_against_kbroker(tmp_path: Path) -> None:
    """The KIP-848 variant: the broker gets the heartbeat interval, the assignor is the broker's."""
    out = tmp_path / "rebalance.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_rebalance.py"), "--brokers", "kbroker",
         "--group-protocol", "consumer", "--assignors", "uniform", "--initial-delays", "0", "--rounds", "1",
         "--iterations", "1", "--first-joins", "1", "--out", str(out)],
        capture_output=True, text=True, timeout=80, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())["runs"]["consumer"]
    by_delay = result["by_initial_delay_ms"]["0"]
    assert by_delay["broker_overrides"]["group.consumer.heartbeat.interval.ms"] == "250"
    assert result["clients"]["heartbeat.interval.ms"] is None  # KIP-848: the broker decides it
    metrics = by_delay["table"]["uniform"]
    assert set(metrics) == METRICS
    assert all(row["kbroker_n"] == 1 and 0 < row["kbroker_p50"] < 30_000 for row in metrics.values()), metrics
