"""Side by side: the same load against kbroker and against Apache Kafka 4.3, in one run.

    .venv/bin/python benchmarks/run.py [--reps 3] [--quick|--tiny] [--only P1,P3] [--configs pinned,unpinned]
                                       [--brokers kbroker,kafka] [--profile] [--p3-generator fetch|consume|both]
                                       [--p7-generator raw|produce]
                                       [--p7-socket-buffers os|kafka]

Brokers alternate A B, B A (one fresh broker per repetition and configuration) to cancel machine
drift. Two configurations (issue 17): "pinned", the broker on core 0 and the load generator on
core 1 (`taskset`: per-core efficiency), and "unpinned", both free on every core (what a user sees;
rows named *_unpinned). Absolute numbers from a shared machine are noise: the table reports
medians, the spread (min..max) and the ratio kbroker/Kafka.

The load generators are native and the same for both brokers (benchmarks/instruments.py); every
row carries the generator's CPU use (gen_cpu_util, in cores) and ceiling (gen_ceiling_*), and the
broker's CPU (broker_cpu_s, broker_cpu_util) from /proc.

Workloads:
  P1  produce, 1 KiB records, batch.size=131072, linger.ms=5, acks=1      (kafka-producer-perf-test)
  P2  produce, 100 B records, batch.size=16384, linger.ms=0, acks=1       (kafka-producer-perf-test)
  P3  consume a 1 GiB backlog of 4 partitions, 4 connections (the sendfile path)   (kbench fetch)
      MB/s of record batches served and the broker's CPU seconds per GiB served. kbench fetch is a
      raw Fetch loop (Fetch v12, 50 MiB per request, 8 MiB per partition, one request in flight per
      connection) that walks only the batch headers for the next offset: it measures the broker's
      serving, not a client's record decoding (CRC, record objects), which is not the broker's work
      and bound the franz-go consumers on their one core. Both brokers serve the same log bytes by
      sendfile/zero-copy, so the same raw client is fair to both. Its ceiling is kbench fetch against
      kbench sink. --p3-generator consume runs the franz-go consumers instead (kbench consume, the
      row's instrument before); both: the two, consume's row named P3_consume_backlog_kgo_consumer
  P4  end-to-end latency at a fixed 1k/5k/20k/50k records/s, 1 KiB, from the intended send time
      (kbench e2e: p50/p99/p99.9/max); the one-at-a-time round trip (Kafka's EndToEndLatency)
  P5  broker RSS under P1, and process start to first acknowledged produce (the probe already running)
  P8  transactional produce (issue 14): 1 KiB records, 100 and 1,000 per transaction, one partition,
      begin/produce/commit with kbench txn (franz-go, transactions version 2: the finalized
      transaction.version from ApiVersions, the producer epoch and the AddPartitionsToTxn count are
      in the row); not in the default --only: benchmarks/run.py --only P8 --configs pinned
  P6  replicated writes: acks=all, RF 3, min.insync.replicas 2, 3 brokers of each kind (kbench produce)
  P7  scale-out on one host: 1 and 2 kbroker nodes (one per core) vs 1 Kafka broker on the same cores
      (benchmarks/cluster_rows.py; P6 and P7 are not in the default --only). Load: kbench produce-raw,
      pre-encoded Produce v9 requests (one 128 KiB batch of 126 x 1 KiB records per partition, valid
      CRC-32C, acks=1, one connection per leader, 5 in flight), nothing pinned: with the brokers on
      both cores the generator shares them, so it must cost next to nothing (kbench produce took 0.80
      of a core at 605 MB/s). Each broker still parses every request, checks every batch's CRC and
      records, assigns the offsets and appends: only the client's batching and encoding is left out,
      which is not the broker's work. Its ceiling is produce-raw against kbench sink.
      --p7-generator produce runs kbench produce (franz-go, P1's shape, linger 5 ms) instead; the
      results record which (p7_generator). Both systems' brokers run with socket.receive.buffer.bytes
      and socket.send.buffer.bytes -1 (the kernel's autotuning): with Kafka's 102,400-byte defaults
      the one-node row's core idled while the generator refilled the connection, so that row measured
      the buffer, not the node; --p7-socket-buffers kafka keeps the defaults (p7_socket_buffers)
  With --ceilings: each kbench load shape against `kbench sink`, a trivial endpoint (the generator's ceiling)

Results: benchmarks/results/latest.json (+ a timestamped copy) and benchmarks/results/latest.png.
With --profile, py-spy samples kbroker during P1 and P3: flame graphs (SVG) and the top hot spots.
"""

