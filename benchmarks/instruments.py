"""The instruments of the side-by-side benchmarks: native load generators and CPU accounting.

A benchmark row must measure the broker, not the load generator (issue 17). So every load here is
native (Kafka's own Java perf tools from kafka-tools 4.3.1, and `kbench`, a Go generator on franz-go
built by `benchmarks/native/build.sh`), the same bytes for both brokers, and every run reports what
the generator itself cost:

- ``gen_cpu_s`` / ``gen_cpu_util``: the generator's CPU seconds (its rusage, from ``wait4``) and the
  cores it kept busy on average over its life. Pinned, it has one core: a util well under 1.0 means
  it was waiting for the broker.
- ``gen_ceiling_*``: the measured rate divided by ``gen_cpu_util``: the rate at which the generator
  would fill one core of its own, i.e. its ceiling, extrapolated linearly. For the Java tools this
  counts the JVM's start-up and JIT as load, so it understates their ceiling.

The broker's CPU comes from ``/proc/<pid>/stat`` (utime + stime of every thread) before and after a
row: ``broker_cpu_s``, ``broker_cpu_util`` (cores), and for consumption ``broker_cpu_s_per_gib``.

Nothing here knows which broker it talks to.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.java import java_command

ROOT = Path(__file__).resolve().parent.parent
LOAD_CPU = "1"
CLK_TCK = os.sysconf("SC_CLK_TCK")
MIB = 1 << 20


def load_cmd(cmd: list[str], pin: bool) -> list[str]:
    """A load generator's command line: on core 1 when pinned (the broker has core 0)."""
    if pin and (os.cpu_count() or 1) > 1:
        return ["taskset", "-c", LOAD_CPU, *cmd]
    return cmd


@dataclass(frozen=True)
class Measured:
    """A finished generator process: its output and what it cost."""

    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    cpu_s: float

    @property
    def cpu_util(self) -> float:
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0


def run_measured(cmd: list[str], timeout: float) -> Measured:
    """Run a command to completion and take its rusage (user + system CPU) from wait4.

    `taskset` execs its command, so the pid is the generator's own."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=ROOT)
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            _, status, ru = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        wall = time.monotonic() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return Measured(proc.returncode, out.read().decode(errors="replace"), err.read().decode(errors="replace"),
                        wall, ru.ru_utime + ru.ru_stime)


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and all its threads, from /proc/<pid>/stat."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()  # the command name may hold spaces and ')'
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of proc(5)


class BrokerCpu:
    """The broker's CPU seconds and cores used while a block runs."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.cpu_s = self.wall_s = 0.0

    def __enter__(self) -> BrokerCpu:
        self._cpu0, self._t0 = proc_cpu_seconds(self.pid), time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cpu_s = proc_cpu_seconds(self.pid) - self._cpu0
        self.wall_s = time.monotonic() - self._t0

    def figures(self) -> dict[str, float]:
        return {"broker_cpu_s": self.cpu_s, "broker_cpu_util": self.cpu_s / self.wall_s if self.wall_s else 0.0}


@functools.cache
def kbench_binary() -> str:
    """Path of the native generator, built (once, cached under .cache/kbench) by build.sh."""
    out = subprocess.run(["bash", str(ROOT / "benchmarks" / "native" / "build.sh")], capture_output=True, text=True,
                         timeout=900, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"benchmarks/native/build.sh failed: {out.stderr[-3000:]}")
    return out.stdout.strip().splitlines()[-1]


def kbench(mode: str, args: dict[str, object], pin: bool, timeout: float = 900) -> dict[str, float]:
    """Run `kbench MODE -k v ...` and return its JSON figures, with the generator's ceiling added."""
    cmd = [kbench_binary(), mode, *[a for k, v in args.items() for a in (f"-{k}", str(v))]]
    m = run_measured(load_cmd(cmd, pin), timeout)
    if m.returncode != 0:
        raise RuntimeError(f"kbench {mode} failed ({m.returncode}): {m.stderr[-2000:]}")
    res = {k: float(v) for k, v in json.loads(m.stdout.strip().splitlines()[-1]).items()}
    util = res.get("gen_cpu_util", 0.0)
    for key in ("mb_per_s", "records_per_s"):
        if key in res and util > 0:
            res[f"gen_ceiling_{key}"] = res[key] / util
    return res


def java_tool(main_class: str, args: list[str], pin: bool, timeout: float = 900) -> Measured:
    """One of Kafka's Java tools (kafka-tools 4.3.1), its CPU measured. The JVM options of Kafka's
    bin/kafka-producer-perf-test.sh (512 MB heap) and kafka-run-class.sh (G1, 20 ms pause goal)."""
    cmd = java_command(main_class, args, jvm_opts=("-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                                                   "-Djava.awt.headless=true"))
    m = run_measured(load_cmd(cmd, pin), timeout)
    if m.returncode != 0:
        raise RuntimeError(f"{main_class} failed ({m.returncode}): {m.stdout[-1500:]} {m.stderr[-1500:]}")
    return m


def generator_figures(m: Measured, rates: dict[str, float]) -> dict[str, float]:
    """gen_cpu_s, gen_cpu_util and gen_ceiling_<rate> for a Java tool's run."""
    out = {"gen_cpu_s": m.cpu_s, "gen_cpu_util": m.cpu_util}
    for key, value in rates.items():
        if m.cpu_util > 0:
            out[f"gen_ceiling_{key}"] = value / m.cpu_util
    return out
