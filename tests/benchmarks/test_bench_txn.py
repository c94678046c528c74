"""benchmarks/run.py row P8 (issue 14): `kbench txn`, a franz-go transactional producer, at tiny scale
against a real kbroker. The row must be transactions version 2 from the first transaction on (the
finalized `transaction.version` in ApiVersions is 2, no AddPartitionsToTxn request, one epoch bump per
EndTxn), and carry the generator's and the broker's CPU so a reader sees what bounded it.

The first-transaction check is what found kbroker answering an unknown ApiVersions version with its
whole table (Kafka 4.3.1 lists only ApiVersions' range): franz-go kept that v0 table, which has no
finalized features, and ran its first transaction on version 1.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.instruments import kbench_binary

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.interop
@pytest.mark.timeout(240)
def test_p8_runs_transactions_v2_and_reports_its_cost(tmp_path: Path) -> None:
    if shutil.which("go") is None:
        pytest.skip("no Go toolchain to build benchmarks/native/kbench (go >= 1.26)")
    kbench_binary()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--tiny", "--reps", "1", "--brokers", "kbroker",
         "--only", "P8", "--configs", "pinned", "--skip-ceiling", "--name", "tiny",
         "--results-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=220, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "tiny.json").read_text())
    assert "P8" in result["generators"] and (tmp_path / "tiny.png").stat().st_size > 0
    [run] = result["runs"]["kbroker"]
    assert set(run) == {"P8_txn_produce_100", "P8_txn_produce_1000"}
    for per_txn in (100, 1000):
        row = run[f"P8_txn_produce_{per_txn}"]
        assert row["records"] == 1000 and row["transactions"] == 1000 // per_txn
        assert row["finalized_transaction_version"] == 2
        assert row["add_partitions_requests"] == 0
        assert row["producer_epoch"] == row["transactions"] + 1  # the warm-up transaction too
        assert row["end_txn_requests"] == row["transactions"] + 1
        assert row["records_per_s"] > 0 and row["commit_p50_ms"] <= row["commit_p99_ms"]
        assert row["gen_cpu_util"] > 0, row
        # The broker's CPU is read in clock ticks (10 ms) from /proc: at this tiny scale it can use
        # less than one tick (CI saw 0.0), so only its presence and sign are checked here.
        for key in ("broker_cpu_util", "broker_cpu_us_per_record"):
            assert row[key] >= 0, (key, row)
