"""Smoke test of benchmarks/bench_group_consume.py against kbroker only, at a small scale.

It runs Kafka's producer and consumer perf tools end to end through a consumer group as the
benchmark does and checks every figure was parsed; the side-by-side figures come from a full run
(docs/benchmarks.md, "Consuming through a group").
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.bench_group_consume import METRICS, summarize
from tests.support.java import java_unavailable_reason

ROOT = Path(__file__).resolve().parents[2]


def test_summarize_takes_medians_and_divides_them() -> None:
    runs = {"kbroker": [dict.fromkeys(METRICS, 10.0), dict.fromkeys(METRICS, 30.0), dict.fromkeys(METRICS, 20.0)],
            "kafka": [dict.fromkeys(METRICS, 40.0)]}
    row = summarize(runs)["MB.sec"]
    assert (row["kbroker_p50"], row["kbroker_min"], row["kbroker_max"]) == (20.0, 10.0, 30.0)
    assert row["ratio"] == pytest.approx(0.5)


@pytest.mark.interop
@pytest.mark.java
@pytest.mark.timeout(150)
def test_bench_group_consume_runs_against_kbroker(tmp_path: Path) -> None:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    out = tmp_path / "group_consume.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_group_consume.py"), "--brokers", "kbroker",
         "--rounds", "1", "--records", "20000", "--consumers", "1", "--initial-delay", "0", "--out", str(out)],
        capture_output=True, text=True, timeout=140, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["conditions"]["initial_delay_ms"] == 0
    [run] = result["runs"]["kbroker"]
    assert set(run) == set(METRICS)
    assert run["MB.sec"] > 0 and run["fetch.MB.sec"] > 0 and run["fetch.nMsg.sec"] > 0
    assert 0 <= run["rebalance.time.ms"] < 60_000
    assert "ratio" not in result["summary"]["MB.sec"]
