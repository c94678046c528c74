"""Controller failover after kill -9 of the active controller: kbroker's voters vs Apache Kafka 4.3.1's.

    .venv/bin/python benchmarks/bench_controller_failover.py [--reps 5] [--json out.json]

Three voters in a static quorum (`controller.quorum.voters`), no brokers, the same `controller.quorum.*`
timeouts for both kinds (Kafka's defaults, given explicitly: fetch timeout 2000 ms, election timeout
1000 ms, election backoff max 1000 ms). Each repetition kills the active controller (found with
DescribeQuorum) with SIGKILL and measures the time until a surviving voter answers DescribeQuorum as
the leader of a newer epoch (polled every 20 ms); the killed voter is then restarted and caught up.

- kbroker: three kbroker controllers ("kkk"); the killed leader is any of them.
- Kafka: voter 1 a kbroker controller, voters 2 and 3 Kafka's (`kafka.Kafka`, "kjj"): the kbroker
  voter is made the leader (a Kafka leader is stopped with SIGTERM and restarted until voter 1 wins)
  and killed, so the failure detection and the election are Kafka's alone -- two JVMs, not three
  (a shared 2-core machine does not hold three controller JVMs beside the other work).

A crash costs the followers' fetch timeout (they stop waiting for the leader), then a pre-vote and a
vote round with a randomized election timeout: about 2-4 s with these settings. The machine is shared:
the load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.kbroker_quorum_cluster import QuorumView, describe_quorum  # noqa: E402
from tests.support.mixed_quorum import MixedQuorum  # noqa: E402

TIMEOUTS = {"controller.quorum.fetch.timeout.ms": "2000", "controller.quorum.election.timeout.ms": "1000",
            "controller.quorum.election.backoff.max.ms": "1000"}


def wait_view(q: MixedQuorum, after_epoch: int = -1, not_leader: int | None = None, timeout: float = 60.0,
              poll: float = 0.02) -> QuorumView:
    deadline = time.monotonic() + timeout
    while True:
        view = describe_quorum(q)
        if view is not None and view.epoch > after_epoch and view.leader != not_leader:
            return view
        if time.monotonic() > deadline:
            raise RuntimeError(f"no leader after epoch {after_epoch}: {view}")
        time.sleep(poll)


def wait_caught_up(q: MixedQuorum, timeout: float = 120.0) -> QuorumView:
    deadline = time.monotonic() + timeout
    while True:
        view = describe_quorum(q)
        if view is not None and len(view.voters) == 3 and all(o >= view.high_watermark for o in view.voters.values()):
            return view
        if time.monotonic() > deadline:
            raise RuntimeError(f"voters not caught up: {view}")
        time.sleep(0.2)


def make_kbroker_lead(q: MixedQuorum, node: int, tries: int = 10) -> QuorumView:
    """Stop (SIGTERM: it resigns) and restart whichever other voter leads until `node` leads."""
    for _ in range(tries):
        view = wait_caught_up(q)
        if view.leader == node:
            return view
        q.controllers[view.leader].stop()
        wait_view(q, after_epoch=view.epoch, not_leader=view.leader)
        q.start(view.leader)
    raise RuntimeError(f"voter {node} never led")


def measure(kinds: str, reps: int, workdir: Path) -> list[dict[str, object]]:
    q = MixedQuorum(workdir, kinds, dict(TIMEOUTS))
    out: list[dict[str, object]] = []
    try:
        q.start_controllers()
        wait_view(q, timeout=180)
        for rep in range(reps):
            view = make_kbroker_lead(q, 1) if kinds == "kjj" else wait_caught_up(q)
            victim = view.leader
            t0 = time.monotonic()
            q.kill(victim)
            new = wait_view(q, after_epoch=view.epoch, not_leader=victim)
            took = time.monotonic() - t0
            row = {"kinds": kinds, "rep": rep, "killed": victim, "new_leader": new.leader,
                   "new_leader_kind": q.kind(new.leader), "epochs": new.epoch - view.epoch,
                   "seconds": round(took, 3), "load": os.getloadavg()[0]}
            print(json.dumps(row), flush=True)
            out.append(row)
            q.start(victim)
    finally:
        q.stop_all()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--only", choices=("kkk", "kjj"))
    args = ap.parse_args()
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="ctl-failover-") as tmp:
        for kinds in ("kkk", "kjj"):
            if args.only and kinds != args.only:
                continue
            rows += measure(kinds, args.reps, Path(tmp) / kinds)
    for kinds, label in (("kkk", "kbroker voters"), ("kjj", "Kafka voters (2 survivors)")):
        secs = [float(r["seconds"]) for r in rows if r["kinds"] == kinds]  # type: ignore[arg-type]
        if secs:
            print(f"{label}: kill -9 of the active controller -> new leader: median {statistics.median(secs):.2f}s, "
                  f"min {min(secs):.2f}s, max {max(secs):.2f}s over {len(secs)} (load {os.getloadavg()[0]:.1f})")
    if args.json:
        Path(args.json).write_text(json.dumps({"timeouts": TIMEOUTS, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
