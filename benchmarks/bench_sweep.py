"""The scaling sweep (issue 17): what each broker costs as the work grows, kbroker and Apache Kafka 4.3 in one run.

    .venv/bin/python benchmarks/bench_sweep.py [--dims partitions,connections,record_size,backlog]
        [--points partitions=10,100 --points backlog=1,4] [--reps 1] [--quick] [--brokers kbroker,kafka]
        [--name sweep] [--results-dir DIR] [--unpinned] [--read-ahead-kb KB]

Four dimensions, each point against a fresh broker of each kind (alternating A B, B A from point to
point so machine drift cancels), pinned like benchmarks/run.py (broker on core 0, generator on core 1):

- ``partitions`` (10 .. 10,000): one topic of P partitions; ``kbench produce`` of 1 KiB records,
  linger 5 ms, 128 KiB batches, acks=1, round robin over every partition. The topic's creation is
  timed apart (``create_s``: CreateTopics answered; ``ready_s``: every partition has a leader in
  Metadata; ``first_touch_s``: one record written to every partition) and is not part of the load.
- ``connections`` (10 .. 1,000): ``kbench fleet`` (benchmarks/native/kbench/fleet.go): N independent
  producer clients, each 10 records/s of 1 KiB, linger 0, acks=1, on 10 partitions; latency from the
  time a record was due to its acknowledgement (no coordinated omission). Throughput is the
  acknowledged rate of an open-loop load (it equals the offered rate unless a broker falls behind);
  the cost is in p99, RSS and the broker's CPU. ``broker_sockets`` is the peak count of the broker's
  socket descriptors (franz-go opens about two connections per client). The clients connect first, 25
  at a time, each with one record acknowledged (``connect_s``), and only then start the schedule:
  before 2026-11-27 all of them connected at once, both brokers' listen queues overflowed, and the
  retried handshakes (1, 3, 7 s) were the 1,000-client p99. ``listen_overflows`` is the kernel's
  count of dropped connection attempts during the point.
- ``record_size`` (100 B .. 1 MiB): ``kbench produce`` of the size, 4 partitions (each written once
  before, unmeasured), linger 5 ms, batches of max(128 KiB, size + 16 KiB), acks=1;
  message.max.bytes=4 MiB on both brokers.
- ``backlog`` (GiB, 1 .. 20): fill a 4-partition topic with 16 KiB records (not measured, the fill
  rate is kept), stop the broker, evict the backlog's files from the page cache
  (``posix_fadvise(DONTNEED)`` after ``fsync``: no root needed; ``cache_resident_mib`` is what
  ``fincore`` still finds cached), start the broker again on the same data, and consume the whole
  backlog from offset 0 (``kbench consume``, 4 partitions, 4 clients). ``disk_ceiling_mb_per_s`` is a
  plain cold sequential read of (up to 4 GiB of) the same segment files, no broker: the disk's ceiling.

Every point keeps the instruments' figures (benchmarks/instruments.py): the generator's CPU
(``gen_cpu_util``, cores) and ceiling (``gen_ceiling_mb_per_s``: its rate if it had a core of its own),
the broker's CPU (``broker_cpu_util``) and its peak RSS (benchmarks/run.RssSampler), plus ``bound``:
which resource the point ran into (generator, broker CPU, disk, or the open-loop offered rate).
The machine's load average is recorded before and after the run and around every point.

Results: benchmarks/results/<name>.json and <name>.png (one row of panels per dimension: throughput,
p99 latency, peak RSS; x is the swept variable on a log scale).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.instruments import LOAD_CPU, MIB, BrokerCpu, kbench, kbench_binary  # noqa: E402
from benchmarks.run import RssSampler  # noqa: E402
from benchmarks.targets import BROKER_CPU, KafkaTarget, KBrokerTarget, Target  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
GIB = 1 << 30
DIMENSIONS = ("partitions", "connections", "record_size", "backlog")
POINTS: dict[str, list[float]] = {
    "partitions": [10, 100, 1000, 10000],
    "connections": [10, 100, 1000],
    "record_size": [100, 10240, 1048576],
    "backlog": [1, 4, 20],  # GiB
}
QUICK_POINTS: dict[str, list[float]] = {
    "partitions": [10, 1000],
    "connections": [10, 100],
    "record_size": [100, 1048576],
    "backlog": [0.25],
}
UNITS = {"partitions": "partitions", "connections": "producer clients", "record_size": "bytes per record",
         "backlog": "GiB"}
RECORD_SIZE_MAX_MESSAGE_BYTES = 4 * MIB
BACKLOG_RECORD = 16 * 1024
BACKLOG_PARTITIONS = 4
MAX_BUFFERED = 10_000  # records franz-go buffers before Produce blocks: the closed-loop p99 is mostly this queue
FLEET_RATE = 10  # records/s per producer client
FLEET_PARTITIONS = 10
# Clients connecting at once before the fleet's schedule (kbench fleet -connect-concurrency): half the
# default listen backlog (socket.listen.backlog.size=50), so the sweep measures open connections, not a
# connection storm (fleet.go says why; listen_overflows shows what a point still dropped).
FLEET_CONNECT_CONCURRENCY = 25
DISK_CEILING_MAX = 4 * GIB


@dataclass(frozen=True)
class Scale:
    """How much load a point gets: a few seconds each (full) or a smoke test (quick)."""

    produce_records: int  # partitions dimension, 1 KiB records, at most ...
    produce_seconds: float  # ... or this long (then the flush of the buffered records)
    size_bytes: int  # record_size dimension: bytes per point
    size_max_records: int
    fleet_seconds: float
    fleet_warmup: float
    produce_inflight: int = 1  # partitions dimension: Produce requests in flight (franz-go's default 1)


FULL = Scale(produce_records=1_000_000, produce_seconds=8, size_bytes=192 * MIB, size_max_records=500_000, fleet_seconds=5,
             fleet_warmup=5)
QUICK = Scale(produce_records=10_000, produce_seconds=2, size_bytes=8 * MIB, size_max_records=20_000, fleet_seconds=2,
              fleet_warmup=2)


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


# ---- topics ------------------------------------------------------------------------------------


# Kafka's controller refuses a user operation of more than 10,000 records (QuorumController's
# MAX_RECORDS_PER_USER_OP: POLICY_VIOLATION "Unable to perform excessively large batch operation"),
# and a topic of P partitions is 1 + P records: larger topics are created in steps, CreateTopics of
# the first 5,000 partitions and CreatePartitions for each further 5,000, on both brokers.
PARTITIONS_PER_OP = 5000


def create_topic_timed(bootstrap: str, topic: str, partitions: int, timeout: float = 420) -> dict[str, float]:
    """CreateTopics (and CreatePartitions, in steps), then Metadata until every partition has a
    leader. Seconds for each step."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    t0 = time.monotonic()
    first = min(partitions, PARTITIONS_PER_OP)
    fut = admin.create_topics([NewTopic(topic, num_partitions=first, replication_factor=1)],
                              request_timeout=timeout, operation_timeout=timeout)
    for f in fut.values():
        f.result(timeout)
    for total in range(first + PARTITIONS_PER_OP, partitions + PARTITIONS_PER_OP, PARTITIONS_PER_OP):
        fut = admin.create_partitions([NewPartitions(topic, min(total, partitions))],
                                      request_timeout=timeout, operation_timeout=timeout)
        for f in fut.values():
            f.result(timeout)
    created = time.monotonic() - t0
    while True:
        try:
            md = admin.list_topics(topic, timeout=60).topics.get(topic)
        except KafkaException:  # a Metadata of thousands of partitions from a busy broker may time out
            md = None
        if md is not None and md.error is None and len(md.partitions) == partitions \
                and all(p.leader >= 0 for p in md.partitions.values()):
            break
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"{topic}: {partitions} partitions without leaders after {timeout}s")
        time.sleep(0.2 if partitions <= 1000 else 1.0)  # a Metadata of 10,000 partitions is work too
    return {"create_s": created, "ready_s": time.monotonic() - t0}  # first_touch_s is added by the load


