"""The side-by-side harness's instruments (benchmarks/run.py, benchmarks/instruments.py, kbench) at
tiny scale against a real kbroker: the result shape, and that every row reports the generator's
own cost and ceiling and the broker's CPU, so a reader can see what bounded it (issue 17).

The figures come from full runs (docs/benchmarks.md); this only proves the instruments work.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from benchmarks.instruments import kbench, kbench_binary, proc_cpu_seconds, run_measured
from benchmarks.run import create_topic
from benchmarks.targets import KBrokerTarget
from tests.support.java import java_unavailable_reason

ROOT = Path(__file__).resolve().parents[2]


def _need_go() -> None:
    if shutil.which("go") is None:
        pytest.skip("no Go toolchain to build benchmarks/native/kbench (go >= 1.26)")


def test_run_measured_takes_the_child_cpu_not_its_wall_clock() -> None:
    busy = run_measured([sys.executable, "-c", "import time\nt=time.process_time()\n"
                         "while time.process_time()-t<0.3: pass"], timeout=30)
    idle = run_measured([sys.executable, "-c", "import time; time.sleep(0.5)"], timeout=30)
    assert busy.returncode == 0 and idle.returncode == 0
    assert busy.cpu_s >= 0.3  # CPU time, whatever else the machine is doing
    assert idle.wall_s >= 0.5 and idle.cpu_s < busy.cpu_s - 0.15
    assert busy.cpu_util == pytest.approx(busy.cpu_s / busy.wall_s)


def test_proc_cpu_seconds_counts_every_thread_of_a_process() -> None:
    before = proc_cpu_seconds(os.getpid())

    def spin() -> None:
        t = time.thread_time()
        while time.thread_time() - t < 0.25:
            pass

    th = threading.Thread(target=spin)
    th.start()
    th.join()
    assert proc_cpu_seconds(os.getpid()) - before >= 0.2


@pytest.mark.timeout(300)
def test_kbench_go_unit_tests_pass() -> None:
    """kbench's latency histogram (benchmarks/native/kbench/main_test.go): percentiles within one
    bucket of the exact ones; the fetch mode's batch-header walk; the sink's Fetch v12 answer. build.sh ran them when it built the binary, so this is Go's cache."""
    _need_go()
    kbench_binary()
    env = dict(os.environ, GOMODCACHE=str(ROOT / ".cache" / "kbench" / "gomod"),
               GOFLAGS="-mod=readonly -buildvcs=false", GOTOOLCHAIN="local", CGO_ENABLED="0")
    out = subprocess.run(["go", "test", "-count=1", "-v", "."], cwd=ROOT / "benchmarks" / "native" / "kbench",
                         env=env, capture_output=True, text=True, timeout=280)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "--- PASS: TestHistogramPercentilesWithinOneBucket" in out.stdout
    assert "--- PASS: TestHistogramBucketsAreContiguous" in out.stdout
    # kbench fetch's batch-header walk (P3) and the sink's Fetch answer (its ceiling).
    assert "--- PASS: TestWalkBatchesIgnoresATrailingPartialBatch" in out.stdout
    assert "--- PASS: TestSinkFetchV12ResponseDecodes" in out.stdout


@pytest.mark.interop
@pytest.mark.timeout(240)
def test_e2e_latency_is_measured_from_the_intended_send_time(tmp_path: Path) -> None:
    """The broker stops for 0.6 s in the middle of a 1,000 records/s run: every record due during
    the stall is late by up to 0.6 s, so p99 and max show it, and nothing is lost. A generator that
    timed from the actual send (coordinated omission) would see one slow record at most."""
    _need_go()
    kbench_binary()  # built (or found in .cache/kbench) before the clock matters
    broker = KBrokerTarget(cpus=None)
    broker.start(tmp_path)
    try:
        create_topic(broker.bootstrap, "stall")

        def stall() -> None:
            time.sleep(2.0)
            os.kill(broker.pid, signal.SIGSTOP)
            time.sleep(0.6)
            os.kill(broker.pid, signal.SIGCONT)

        th = threading.Thread(target=stall)
        th.start()
        r = kbench("e2e", {"bootstrap": broker.bootstrap, "topic": "stall", "rate": 1000, "seconds": 3,
                           "warmup": 1, "size": 64}, pin=False, timeout=120)
        th.join()
    finally:
        os.kill(broker.pid, signal.SIGCONT)
        broker.stop()
    assert r["sent"] == 3000 and r["lost"] == 0 and r["failed"] == 0
    assert r["p50_ms"] <= r["p99_ms"] <= r["p999_ms"] <= r["max_ms"]
    assert r["max_ms"] >= 450          # the first record due in the stall waited it out
    assert r["p99_ms"] >= 300          # ~600 records were due during it: far more than 1%
    assert r["send_lag_p99_ms"] < 300  # the generator itself kept its schedule


