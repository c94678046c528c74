"""Start time of `kbroker serve`: from spawning the process to its first Metadata response listing a broker.

    .venv/bin/python benchmarks/bench_start.py [--runs 10] [--override key=value ...] [--restart | --kill] [--root DIR]

Each run starts a fresh broker (a new, empty data dir: the first start formats it) as `make run` does,
on a free loopback port, and polls it every 5 ms with a raw Metadata v1 request (no client library in
the way: librdkafka's reconnect backoff would blur the figure). The run ends at the first response that
lists at least one broker: the node serves and has registered. The broker's CPU time (user + system) at
that moment is shown too: on a busy machine it moves less than the wall-clock time. `--restart` times a second start on the
same data instead (a clean stop between), `--kill` one after SIGKILL; `--root` runs another checkout (e.g. `git archive` of main into
a temporary dir) with the same command. An `--override listeners=...` adds listeners beside the polled
one; `{free}` in any override becomes one free port, the same in each. Prints each run and the median, min and max in seconds.
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Metadata v1, correlation id 1, client id "start", topics null (all).
METADATA_V1 = struct.pack(">hhih5si", 3, 1, 1, 5, b"start", -1)
REQUEST = struct.pack(">i", len(METADATA_V1)) + METADATA_V1


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def brokers_listed(port: int) -> int:
    """The broker count of one Metadata v1 answer; -1 when nothing answers yet."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
            s.sendall(REQUEST)
            head = b""
            while len(head) < 12:
                chunk = s.recv(12 - len(head))
                if not chunk:
                    return -1
                head += chunk
            _size, _correlation, brokers = struct.unpack(">iii", head)
            return brokers
    except OSError:
        return -1


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/<pid>/stat, clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start(root: Path, data: Path, port: int, overrides: list[str],
          timeout: float = 60.0) -> tuple[subprocess.Popen[bytes], float, float]:
    listeners = f"PLAINTEXT://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "kbroker", "serve", "--override", f"log.dirs={data}"]
    free = str(free_port())
    overrides = [o.replace("{free}", free) for o in overrides]
    for o in overrides:
        if o.startswith("listeners="):  # more listeners beside the polled one
            listeners += "," + o.split("=", 1)[1]
    cmd += ["--override", f"listeners={listeners}"]
    overrides = [o for o in overrides if not o.startswith("listeners=")]
    for o in overrides:
        cmd += ["--override", o]
    log = open(data.parent / "kbroker.log", "ab")  # noqa: SIM115 (the child keeps it)
    began = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=root, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    while time.monotonic() - began < timeout:
        if proc.poll() is not None:
            tail = (data.parent / "kbroker.log").read_text(errors="replace")[-3000:]
            raise SystemExit(f"kbroker exited with {proc.returncode}:\n{tail}")
        if brokers_listed(port) > 0:
            return proc, time.monotonic() - began, cpu_seconds(proc.pid)
        time.sleep(0.005)
    proc.kill()
    raise SystemExit(f"no Metadata answer within {timeout}s: see {data.parent / 'kbroker.log'}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise SystemExit("kbroker did not stop within 60 s of SIGTERM") from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--override", action="append", default=[])
    parser.add_argument("--root", type=Path, default=ROOT, help="the kbroker checkout to run (default: this one)")
    parser.add_argument("--restart", action="store_true", help="time a restart on the same data")
    parser.add_argument("--kill", action="store_true", help="time a restart on the same data after kill -9")
    args = parser.parse_args()
    # Bytecode first, as `pip install` writes it (under PYTHONDONTWRITEBYTECODE an editable install would
    # compile every module at every start).
    compileall.compile_dir(str(args.root / "kbroker"), quiet=1)
    # and the methods of its dataclasses, which Python 3.11 compiles at every import (kbroker/codecache.py;
    # an older tree given with --root has none: nothing to prime)
    subprocess.run([sys.executable, "-c", "from kbroker import codecache; codecache.prime()"], cwd=args.root,
                   check=False, capture_output=True)
    times, cpus = [], []
    for i in range(args.runs):
        work = Path(tempfile.mkdtemp(prefix="kbroker-start-"))
        try:
            port = free_port()
            proc, seconds, cpu = start(args.root, work / "data", port, args.override)
            if args.restart or args.kill:
                if args.kill:
                    proc.kill()
                    proc.wait()
                else:
                    stop(proc)
                proc, seconds, cpu = start(args.root, work / "data", port, args.override)
            stop(proc)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        times.append(seconds)
        cpus.append(cpu)
        print(f"run {i + 1}: {seconds:.3f} s ({cpu:.2f} s CPU)", flush=True)
    print(f"median {statistics.median(times):.3f} s, min {min(times):.3f} s, max {max(times):.3f} s; "
          f"CPU median {statistics.median(cpus):.2f} s ({len(times)} runs{', restart' if args.restart else ''}{', restart after kill -9' if args.kill else ''})")


if __name__ == "__main__":
    main()
