"""Side by side: the same load against kbroker and against Apache Kafka 4.3, in one run.

    .venv/bin/python benchmarks/run.py [--reps 3] [--quick] [--only P1,P3] [--profile]

Brokers alternate A B A B (one fresh broker per repetition) to cancel machine drift; the broker
is pinned to core 0 and the load generators to core 1 (`taskset`). Absolute numbers from a shared
machine are noise: the table reports medians, the spread (min..max) and the ratio kbroker/Kafka.

Workloads (the rows of issue 5):
  P1  produce, 1 KiB records, batch.size=131072, linger.ms=5, acks=1      (kafka-producer-perf-test)
  P2  produce, 100 B records, batch.size=16384, linger.ms=0, acks=1       (kafka-producer-perf-test)
  P3  consume a backlog from the beginning (the sendfile path)             (librdkafka, assign mode)
  P4  end-to-end latency p50/p99/p99.9 at 5,000 and 20,000 records/s, 1 KiB (librdkafka)
  P5  broker RSS under P1, and start-up to first acknowledged produce

Results: benchmarks/results/latest.json (+ a timestamped copy) and benchmarks/results/latest.png.
With --profile, py-spy samples kbroker during P1 and P3: flame graphs (SVG) and the top hot spots.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.targets import KafkaTarget, KBrokerTarget, Target  # noqa: E402
from tests.support.java import java_command  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
LOAD_CPU = "1"
PY = sys.executable
# py-spy comes with the dev extra into the same virtualenv, which need not be on PATH.
PY_SPY = str(Path(PY).with_name("py-spy")) if Path(PY).with_name("py-spy").exists() else "py-spy"


def pinned(cmd: list[str]) -> list[str]:
    return ["taskset", "-c", LOAD_CPU, *cmd] if os.cpu_count() and os.cpu_count() > 1 else cmd  # type: ignore[operator]


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    for f in fut.values():
        f.result(60)


_PERF_RE = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th"
)


def producer_perf(bootstrap: str, topic: str, records: int, size: int, props: dict[str, str]) -> dict[str, float]:
    args = ["--topic", topic, "--num-records", str(records), "--record-size", str(size),
            "--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}",
            *[f"{k}={v}" for k, v in props.items()]]
    out = subprocess.run(pinned(java_command("org.apache.kafka.tools.ProducerPerformance", args)),
                         capture_output=True, text=True, timeout=900, cwd=ROOT)
    m = None
    for line in out.stdout.splitlines():
        m = _PERF_RE.search(line) or m
    if m is None:
        raise RuntimeError(f"producer perf test failed: {out.stdout[-2000:]} {out.stderr[-2000:]}")
    return {"records": int(m.group(1)), "records_per_s": float(m.group(2)), "mb_per_s": float(m.group(3)),
            "avg_latency_ms": float(m.group(4)), "p99_latency_ms": float(m.group(8))}


def loadgen(*args: str, timeout: float = 900) -> dict[str, float]:
    out = subprocess.run(pinned([PY, str(ROOT / "benchmarks" / "loadgen.py"), *args]),
                         capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"loadgen {args[0]} failed: {out.stderr[-2000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


class RssSampler:
    """Peak resident set size of a process (and its threads) while a workload runs."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak_kb, self._stop = pid, 0, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        self.peak_kb = max(self.peak_kb, int(line.split()[1]))
            except OSError:
                return
            self._stop.wait(0.2)

    def __enter__(self) -> RssSampler:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