from __future__ import annotations

import argparse
import compileall
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

from benchmarks import cluster_rows  # noqa: E402
from benchmarks.instruments import (  # noqa: E402
    MIB,
    BrokerCpu,
    generator_figures,
    java_tool,
    kbench,
    load_cmd,
    run_measured,
)
from benchmarks.targets import BROKER_CPU, KafkaTarget, KBrokerTarget, Target, free_port  # noqa: E402

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


def producer_perf(bootstrap: str, topic: str, records: int, size: int, props: dict[str, str],
                  pin: bool = True) -> dict[str, float]:
    """kafka-producer-perf-test (ProducerPerformance, kafka-tools 4.3.1) at full speed, with its CPU."""
    args = ["--topic", topic, "--num-records", str(records), "--record-size", str(size),
            "--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}",
            *[f"{k}={v}" for k, v in props.items()]]
    out = java_tool("org.apache.kafka.tools.ProducerPerformance", args, pin)
    m = None
    for line in out.stdout.splitlines():
        m = _PERF_RE.search(line) or m
    if m is None:
        raise RuntimeError(f"producer perf test failed: {out.stdout[-2000:]} {out.stderr[-2000:]}")
    res = {"records": int(m.group(1)), "records_per_s": float(m.group(2)), "mb_per_s": float(m.group(3)),
           "avg_latency_ms": float(m.group(4)), "p99_latency_ms": float(m.group(8))}
    return res | generator_figures(out, {"mb_per_s": res["mb_per_s"], "records_per_s": res["records_per_s"]})


_E2E_RE = re.compile(r"Percentiles: 50th = (\d+), 99th = (\d+), 99.9th = (\d+)")
_AVG_RE = re.compile(r"Avg latency: ([\d.]+) ms")


def round_trip(bootstrap: str, topic: str, records: int, size: int, pin: bool = True) -> dict[str, float]:
    """Kafka's EndToEndLatency: one record at a time, produced (acks=1) then consumed, n times."""
    out = java_tool("org.apache.kafka.tools.EndToEndLatency",
                    ["--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(records),
                     "--producer-acks", "1", "--record-size", str(size)], pin)
    p, avg = _E2E_RE.search(out.stdout), _AVG_RE.search(out.stdout)
    if p is None or avg is None:
        raise RuntimeError(f"EndToEndLatency output not understood: {out.stdout[-2000:]}")
    return {"records": records, "avg_ms": float(avg.group(1)), "p50_ms": float(p.group(1)),
            "p99_ms": float(p.group(2)), "p999_ms": float(p.group(3)),
            "gen_cpu_s": out.cpu_s, "gen_cpu_util": out.cpu_util}


def loadgen(*args: str, timeout: float = 900) -> dict[str, float]:
    out = run_measured(load_cmd([PY, str(ROOT / "benchmarks" / "loadgen.py"), *args], True), timeout)
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


def start_to_first_produce(target: Target, workdir: Path) -> dict[str, float]:
    """P5: start the broker with the probe already running, and time its process start to the first
    acknowledged produce. The probe (`loadgen.py first-produce-on-go`, pinned like every generator) has
    imported librdkafka and is told to go just before the broker's process is started; it produces to
    the broker's port from then on, so neither its own start nor a readiness poll is counted (both were,
    up to 0.2 s and 0.5 s, before 2026-11-27). `probe_ready_s` is the probe's own start, left out."""
    port = free_port()
    cmd = load_cmd([PY, str(ROOT / "benchmarks" / "loadgen.py"), "first-produce-on-go",
                    f"127.0.0.1:{port}", "startup-probe", "120"], True)
    probe = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert probe.stdin is not None and probe.stdout is not None
    try:
        if probe.stdout.readline().strip() != "ready":
            raise RuntimeError("the P5 probe did not start")
        t0 = time.monotonic()
        probe.stdin.write("go\n")
        probe.stdin.flush()
        target.start(workdir, port)
        listening_s = time.monotonic() - t0
        out = json.loads(probe.stdout.read().strip().splitlines()[-1])
    finally:
        if probe.poll() is None:
            probe.wait(130)
    return {"seconds": float(out["acked_at"]) - t0, "start_returned_s": listening_s,
            "probe_ready_s": float(out["probe_ready_s"])}


