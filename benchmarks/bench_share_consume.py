"""kafka-share-consumer-perf-test (KIP-932 share groups), kbroker against Apache Kafka 4.3, in one run.

    .venv/bin/python benchmarks/bench_share_consume.py [--rounds 1] [--records 200000] [--threads 4]

Issue 20 asks for share-consumer throughput, 4 consumers on 1 partition, kbroker and Kafka side by
side. Per round, a fresh kbroker and a fresh reference Kafka (broker pinned to core 0, tools to core 1,
as `benchmarks/run.py` does) each get a 1-partition topic; Kafka's own `ShareConsumerPerformance`
(kafka-tools 4.3.1, `--threads 4`, one share group) starts first and polls, so the share-partition is
initialized (`share.auto.offset.reset=latest`, the default of both brokers: kbroker has no GROUP config
resource to set `earliest`), then `kafka-producer-perf-test` writes the records (100 bytes, acks=1,
linger.ms=20, batch.size=262144) and the share consumers read them all, acknowledging implicitly.

Reported per broker: `records_per_s`, the records consumed divided by the time from the start of the
producer to the tool's `end.time` (producing overlaps consuming, so this is end to end, not a read of a
full log; the tool's own `nMsg.sec` counts from its start, warm-up included, and is kept as
`tool_nMsg.sec`). Results:
benchmarks/results/share_consume.json.
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

TOPIC = "share-perf"
WARM_UP_S = 10.0


def _epoch_s(stamp: str) -> float:
    """The tool's `yyyy-MM-dd HH:mm:ss:SSS` (the JVM's local time, this machine's) as epoch seconds."""
    day, clock = stamp.split(" ")
    hms, millis = clock.rsplit(":", 1)
    return time.mktime(time.strptime(f"{day} {hms}", "%Y-%m-%d %H:%M:%S")) + int(millis) / 1000


def run_one(target: Target, records: int, threads: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix=f"share-consume-{target.name}-") as d:
        target.start(Path(d))
        try:
            create_topic(target.bootstrap, TOPIC, 1)
            args = ["--bootstrap-server", target.bootstrap, "--topic", TOPIC, "--num-records", str(records),
                    "--threads", str(threads), "--group", "share-perf", "--timeout", "60000"]
            consumer = subprocess.Popen(pinned(java_command("org.apache.kafka.tools.ShareConsumerPerformance", args)),
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
            time.sleep(WARM_UP_S)
            produce_start = time.time()
            produced = producer_perf(target.bootstrap, TOPIC, records, 100,
                                     {"acks": "1", "linger.ms": "20", "batch.size": "262144"})
            out, err = consumer.communicate(timeout=600)
            lines = [line for line in out.splitlines() if line.strip()]
            at = next((i for i, line in enumerate(lines) if line.startswith("start.time")), None)
            if consumer.returncode != 0 or at is None or at + 1 >= len(lines):
                raise RuntimeError(f"share consumer perf test failed: {out[-2000:]} {err[-2000:]}")
            row = dict(zip([h.strip() for h in lines[at].split(",")], [v.strip() for v in lines[at + 1].split(",")],
                           strict=False))
            consumed = int(float(row["data.consumed.in.nMsg"]))
            if consumed < records:
                raise RuntimeError(f"share consumer perf test read {consumed} of {records} records")
            end = _epoch_s(row["end.time"])
            return {"records_per_s": consumed / max(end - produce_start, 1e-3),
                    "tool_nMsg.sec": float(row["nMsg.sec"]),
                    "producer_records_per_s": produced["records_per_s"]}
        finally:
            target.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--brokers", default="kbroker,kafka")
    p.add_argument("--out", type=Path, default=RESULTS / "share_consume.json")
    a = p.parse_args(argv)
    makers: dict[str, Callable[[dict[str, str]], Target]] = {"kbroker": KBrokerTarget, "kafka": KafkaTarget}
    brokers = a.brokers.split(",")
    runs: dict[str, list[dict[str, float]]] = {b: [] for b in brokers}
    started = time.monotonic()
    for rnd in range(a.rounds):
        for b in brokers if rnd % 2 == 0 else list(reversed(brokers)):
            print(f"round {rnd + 1}/{a.rounds}: {b}", file=sys.stderr, flush=True)
            runs[b].append(run_one(makers[b]({}), a.records, a.threads))
    summary = {b: {m: statistics.median(r[m] for r in rs) for m in rs[0]} for b, rs in runs.items() if rs}
    for b, row in summary.items():
        print(f"{b:<8} share consumers ({a.threads} on 1 partition): {row['records_per_s']:>10,.0f} records/s "
              f"(producer {row['producer_records_per_s']:,.0f} records/s)")
    out: Path = a.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "command": " ".join([".venv/bin/python", "benchmarks/bench_share_consume.py", *(argv or sys.argv[1:])]),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "conditions": {"cpus": os.cpu_count(), "broker_cpu": BROKER_CPU, "load_cpu": "1",
                       "loadavg": os.getloadavg(), "records": a.records, "threads": a.threads},
        "runs": runs, "summary": summary, "seconds": round(time.monotonic() - started, 1),
    }, indent=2) + "\n")
    print(f"\nresults: {out}  ({time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