# ---- samplers ----------------------------------------------------------------------------------


def listen_overflows() -> int:
    """The kernel's TcpExt ListenOverflows so far (/proc/net/netstat): connections a listen queue had no
    room for (the client's SYN or handshake dropped; it retries after 1, 3, 7 s). Machine-wide: one
    broker runs at a time, so a point's difference is its broker's."""
    try:
        lines = Path("/proc/net/netstat").read_text().splitlines()
    except OSError:
        return -1
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:"):
            row = dict(zip(names.split()[1:], values.split()[1:], strict=False))
            return int(row.get("ListenOverflows", -1))
    return -1


class SocketSampler:
    """Peak number of socket descriptors a process holds while a load runs (its connections)."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, 0, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _count(self) -> int:
        n = 0
        fd_dir = f"/proc/{self.pid}/fd"
        for fd in os.listdir(fd_dir):
            try:
                if os.readlink(f"{fd_dir}/{fd}").startswith("socket:"):
                    n += 1
            except OSError:
                continue
        return n

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, self._count())
            except OSError:
                return
            self._stop.wait(0.5)

    def __enter__(self) -> SocketSampler:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


# ---- the page cache ----------------------------------------------------------------------------


def segment_files(data_dir: Path, topic: str) -> list[Path]:
    return sorted(p for p in data_dir.rglob("*.log") if p.parent.name.startswith(f"{topic}-"))


def evict(files: list[Path]) -> None:
    """Drop the files' pages from the page cache: written back first (fsync), then
    POSIX_FADV_DONTNEED, which an unprivileged process may do for its own files."""
    for p in files:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def resident_bytes(files: list[Path]) -> int:
    """Bytes of the files in the page cache (util-linux fincore)."""
    total = 0
    for i in range(0, len(files), 200):
        out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", *map(str, files[i:i + 200])],
                             capture_output=True, text=True, check=False)
        total += sum(int(x) for x in out.stdout.split() if x.isdigit())
    return total


def cold_read_mb_per_s(files: list[Path], limit: int) -> dict[str, float]:
    """A cold sequential read of the files (evicted first), no broker: the disk's ceiling."""
    evict(files)
    buf = bytearray(4 * MIB)
    done = 0
    t0 = time.monotonic()
    for p in files:
        with open(p, "rb", buffering=0) as f:
            while done < limit and (n := f.readinto(buf)):
                done += n
        if done >= limit:
            break
    secs = time.monotonic() - t0
    evict(files)
    return {"disk_ceiling_mb_per_s": done / MIB / secs if secs else 0.0, "disk_ceiling_read_mib": done / MIB}


