"""The cost of metrics: benchmark rows P1 and P2 against kbroker with metrics off and on, back to back.

    .venv/bin/python benchmarks/bench_metrics.py [--reps 3] [--quick] [--only P1,P2]

Each repetition starts a fresh broker per setting, alternating off/on then on/off (drift cancels), and
runs the rows exactly as benchmarks/run.py does (same load tool, same pinning: broker on core 0,
kafka-producer-perf-test on core 1). "off" is `kbroker.metrics.enable=false` (nothing recorded, no
HTTP listener); "on" records every metric and serves /metrics on `kbroker.metrics.listener`, scraped
once a second during the run (harsher than Prometheus' default 15 s interval). The table gives the
medians and the relative cost, (off - on) / off, of each throughput figure.

Results: benchmarks/results/metrics-cost.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.run import RESULTS, run_one  # noqa: E402
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="small counts: a smoke run, not figures")
    ap.add_argument("--only", default="P1,P2")
    a = ap.parse_args()
    scale = {"p1": 100_000, "p2": 200_000} if a.quick else {"p1": 1_000_000, "p2": 2_000_000}
    only = set(a.only.split(","))
    runs: dict[str, list[dict[str, dict[str, float]]]] = {"off": [], "on": []}
    scrapes = 0
    for rep in range(a.reps):
        order = ["off", "on"] if rep % 2 == 0 else ["on", "off"]
        for setting in order:
            print(f"rep {rep + 1}/{a.reps}: metrics {setting}", file=sys.stderr, flush=True)
            if setting == "off":
                target = KBrokerTarget({"kbroker.metrics.enable": "false"})
                runs["off"].append(run_one(target, scale, only, False))
                continue
            port = free_port()
            target = KBrokerTarget({"kbroker.metrics.enable": "true",
                                    "kbroker.metrics.listener": f"http://127.0.0.1:{port}"})
            with Scraper(f"http://127.0.0.1:{port}/metrics") as scraper:
                runs["on"].append(run_one(target, scale, only, False))
            scrapes += scraper.scrapes
    table: dict[str, dict[str, float]] = {}
    print(f"{'row':18} {'figure':16} {'off median (min..max)':>30} {'on median (min..max)':>30} {'cost':>7}")
    for row in ("P1_produce_1k", "P2_produce_100b"):
        for fig in ("mb_per_s", "records_per_s"):
            off = [r[row][fig] for r in runs["off"] if row in r]
            on = [r[row][fig] for r in runs["on"] if row in r]
            if not off or not on:
                continue
            m_off, m_on = statistics.median(off), statistics.median(on)
            cost = (m_off - m_on) / m_off
            table[f"{row}.{fig}"] = {"off_median": m_off, "on_median": m_on, "cost": cost,
                                     "off_min": min(off), "off_max": max(off), "on_min": min(on), "on_max": max(on)}
            print(f"{row:18} {fig:16} {m_off:14,.1f} ({min(off):,.0f}..{max(off):,.0f}) "
                  f"{m_on:14,.1f} ({min(on):,.0f}..{max(on):,.0f}) {cost:7.2%}")
    print(f"scrapes of /metrics during the 'on' runs: {scrapes}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "metrics-cost.json"
    out.write_text(json.dumps({"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "scale": scale,
                               "reps": a.reps, "scrapes": scrapes, "table": table, "runs": runs}, indent=2))
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
