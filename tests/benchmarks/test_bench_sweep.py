"""The scaling sweep (benchmarks/bench_sweep.py, issue 17) at its smallest: the instruments work and
every point carries what a reader needs to judge it (throughput, p99, RSS, the generator's cost and
ceiling, the broker's CPU, the bound). One point runs against both brokers; the figures come from the
full run in docs/benchmarks.md.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.bench_sweep import bound, evict, parse_points, resident_bytes, summarize
from benchmarks.instruments import kbench_binary
from tests.support.java import java_unavailable_reason

ROOT = Path(__file__).resolve().parents[2]


def _need_go() -> None:
    if shutil.which("go") is None:
        pytest.skip("no Go toolchain to build benchmarks/native/kbench (go >= 1.26)")


def _sweep(tmp_path: Path, *args: str, timeout: float) -> dict[str, object]:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_sweep.py"), "--quick", "--name", "t",
                           "--results-dir", str(tmp_path), *args],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (tmp_path / "t.png").stat().st_size > 0
    assert "bound / notes" in proc.stdout  # the table is printed
    result: dict[str, object] = json.loads((tmp_path / "t.json").read_text())
    assert "load average" in str(result["uptime_before"]) and "load average" in str(result["uptime_after"])
    return result


def _check_instruments(r: dict[str, float | str]) -> None:
    assert float(r["mb_per_s"]) > 0 and float(r["records_per_s"]) > 0
    assert 0 < float(r["gen_cpu_util"]) <= 1.05  # pinned to its core
    assert float(r["gen_ceiling_mb_per_s"]) == pytest.approx(float(r["mb_per_s"]) / float(r["gen_cpu_util"]))
    assert float(r["broker_cpu_s"]) > 0 and 0 <= float(r["broker_core_busy"]) <= 1
    assert float(r["peak_rss_mib"]) > 20
    assert r["bound"]


def test_eviction_empties_the_page_cache_of_a_file(tmp_path: Path) -> None:
    f = tmp_path / "00000000000000000000.log"
    f.write_bytes(os.urandom(8 << 20))
    assert resident_bytes([f]) > 0  # just written: cached
    evict([f])
    assert resident_bytes([f]) < (1 << 20)
    f.read_bytes()
    assert resident_bytes([f]) >= 7 << 20


def test_bound_names_the_saturated_resource() -> None:
    assert bound({"gen_cpu_util": 0.95, "broker_cpu_util": 0.95}) == "generator CPU"
    assert bound({"gen_cpu_util": 0.3, "broker_cpu_util": 0.9}) == "broker CPU"
    assert bound({"gen_cpu_util": 0.3, "broker_cpu_util": 0.2, "mb_per_s": 500,
                  "disk_ceiling_mb_per_s": 550}) == "disk"
    assert bound({"gen_cpu_util": 0.1, "broker_cpu_util": 0.2, "offered_records_per_s": 100,
                  "records_per_s": 99.0, "p99_latency_ms": 20.0}) == "offered rate (open loop)"
    # Every record acknowledged in the end, but seconds late: the broker fell behind.
    assert "core full" in bound({"gen_cpu_util": 0.1, "broker_cpu_util": 0.2, "offered_records_per_s": 100,
                                 "records_per_s": 100.0, "p99_latency_ms": 5000.0, "broker_core_busy": 1.0})
    assert "shared machine" in bound({"gen_cpu_util": 0.1, "broker_cpu_util": 0.3, "broker_core_busy": 0.99})


def test_summary_takes_medians_and_the_ratio() -> None:
    runs = {"partitions": {"10": {"kbroker": [{"mb_per_s": 10.0, "gen_cpu_util": 0.9}, {"mb_per_s": 30.0},
                                              {"mb_per_s": 20.0}],
                                  "kafka": [{"mb_per_s": 40.0, "broker_cpu_util": 0.9}]}}}
    row = summarize(runs)["partitions"]["10"]  # type: ignore[arg-type]
    assert row["kbroker"]["mb_per_s"] == 20.0 and row["kafka"]["mb_per_s"] == 40.0
    assert row["ratio_kbroker_over_kafka"]["mb_per_s"] == 0.5
    assert row["kbroker"]["bound"] == "generator CPU" and row["kafka"]["bound"] == "broker CPU"


def test_points_default_to_the_issue_and_can_be_chosen() -> None:
    assert parse_points([], ["partitions", "backlog"], quick=False) == {
        "partitions": [10, 100, 1000, 10000], "backlog": [1, 4, 20]}
    assert parse_points(["backlog=0.5,2"], ["backlog"], quick=False) == {"backlog": [0.5, 2.0]}
    with pytest.raises(SystemExit):
        parse_points(["bogus=1"], ["partitions"], quick=True)


@pytest.mark.interop
@pytest.mark.timeout(420)
def test_sweep_quick_against_kbroker_every_dimension(tmp_path: Path) -> None:
    """The smallest point of each dimension against kbroker: the creation timing, the fleet's
    sockets, a 1 MiB record under message.max.bytes=4 MiB, a cold backlog that was evicted."""
    _need_go()
    kbench_binary()
    result = _sweep(tmp_path, "--brokers", "kbroker", "--points", "partitions=10", "--points", "connections=10",
                    "--points", "record_size=1048576", "--points", "backlog=0.02", "--produce-inflight", "3",
                    timeout=400)
    runs = result["runs"]
    assert isinstance(runs, dict)
    part = runs["partitions"]["10"]["kbroker"][0]
    _check_instruments(part)
    assert part["partitions"] == 10 and 0 < part["create_s"] <= part["ready_s"]
    # --produce-inflight reached the client (franz-go's default is one Produce request in flight).
    assert part["inflight"] == 3 and result["scale"]["produce_inflight"] == 3  # type: ignore[index]
    assert float(part["p99_latency_ms"]) > 0
    fleet = runs["connections"]["10"]["kbroker"][0]
    _check_instruments(fleet)
    assert fleet["clients"] == 10 and fleet["failed"] == 0
    assert fleet["offered_records_per_s"] == 100 and fleet["records"] >= 0.9 * 100 * 2  # 2 measured seconds
    assert 0 < fleet["p50_latency_ms"] <= fleet["p99_latency_ms"] <= fleet["max_latency_ms"]
    assert fleet["broker_sockets"] >= 10  # one connection per client at least
    # Every client connected and had a record acknowledged before the schedule (fleet.go), 25 at a time.
    assert fleet["connect_concurrency"] == 25 and fleet["connect_s"] > 0
    assert fleet["listen_overflows"] >= 0
    big = runs["record_size"]["1048576"]["kbroker"][0]
    _check_instruments(big)
    assert big["record_size"] == 1048576 and big["records"] == 64
    cold = runs["backlog"]["0.02"]["kbroker"][0]
    _check_instruments(cold)
    assert cold["bytes"] == (int(0.02 * 2**30) // 16384) * 16384
    assert cold["cache_resident_mib"] < 1  # evicted before the consume
    assert cold["segment_mib"] >= 0.02 * 1024 and cold["disk_ceiling_mb_per_s"] > 0
    assert cold["restart_s"] > 0 and cold["time_to_first_record_s"] >= 0


@pytest.mark.interop
@pytest.mark.java
@pytest.mark.timeout(300)
def test_sweep_quick_one_point_both_brokers(tmp_path: Path) -> None:
    """One short point against kbroker and the reference Kafka 4.3.1 in the same run: both measured,
    the ratio computed, the chart drawn."""
    _need_go()
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    kbench_binary()
    result = _sweep(tmp_path, "--dims", "connections", "--points", "connections=10", timeout=280)
    table = result["table"]
    assert isinstance(table, dict)
    row = table["connections"]["10"]
    for name in ("kbroker", "kafka"):
        _check_instruments(row[name])
        assert row[name]["failed"] == 0 and row[name]["broker_sockets"] >= 10
    ratio = row["ratio_kbroker_over_kafka"]
    assert ratio["peak_rss_mib"] == pytest.approx(row["kbroker"]["peak_rss_mib"] / row["kafka"]["peak_rss_mib"])
    assert set(ratio) >= {"mb_per_s", "p99_latency_ms", "peak_rss_mib", "broker_cpu_util"}