@pytest.mark.interop
@pytest.mark.java
@pytest.mark.timeout(300)
def test_run_py_tiny_against_kbroker_reports_generator_and_broker_cost(tmp_path: Path) -> None:
    _need_go()
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    kbench_binary()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--tiny", "--reps", "1", "--brokers", "kbroker",
         "--only", "P1,P3,P4", "--configs", "pinned,unpinned", "--skip-ceiling", "--name", "tiny",
         "--results-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=280, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "tiny.json").read_text())
    assert (tmp_path / "tiny.png").stat().st_size > 0
    assert result["configs"] == ["pinned", "unpinned"]
    assert set(result["generators"]) >= {"P1", "P3", "P4_e2e", "P4_round_trip"}
    [run] = result["runs"]["kbroker"]
    assert set(run) == {"P1_produce_1k", "P1_produce_1k_unpinned", "P3_consume_backlog",
                        "P3_consume_backlog_unpinned", "P4_e2e_1000", "P4_round_trip", "P5_rss_under_P1"}
    for row in ("P1_produce_1k", "P1_produce_1k_unpinned", "P3_consume_backlog", "P3_consume_backlog_unpinned"):
        r = run[row]
        assert r["mb_per_s"] > 0 and r["records"] == 5000
        # The generator's own cost and ceiling, and the broker's CPU, in every throughput row.
        assert 0 < r["gen_cpu_util"] and r["gen_cpu_s"] > 0
        assert r["gen_ceiling_mb_per_s"] == pytest.approx(r["mb_per_s"] / r["gen_cpu_util"])
        assert r["broker_cpu_s"] >= 0 and "broker_cpu_util" in r
    assert run["P3_consume_backlog"]["partitions"] == 4 and run["P3_consume_backlog"]["clients"] == 4
    # kbench fetch (P3's default generator) counts the whole batches served: 1 KiB values plus headers.
    assert result["p3_generator"] == "fetch" and "kbench fetch" in result["generators"]["P3"]
    assert 5000 * 1024 < run["P3_consume_backlog"]["bytes"] < 5000 * 1024 * 1.05
    assert run["P3_consume_backlog"]["fetch_version"] == 12
    assert run["P3_consume_backlog"]["broker_cpu_s_per_gib"] >= 0
    # The Fetch responses are counted, so their sizes can be compared between brokers.
    assert run["P3_consume_backlog"]["fetch_responses"] >= 4
    assert run["P3_consume_backlog"]["fetch_response_mib"] >= 5000 * 1024 / 2**20
    e2e = run["P4_e2e_1000"]
    assert e2e["sent"] == 1000 and e2e["lost"] == 0
    assert 0 < e2e["p50_ms"] <= e2e["p99_ms"] <= e2e["p999_ms"] <= e2e["max_ms"]
    assert {"send_lag_p99_ms", "send_lag_max_ms", "gen_cpu_util", "broker_cpu_s"} <= set(e2e)
    rt = run["P4_round_trip"]
    assert rt["records"] == 50 and 0 <= rt["p50_ms"] <= rt["p99_ms"] <= rt["p999_ms"] and rt["gen_cpu_s"] > 0
    # Pinned rows ran on one core each: neither the broker nor the generator can exceed it.
    assert run["P1_produce_1k"]["gen_cpu_util"] <= 1.05
    assert run["P1_produce_1k"]["broker_cpu_util"] <= 1.05