P8_PER_TXN = (100, 1000)  # records per transaction (issue 14)
P3_PARTITIONS = 4  # and as many connections (clients): one connection's round trips are not the limit
P3_GENERATORS = ("fetch", "consume", "both")
P3_CONSUMER_ROW = "P3_consume_backlog_kgo_consumer"  # kbench consume's row with --p3-generator both


def p3_rows(generator: str) -> list[tuple[str, str]]:
    """(kbench mode, row name) of P3 for --p3-generator: the chosen generator's row is P3_consume_backlog."""
    if generator == "both":
        return [("fetch", "P3_consume_backlog"), ("consume", P3_CONSUMER_ROW)]
    if generator not in P3_GENERATORS:
        raise ValueError(f"--p3-generator {generator!r}: one of {', '.join(P3_GENERATORS)}")
    return [(generator, "P3_consume_backlog")]
P4_RATES = (1000, 5000, 20000, 50000)


def run_one(target: Target, scale: dict[str, int], only: set[str], profile: bool,
            config: str = "pinned", p3_generator: str = "fetch") -> dict[str, dict[str, float]]:
    """Every selected row against one fresh broker. Pinned: all rows, the generators on core 1.
    Unpinned: the throughput rows (P1, P2, P3) only, named *_unpinned, nothing pinned."""
    pin = config == "pinned"
    sfx = "" if pin else "_unpinned"
    res: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix=f"bench-{target.name}-") as d:
        if "P5" in only and pin:
            res["P5_start_to_first_produce"] = start_to_first_produce(target, Path(d))
        else:
            target.start(Path(d))
        try:
            if "P1" in only:
                create_topic(target.bootstrap, "p1")
                with RssSampler(target.pid) as rss, \
                        Profiler(target.pid, "P1", profile and pin and target.name == "kbroker"), \
                        BrokerCpu(target.pid) as cpu:
                    r = producer_perf(target.bootstrap, "p1", scale["p1"], 1024, {
                        "batch.size": "131072", "linger.ms": "5", "acks": "1"}, pin)
                res["P1_produce_1k" + sfx] = r | cpu.figures() | per_record(cpu, r)
                if pin:
                    res["P5_rss_under_P1"] = {"peak_rss_mb": rss.peak_kb / 1024}
            if "P2" in only:
                create_topic(target.bootstrap, "p2")
                with BrokerCpu(target.pid) as cpu:
                    r = producer_perf(target.bootstrap, "p2", scale["p2"], 100, {
                        "batch.size": "16384", "linger.ms": "0", "acks": "1"}, pin)
                res["P2_produce_100b" + sfx] = r | cpu.figures() | per_record(cpu, r)
            if "P3" in only:
                create_topic(target.bootstrap, "p3", P3_PARTITIONS)
                kbench("produce", {"bootstrap": target.bootstrap, "topic": "p3", "records": scale["p3"],
                                   "size": 1024, "acks": "1", "linger-ms": 5, "batch-bytes": 131072}, pin)
                for mode, row in p3_rows(p3_generator):
                    with Profiler(target.pid, "P3", profile and pin and target.name == "kbroker"
                                  and row == "P3_consume_backlog"), BrokerCpu(target.pid) as cpu:
                        r = kbench(mode, {"bootstrap": target.bootstrap, "topic": "p3",
                                          "partitions": P3_PARTITIONS, "clients": P3_PARTITIONS,
                                          "records": scale["p3"]}, pin)
                    f = cpu.figures()
                    f["broker_cpu_s_per_gib"] = cpu.cpu_s / (r["bytes"] / (1024 * MIB)) if r["bytes"] else 0.0
                    res[row + sfx] = r | f
            if "P8" in only and pin:
                for per_txn in P8_PER_TXN:
                    topic = f"p8-{per_txn}"
                    create_topic(target.bootstrap, topic)
                    with BrokerCpu(target.pid) as cpu:
                        r = kbench("txn", {"bootstrap": target.bootstrap, "topic": topic, "records": scale["p8"],
                                           "per-txn": per_txn, "size": 1024, "linger-ms": 5,
                                           "batch-bytes": 1_000_000}, pin)
                    check_transactions_v2(target.name, r)
                    res[f"P8_txn_produce_{per_txn}"] = r | cpu.figures() | per_record(cpu, r)
            if "P4" in only and pin:
                for rate in scale_rates(scale):
                    topic = f"p4-{rate}"
                    create_topic(target.bootstrap, topic)
                    with BrokerCpu(target.pid) as cpu:
                        r = kbench("e2e", {"bootstrap": target.bootstrap, "topic": topic, "rate": rate,
                                           "seconds": scale["p4_seconds"], "warmup": scale["p4_warmup"],
                                           "size": 1024, "acks": "1"}, pin)
                    res[f"P4_e2e_{rate}"] = r | cpu.figures()
                create_topic(target.bootstrap, "p4-round-trip")
                res["P4_round_trip"] = round_trip(target.bootstrap, "p4-round-trip", scale["p4_round_trips"],
                                                  1024, pin)
        finally:
            target.stop()
    return res