# ---- points ------------------------------------------------------------------------------------


def data_dir(target: Target, workdir: Path) -> Path:
    return workdir / "kafka" / "data" if target.name == "kafka" else workdir / "data"


class CoreBusy:
    """How busy each core was (every process, from /proc/stat) while a load ran: on a shared machine
    a broker may get a small share of its core while the core itself is full."""

    @staticmethod
    def _read() -> dict[int, tuple[int, int]]:
        out: dict[int, tuple[int, int]] = {}
        for line in Path("/proc/stat").read_text().splitlines():
            name, *vals = line.split()
            if name.startswith("cpu") and name != "cpu":
                n = [int(v) for v in vals]
                out[int(name[3:])] = (sum(n[:8]), n[3] + n[4])  # (total, idle + iowait)
        return out

    def __enter__(self) -> CoreBusy:
        self._t0 = self._read()
        return self

    def __exit__(self, *exc: object) -> None:
        t1 = self._read()
        self.busy = {c: 1.0 - (t1[c][1] - self._t0[c][1]) / max(1, t1[c][0] - self._t0[c][0]) for c in t1}

    def figures(self) -> dict[str, float]:
        broker_core = int(BROKER_CPU)
        return {"broker_core_busy": self.busy.get(broker_core, 0.0),
                "gen_core_busy": self.busy.get(int(LOAD_CPU), 0.0),
                "machine_busy": sum(self.busy.values()) / max(1, len(self.busy))}


def bound(r: dict[str, float]) -> str:
    """Which resource a point ran into, from its own figures (pinned: one core each)."""
    if r.get("gen_cpu_util", 0.0) >= 0.85:
        return "generator CPU"
    if r.get("broker_cpu_util", 0.0) >= 0.85:
        return "broker CPU"
    ceiling = r.get("disk_ceiling_mb_per_s", 0.0)
    if ceiling and r.get("mb_per_s", 0.0) >= 0.8 * ceiling:
        return "disk"
    offered = r.get("offered_records_per_s", 0.0)
    # An open-loop fleet kept up if its records were acknowledged within a second of being due
    # (ten of its 100 ms intervals); later, it fell behind, even if it caught up in the flush.
    if offered and r.get("p99_latency_ms", 0.0) < 1000 and r.get("records_per_s", 0.0) >= 0.95 * offered:
        return "offered rate (open loop)"
    if r.get("broker_core_busy", 0.0) >= 0.9:
        return "broker's core full (the broker plus other processes on the shared machine)"
    return "neither core saturated (round trips, or the shared machine)"


def run_point(make: Callable[[dict[str, str]], Target], dim: str, value: float, scale: Scale,
              ) -> dict[str, float | str]:
    """One point against a fresh broker: its figures, plus start/stop seconds and the load average."""
    overrides = {"message.max.bytes": str(RECORD_SIZE_MAX_MESSAGE_BYTES)} if dim == "record_size" else {}
    target = make(overrides)
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix=f"sweep-{target.name}-", dir=os.environ.get("SWEEP_TMP")) as d:
        workdir = Path(d)
        t0 = time.monotonic()
        target.start(workdir)
        res: dict[str, float | str] = {"start_s": time.monotonic() - t0}
        try:
            res |= LOADS[dim](target, workdir, value, scale)
        finally:
            t1 = time.monotonic()
            target.stop()
            res["stop_s"] = time.monotonic() - t1
    res["load1_before"], res["load1_after"] = load0, os.getloadavg()[0]
    res["bound"] = bound({k: v for k, v in res.items() if isinstance(v, float | int)})
    return res


