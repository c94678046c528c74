"""The broker's CPU per Produce request when requests are small: the fixed cost per request (issue 17).

    .venv/bin/python benchmarks/bench_request_cost.py [--records 150000] [--partitions 4] [--connections 4]
                                                      [--size 100] [--batch-bytes 200] [--strace | --instructions]

One kbroker node (`kbroker serve`, as P7 starts it) pinned to core 0; `kbench produce-raw` on core 1
sends pre-encoded Produce v9 requests, acks=1, 5 in flight per connection. With the defaults each
request carries one batch of one 100-byte record, so the bytes cost next to nothing and what is
measured is what every request costs: reading and decoding it, dispatch, the append, the response and
its write. It prints requests/s, the node's user and system CPU per request (from /proc/<pid>/stat)
and how busy its core was (below 1.0: the generator's pipeline, not the node, was the limit).
``--strace`` instead counts the node's system calls per request (`strace -c -f`; the timings are
then strace's, only the counts mean anything). ``--instructions`` runs the node under valgrind's
callgrind (Debian's ``valgrind``) and prints the user-space instructions per request: the counters
are zeroed after the warm-up (``callgrind_control -z``) and dumped after the load (``-d``), so start-up
and warm-up are left out. Two runs of one tree agree within 0.5%, whatever else the machine is doing,
so it settles differences smaller than the spread of requests/s. It leaves out the kernel's side of
the system calls, and under valgrind the node runs some 50 times slower, so more requests arrive
together than at full speed: use ``--records`` 5,000 or so (P7's shape: 200,000 records, 400
requests). docs/benchmarks.md, "Responses written together" and "Instructions per request".
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import cluster_rows  # noqa: E402
from benchmarks.instruments import kbench, kbench_binary  # noqa: E402


def _cpu_s(pid: int) -> tuple[float, float]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _pin(pid: int, core: int) -> None:
    for task in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(task), {core})


def _callgrind_total(out_dir: Path) -> int:
    """The instructions counted since the last zeroing: the `totals:` line of the newest dump."""
    dumps = sorted(out_dir.glob("callgrind.out.*"), key=lambda p: p.stat().st_mtime)
    for dump in reversed(dumps):
        found = re.search(r"^totals: (\d+)", dump.read_text(errors="replace"), re.MULTILINE)
        if found is not None and int(found.group(1)) > 0:
            return int(found.group(1))
    raise SystemExit(f"callgrind wrote no totals into {out_dir}: {[p.name for p in dumps]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=150_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--connections", type=int, default=4, help="kbench connections (partitions dealt round robin)")
    ap.add_argument("--size", type=int, default=100, help="record value bytes")
    ap.add_argument("--batch-bytes", type=int, default=200, help="batch size limit: 200 makes one record per batch")
    count = ap.add_mutually_exclusive_group()
    count.add_argument("--strace", action="store_true", help="count system calls per request instead of timing")
    count.add_argument("--instructions", action="store_true",
                    help="count the node's user-space instructions per request under valgrind's callgrind "
                         "(deterministic; about 50 times slower: use --records 5000)")
    args = ap.parse_args()
    if args.instructions and shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (apt-get install valgrind)")
    load = {"size": args.size, "acks": "1", "batch-bytes": args.batch_bytes, "connections": args.connections,
            "in-flight": 5}
    with tempfile.TemporaryDirectory(prefix="kbroker-request-cost-") as d:
        wrapper = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={d}/callgrind.out.%p"] \
            if args.instructions else None
        with cluster_rows._LocalNodes(Path(d), 1, cluster_rows.p7_broker_overrides("os"), wrapper) as nodes:
            nodes.create_topic("cost", ",".join("1" for _ in range(args.partitions)), {})
            pid = nodes.pid(1)
            _pin(pid, 0)
            warm_up = 2_000 if args.instructions else 20_000  # segments, indexes, code paths
            kbench("produce-raw", {"bootstrap": nodes.bootstrap, "topic": "cost", "records": warm_up, **load},
                   pin=False)
            trace_out = Path(d) / "strace.txt"
            tracer = None
            if args.strace:
                tracer = subprocess.Popen(["strace", "-c", "-f", "-o", str(trace_out), "-p", str(pid)],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(1)
            if args.instructions:  # count from here: the warm-up and the start are left out
                subprocess.run(["callgrind_control", "-z", str(pid)], check=True, capture_output=True)
            user0, sys0 = _cpu_s(pid)
            started = time.monotonic()
            cmd = ["taskset", "-c", "1", kbench_binary(), "produce-raw", "-bootstrap", nodes.bootstrap,
                   "-topic", "cost", "-records", str(args.records)]
            cmd += [a for k, v in load.items() for a in (f"-{k}", str(v))]
            done = subprocess.run(cmd, capture_output=True, text=True, check=True)
            user1, sys1 = _cpu_s(pid)
            wall = time.monotonic() - started
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            requests = float(figures["requests"])
            if args.instructions:
                subprocess.run(["callgrind_control", "-d", str(pid)], check=True, capture_output=True)
                total = _callgrind_total(Path(d))
                print(json.dumps({"requests": int(requests), "instructions": total,
                                  "instructions_per_request": round(total / requests)}))
                return
            if tracer is not None:
                tracer.send_signal(2)
                tracer.wait(60)
                print(f"system calls per request ({requests:.0f} requests):")
                for line in trace_out.read_text().splitlines()[2:]:
                    cols = line.split()
                    if len(cols) >= 5 and cols[3].isdigit():
                        errors = f" ({int(cols[4]) / requests:.2f} failed)" if len(cols) == 6 else ""
                        print(f"  {cols[-1]:<14} {int(cols[3]) / requests:6.2f}{errors}")
                return
            print(json.dumps({
                "requests_per_s": round(requests / wall),
                "node_user_us_per_request": round((user1 - user0) / requests * 1e6, 1),
                "node_system_us_per_request": round((sys1 - sys0) / requests * 1e6, 1),
                "node_core_busy": round((user1 - user0 + sys1 - sys0) / wall, 2),
            }))


if __name__ == "__main__":
    main()
