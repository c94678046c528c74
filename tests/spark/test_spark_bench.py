"""benchmarks/bench_spark.py still runs, on local[2] and on the 2-worker standalone cluster (slow: a small
load, two spark-submits and a cluster start). The figure itself (1,000,000 x 1 KiB) is run by hand; see
docs/spark.md."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.broker import REPO_ROOT


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_bench_spark_both_masters(spark_ready: None) -> None:
    proc = subprocess.run(
        [sys.executable, "benchmarks/bench_spark.py", "--target", "kbroker", "--records", "30000", "--size", "256",
         "--masters", "local[2],standalone"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [r["master"] for r in results] == ["local[2]", "standalone"]
    for r in results:
        assert r["records"] == 30000 and r["bytes"] == 30000 * 256
        assert r["tasks"] >= 3 and r["executor_cpu_s"] > 0 and r["records_per_s"] > 0
