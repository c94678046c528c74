"""Where P4's end-to-end latency goes inside kbroker: a traced broker, kbench e2e, a timeline (issue 17).

    .venv/bin/python benchmarks/p4_trace.py 20000 50000 [--seconds 6]

Starts `kbroker serve` (pinned to core 0, like run.py's P4) with tracing patches applied from outside
(`--broker-child` below: the classes are wrapped in that process only, the broker's hot path carries
no trace code), runs `kbench e2e` (core 1) at each rate, and prints per rate:

- appends: how many, records and bytes per append (the producer's batch size: ~965 records of 1 KiB
  means its 1 MB batch cap, i.e. the producer is behind), and how late each append is against the
  generator's schedule (offset o is due at o / rate after offset 0);
- Produce / Fetch RequestMetrics phases (local, remote = worker or purgatory, response queue, total);
- fetches: how many waited in the purgatory, bytes returned, append -> fetch-answered time of the
  first returned offset, and the backlog (log end - fetch offset) when each fetch arrived;
- the produce cycle: whether produce requests overlap (pipelining) and the gap between a produce
  response and the next produce's first byte (the client's share of the cycle);
- event-loop stalls over 10 ms, with the loop thread's CPU time in them (CPU ~ stall: the loop was
  busy; CPU ~ 0: the process was off the CPU, e.g. a loaded machine).
"""

from __future__ import annotations

import bisect
import json
import os
import statistics as st
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _child(trace_out: str, argv: list[str]) -> None:
    """The broker process: wrap a few methods to record (kind, monotonic times, ...) tuples, dump at exit."""
    import asyncio
    import atexit

    from kbroker.net import connection as cmod
    from kbroker.replica import replica_manager as rmmod

    ev: list[tuple[Any, ...]] = []
    mono = time.monotonic
    append = rmmod.ReplicaManager._append_to_local_log

    def traced_append(self: Any, key: Any, records: Any, *a: Any, **k: Any) -> Any:
        t0 = mono()
        res, nxt = append(self, key, records, *a, **k)
        if not key[0].startswith("__"):
            ev.append(("A", t0, mono(), res.base_offset, nxt, len(records)))
        return res, nxt

    fetch = rmmod.ReplicaManager.fetch_messages
    started: list[int] = []

    def tick_start(loop: asyncio.AbstractEventLoop) -> None:
        state = {"t": mono(), "c": time.thread_time()}

        def tick() -> None:
            now, cpu = mono(), time.thread_time()
            late = now - state["t"] - 0.002
            if late > 0.01:
                ev.append(("L", state["t"], now, late, cpu - state["c"]))
            state["t"], state["c"] = now, cpu
            loop.call_later(0.002, tick)

        loop.call_later(0.002, tick)

    def traced_fetch(self: Any, params: Any, requests: Any) -> Any:
        if not started:
            started.append(1)
            tick_start(asyncio.get_running_loop())
        t0 = mono()
        out = fetch(self, params, requests)
        if requests and requests[0].topic and not requests[0].topic.startswith("__"):
            req = requests[0]

            def note(results: Any, delayed: int) -> None:
                r = results[req.key]
                ev.append(("F", t0, mono(), req.fetch_offset, r.records_size, delayed, params.min_bytes,
                           params.max_wait_ms, req.max_bytes))

            if isinstance(out, dict):
                note(out, 0)
            else:
                out.add_done_callback(lambda f: f.cancelled() or f.exception() or note(f.result(), 1))
        return out

    buffer_updated = cmod.KafkaConnection.buffer_updated

    def traced_buffer_updated(self: Any, n: int) -> None:
        since = self.receiving_since
        buffer_updated(self, n)
        if since and self.receiving_since == 0.0:
            ev.append(("R", since, mono()))

    record = cmod.KafkaConnection._record

    def traced_record(slots: Any, flushed: float, sent: float) -> None:
        for s in slots:
            if s.stats is not None and s.stats.api_key in (0, 1):
                ev.append(("Q", s.stats.api_key, s.received, s.dispatched, s.local_done, s.completed, flushed, sent))
        record(slots, flushed, sent)

    rmmod.ReplicaManager._append_to_local_log = traced_append  # type: ignore[method-assign]
    rmmod.ReplicaManager.fetch_messages = traced_fetch  # type: ignore[method-assign]
    cmod.KafkaConnection.buffer_updated = traced_buffer_updated  # type: ignore[method-assign]
    cmod.KafkaConnection._record = staticmethod(traced_record)  # type: ignore[method-assign,assignment]
    atexit.register(lambda: Path(trace_out).write_text(json.dumps(ev)))
    from kbroker.cli import main

    sys.argv = ["kbroker", *argv]
    sys.exit(main())


def _q(xs: list[float], scale: float = 1000.0) -> str:
    if len(xs) < 2:
        return str([round(x * scale, 2) for x in xs])
    qs = st.quantiles(xs, n=10)
    return f"p10 {qs[0] * scale:.2f} p50 {qs[4] * scale:.2f} p90 {qs[8] * scale:.2f} max {max(xs) * scale:.2f}"


