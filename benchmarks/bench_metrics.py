"""The cost of metrics: benchmark rows P1 and P2 against kbroker with metrics off and on, back to back.

    .venv/bin/python benchmarks/bench_metrics.py [--reps 3] [--quick] [--only P1,P2]

Each repetition starts a fresh broker per setting, alternating off/on then on/off (drift cancels), and
runs the rows exactly as benchmarks/run.py does (same load tool, same pinning: broker on core 0,
kafka-producer-perf-test on core 1). "off" is `kbroker.metrics.enable=false` (nothing recorded, no
HTTP listener); "on" records every metric and serves /metrics on `kbroker.metrics.listener`, scraped
every `--scrape-interval` seconds during the run (default 15, Prometheus' default; one scrape costs the
broker about 9 ms of CPU with a dozen APIs in use, so 1 s scrapes alone cost about 1% of a core). The table gives the
medians and the relative cost of each figure: throughput ((off - on) / off), and the broker's CPU time
per record ((on - off) / off; user + system time of the broker process over the row, all threads),
which a machine shared with other jobs disturbs far less than throughput.

Results: benchmarks/results/metrics-cost.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.run import RESULTS, create_topic, producer_perf  # noqa: E402
from benchmarks.targets import KBrokerTarget, free_port  # noqa: E402


class Scraper:
    """GETs a URL every `interval` seconds while the load runs (what Prometheus would do)."""

    def __init__(self, url: str, interval: float = 1.0) -> None:
        self.url, self.interval = url, interval
        self.scrapes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                with urllib.request.urlopen(self.url, timeout=5) as resp:
                    resp.read()
                self.scrapes += 1
            except OSError:
                pass  # the broker is not up yet, or already stopped

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


ROWS = {
    # row: (topic, records at full scale, record size, producer props) -- benchmarks/run.py's P1 and P2.
    "P1_produce_1k": ("p1", 1_000_000, 1024, {"batch.size": "131072", "linger.ms": "5", "acks": "1"}),
    "P2_produce_100b": ("p2", 2_000_000, 100, {"batch.size": "16384", "linger.ms": "0", "acks": "1"}),
}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, all its threads (from /proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def produce_requests(url: str | None) -> float:
    """Produce requests the broker has counted so far (metrics on only)."""
    if url is None:
        return float("nan")
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith('kafka_network_requestmetrics_requests_total{request="Produce"'))


def run_rows(target: KBrokerTarget, rows: list[str], scale: float, url: str | None) -> dict[str, dict[str, float]]:
    """Each row on a fresh topic of one fresh broker: throughput, and the broker's CPU time per record."""
    res: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as d:
        target.start(Path(d))
        try:
            for row in rows:
                topic, records, size, props = ROWS[row]
                n = max(1000, int(records * scale))
                create_topic(target.bootstrap, topic)
                cpu0, req0 = cpu_seconds(target.pid), produce_requests(url)
                r = producer_perf(target.bootstrap, topic, n, size, props)
                cpu1, req1 = cpu_seconds(target.pid), produce_requests(url)
                r["broker_cpu_s"] = cpu1 - cpu0
                r["broker_cpu_us_per_record"] = (cpu1 - cpu0) / r["records"] * 1e6
                if url is not None:
                    r["produce_requests"] = req1 - req0
                res[row] = r
        finally:
            target.stop()
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="a tenth of the records: a smoke run, not figures")
    ap.add_argument("--only", default="P1,P2")
    ap.add_argument("--scrape-interval", type=float, default=15.0,
                    help="seconds between scrapes of /metrics in the 'on' runs (Prometheus' default: 15)")
    a = ap.parse_args()
    scale = 0.1 if a.quick else 1.0
    rows = [r for r in ROWS if r.split("_", 1)[0] in a.only.split(",")]
    runs: dict[str, list[dict[str, dict[str, float]]]] = {"off": [], "on": []}
    scrapes = 0
    for rep in range(a.reps):
        order = ["off", "on"] if rep % 2 == 0 else ["on", "off"]
        for setting in order:
            print(f"rep {rep + 1}/{a.reps}: metrics {setting}", file=sys.stderr, flush=True)
            if setting == "off":
                target = KBrokerTarget({"kbroker.metrics.enable": "false"})
                runs["off"].append(run_rows(target, rows, scale, None))
                continue
            port = free_port()
            url = f"http://127.0.0.1:{port}/metrics"
            target = KBrokerTarget({"kbroker.metrics.enable": "true",
                                    "kbroker.metrics.listener": f"http://127.0.0.1:{port}"})
            with Scraper(url, a.scrape_interval) as scraper:
                runs["on"].append(run_rows(target, rows, scale, url))
            scrapes += scraper.scrapes
    table: dict[str, dict[str, float]] = {}
    print(f"{'row':16} {'figure':25} {'off median (min..max)':>28} {'on median (min..max)':>28} {'cost':>7}")
    for row in rows:
        for fig, higher_is_better in (("mb_per_s", True), ("records_per_s", True),
                                      ("broker_cpu_us_per_record", False)):
            off = [r[row][fig] for r in runs["off"]]
            on = [r[row][fig] for r in runs["on"]]
            m_off, m_on = statistics.median(off), statistics.median(on)
            cost = (m_off - m_on) / m_off if higher_is_better else (m_on - m_off) / m_off
            table[f"{row}.{fig}"] = {"off_median": m_off, "on_median": m_on, "cost": cost,
                                     "off_min": min(off), "off_max": max(off), "on_min": min(on), "on_max": max(on)}
            print(f"{row:16} {fig:25} {m_off:12,.2f} ({min(off):,.2f}..{max(off):,.2f}) "
                  f"{m_on:12,.2f} ({min(on):,.2f}..{max(on):,.2f}) {cost:7.2%}")
        reqs = statistics.median(r[row]["produce_requests"] for r in runs["on"])
        recs = statistics.median(r[row]["records"] for r in runs["on"])
        print(f"{row:16} Produce requests (on): {reqs:,.0f} for {recs:,.0f} records")
    print(f"scrapes of /metrics during the 'on' runs: {scrapes} (every {a.scrape_interval:g} s)")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "metrics-cost.json"
    out.write_text(json.dumps({"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "scale": scale,
                               "reps": a.reps, "scrapes": scrapes, "scrape_interval_s": a.scrape_interval,
                               "table": table, "runs": runs}, indent=2))
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