class Profiler:
    """py-spy sampling the kbroker process during one workload (raw collapsed stacks + SVG)."""

    def __init__(self, pid: int, name: str, enabled: bool) -> None:
        self.pid, self.name, self.enabled = pid, name, enabled
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Profiler:
        if self.enabled:
            for fmt, ext in (("flamegraph", "svg"), ("raw", "txt")):
                self.procs.append(subprocess.Popen(
                    [PY_SPY, "record", "--pid", str(self.pid), "--rate", "200", "--format", fmt,
                     "--output", str(RESULTS / f"profile-{self.name}.{ext}"), "--nonblocking"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            time.sleep(1.0)
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            p.send_signal(2)
        for p in self.procs:
            p.wait(60)


def hot_spots(raw: Path, top: int = 5) -> list[tuple[str, float]]:
    """Self-time share of the leaf frames in py-spy's collapsed-stack output."""
    counts: dict[str, int] = {}
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack:
            continue
        leaf = stack.split(";")[-1]
        counts[leaf] = counts.get(leaf, 0) + int(n)
        total += int(n)
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])[:top]
    return [(k, v / total) for k, v in ranked] if total else []


def run_one(target: Target, scale: dict[str, int], only: set[str], profile: bool) -> dict[str, dict[str, float]]:
    res: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix=f"bench-{target.name}-") as d:
        t0 = time.monotonic()
        target.start(Path(d))
        if "P5" in only:
            fp = loadgen("first-produce", target.bootstrap, "startup-probe", "120")
            res["P5_start_to_first_produce"] = {"seconds": time.monotonic() - t0,
                                                "after_listen_s": fp["seconds"]}
        try:
            if "P1" in only:
                create_topic(target.bootstrap, "p1")
                with RssSampler(target.pid) as rss, Profiler(target.pid, "P1", profile and target.name == "kbroker"):
                    res["P1_produce_1k"] = producer_perf(target.bootstrap, "p1", scale["p1"], 1024, {
                        "batch.size": "131072", "linger.ms": "5", "acks": "1"})
                res["P5_rss_under_P1"] = {"peak_rss_mb": rss.peak_kb / 1024}
            if "P2" in only:
                create_topic(target.bootstrap, "p2")
                res["P2_produce_100b"] = producer_perf(target.bootstrap, "p2", scale["p2"], 100, {
                    "batch.size": "16384", "linger.ms": "0", "acks": "1"})
            if "P3" in only:
                create_topic(target.bootstrap, "p3")
                producer_perf(target.bootstrap, "p3", scale["p3"], 1024, {
                    "batch.size": "131072", "linger.ms": "5", "acks": "1"})
                with Profiler(target.pid, "P3", profile and target.name == "kbroker"):
                    res["P3_consume_backlog"] = loadgen("consume", target.bootstrap, "p3", "1", str(scale["p3"]))
            if "P4" in only:
                for rate in (5000, 20000):
                    topic = f"p4-{rate}"
                    create_topic(target.bootstrap, topic)
                    res[f"P4_e2e_{rate}"] = loadgen("e2e", target.bootstrap, topic, str(rate),
                                                    str(scale["p4_seconds"]), "1024")
        finally:
            target.stop()
    return res