def analyse(ev: list[list[Any]], rate: float) -> None:
    appends = [e for e in ev if e[0] == "A"]
    fetches = [e for e in ev if e[0] == "F"]
    phases = [e for e in ev if e[0] == "Q"]
    frames = sorted((e for e in ev if e[0] == "R"), key=lambda e: e[1])
    stalls = [e for e in ev if e[0] == "L"]
    if not appends:
        print("  no appends traced")
        return
    dur = appends[-1][1] - appends[0][1] or 1.0
    print(f"  appends {len(appends)} ({len(appends) / dur:.0f}/s), records/append "
          f"{(appends[-1][4] - appends[0][3]) / len(appends):.0f}, bytes/append {st.mean(a[5] for a in appends):.0f}")
    base = appends[0][2] - appends[0][3] / rate
    lags = [a[2] - base - a[4] / rate for a in appends]
    print(f"  append lateness vs schedule (ms): {_q(lags)}")
    for api, name in ((0, "Produce"), (1, "Fetch")):
        q = [x for x in phases if x[1] == api]
        if q:
            print(f"  {name} ({len(q)}): local {_q([x[4] - x[3] for x in q])}; remote {_q([x[5] - x[4] for x in q])}; "
                  f"total {_q([x[7] - x[2] for x in q])}")
    if fetches:
        offs = [a[3] for a in appends]
        wake = []
        for f in fetches:
            i = bisect.bisect_right(offs, f[3]) - 1
            if i >= 0 and f[4] > 0:
                wake.append(f[2] - appends[i][2])
        ends = [(a[2], a[4]) for a in appends]
        times = [t for t, _ in ends]
        backlog = [float(ends[i][1] - f[3]) for f in fetches if (i := bisect.bisect_right(times, f[1]) - 1) >= 0]
        print(f"  fetches {len(fetches)}, waited in purgatory {sum(1 for f in fetches if f[5])}, bytes/fetch "
              f"{st.mean(f[4] for f in fetches):.0f} (min.bytes {fetches[-1][6]}, max.wait {fetches[-1][7]} ms, "
              f"partition max {fetches[-1][8]})")
        print(f"  append -> fetch answered (ms): {_q(wake)}")
        print(f"  backlog at fetch arrival (records): {_q(backlog, 1.0)}")
    produce = [x for x in phases if x[1] == 0]
    if len(produce) > 2 and frames:
        starts = [r[1] for r in frames]

        def first_byte(received: float) -> float:
            i = bisect.bisect_right(starts, received) - 1
            return starts[i] if i >= 0 else received

        overlap = sum(1 for a, b in zip(produce, produce[1:], strict=False) if b[2] < a[7])
        gap = [first_byte(b[2]) - a[7] for a, b in zip(produce, produce[1:], strict=False)]
        print(f"  produce requests overlapping the previous one: {overlap} of {len(produce)}; "
              f"response -> next produce's first byte (ms): {_q(gap)}")
    print(f"  loop stalls > 10 ms: {len(stalls)}, {sum(s[3] for s in stalls) * 1000:.0f} ms late in all, "
          f"{sum(s[4] for s in stalls) * 1000:.0f} ms of loop CPU in them")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--broker-child":
        _child(sys.argv[2], sys.argv[3:])
        return 0
    sys.path.insert(0, str(ROOT))
    from benchmarks.instruments import kbench_binary
    from benchmarks.run import create_topic
    from benchmarks.targets import free_port, wait_for_port

    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    seconds = "6"
    if "--seconds" in sys.argv:
        seconds = sys.argv[sys.argv.index("--seconds") + 1]
        args.remove(seconds)
    rates = args or ["50000"]
    with tempfile.TemporaryDirectory(prefix="p4trace-") as d:
        port = free_port()
        trace = Path(d) / "trace.json"
        with open(Path(d) / "broker.log", "wb") as log:
            broker = subprocess.Popen(
                ["taskset", "-c", "0", sys.executable, __file__, "--broker-child", str(trace), "serve",
                 "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override", f"log.dirs={d}/data",
                 "--override", "num.partitions=1"],
                stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
            try:
                wait_for_port(port, 60)
                bootstrap = f"127.0.0.1:{port}"
                kbench = kbench_binary()
                spans = []
                for rate in rates:
                    create_topic(bootstrap, f"p4-{rate}")
                    t0 = time.monotonic()
                    out = subprocess.run(["taskset", "-c", "1", kbench, "e2e", "-bootstrap", bootstrap, "-topic",
                                          f"p4-{rate}", "-rate", rate, "-seconds", seconds, "-warmup", "2",
                                          "-size", "1024", "-acks", "1"],
                                         capture_output=True, text=True, timeout=600, check=True)
                    spans.append((rate, t0, time.monotonic(), json.loads(out.stdout.strip().splitlines()[-1])))
            finally:
                broker.terminate()
                broker.wait(60)
        events = json.loads(trace.read_text())
    for rate, t0, t1, r in spans:
        print(f"rate {rate}: kbench p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, send lag p99 "
              f"{r['send_lag_p99_ms']:.1f} ms (load {os.getloadavg()[0]:.1f})")
        window = [e for e in events if (e[2] if e[0] == "Q" else e[1]) and t0 <= (e[2] if e[0] == "Q" else e[1]) <= t1]
        analyse(window, float(rate))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