def _measure(target: Target, load: Callable[[], dict[str, float]],
             sockets: bool = False) -> dict[str, float | str]:
    socks = SocketSampler(target.pid)
    with RssSampler(target.pid) as rss, socks if sockets else contextlib.nullcontext(), \
            BrokerCpu(target.pid) as cpu, CoreBusy() as cores:
        r = load()
    out: dict[str, float | str] = {**r, **cpu.figures(), **cores.figures(), "peak_rss_mib": rss.peak_kb / 1024}
    if sockets:
        out["broker_sockets"] = float(socks.peak)
    return out


def first_touch(target: Target, topic: str, partitions: int) -> float:
    """One record to every partition of a new topic, unmeasured; its seconds.

    The first append to a fresh partition maps its indexes: on a machine with a large read_ahead_kb
    the page faults behind that dominated the measured seconds (docs/benchmarks.md, "First touch").
    And against Kafka the first produce to a just-created topic stalls in steps of 5 s (5.06 s at 10
    and 100 partitions, 15.06 s at 1,000: the period of franz-go's metadata minimum age, which gates
    a retry; not traced further): inside a measured load that stall was 5 s of Kafka's 8 (p99 ≈ 5 s
    in the first quiet run of the ``record_size`` rows). So every closed-loop load of the sweep
    starts on touched partitions and measures the steady state."""
    t0 = time.monotonic()
    kbench("produce", {"bootstrap": target.bootstrap, "topic": topic, "records": partitions, "size": 1024,
                       "acks": "1", "linger-ms": 0, "batch-bytes": 131072, "max-buffered": MAX_BUFFERED},
           pin=True, timeout=900)
    return time.monotonic() - t0


def load_partitions(target: Target, workdir: Path, value: float, scale: Scale) -> dict[str, float | str]:
    partitions = int(value)
    created = create_topic_timed(target.bootstrap, "sweep", partitions)
    created["first_touch_s"] = first_touch(target, "sweep", partitions)
    r = _measure(target, lambda: kbench("produce", {
        "bootstrap": target.bootstrap, "topic": "sweep", "records": scale.produce_records, "size": 1024,
        "acks": "1", "linger-ms": 5, "batch-bytes": 131072, "seconds": scale.produce_seconds,
        "max-buffered": MAX_BUFFERED, "inflight": scale.produce_inflight}, pin=True))
    return {**created, **r, "partitions": float(partitions)}


def load_connections(target: Target, workdir: Path, value: float, scale: Scale) -> dict[str, float | str]:
    clients = int(value)
    create_topic_timed(target.bootstrap, "sweep", FLEET_PARTITIONS)
    overflows = listen_overflows()
    r = _measure(target, lambda: kbench("fleet", {
        "bootstrap": target.bootstrap, "topic": "sweep", "clients": clients, "rate": FLEET_RATE,
        "seconds": scale.fleet_seconds, "warmup": scale.fleet_warmup, "size": 1024, "acks": "1",
        "connect-concurrency": FLEET_CONNECT_CONCURRENCY}, pin=True),
        sockets=True)
    r["listen_overflows"] = float(listen_overflows() - overflows)
    if r.get("failed"):
        raise RuntimeError(f"fleet of {clients} on {target.name}: {r['failed']} records failed: {r}")
    return r


