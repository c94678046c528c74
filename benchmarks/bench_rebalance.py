"""Rebalance latency side by side: a 4th consumer joins a group, kbroker against Apache Kafka 4.3.

    .venv/bin/python benchmarks/bench_rebalance.py [--initial-delays 3000,0] [--rounds 2] [--iterations 5]
        [--first-joins 2] [--group-protocol classic|consumer] [--assignors A,B] [--brokers kbroker,kafka]

About 7 minutes with the defaults on a 2-core machine (Kafka's start-up is a third of it).
Assignors default to the clients' range and cooperative-sticky (classic protocol), or the brokers'
uniform and range (KIP-848 consumer protocol).

For each `group.initial.rebalance.delay.ms` (given to both brokers) and each round, a fresh kbroker
and a fresh reference Kafka are started the way `benchmarks/run.py` starts them (`targets.py`: broker
pinned to core 0) in alternating order (A B, then B A), a 12-partition topic is created, and
`benchmarks/groups_load.py` runs pinned to core 1: per assignor, 3 consumers join an empty group
(first_join), then a 4th joins (join) and leaves (leave) `--iterations` times. Figures are
milliseconds from the subscribe()/close() to the moment every member holds its new assignment (the
clients' rebalance callbacks); the *_broker figures are the same moment as the broker reports it
(describe_consumer_groups: Stable, all members, complete assignment; polled every 20 ms).

Results: benchmarks/results/rebalance.json, one entry per --label (default: the group protocol)
with the settings, the machine's load, every sample and the summary (p50, min, max per broker and
the ratio kbroker/Kafka of the p50s: below 1 means kbroker rebalances faster); a table on stdout.
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

from benchmarks.run import PY, RESULTS, create_topic, pinned  # noqa: E402
from benchmarks.targets import BROKER_CPU, KafkaTarget, KBrokerTarget, Target  # noqa: E402

Samples = dict[str, dict[str, list[float]]]  # assignor -> metric -> samples (ms)


def broker_overrides(delay_ms: int, protocol: str, heartbeat_ms: int) -> dict[str, str]:
    o = {"group.initial.rebalance.delay.ms": str(delay_ms)}
    if protocol == "consumer":
        # KIP-848: the broker sets the heartbeat interval (default 5 s, floor 5 s); give it the
        # clients' classic interval so both protocols are timed with the same heartbeat.
        o.update({"group.consumer.min.heartbeat.interval.ms": str(heartbeat_ms),
                  "group.consumer.heartbeat.interval.ms": str(heartbeat_ms)})
    return o


def wait_for_topic(bootstrap: str, topic: str, partitions: int, timeout: float = 60) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        t = admin.list_topics(topic, timeout=10).topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == partitions \
                and all(p.leader >= 0 for p in t.partitions.values()):
            return
        time.sleep(0.1)
    raise TimeoutError(f"{topic} has no leaders for {partitions} partitions after {timeout}s")


def run_one(target: Target, a: argparse.Namespace) -> Samples:
    with tempfile.TemporaryDirectory(prefix=f"rebalance-{target.name}-") as d:
        target.start(Path(d))
        try:
            create_topic(target.bootstrap, "rebalance", a.partitions)
            wait_for_topic(target.bootstrap, "rebalance", a.partitions)
            out = subprocess.run(pinned([
                PY, str(ROOT / "benchmarks" / "groups_load.py"), "--bootstrap", target.bootstrap,
                "--topic", "rebalance", "--partitions", str(a.partitions), "--assignors", a.assignors,
                "--group-protocol", a.group_protocol, "--heartbeat-ms", str(a.heartbeat_ms),
                "--first-joins", str(a.first_joins), "--iterations", str(a.iterations)]),
                capture_output=True, text=True, timeout=900, cwd=ROOT)
            if out.returncode != 0:
                raise RuntimeError(f"groups_load against {target.name} failed: {out.stderr[-3000:]}")
            return dict(json.loads(out.stdout.strip().splitlines()[-1]))
        finally:
            target.stop()


def summarize(runs: dict[str, list[Samples]]) -> dict[str, dict[str, dict[str, float]]]:
    """assignor -> metric -> {broker_p50/min/max/n, ratio}: every sample of every round pooled."""
    pooled: dict[str, dict[str, dict[str, list[float]]]] = {}
    for broker, rounds in runs.items():
        for r in rounds:
            for asg, samples in r.items():
                for m, vals in samples.items():
                    pooled.setdefault(asg, {}).setdefault(m, {}).setdefault(broker, []).extend(vals)
    table: dict[str, dict[str, dict[str, float]]] = {}
    for asg, by_metric in pooled.items():
        for m, per_broker in by_metric.items():
            row: dict[str, float] = {}
            for b, vals in per_broker.items():
                if vals:
                    row.update({f"{b}_p50": statistics.median(vals), f"{b}_min": min(vals),
                                f"{b}_max": max(vals), f"{b}_n": len(vals)})
            if row.get("kafka_p50") and "kbroker_p50" in row:
                row["ratio"] = row["kbroker_p50"] / row["kafka_p50"]
            table.setdefault(asg, {})[m] = row
    return table


def print_table(delay: int, table: dict[str, dict[str, dict[str, float]]]) -> None:
    print(f"\ngroup.initial.rebalance.delay.ms={delay}")
    print(f"{'assignor':20} {'metric':22} {'kbroker p50 (min..max) n':>30} {'kafka p50 (min..max) n':>30} {'ratio':>6}")
    for asg, metrics in table.items():
        for m, row in metrics.items():
            print(f"{asg:20} {m:22} {_cell(row, 'kbroker'):>30} {_cell(row, 'kafka'):>30} "
                  f"{row.get('ratio', float('nan')):6.2f}")


def _cell(row: dict[str, float], b: str) -> str:
    if f"{b}_p50" not in row:
        return "-"
    return f"{row[f'{b}_p50']:.0f} ({row[f'{b}_min']:.0f}..{row[f'{b}_max']:.0f}) {row[f'{b}_n']:.0f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--initial-delays", default="3000,0",
                    help="group.initial.rebalance.delay.ms values, each given to both brokers (Kafka's default 3000)")
    ap.add_argument("--rounds", type=int, default=2, help="fresh-broker rounds per broker, alternating A B / B A")
    ap.add_argument("--iterations", type=int, default=5, help="4th-member joins per assignor per broker start")
    ap.add_argument("--first-joins", type=int, default=2, help="empty-group joins per assignor per broker start")
    ap.add_argument("--assignors", default=None,
                    help="classic: client assignors (range,cooperative-sticky); consumer: broker ones (uniform,range)")
    ap.add_argument("--group-protocol", default="classic", choices=("classic", "consumer"))
    ap.add_argument("--heartbeat-ms", type=int, default=250, help="client heartbeat.interval.ms")
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--brokers", default="kbroker,kafka")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="extra broker setting for both brokers (repeatable; a key one broker lacks is ignored by it)")
    ap.add_argument("--label", default=None, help="entry name in the results file (default: the group protocol)")
    ap.add_argument("--out", type=Path, default=RESULTS / "rebalance.json")
    a = ap.parse_args(argv)
    if a.assignors is None:
        a.assignors = "range,cooperative-sticky" if a.group_protocol == "classic" else "uniform,range"
    makers: dict[str, Callable[[dict[str, str]], Target]] = {"kbroker": KBrokerTarget, "kafka": KafkaTarget}
    brokers = [b for b in a.brokers.split(",") if b]
    load_before = os.getloadavg()
    started = time.monotonic()
    by_delay: dict[str, object] = {}
    for delay in (int(x) for x in a.initial_delays.split(",")):
        overrides = broker_overrides(delay, a.group_protocol, a.heartbeat_ms)
        overrides.update(kv.split("=", 1) for kv in a.override)
        runs: dict[str, list[Samples]] = {b: [] for b in brokers}
        for rnd in range(a.rounds):
            for b in (brokers if rnd % 2 == 0 else brokers[::-1]):  # A B, then B A: drift cancels
                print(f"delay {delay} ms, round {rnd + 1}/{a.rounds}: {b}", file=sys.stderr, flush=True)
                runs[b].append(run_one(makers[b](overrides), a))
        table = summarize(runs)
        print_table(delay, table)
        by_delay[str(delay)] = {"broker_overrides": overrides, "table": table, "runs": runs}
    result = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join([".venv/bin/python", "benchmarks/bench_rebalance.py", *(argv or sys.argv[1:])]),
        "wall_s": round(time.monotonic() - started, 1),
        "conditions": {"cpus": os.cpu_count(), "broker_cpu": BROKER_CPU, "load_cpu": "1",
                       "loadavg_before": load_before, "loadavg_after": os.getloadavg()},
        "clients": {"library": _librdkafka(), "group.protocol": a.group_protocol,
                    "heartbeat.interval.ms": a.heartbeat_ms if a.group_protocol == "classic" else None,
                    "session.timeout.ms": 45000 if a.group_protocol == "classic" else None,
                    "enable.auto.commit": False, "consumers": "4 librdkafka handles, one thread each, one process"},
        "topic_partitions": a.partitions, "rounds": a.rounds, "iterations": a.iterations,
        "first_joins": a.first_joins,
        "by_initial_delay_ms": by_delay,
    }
    # One file for every variant: a run replaces its own entry (--label) and keeps the others.
    doc: dict[str, dict[str, object]] = {"runs": {}}
    if a.out.exists():
        doc["runs"].update(json.loads(a.out.read_text()).get("runs", {}))
    doc["runs"][a.label or a.group_protocol] = result
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=2))
    print(f"\nresults: {a.out}  ({result['wall_s']} s)")
    return 0


def _librdkafka() -> str:
    import confluent_kafka

    v = confluent_kafka.version()  # a str in 2.x, a (str, int) tuple in 1.x
    return f"confluent-kafka {v if isinstance(v, str) else v[0]}, librdkafka {confluent_kafka.libversion()[0]}"


if __name__ == "__main__":
    raise SystemExit(main())