def check_transactions_v2(broker: str, r: dict[str, float]) -> None:
    """P8 compares transactions version 2 on both brokers: the finalized level in ApiVersions is 2, the
    client sent no AddPartitionsToTxn and bumped its epoch at every EndTxn (the warm-up one included)."""
    if (r["finalized_transaction_version"] != 2 or r["add_partitions_requests"] != 0
            or r["producer_epoch"] != r["transactions"] + 1):
        raise RuntimeError(f"P8 on {broker} did not run transactions version 2: {r}")


def per_record(cpu: BrokerCpu, r: dict[str, float]) -> dict[str, float]:
    """The broker's CPU microseconds per record produced: a busy machine disturbs it less than records/s."""
    return {"broker_cpu_us_per_record": cpu.cpu_s * 1e6 / r["records"]} if r.get("records") else {}


def scale_rates(scale: dict[str, int]) -> list[int]:
    return [r for r in P4_RATES if r <= scale["p4_max_rate"]]


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


def chart(table: dict[str, dict[str, dict[str, float]]], path: Path,
          physical_ceiling: dict[str, dict[str, float]] | None = None) -> None:
    """The bars of every row (median, whiskers min..max), each throughput bar with its generator's
    ceiling (x: the rate the generator would reach with a core of its own) and the throughput panel
    with the physical ceilings measured in the same run (dashed: loopback TCP send, sendfile)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    thr = [(w + c, "mb_per_s") for w in ("P1_produce_1k", "P2_produce_100b", "P3_consume_backlog")
           for c in ("", "_unpinned") if w + c in table]
    p4 = sorted((w for w in table if w.startswith("P4_e2e_")), key=lambda w: int(w.rsplit("_", 1)[1]))
    lat = [(w, m) for w in [*p4, "P4_round_trip"] if w in table for m in ("p50_ms", "p99_ms", "p999_ms")]
    cluster = [(w, "mb_per_s") for w in ("P6_replicated_acks_all", "P7_scaleout_1core", "P7_scaleout_2core")
               if w in table]
    txn = [(w, "records_per_s") for w in (f"P8_txn_produce_{n}" for n in P8_PER_TXN) if w in table]
    panels = [(thr, "MB/s (median; whiskers min..max)", "Throughput (pinned: 1 core each; unpinned)"),
              (lat, "ms (median)", "End-to-end latency (P4, pinned), from the intended send time"),
              (cluster, "MB/s (median; whiskers min..max)",
               "P6 acks=all, RF 3; P7 on 1 vs 2 cores"),
              (txn, "records/s (median; whiskers min..max)", "P8 transactional produce, 1 KiB, pinned")]
    panels = [pnl for pnl in panels if pnl[0]]
    if not panels:  # e.g. --only P5: nothing to plot
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 5), squeeze=False)
    for ax, (cells, ylabel, title) in zip(axes[0], panels, strict=True):
        _bars(ax, table, cells, ylabel, title)
        if cells is thr:
            _ceilings(ax, table, cells, physical_ceiling or {})
    fig.suptitle("kbroker vs Apache Kafka 4.3, same machine, same load")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _ceilings(ax: object, table: dict[str, dict[str, dict[str, float]]], cells: list[tuple[str, str]],
              physical: dict[str, dict[str, float]]) -> None:
    import numpy as np

    x = np.arange(len(cells))
    for i, (name, color) in enumerate((("kbroker", "#1d6f65"), ("kafka", "#a34a33"))):
        ceil = [table[w].get("gen_ceiling_mb_per_s", {}).get(f"{name}_median") for w, _ in cells]
        pts = [(x[j] + (i - 0.5) * 0.4, c) for j, c in enumerate(ceil) if isinstance(c, float)]
        if pts:
            ax.plot([p for p, _ in pts], [c for _, c in pts], "x", color=color, markersize=8,  # type: ignore[attr-defined]
                    label=f"generator ceiling ({name} run)")
    for key, style, what in (("tcp_send", "--", "loopback TCP send"), ("sendfile", ":", "sendfile")):
        med = physical.get(key, {}).get("median_mib_s")
        if isinstance(med, int | float):
            ax.axhline(med, linestyle=style, color="grey", linewidth=1)  # type: ignore[attr-defined]
            ax.annotate(f"{what} ceiling {med:,.0f} MiB/s", (0, med), xytext=(2, 2),  # type: ignore[attr-defined]
                        textcoords="offset points", fontsize=7, color="grey")
    ax.legend(fontsize=7)  # type: ignore[attr-defined]


def _label(workload: str, metric: str) -> str:
    """A short tick label: "consume_backlog\nunpinned", "20k/s\np99", "round\ntrip p50"."""
    if workload.startswith("P4_e2e_"):
        return f"{int(workload.rsplit('_', 1)[1]) // 1000}k/s\n{metric.removesuffix('_ms')}"
    if workload == "P4_round_trip":
        return f"round\ntrip {metric.removesuffix('_ms')}"
    if workload.startswith("P7_scaleout_"):
        return "P7 " + workload.rsplit("_", 1)[1].replace("core", " core(s)")
    if workload.startswith("P8_txn_produce_"):
        return f"{int(workload.rsplit('_', 1)[1]):,} records\nper transaction"
    if workload.startswith("P6_"):
        return "P6 acks=all\nRF 3, 3 nodes"
    return workload.split("_", 1)[1].replace("_unpinned", "\nunpinned")


def _bars(ax: object, table: dict[str, dict[str, dict[str, float]]], cells: list[tuple[str, str]],
          ylabel: str, title: str) -> None:
    import numpy as np

    x = np.arange(len(cells))
    for i, (name, color) in enumerate((("kbroker", "#2a9d8f"), ("kafka", "#e76f51"))):
        med = [table[w][m].get(f"{name}_median", 0.0) for w, m in cells]
        lo = [med[j] - table[w][m].get(f"{name}_min", med[j]) for j, (w, m) in enumerate(cells)]
        hi = [table[w][m].get(f"{name}_max", med[j]) - med[j] for j, (w, m) in enumerate(cells)]
        ax.bar(x + (i - 0.5) * 0.4, med, 0.4, yerr=[lo, hi], label=name, color=color, capsize=3)  # type: ignore[attr-defined]
    ax.set_xticks(x, [_label(w, m) for w, m in cells], fontsize=7)  # type: ignore[attr-defined]
    ax.set_ylabel(ylabel)  # type: ignore[attr-defined]
    if "latency" in title:
        ax.set_yscale("log")  # type: ignore[attr-defined]
    ax.set_title(title)  # type: ignore[attr-defined]
    ax.legend()  # type: ignore[attr-defined]


SCALES: dict[str, dict[str, int]] = {
    "full": {"p1": 1_000_000, "p2": 2_000_000, "p3": 1_048_576, "p6": 200_000, "p7": 500_000, "p4_seconds": 10, "p4_warmup": 2,
             "p4_max_rate": 50_000, "p4_round_trips": 2_000, "p8": 20_000},
    "quick": {"p1": 50_000, "p2": 100_000, "p3": 50_000, "p6": 50_000, "p7": 100_000, "p4_seconds": 3, "p4_warmup": 1,
              "p4_max_rate": 50_000, "p4_round_trips": 500, "p8": 5_000},
    # The default-suite test's scale (tests/benchmarks/test_bench_run.py): seconds, not figures.
    "tiny": {"p1": 5_000, "p2": 5_000, "p3": 5_000, "p6": 5_000, "p7": 5_000, "p4_seconds": 1, "p4_warmup": 1,
             "p4_max_rate": 1_000, "p4_round_trips": 50, "p8": 1_000},
}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="small counts: a smoke run, not figures")
    ap.add_argument("--tiny", action="store_true", help="the test's scale: checks the instruments, no figures")
    ap.add_argument("--only", default="P1,P2,P3,P4,P5")
    ap.add_argument("--configs", default="pinned,unpinned",
                    help="pinned (broker core 0, load core 1) and/or unpinned (throughput rows only)")
    ap.add_argument("--brokers", default="kbroker,kafka")
    ap.add_argument("--profile", action="store_true", help="py-spy flame graphs of kbroker under P1 and P3")
    ap.add_argument("--p3-generator", choices=P3_GENERATORS, default="fetch",
                    help="P3's instrument: kbench fetch (raw Fetch, the broker's serving; default), kbench consume "
                         f"(franz-go consumers, which decode records), or both (consume's row: {P3_CONSUMER_ROW})")
    ap.add_argument("--p7-generator", choices=cluster_rows.P7_GENERATORS, default="raw",
                    help="P7's instrument: kbench produce-raw (pre-encoded Produce requests, next to no generator "
                         "CPU; default) or kbench produce (franz-go, linger 5 ms, P1's shape)")
    ap.add_argument("--p7-socket-buffers", choices=tuple(cluster_rows.P7_SOCKET_BUFFERS), default="os",
                    help="P7's brokers' socket.receive/send.buffer.bytes: os (-1, the kernel's autotuning; default: "
                         "the one-node row is then bound by its core) or kafka (Kafka's 102,400-byte defaults)")
    ap.add_argument("--skip-ceiling", action="store_true")
    ap.add_argument("--render", type=Path, metavar="JSON",
                    help="no run: the chart of a results file again, written next to it as <stem>.png")
    ap.add_argument("--ceilings", action="store_true",
                    help="each kbench load shape against the trivial sink (kbench sink): the generators' ceilings")
    ap.add_argument("--name", default="latest", help="results file stem (latest.json, latest.png)")
    ap.add_argument("--results-dir", type=Path, default=RESULTS, help="where the JSON and the chart go")
    ap.add_argument("--p6-records", type=int, default=None, metavar="N",
                    help="records P6 produces (kafka-producer-perf-test's --num-records; default: the scale's, "
                         f"{SCALES['full']['p6']:,} full, {SCALES['quick']['p6']:,} --quick)")
    ap.add_argument("--p7-records", type=int, default=None, metavar="N",
                    help="records P7 produces per configuration (default: the scale's, "
                         f"{SCALES['full']['p7']:,} full: about a second at kbroker's 2-node rate)")
    return ap


def chosen_scale(a: argparse.Namespace) -> dict[str, int]:
    """The scale the flags pick (--tiny, --quick, full), with the per-row record counts given."""
    scale = dict(SCALES["tiny" if a.tiny else "quick" if a.quick else "full"])
    if a.p6_records is not None:
        if a.p6_records <= 0:
            raise SystemExit(f"--p6-records must be positive, not {a.p6_records}")
        scale["p6"] = a.p6_records
    if a.p7_records is not None:
        if a.p7_records <= 0:
            raise SystemExit(f"--p7-records must be positive, not {a.p7_records}")
        scale["p7"] = a.p7_records
    return scale


def main() -> int:
    a = build_parser().parse_args()
    if a.render:  # the chart again from a results file (its table and physical ceilings)
        done = json.loads(a.render.read_text())
        chart(done["table"], a.render.with_suffix(".png"), done.get("physical_ceiling_mib_s"))
        print(f"chart: {a.render.with_suffix('.png')}")
        return 0
    out_dir: Path = a.results_dir
    scale = chosen_scale(a)
    only = set(a.only.split(","))
    configs = [c for c in a.configs.split(",") if c]
    RESULTS.mkdir(parents=True, exist_ok=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    # kbroker's bytecode, as `pip install` writes it: an editable install run with PYTHONDONTWRITEBYTECODE
    # (CI sets it) would compile every module at every start, which P5 would count as the broker's.
    compileall.compile_dir(str(ROOT / "kbroker"), quiet=1)
    # and the methods of its dataclasses, which Python 3.11 compiles at every import (kbroker/codecache.py)
    subprocess.run([sys.executable, "-c", "from kbroker import codecache; codecache.prime()"], cwd=ROOT,
                   check=True)
    makers: dict[str, Callable[[str | None], Target]] = {
        "kbroker": lambda cpus: KBrokerTarget(None, cpus), "kafka": lambda cpus: KafkaTarget(None, cpus)}
    names = [n for n in a.brokers.split(",") if n]
    runs: dict[str, list[dict[str, dict[str, float]]]] = {n: [] for n in names}
    for rep in range(a.reps):
        order = names if rep % 2 == 0 else names[::-1]  # A B, then B A: drift cancels
        merged: dict[str, dict[str, dict[str, float]]] = {n: {} for n in names}
        single = only & {"P1", "P2", "P3", "P4", "P5", "P8"}
        for config in configs if single else []:
            for name in order:
                t = makers[name](BROKER_CPU if config == "pinned" else None)
                print(f"rep {rep + 1}/{a.reps} {config}: {t.name}", file=sys.stderr, flush=True)
                merged[name].update(run_one(t, scale, only, a.profile and rep == 0, config, a.p3_generator))
        for name in order:  # the multi-node rows, one fresh cluster each (benchmarks/cluster_rows.py)
            if "P6" in only:
                print(f"rep {rep + 1}/{a.reps} P6: {name}", file=sys.stderr, flush=True)
                merged[name]["P6_replicated_acks_all"] = cluster_rows.p6(name, scale["p6"])
            if "P7" in only:
                for cores in (1, 2):
                    print(f"rep {rep + 1}/{a.reps} P7 {cores} core(s): {name}", file=sys.stderr, flush=True)
                    merged[name][f"P7_scaleout_{cores}core"] = cluster_rows.p7(name, cores, scale["p7"],
                                                                                a.p7_generator, a.p7_socket_buffers)
                one, two = merged[name]["P7_scaleout_1core"], merged[name]["P7_scaleout_2core"]
                merged[name]["P7_scaling_2_over_1"] = {"mb_per_s": two["mb_per_s"] / one["mb_per_s"]}
        for name in names:
            runs[name].append(merged[name])
    table = summarize(runs)
    result: dict[str, object] = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                 "command": " ".join([".venv/bin/python", "benchmarks/run.py", *sys.argv[1:]]),
                                 "scale": scale, "reps": a.reps, "configs": configs, "table": table, "runs": runs,
                                 "generators": generators(a.p3_generator, a.p7_generator),
                                 "p3_generator": a.p3_generator, "p7_generator": a.p7_generator,
                                 "p7_socket_buffers": a.p7_socket_buffers}
    (out_dir / "partial.json").write_text(json.dumps(result, indent=2))  # survives a failure below
    if a.ceilings:
        print("generator ceilings against kbench sink", file=sys.stderr, flush=True)
        result["generator_ceilings"] = {
            **p7_ceilings(a.p7_generator, scale["p7"]),
            "kbench_produce_1k_linger5_acksall (P6 shape)": cluster_rows.sink_ceiling(cluster_rows.P6_LOAD, scale["p6"]),
            "kbench_produce_100b_linger0 (P2 shape)": cluster_rows.sink_ceiling(cluster_rows.P2_LOAD, scale["p2"]),
            **{f"kbench_{mode}_4x4 (P3 shape)": cluster_rows.sink_consume_ceiling(scale["p3"], mode=mode)
               for mode, _ in p3_rows(a.p3_generator)},
        }
        (out_dir / "partial.json").write_text(json.dumps(result, indent=2))
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
        (out_dir / name).write_text(json.dumps(result, indent=2))
    chart(table, out_dir / f"{a.name}.png", result.get("physical_ceiling_mib_s"))  # type: ignore[arg-type]
    print(f"results: {out_dir / (a.name + '.json')}  chart: {out_dir / (a.name + '.png')}")
    return 0


# Which instrument drives each row (written into the results, so a reader of the JSON knows).
GENERATORS = {
    "P1": "kafka-producer-perf-test (org.apache.kafka.tools.ProducerPerformance, kafka-tools 4.3.1)",
    "P2": "kafka-producer-perf-test (org.apache.kafka.tools.ProducerPerformance, kafka-tools 4.3.1)",
    "P3": "kbench fetch (Go, franz-go v1.22.3's kmsg; benchmarks/native/kbench/fetch.go): raw Fetch v12, 4 partitions, "
          "4 connections, 50 MiB / 8 MiB per partition per request, batch headers walked, no record decoded",
    "P4_e2e": "kbench e2e (Go, franz-go v1.22.3): fixed rate, latency from the intended send time",
    "P4_round_trip": "EndToEndLatency (org.apache.kafka.tools.EndToEndLatency, kafka-tools 4.3.1)",
    "P5": "confluent-kafka producer (benchmarks/loadgen.py first-produce-on-go): ready before the broker starts, timed from its spawn",
    "P6": "kbench produce (Go, franz-go v1.22.3): 1 KiB, linger 5 ms, 128 KiB batches, acks=all, unpinned",
    "P7": "kbench produce-raw (Go, franz-go v1.22.3's kmsg; benchmarks/native/kbench/produceraw.go): pre-encoded "
          "Produce v9, one 128 KiB batch of 126 x 1 KiB records per partition per request, acks=1, one connection "
          "per leader, 5 requests in flight, unpinned",
    "P8": "kbench txn (Go, franz-go v1.22.3, transactions version 2): 1 KiB, 100 or 1,000 records per "
          "transaction, one partition, commit included, pinned",
    "ceilings": "kbench (the same loads) against kbench sink (benchmarks/native/kbench/sink.go), sink core 0, kbench core 1",
}
P3_CONSUME_GENERATOR = "kbench consume (Go, franz-go v1.22.3; benchmarks/native), 4 partitions, 4 clients"
P7_PRODUCE_GENERATOR = "kbench produce (Go, franz-go v1.22.3): 1 KiB, linger 5 ms, 128 KiB batches, acks=1, unpinned"


def generators(p3_generator: str, p7_generator: str = "raw") -> dict[str, str]:
    """GENERATORS with P3's and P7's instruments as --p3-generator and --p7-generator chose them."""
    out = dict(GENERATORS)
    if p3_generator == "consume":
        out["P3"] = P3_CONSUME_GENERATOR
    elif p3_generator == "both":
        out[P3_CONSUMER_ROW] = P3_CONSUME_GENERATOR
    if p7_generator == "produce":
        out["P7"] = P7_PRODUCE_GENERATOR
    return out


def p7_ceilings(p7_generator: str, records: int) -> dict[str, dict[str, float]]:
    """The sink ceilings of the P1/P7 load shape: kbench produce's (P1's shape, P7's with --p7-generator
    produce), and with P7's default generator also kbench produce-raw's (P7's shape)."""
    shape = "P1/P7 shape" if p7_generator == "produce" else "P1 shape"  # the key of the runs before produce-raw
    out = {f"kbench_produce_1k_linger5_acks1 ({shape})": cluster_rows.sink_ceiling(cluster_rows.P7_LOAD, records)}
    if p7_generator == "raw":
        mode, load = cluster_rows.p7_load("raw")
        out["kbench_produce-raw_1k_128k_acks1 (P7 shape)"] = cluster_rows.sink_ceiling(load, records, mode=mode)
    return out


if __name__ == "__main__":
    raise SystemExit(main())