def load_record_size(target: Target, workdir: Path, value: float, scale: Scale) -> dict[str, float | str]:
    size = int(value)
    records = max(64, min(scale.size_max_records, scale.size_bytes // size))
    create_topic_timed(target.bootstrap, "sweep", 4)
    touched = first_touch(target, "sweep", 4)
    return _measure(target, lambda: kbench("produce", {
        "bootstrap": target.bootstrap, "topic": "sweep", "records": records, "size": size, "acks": "1",
        "linger-ms": 5, "batch-bytes": max(131072, size + 16384), "seconds": scale.produce_seconds,
        "max-buffered": MAX_BUFFERED}, pin=True)) | {"record_size": float(size), "first_touch_s": touched}


def load_backlog(target: Target, workdir: Path, value: float, scale: Scale) -> dict[str, float | str]:
    records = int(value * GIB) // BACKLOG_RECORD
    create_topic_timed(target.bootstrap, "backlog", BACKLOG_PARTITIONS)
    fill = kbench("produce", {"bootstrap": target.bootstrap, "topic": "backlog", "records": records,
                              "size": BACKLOG_RECORD, "acks": "1", "linger-ms": 5, "batch-bytes": MIB}, pin=True)
    target.stop()  # a cold start: a fresh broker process on the backlog ...
    files = segment_files(data_dir(target, workdir), "backlog")
    evict(files)  # ... and none of its bytes in the page cache
    resident = resident_bytes(files)
    t0 = time.monotonic()
    target.start(workdir)
    restart = time.monotonic() - t0
    r = _measure(target, lambda: kbench("consume", {
        "bootstrap": target.bootstrap, "topic": "backlog", "partitions": BACKLOG_PARTITIONS,
        "clients": BACKLOG_PARTITIONS, "records": records}, pin=True))
    r["broker_cpu_s_per_gib"] = float(r["broker_cpu_s"]) / (records * BACKLOG_RECORD / GIB)
    r["time_to_first_record_s"] = float(r["seconds_with_connect"]) - float(r["seconds"])
    files = segment_files(data_dir(target, workdir), "backlog")
    return {**r, "backlog_gib": value, "fill_mb_per_s": fill["mb_per_s"], "fill_gen_cpu_util": fill["gen_cpu_util"],
            "restart_s": restart, "cache_resident_mib": resident / MIB,
            "segment_mib": sum(p.stat().st_size for p in files) / MIB,
            **cold_read_mb_per_s(files, DISK_CEILING_MAX)}


LOADS: dict[str, Callable[[Target, Path, float, Scale], dict[str, float | str]]] = {
    "partitions": load_partitions, "connections": load_connections, "record_size": load_record_size,
    "backlog": load_backlog}


# ---- the table and the chart -------------------------------------------------------------------

# (metric, label) per panel; the backlog's consume has no request latency: its second panel is the
# time to the first record after the cold start instead.
THROUGHPUT = ("mb_per_s", "MB/s")
LATENCY = {"backlog": ("time_to_first_record_s", "s to first record (cold)")}
DEFAULT_LATENCY = ("p99_latency_ms", "p99 ms")
RSS = ("peak_rss_mib", "peak RSS MiB")


def latency_metric(dim: str) -> tuple[str, str]:
    return LATENCY.get(dim, DEFAULT_LATENCY)


def summarize(runs: dict[str, dict[str, dict[str, list[dict[str, float | str]]]]]
              ) -> dict[str, dict[str, dict[str, dict[str, float | str]]]]:
    """dim -> point -> broker -> the median of each numeric figure over the repetitions (and the
    `bound` of the first; <metric>_min/_max for the plotted metrics), with ratio_<metric> = kbroker /
    kafka for the plotted metrics."""
    table: dict[str, dict[str, dict[str, dict[str, float | str]]]] = {}
    for dim, points in runs.items():
        for point, brokers in points.items():
            row: dict[str, dict[str, float | str]] = {}
            for name, reps in brokers.items():
                if not reps:
                    continue
                keys = {k for r in reps for k, v in r.items() if isinstance(v, int | float)}
                med: dict[str, float | str] = {k: statistics.median(float(r[k]) for r in reps if k in r)
                                               for k in sorted(keys)}
                for m in (THROUGHPUT[0], latency_metric(dim)[0], RSS[0]):  # the spread the chart draws
                    vals = [float(r[m]) for r in reps if isinstance(r.get(m), int | float)]
                    if vals:
                        med[f"{m}_min"], med[f"{m}_max"] = min(vals), max(vals)
                first = {k: float(v) for k, v in reps[0].items() if isinstance(v, int | float)}
                med["bound"] = bound(first) if "error" not in reps[0] else "failed"
                row[name] = med
            if "kbroker" in row and "kafka" in row:
                ratios: dict[str, float | str] = {}
                for m in (THROUGHPUT[0], latency_metric(dim)[0], RSS[0], "broker_cpu_util"):
                    a, b = row["kbroker"].get(m), row["kafka"].get(m)
                    if isinstance(a, float) and isinstance(b, float) and b:
                        ratios[m] = a / b
                row["ratio_kbroker_over_kafka"] = ratios
            table.setdefault(dim, {})[point] = row
    return table


def _f(v: object, fmt: str = ".1f") -> str:
    return format(v, fmt) if isinstance(v, int | float) else "-"


def print_table(table: dict[str, dict[str, dict[str, dict[str, float | str]]]], names: list[str]) -> None:
    print(f"{'dimension':12} {'point':>9} {'broker':8} {'MB/s':>8} {'rec/s':>9} {'p99 ms':>8} {'RSS MiB':>8} "
          f"{'brk cpu':>7} {'core0':>5} {'gen cpu':>7} {'gen ceil MB/s':>13}  bound / notes")
    for dim, points in table.items():
        lat_key = latency_metric(dim)[0]
        for point, row in points.items():
            for name in names:
                r = row.get(name)
                if r is None:
                    continue
                notes = str(r.get("bound", ""))
                if dim == "partitions":
                    notes += (f"; create {_f(r.get('create_s'), '.2f')} s, ready {_f(r.get('ready_s'), '.2f')} s, "
                              f"first touch {_f(r.get('first_touch_s'), '.2f')} s")
                if dim == "connections":
                    notes += f"; {_f(r.get('broker_sockets'), '.0f')} sockets"
                if dim == "backlog":
                    notes += (f"; disk {_f(r.get('disk_ceiling_mb_per_s'), '.0f')} MB/s, cached "
                              f"{_f(r.get('cache_resident_mib'), '.0f')} MiB, fill {_f(r.get('fill_mb_per_s'), '.0f')}"
                              f" MB/s")
                print(f"{dim:12} {point:>9} {name:8} {_f(r.get('mb_per_s')):>8} {_f(r.get('records_per_s'), '.0f'):>9} "
                      f"{_f(r.get(lat_key), '.2f'):>8} {_f(r.get('peak_rss_mib'), '.0f'):>8} "
                      f"{_f(r.get('broker_cpu_util'), '.2f'):>7} {_f(r.get('broker_core_busy'), '.2f'):>5} "
                      f"{_f(r.get('gen_cpu_util'), '.2f'):>7} "
                      f"{_f(r.get('gen_ceiling_mb_per_s'), '.0f'):>13}  {notes}")
            ratio = row.get("ratio_kbroker_over_kafka")
            if ratio:
                print(f"{'':12} {'':>9} {'ratio':8} {_f(ratio.get('mb_per_s'), '.2f'):>8} {'':>9} "
                      f"{_f(ratio.get(lat_key), '.2f'):>8} {_f(ratio.get('peak_rss_mib'), '.2f'):>8} "
                      f"{_f(ratio.get('broker_cpu_util'), '.2f'):>7}")


COLORS = {"kbroker": "#2a9d8f", "kafka": "#e76f51"}


def chart(table: dict[str, dict[str, dict[str, dict[str, float | str]]]], names: list[str], path: Path,
          title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    dims = [d for d in DIMENSIONS if d in table]
    fig, axes = plt.subplots(len(dims), 3, figsize=(15, 3.6 * len(dims)), squeeze=False)
    for row_axes, dim in zip(axes, dims, strict=True):
        points = table[dim]
        xs = [float(p) for p in points]
        for ax, (metric, label) in zip(row_axes, (THROUGHPUT, latency_metric(dim), RSS), strict=True):
            for name in names:
                ys = [points[p].get(name, {}).get(metric) for p in points]
                pts = [(x, y) for x, y in zip(xs, ys, strict=True) if isinstance(y, float)]
                if pts:
                    ax.plot([x for x, _ in pts], [y for _, y in pts], "o-", color=COLORS.get(name), label=name)
                    # the spread over the repetitions (min to max), where there was more than one
                    lo = [points[p].get(name, {}).get(f"{metric}_min") for p in points]
                    hi = [points[p].get(name, {}).get(f"{metric}_max") for p in points]
                    bars = [(x, y, a, b) for x, y, a, b in zip(xs, ys, lo, hi, strict=True)
                            if isinstance(y, float) and isinstance(a, float) and isinstance(b, float) and b > a]
                    if bars:
                        ax.errorbar([x for x, *_ in bars], [y for _, y, *_ in bars],
                                    yerr=[[y - a for _, y, a, _ in bars], [b - y for _, y, _, b in bars]],
                                    fmt="none", ecolor=COLORS.get(name), capsize=3, alpha=0.7)
                    for x, y in pts:
                        ax.annotate(f"{y:.3g}", (x, y), fontsize=7, textcoords="offset points", xytext=(0, 4),
                                    ha="center")
            if metric == "mb_per_s":  # the ceilings, dashed/dotted, where the point had one
                for name in names:
                    for key, style, what in (("gen_ceiling_mb_per_s", ":x", "generator ceiling"),
                                             ("disk_ceiling_mb_per_s", "--+", "disk ceiling (cold read)")):
                        cs = [(x, points[p].get(name, {}).get(key)) for x, p in zip(xs, points, strict=True)]
                        cs2 = [(x, c) for x, c in cs if isinstance(c, float)]
                        if cs2:
                            ax.plot([x for x, _ in cs2], [c for _, c in cs2], style, color=COLORS.get(name),
                                    label=f"{what} ({name} run)")
            ax.set_xscale("log")
            ax.set_xticks(xs, [f"{x:,.0f}" if x == int(x) else f"{x:g}" for x in xs])  # the swept points themselves
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xlabel(f"{dim} ({UNITS[dim]})")
            ax.set_ylabel(label)
            if metric == RSS[0]:
                ax.set_ylim(bottom=0)
            else:
                ax.set_yscale("log")
            ax.set_title(f"{dim}: {label}", fontsize=10)
            ax.legend(fontsize=7)
            ax.grid(True, which="both", alpha=0.3)
    fig.suptitle("\n".join(textwrap.wrap(title, 130)), fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---- main --------------------------------------------------------------------------------------


def parse_points(specs: list[str], dims: list[str], quick: bool) -> dict[str, list[float]]:
    points = {d: list((QUICK_POINTS if quick else POINTS)[d]) for d in dims}
    for spec in specs:
        dim, _, values = spec.partition("=")
        if dim not in DIMENSIONS:
            raise SystemExit(f"--points {spec}: unknown dimension {dim!r} (one of {', '.join(DIMENSIONS)})")
        points[dim] = [float(v) for v in values.split(",") if v]
    return {d: points[d] for d in dims}


def read_ahead_path(directory: Path) -> Path | None:
    """The sysfs ``read_ahead_kb`` of the block device holding ``directory`` (a partition's disk's), or None."""
    dev = os.stat(directory).st_dev
    queue = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    for candidate in (queue / "queue/read_ahead_kb", queue / "../queue/read_ahead_kb"):
        if candidate.exists():
            return candidate.resolve()
    return None


@contextlib.contextmanager
def read_ahead_kb(directory: Path, kb: int | None):
    """Run with the device's read_ahead_kb set to ``kb`` (root), put back after; yields the value in effect.

    A page fault on a file mapping reads the device's read_ahead_kb around it unless the mapping is
    advised otherwise. Kafka maps its indexes without advice: on a machine where that is 8 MiB, the
    first appends to 1,000 fresh partitions fill 16 GiB of page cache with zeros (docs/benchmarks.md,
    "First touch"). ``--read-ahead-kb 128`` runs a dimension as on a machine with Linux's default.
    """
    path = read_ahead_path(directory)
    old = int(path.read_text()) if path else None
    if kb is None or path is None or old == kb:
        yield old
        return
    path.write_text(str(kb))
    try:
        yield int(path.read_text())
    finally:
        path.write_text(str(old))


def point_key(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:g}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dims", default=",".join(DIMENSIONS), help="which dimensions, in order")
    ap.add_argument("--points", action="append", default=[], metavar="DIM=V1,V2",
                    help="the points of a dimension (backlog in GiB); default: the issue's")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="fewer points, a smoke load each: checks, not figures")
    ap.add_argument("--brokers", default="kbroker,kafka")
    ap.add_argument("--unpinned", action="store_true", help="broker and generator free on every core")
    ap.add_argument("--produce-inflight", type=int, default=1, metavar="N",
                    help="partitions dimension: Produce requests the generator keeps in flight per broker "
                         "(franz-go's default, 1, makes the row a closed loop)")
    ap.add_argument("--name", default="sweep", help="results file stem")
    ap.add_argument("--results-dir", type=Path, default=RESULTS)
    ap.add_argument("--resume", type=Path, metavar="JSON",
                    help="keep the runs of a (partial) results file and run only the points it lacks")
    ap.add_argument("--read-ahead-kb", type=int, metavar="KB",
                    help="set the work directory's block device read_ahead_kb for the run (root; restored after)")
    ap.add_argument("--render", type=Path, metavar="JSON",
                    help="no run: the table and the chart of a (partial) results file's runs, written to <name>")
    a = ap.parse_args(argv)
    if a.render:
        return render(a.render, a.results_dir, a.name)
    dims = [d for d in a.dims.split(",") if d]
    for d in dims:
        if d not in DIMENSIONS:
            raise SystemExit(f"--dims: unknown dimension {d!r} (one of {', '.join(DIMENSIONS)})")
    points = parse_points(a.points, dims, a.quick)
    scale = dataclasses.replace(QUICK if a.quick else FULL, produce_inflight=a.produce_inflight)
    names = [n for n in a.brokers.split(",") if n]
    cpus = None if a.unpinned else BROKER_CPU
    makers: dict[str, Callable[[dict[str, str]], Target]] = {
        "kbroker": lambda o: KBrokerTarget(o, cpus), "kafka": lambda o: KafkaTarget(o, cpus)}
    kbench_binary()  # built before any clock runs
    out_dir: Path = a.results_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    result: dict[str, object] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join([".venv/bin/python", "benchmarks/bench_sweep.py", *(argv or sys.argv[1:])]),
        "uptime_before": uptime(), "loadavg_before": loadavg(), "cpus": os.cpu_count(),
        "pinned": not a.unpinned, "points": points, "reps": a.reps, "scale": scale.__dict__,
        "generators": GENERATORS}
    runs: dict[str, dict[str, dict[str, list[dict[str, float | str]]]]] = {}
    if a.resume:
        earlier = json.loads(a.resume.read_text())
        runs = earlier["runs"]
        result["resumed_run"] = {k: earlier.get(k) for k in ("when", "command", "uptime_before", "loadavg_before")}
        for points_ in runs.values():  # a failed point is run again
            for brokers in points_.values():
                for n in brokers:
                    brokers[n] = [r for r in brokers[n] if "error" not in r]
        result["resumed_from"] = str(a.resume)
    work_root = Path(os.environ.get("SWEEP_TMP") or tempfile.gettempdir())
    ra = contextlib.ExitStack()
    atexit.register(ra.close)  # put back even when the run is interrupted
    result["read_ahead_kb"] = ra.enter_context(read_ahead_kb(work_root, a.read_ahead_kb))
    print(f"read_ahead_kb of {work_root}'s device: {result['read_ahead_kb']}", file=sys.stderr, flush=True)
    k = 0
    for dim in dims:
        for value in points[dim]:
            for rep in range(a.reps):
                order = names if k % 2 == 0 else names[::-1]
                k += 1
                for name in order:
                    if len(runs.get(dim, {}).get(point_key(value), {}).get(name, [])) > rep:
                        continue  # resumed: this one is done
                    print(f"{dim}={point_key(value)} rep {rep + 1}/{a.reps}: {name}  (load {loadavg()})",
                          file=sys.stderr, flush=True)
                    try:
                        r = run_point(makers[name], dim, value, scale)
                    except Exception as e:  # one failed point must not lose the others: it is recorded
                        print(f"  failed: {e!r}", file=sys.stderr, flush=True)
                        r = {"error": repr(e)[:2000], "bound": "failed"}
                    runs.setdefault(dim, {}).setdefault(point_key(value), {}).setdefault(name, []).append(r)
                    result["runs"] = runs
                    (out_dir / f"{a.name}.partial.json").write_text(json.dumps(result, indent=2))
    ra.close()
    table = summarize(runs)
    result |= {"table": table, "uptime_after": uptime(), "loadavg_after": loadavg(), "runs": runs}
    (out_dir / f"{a.name}.json").write_text(json.dumps(result, indent=2))
    (out_dir / f"{a.name}.partial.json").unlink(missing_ok=True)
    print_table(table, names)
    pinning = "unpinned" if a.unpinned else "pinned: broker core 0, generator core 1"
    chart(table, names, out_dir / f"{a.name}.png",
          f"Scaling sweep, kbroker vs Apache Kafka 4.3.1, {pinning}, read_ahead_kb {result['read_ahead_kb']}, "
          f"median of {a.reps} (bars: min-max); load average before {result['loadavg_before']}, "
          f"after {result['loadavg_after']}")
    print(f"results: {out_dir / (a.name + '.json')}  chart: {out_dir / (a.name + '.png')}")
    return 0


def render(src: Path, out_dir: Path, name: str) -> int:
    """The table and the chart again from the runs of a results file (a partial one included)."""
    result = json.loads(src.read_text())
    runs = result["runs"]
    names = [n for n in ("kbroker", "kafka") if any(n in b for pts in runs.values() for b in pts.values())]
    table = summarize(runs)
    result["table"] = table
    result.setdefault("uptime_after", "not recorded: the run did not finish")
    result.setdefault("loadavg_after", [])
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{name}.json").write_text(json.dumps(result, indent=2))
    print_table(table, names)
    pinning = "pinned: broker core 0, generator core 1" if result.get("pinned", True) else "unpinned"
    chart(table, names, out_dir / f"{name}.png", f"Scaling sweep, kbroker vs Apache Kafka 4.3.1, {pinning}, "
          f"read_ahead_kb {result.get('read_ahead_kb', 'not recorded')}, medians (bars: min-max over the "
          f"repetitions); load average before {result['loadavg_before']}, after {result['loadavg_after']}")
    return 0


GENERATORS = {
    "partitions": "kbench produce (Go, franz-go v1.22.3): 1 KiB, linger 5 ms, 128 KiB batches, acks=1, round robin, "
                  "one Produce request in flight per broker unless --produce-inflight says more",
    "connections": f"kbench fleet (Go, franz-go v1.22.3): N clients x {FLEET_RATE} records/s of 1 KiB, linger 0, "
                   f"acks=1, {FLEET_PARTITIONS} partitions; latency from the due time",
    "record_size": "kbench produce: 4 partitions, linger 5 ms, batches max(128 KiB, size + 16 KiB), acks=1; "
                   "message.max.bytes=4194304 on both brokers",
    "backlog": f"fill: kbench produce {BACKLOG_RECORD // 1024} KiB records, 1 MiB batches; consume after a broker "
               f"restart and a page-cache eviction: kbench consume, {BACKLOG_PARTITIONS} partitions, "
               f"{BACKLOG_PARTITIONS} clients",
}


if __name__ == "__main__":
    raise SystemExit(main())
