"""Restart cost with many partitions: time to serve again and RSS, after a clean stop and after kill -9.

    .venv/bin/python benchmarks/bench_restart.py [--partitions 1000 10000] [--target kbroker kafka]
                                                [--dir /tmp] [--nofile 4096] [--json out.json]

For each partition count N: a fresh broker gets N partitions (topics of at most 1,000 partitions each,
so no CreateTopics cap is in the way) and one 100-byte record in every partition; then

  clean   SIGTERM, start again on the same data: the clean-shutdown marker is there, nothing is rescanned;
  kill-9  SIGKILL, start again: every segment after the recovery point is CRC-checked and its indexes
          rebuilt (Kafka's LogLoader recovery).

"restart s" is from spawning the process until it serves (kbroker: its "kbroker started" line, written
after every partition is loaded; Kafka: kafka.sh's readiness check, a Metadata request that lists the
broker, which includes JVM start-up). "RSS MiB" is VmRSS then; "fds" the open descriptors then.
`--nofile` runs the restarted broker under that RLIMIT_NOFILE (prlimit), as a production box would.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.targets import free_port  # noqa: E402

READY_LINE = "kbroker started"
TOPIC_CAP = 1000


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _populate(bootstrap: str, partitions: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics, left, i = [], partitions, 0
    while left > 0:
        n = min(TOPIC_CAP, left)
        topics.append((f"restart-{i}", n))
        left -= n
        i += 1
    for name, n in topics:
        for f in admin.create_topics([NewTopic(name, n, 1)], operation_timeout=600, request_timeout=600).values():
            f.result()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "message.timeout.ms": 600000})
    for name, n in topics:
        for p in range(n):
            while True:
                try:
                    producer.produce(name, b"x" * 100, partition=p)
                    break
                except BufferError:
                    producer.poll(0.1)
        producer.poll(0)
    left_over = producer.flush(600)
    if left_over:
        raise RuntimeError(f"{left_over} records not acknowledged")


class KBrokerProc:
    name = "kbroker"

    def __init__(self, workdir: Path, nofile: int | None) -> None:
        self.workdir, self.nofile = workdir, nofile
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, limited: bool) -> float:
        self.starts += 1
        self.log = self.workdir / f"kbroker-{self.starts}.log"
        cmd = [sys.executable, "-m", "kbroker", "serve", "--override", f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
               "--override", f"log.dirs={self.workdir / 'data'}", "--override", "num.partitions=1"]
        if limited and self.nofile:
            cmd = ["prlimit", f"--nofile={self.nofile}:{self.nofile}", *cmd]
        t0 = time.monotonic()
        with open(self.log, "wb") as err:
            self.proc = subprocess.Popen(cmd, stdout=err, stderr=err, cwd=ROOT)
        while READY_LINE not in self.log.read_text(errors="replace"):
            if self.proc.poll() is not None:
                raise RuntimeError(f"kbroker exited ({self.proc.returncode}):\n{self.log.read_text()[-2000:]}")
            if time.monotonic() - t0 > 1800:
                raise RuntimeError("kbroker did not start in 30 minutes")
            time.sleep(0.05)
        return time.monotonic() - t0

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(1800)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()


class KafkaProc:
    name = "kafka"

    def __init__(self, workdir: Path, nofile: int | None) -> None:
        self.dir, self.nofile = workdir / "kafka", nofile
        self.bootstrap = ""
        self.pid = 0

    def _sh(self, *args: str, timeout: float = 1800) -> str:
        out = subprocess.run(["bash", str(ROOT / "benchmarks/reference/kafka.sh"), *args, "--dir", str(self.dir)],
                             capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            raise RuntimeError(f"kafka.sh {args[0]} failed:\n{out.stderr}{out.stdout}")
        return out.stdout

    def start(self, limited: bool) -> float:
        t0 = time.monotonic()
        out = self._sh("start", "--override", "num.partitions=1", "--timeout", "1700")
        self.bootstrap = out.strip().splitlines()[-1].split("=", 1)[1]
        self.pid = int((self.dir / "kafka.pid").read_text().strip())
        return time.monotonic() - t0

    def stop(self) -> None:
        self._sh("stop")

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while Path(f"/proc/{self.pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        (self.dir / "kafka.pid").unlink(missing_ok=True)


def run_one(target: str, partitions: int, base: Path, nofile: int | None) -> list[dict[str, object]]:
    workdir = Path(tempfile.mkdtemp(prefix=f"restart-{target}-{partitions}-", dir=base))
    broker = KBrokerProc(workdir, nofile) if target == "kbroker" else KafkaProc(workdir, nofile)
    rows: list[dict[str, object]] = []
    try:
        broker.start(limited=False)
        t0 = time.monotonic()
        _populate(broker.bootstrap, partitions)
        print(f"[{target} N={partitions}] populated in {time.monotonic() - t0:.1f}s", flush=True)
        for how in ("clean", "kill-9"):
            if how == "clean":
                broker.stop()
            else:
                broker.kill()
            seconds = broker.start(limited=True)
            row = {"target": target, "partitions": partitions, "after": how, "restart_s": round(seconds, 2),
                   "rss_mib": round(_rss_mib(broker.pid), 1), "fds": _fds(broker.pid)}
            print(f"[{target} N={partitions}] {row}", flush=True)
            rows.append(row)
        broker.stop()
    finally:
        try:
            broker.kill()
        except Exception:  # noqa: BLE001 - already stopped
            pass
        shutil.rmtree(workdir, ignore_errors=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--target", nargs="+", choices=["kbroker", "kafka"], default=["kbroker"])
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--nofile", type=int, default=None, help="RLIMIT_NOFILE of the restarted broker")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    rows = []
    for n in args.partitions:
        for target in args.target:
            rows += run_one(target, n, args.dir, args.nofile)
    print(f"\n{'target':8} {'partitions':>10} {'after':7} {'restart s':>10} {'RSS MiB':>9} {'fds':>6}")
    for r in rows:
        print(f"{r['target']:8} {r['partitions']:>10} {r['after']:7} {r['restart_s']:>10} {r['rss_mib']:>9} {r['fds']:>6}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