def summarize(runs: dict[str, list[dict[str, dict[str, float]]]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per (workload, metric): median, min, max per broker and the ratio kbroker/kafka of medians."""
    table: dict[str, dict[str, dict[str, float]]] = {}
    keys = {(w, m) for reps in runs.values() for r in reps for w, ms in r.items() for m in ms}
    for w, m in sorted(keys):
        row: dict[str, float] = {}
        for name, reps in runs.items():
            vals = [r[w][m] for r in reps if w in r and m in r[w]]
            if vals:
                row[f"{name}_median"] = statistics.median(vals)
                row[f"{name}_min"], row[f"{name}_max"] = min(vals), max(vals)
        if row.get("kafka_median"):
            row["ratio"] = row.get("kbroker_median", float("nan")) / row["kafka_median"]
        table.setdefault(w, {})[m] = row
    return table


def print_table(table: dict[str, dict[str, dict[str, float]]]) -> None:
    print(f"{'workload':28} {'metric':18} {'kbroker (min..max)':>28} {'kafka (min..max)':>28} {'ratio':>7}")
    for w, metrics in table.items():
        for m, row in metrics.items():
            print(f"{w:28} {m:18} {_cell(row, 'kbroker'):>28} {_cell(row, 'kafka'):>28} "
                  f"{row.get('ratio', float('nan')):7.2f}")


def _cell(row: dict[str, float], n: str) -> str:
    if f"{n}_median" not in row:
        return "-"
    return f"{row[f'{n}_median']:.1f} ({row[f'{n}_min']:.1f}..{row[f'{n}_max']:.1f})"


def chart(table: dict[str, dict[str, dict[str, float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    thr = [(w, "mb_per_s") for w in ("P1_produce_1k", "P2_produce_100b", "P3_consume_backlog") if w in table]
    _bars(ax1, table, thr, "MB/s (median; whiskers min..max)", "Throughput")
    lat = [(w, m) for w in table if w.startswith("P4_") for m in ("p50_ms", "p99_ms", "p999_ms")]
    _bars(ax2, table, lat, "ms (median)", "End-to-end latency (P4)")
    fig.suptitle("kbroker vs Apache Kafka 4.3, same machine, same load")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _bars(ax: object, table: dict[str, dict[str, dict[str, float]]], cells: list[tuple[str, str]],
          ylabel: str, title: str) -> None:
    import numpy as np

    x = np.arange(len(cells))
    for i, (name, color) in enumerate((("kbroker", "#2a9d8f"), ("kafka", "#e76f51"))):
        med = [table[w][m].get(f"{name}_median", 0.0) for w, m in cells]
        lo = [med[j] - table[w][m].get(f"{name}_min", med[j]) for j, (w, m) in enumerate(cells)]
        hi = [table[w][m].get(f"{name}_max", med[j]) - med[j] for j, (w, m) in enumerate(cells)]
        ax.bar(x + (i - 0.5) * 0.4, med, 0.4, yerr=[lo, hi], label=name, color=color, capsize=3)  # type: ignore[attr-defined]
    ax.set_xticks(x, [f"{w.split('_', 1)[1]}\n{m}" for w, m in cells], fontsize=8)  # type: ignore[attr-defined]
    ax.set_ylabel(ylabel)  # type: ignore[attr-defined]
    if "latency" in title:
        ax.set_yscale("log")  # type: ignore[attr-defined]
    ax.set_title(title)  # type: ignore[attr-defined]
    ax.legend()  # type: ignore[attr-defined]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="small counts: a smoke run, not figures")
    ap.add_argument("--only", default="P1,P2,P3,P4,P5")
    ap.add_argument("--profile", action="store_true", help="py-spy flame graphs of kbroker under P1 and P3")
    ap.add_argument("--skip-ceiling", action="store_true")
    ap.add_argument("--name", default="latest", help="results file stem (latest.json, latest.png)")
    a = ap.parse_args()
    scale = ({"p1": 50_000, "p2": 100_000, "p3": 50_000, "p4_seconds": 3} if a.quick else
             {"p1": 1_000_000, "p2": 2_000_000, "p3": 1_048_576, "p4_seconds": 15})
    only = set(a.only.split(","))
    RESULTS.mkdir(parents=True, exist_ok=True)
    targets: list[Callable[[], Target]] = [KBrokerTarget, KafkaTarget]
    runs: dict[str, list[dict[str, dict[str, float]]]] = {"kbroker": [], "kafka": []}
    for rep in range(a.reps):
        order = targets if rep % 2 == 0 else targets[::-1]  # A B, then B A: drift cancels
        for make in order:
            t = make()
            print(f"rep {rep + 1}/{a.reps}: {t.name}", file=sys.stderr, flush=True)
            runs[t.name].append(run_one(t, scale, only, a.profile and rep == 0))
    table = summarize(runs)
    result: dict[str, object] = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                 "scale": scale, "reps": a.reps, "table": table, "runs": runs}
    (RESULTS / "partial.json").write_text(json.dumps(result, indent=2))  # survives a failure below
    if not a.skip_ceiling:
        from benchmarks.physical_ceiling import run as ceiling  # loopback TCP and sendfile ceilings

        result["physical_ceiling_mib_s"] = ceiling(file_mib=256, tcp_mib=1024, repeat=3)
    if a.profile:
        result["hot_spots"] = {w: hot_spots(RESULTS / f"profile-{w}.txt")
                               for w in ("P1", "P3") if (RESULTS / f"profile-{w}.txt").exists()}
    print_table(table)
    for path, r in dict(result.get("physical_ceiling_mib_s") or {}).items():  # type: ignore[call-overload]
        print(f"physical ceiling {path:10} median {r['median_mib_s']:.0f} MiB/s (best {r['best_mib_s']:.0f})")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for name in (f"run-{stamp}.json", f"{a.name}.json"):
        (RESULTS / name).write_text(json.dumps(result, indent=2))
    chart(table, RESULTS / f"{a.name}.png")
    print(f"results: {RESULTS / (a.name + '.json')}  chart: {RESULTS / (a.name + '.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
