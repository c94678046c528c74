"""kafka-consumer-perf-test through a consumer group, kbroker against Apache Kafka 4.3, in one run.

    .venv/bin/python benchmarks/bench_group_consume.py [--rounds 2] [--records 1000000] [--initial-delay 3000]

Issue 6 asks for the figure of Kafka's own `kafka-consumer-perf-test` consuming 1,000,000 records
through a group. Per round, a fresh kbroker and a fresh reference Kafka (order A B, then B A; broker
pinned to core 0, tools to core 1, as `benchmarks/run.py` does) each get a 6-partition topic filled by
`kafka-producer-perf-test` (100-byte records, acks=1, linger.ms=20, batch.size=262144), then
`kafka-consumer-perf-test` reads all of it twice, each time with a new group (classic protocol, the
Java consumer's defaults). Both brokers get the same `group.initial.rebalance.delay.ms`.

Reported per broker, p50 (min..max) over every consumer run, and the ratio kbroker/Kafka of the p50s:
`MB.sec` (end to end: joining the group included), `rebalance.time.ms` (the join), `fetch.MB.sec` and
`fetch.nMsg.sec` (the consuming phase alone). Results: benchmarks/results/group_consume.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.run import RESULTS, create_topic, pinned, producer_perf  # noqa: E402
from benchmarks.targets import BROKER_CPU, KafkaTarget, KBrokerTarget, Target  # noqa: E402
from tests.support.java import java_command  # noqa: E402

TOPIC = "perf"
PARTITIONS = 6
METRICS = ("MB.sec", "rebalance.time.ms", "fetch.MB.sec", "fetch.nMsg.sec")


def consumer_perf(bootstrap: str, group: str, records: int) -> dict[str, float]:
    args = ["--bootstrap-server", bootstrap, "--topic", TOPIC, "--num-records", str(records),
            "--group", group, "--timeout", "120000"]
    out = subprocess.run(pinned(java_command("org.apache.kafka.tools.ConsumerPerformance", args)),
                         capture_output=True, text=True, timeout=900, cwd=ROOT)
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    at = next((i for i, line in enumerate(lines) if line.startswith("start.time")), None)
    if out.returncode != 0 or at is None or at + 1 >= len(lines):
        raise RuntimeError(f"consumer perf test failed: {out.stdout[-2000:]} {out.stderr[-2000:]}")
    row = dict(zip([h.strip() for h in lines[at].split(",")], [v.strip() for v in lines[at + 1].split(",")],
                   strict=False))
    consumed = int(row["data.consumed.in.nMsg"])
    if consumed < records:
        raise RuntimeError(f"consumer perf test read {consumed} of {records} records")
    return {m: float(row[m]) for m in METRICS}


def run_one(target: Target, records: int, consumers: int) -> list[dict[str, float]]:
    with tempfile.TemporaryDirectory(prefix=f"group-consume-{target.name}-") as d:
        target.start(Path(d))
        try:
            create_topic(target.bootstrap, TOPIC, PARTITIONS)
            producer_perf(target.bootstrap, TOPIC, records, 100,
                          {"acks": "1", "linger.ms": "20", "batch.size": "262144"})
            return [consumer_perf(target.bootstrap, f"perf-g{i}", records) for i in range(consumers)]
        finally:
            target.stop()


def summarize(runs: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    table: dict[str, dict[str, float]] = {}
    for m in METRICS:
        row: dict[str, float] = {}
        for b, samples in runs.items():
            values = [s[m] for s in samples]
            row.update({f"{b}_p50": statistics.median(values), f"{b}_min": min(values), f"{b}_max": max(values)})
        if row.get("kafka_p50"):
            row["ratio"] = row["kbroker_p50"] / row["kafka_p50"]
        table[m] = row
    return table


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=2, help="fresh-broker rounds per broker, A B / B A")
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--consumers", type=int, default=2, help="consumer perf runs (new group each) per broker start")
    p.add_argument("--initial-delay", type=int, default=3000, help="group.initial.rebalance.delay.ms, both brokers")
    p.add_argument("--brokers", default="kbroker,kafka")
    p.add_argument("--out", type=Path, default=RESULTS / "group_consume.json")
    a = p.parse_args(argv)
    overrides = {"group.initial.rebalance.delay.ms": str(a.initial_delay)}
    makers: dict[str, Callable[[dict[str, str]], Target]] = {"kbroker": KBrokerTarget, "kafka": KafkaTarget}
    brokers = a.brokers.split(",")
    runs: dict[str, list[dict[str, float]]] = {b: [] for b in brokers}
    started = time.monotonic()
    for rnd in range(a.rounds):
        for b in brokers if rnd % 2 == 0 else list(reversed(brokers)):
            print(f"round {rnd + 1}/{a.rounds}: {b}", file=sys.stderr, flush=True)
            runs[b].extend(run_one(makers[b](overrides), a.records, a.consumers))
    table = summarize(runs)
    print(f"{'metric':<20}" + "".join(f"{b + ' p50 (min..max)':>32}" for b in brokers) + "   ratio")
    for m, row in table.items():
        cells = "".join(f"{row[f'{b}_p50']:>14,.1f} ({row[f'{b}_min']:,.1f}..{row[f'{b}_max']:,.1f})".rjust(32)
                        for b in brokers)
        print(f"{m:<20}{cells}   {row.get('ratio', float('nan')):.2f}")
    out: Path = a.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "command": " ".join([".venv/bin/python", "benchmarks/bench_group_consume.py", *(argv or sys.argv[1:])]),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "conditions": {"cpus": os.cpu_count(), "broker_cpu": BROKER_CPU, "load_cpu": "1",
                       "loadavg": os.getloadavg(), "initial_delay_ms": a.initial_delay},
        "runs": runs, "summary": table, "seconds": round(time.monotonic() - started, 1),
    }, indent=2) + "\n")
    print(f"\nresults: {out}  ({time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
