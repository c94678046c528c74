"""Replicated produce and failover: 3 kbroker brokers vs 3 Apache Kafka brokers under one Kafka controller.

    .venv/bin/python benchmarks/bench_replicated.py [--records 30000] [--kills 3] [--json out.json]

For each system, a fresh cluster: an Apache Kafka 4.3.1 controller (`broker.session.timeout.ms` 3000,
the same for both) and three brokers of that kind (nodes 2, 3, 4), as `tests/support/kafka_cluster.py`
starts them. Topic `bench`: 1 partition, RF 3, min.insync.replicas 2. Reported:

  produce rec/s, MB/s, avg/p99 ms   `kafka-producer-perf-test` --num-records N --record-size 100
                --throughput -1, acks=all, linger.ms=5, batch.size=65536 (Kafka's own load tool, the
                same command for both systems; latency is the tool's send-to-ack).
  elect s       kill -9 of partition 0's leader until a surviving broker's Metadata names another
                leader (the controller must notice the missed heartbeats: bounded below by the session
                timeout), median over --kills (the killed broker is restarted and the ISR refilled
                between kills).

The machine is shared (2 cores, other work running): the load average is printed with the figures;
read them as indicative and compare the two systems within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.java import run_java_main  # noqa: E402
from tests.support.kafka_cluster import KafkaCluster  # noqa: E402
from tests.support.replicated_cluster import metadata_state  # noqa: E402

IDS = (2, 3, 4)
OVERRIDES = {"min.insync.replicas": "2", "replica.lag.time.max.ms": "10000"}


def _start(system: str, workdir: Path) -> tuple[KafkaCluster, dict[int, object]]:
    c = KafkaCluster(workdir, controller_overrides={"broker.session.timeout.ms": "3000"})
    c.start_controllers()
    nodes: dict[int, object] = {}
    for node_id in IDS:
        if system == "kafka":
            nodes[node_id] = c.add_kafka_broker(node_id, OVERRIDES).start()
        else:
            nodes[node_id] = c.kbroker(node_id, OVERRIDES).start(timeout=120)
    return c, nodes


def _bootstrap(nodes: dict[int, object], alive: set[int]) -> list[str]:
    return [nodes[n].bootstrap for n in sorted(alive)]  # type: ignore[attr-defined]


def _wait(cond, timeout: float = 120) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        time.sleep(0.05)


def _state(nodes: dict[int, object], alive: set[int]):  # noqa: ANN202
    for b in _bootstrap(nodes, alive):
        st = metadata_state(b, "bench")
        if st is not None:
            return st
    return None


def run_system(system: str, records: int, kills: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix=f"bench-repl-{system}-") as tmp:
        c, nodes = _start(system, Path(tmp))
        try:
            boot = ",".join(_bootstrap(nodes, set(IDS)))
            proc = run_java_main("kafka-topics", ["--bootstrap-server", boot, "--create", "--topic", "bench",
                                                  "--replica-assignment", "2:3:4", "--config",
                                                  "min.insync.replicas=2"], timeout=120)
            assert proc.returncode == 0, proc.stderr
            _wait(lambda: (s := _state(nodes, set(IDS))) is not None and len(s.isr) == 3)
            load_before = os.getloadavg()[0]
            perf = run_java_main("kafka-producer-perf-test", [
                "--topic", "bench", "--num-records", str(records), "--record-size", "100", "--throughput", "-1",
                "--producer-props", f"bootstrap.servers={boot}", "acks=all", "linger.ms=5", "batch.size=65536"],
                timeout=600)
            assert perf.returncode == 0, perf.stderr
            summary = [line for line in perf.stdout.splitlines() if "99th" in line][-1]
            m = re.search(r"([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency.*?"
                          r"([\d.]+) ms 99th", summary)
            assert m, summary
            elect: list[float] = []
            for _ in range(kills):
                st = _state(nodes, set(IDS))
                assert st is not None
                leader = st.leader
                node = nodes[leader]
                t0 = time.monotonic()
                node.kill()  # type: ignore[attr-defined]
                alive = set(IDS) - {leader}
                _wait(lambda alive=alive, leader=leader: (s := _state(nodes, alive)) is not None
                      and s.leader not in (leader, -1), 60)
                elect.append(time.monotonic() - t0)
                node.start()  # type: ignore[attr-defined]
                _wait(lambda: (s := _state(nodes, set(IDS))) is not None and len(s.isr) == 3)
            return {"system": system, "records_per_s": float(m.group(1)), "mb_per_s": float(m.group(2)),
                    "avg_ms": float(m.group(3)), "p99_ms": float(m.group(4)),
                    "elect_s_median": statistics.median(elect), "elect_s": [round(e, 2) for e in elect],
                    "load_avg_1m": round(load_before, 2), "cpus": os.cpu_count()}
        finally:
            c.stop_all()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=30000)
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--systems", default="kbroker,kafka")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = [run_system(s, args.records, args.kills) for s in args.systems.split(",")]
    print(f"{'system':8} {'rec/s':>9} {'MB/s':>6} {'avg ms':>8} {'p99 ms':>8} {'elect s (median)':>17} load")
    for r in rows:
        print(f"{r['system']:8} {r['records_per_s']:9.0f} {r['mb_per_s']:6.2f} {r['avg_ms']:8.1f} {r['p99_ms']:8.0f} "
              f"{r['elect_s_median']:17.2f} {r['load_avg_1m']} {r['elect_s']}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
