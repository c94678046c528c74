"""The multi-node rows of benchmarks/run.py (issue 17): P6 replicated writes, P7 scale-out on one host,
and the generator's ceiling against a trivial sink.

P6  acks=all, replication factor 3, min.insync.replicas 2: three kbroker brokers against three Apache
    Kafka 4.3.1 brokers, each cluster under one Apache Kafka controller (as bench_replicated.py and
    tests/support/kafka_cluster.py start them: the controller is the same program for both, so the
    row compares the brokers). Topic `p6`: 3 partitions, one leader per broker (assignment 2:3:4,
    3:4:2, 4:2:3). Load: `kbench produce` (Go, franz-go), 1 KiB records, linger 5 ms, 128 KiB
    batches, acks=all: MB/s, and p50/p99 of each record's send-to-acknowledgement latency. Nothing
    pinned: three brokers and a generator share the machine's cores, as they would on one host.
P7  scale-out: kbroker runs one process per core, so N cores means N nodes, started as a user would
    start them: `kbroker serve --nodes N` under `taskset -c 0-(N-1)` (docs/cluster.md, "One node per
    core": node i pinned to core i-1; with N=1 the plain single node, with N=2 node 1 a combined
    broker,controller and node 2 a broker), against one Apache Kafka broker (under one Apache Kafka
    controller) pinned to the same cores (0, then 0-1). Topic `p7`: 4 partitions, RF 1, spread over
    the nodes (1,2,1,2 with two nodes). Load, unpinned (with 2 cores both taken by the brokers, the
    generator shares them): by default `kbench produce-raw` (benchmarks/native/kbench/produceraw.go:
    pre-encoded Produce v9 requests, one 128 KiB batch of 126 x 1 KiB records per partition, acks=1,
    one connection per leader, 5 requests in flight), whose cost per MB is a fraction of a franz-go
    producer's, so that the row measures the brokers and not a generator taking their cores (it took
    0.80 of a core at 605 MB/s, 2026-11-26). Pre-encoded batches are fair to both brokers: each still
    parses every request, checks every batch's CRC and records, assigns offsets and appends; how a
    client batched and encoded the records is the client's work. `generator="produce"` (run.py
    --p7-generator produce) keeps `kbench produce` in the P1 shape (1 KiB, linger 5 ms, 128 KiB
    batches, acks=1). Reported: MB/s per configuration, and `scaling` = 2 nodes / 1 node.
Ceiling  `kbench sink` (benchmarks/native/kbench/sink.go, a Go endpoint that answers Produce and Fetch
    without storing) on core 0, the generator on core 1, for each kbench load shape used above; for
    P3's shape the generator P3 ran (kbench fetch by default, kbench consume with --p3-generator), for
    P7's the generator P7 ran (kbench produce-raw by default).

The controller JVM runs unpinned and is idle during the measured run (no metadata changes).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.instruments import BrokerCpu, kbench, kbench_binary, proc_cpu_seconds
from tests.support import kafka_cluster
from tests.support.java import run_java_main
from tests.support.kafka_cluster import KafkaCluster
from tests.support.replicated_cluster import describe

# Kafka's brokers get the JVM options of Kafka's own scripts (kafka-server-start.sh: 1 GiB heap; G1,
# kafka-run-class.sh), not the tests' small C1-only settings: a benchmark must not slow Kafka down.
KAFKA_BROKER_JVM_OPTS = ("-Xmx1G", "-Xms1G", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                         "-XX:InitiatingHeapOccupancyPercent=35", "-Djava.awt.headless=true")
P6_LOAD = {"size": 1024, "acks": "all", "linger-ms": 5, "batch-bytes": 131072}
P7_LOAD = {"size": 1024, "acks": "1", "linger-ms": 5, "batch-bytes": 131072}
P2_LOAD = {"size": 100, "acks": "1", "linger-ms": 0, "batch-bytes": 16384}
# P7's default load: kbench produce-raw, P7_LOAD's record size, batch size and acks, without a client's
# batching (no linger: every request is ready), one connection per leader as a producer has, and
# max.in.flight.requests.per.connection's default of 5.
P7_RAW_LOAD = {"size": 1024, "acks": "1", "batch-bytes": 131072, "connections": 1, "in-flight": 5}
# --p7-generator: raw (kbench produce-raw, the default) or produce (kbench produce, franz-go).
P7_GENERATORS = ("raw", "produce")


# --p7-socket-buffers: os (the default: socket.receive.buffer.bytes and socket.send.buffer.bytes -1 on both
# brokers, the kernel's autotuning) or kafka (Kafka's 102,400-byte defaults). With Kafka's, one connection
# carries about 100 KiB of a 0.5 MiB request at a time and the one-node row's core idles while the
# generator refills it (0.67 to 0.89 busy in 2026-11-28's runs): the row then measures the socket buffer,
# not the node, and the 2 / 1 ratio swings with it (docs/benchmarks.md, "That reason, tested").
P7_SOCKET_BUFFERS: dict[str, dict[str, str]] = {
    "os": {"socket.receive.buffer.bytes": "-1", "socket.send.buffer.bytes": "-1"},
    "kafka": {},
}


def p7_broker_overrides(socket_buffers: str) -> dict[str, str]:
    """The broker settings P7 gives both systems' brokers (besides one partition per topic by default)."""
    if socket_buffers not in P7_SOCKET_BUFFERS:
        raise ValueError(f"P7's socket buffers are one of {', '.join(P7_SOCKET_BUFFERS)}, not {socket_buffers!r}")
    return {"num.partitions": "1", **P7_SOCKET_BUFFERS[socket_buffers]}


def p7_load(generator: str) -> tuple[str, dict[str, object]]:
    """The kbench mode and load P7 runs with `generator` (raw or produce)."""
    if generator == "raw":
        return "produce-raw", P7_RAW_LOAD
    if generator == "produce":
        return "produce", P7_LOAD
    raise ValueError(f"P7's generator is one of {', '.join(P7_GENERATORS)}, not {generator!r}")


def _pin(pid: int, cpus: str) -> None:
    """Every thread of a running process onto `cpus` (taskset -a: the JVM's threads too)."""
    subprocess.run(["taskset", "-a", "-cp", cpus, str(pid)], capture_output=True, check=True)


class _Cluster:
    """One Apache Kafka controller and `n` brokers of one system, started fresh, stopped after."""

    def __init__(self, system: str, workdir: Path, ids: tuple[int, ...], overrides: dict[str, str]) -> None:
        self.system, self.ids = system, ids
        self.cluster = KafkaCluster(workdir)
        self.nodes: dict[int, object] = {}
        self.overrides = overrides

    def __enter__(self) -> _Cluster:
        self.cluster.start_controllers()
        for node_id in self.ids:
            if self.system == "kafka":
                saved = kafka_cluster.NODE_JVM_OPTS
                kafka_cluster.NODE_JVM_OPTS = KAFKA_BROKER_JVM_OPTS
                try:
                    self.nodes[node_id] = self.cluster.add_kafka_broker(node_id, self.overrides).start()
                finally:
                    kafka_cluster.NODE_JVM_OPTS = saved
            else:
                self.nodes[node_id] = self.cluster.kbroker(node_id, self.overrides).start(timeout=120)
        return self

    def __exit__(self, *exc: object) -> None:
        self.cluster.stop_all()

    def pid(self, node_id: int) -> int:
        node = self.nodes[node_id]
        return int(node.proc.pid if self.system == "kafka" else node.pid)  # type: ignore[attr-defined]

    @property
    def bootstrap(self) -> str:
        return ",".join(self.nodes[n].bootstrap for n in self.ids)  # type: ignore[attr-defined]

    def create_topic(self, topic: str, assignment: str, configs: dict[str, str]) -> None:
        _create_topic(self.bootstrap, topic, assignment, configs)

    def cpu_seconds(self) -> float:
        return sum(proc_cpu_seconds(self.pid(n)) for n in self.ids)


def _create_topic(bootstrap: str, topic: str, assignment: str, configs: dict[str, str]) -> None:
    """kafka-topics --create with an explicit assignment; waits until every partition has its ISR."""
    args = ["--bootstrap-server", bootstrap, "--create", "--topic", topic, "--replica-assignment", assignment]
    for k, v in configs.items():
        args += ["--config", f"{k}={v}"]
    proc = run_java_main("kafka-topics", args, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"kafka-topics --create {topic}: {proc.stderr[-2000:]}")
    partitions = len(assignment.split(","))
    want_isr = len(assignment.split(",")[0].split(":"))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            state = describe(bootstrap, [topic])
        except Exception:  # noqa: BLE001 - metadata not there yet
            state = {}
        if len(state) == partitions and all(len(s.isr) >= want_isr and s.leader >= 0 for s in state.values()):
            return
        time.sleep(0.2)
    raise TimeoutError(f"topic {topic} not fully in sync after 120 s")


def _free_port_range(count: int) -> int:
    """A base port with `count` consecutive free loopback ports (kbroker serve --nodes: node i on base + i - 1)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + count > 65535:
            continue
        socks = [socket.socket() for _ in range(count)]
        try:
            for i, sock in enumerate(socks):
                sock.bind(("127.0.0.1", base + i))
            return int(base)
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError("no free port range")


class _LocalNodes:
    """`kbroker serve --nodes n` under `taskset -c 0-(n-1)`: n kbroker nodes, node i pinned to core i-1."""

    def __init__(self, workdir: Path, n: int, overrides: dict[str, str] | None = None,
                 wrapper: list[str] | None = None) -> None:
        """``wrapper``: a command the node's Python runs under (bench_request_cost.py's valgrind)."""
        self.workdir, self.n = workdir, n
        self.overrides = {"num.partitions": "1"} if overrides is None else overrides
        self.wrapper = wrapper or []
        self.port, self.controller_port = _free_port_range(n), _free_port_range(3)
        self.pids: dict[int, int] = {}
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        cmd = ["taskset", "-c", f"0-{self.n - 1}", *self.wrapper, sys.executable, "-m", "kbroker", "serve",
               "--nodes", str(self.n),
               "--controller-port", str(self.controller_port),
               "--override", f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
               "--override", f"log.dirs={self.workdir / 'data'}"]
        for key, value in self.overrides.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    def __enter__(self) -> _LocalNodes:
        out = self.workdir / "serve.out"
        with open(out, "wb") as sink:
            self.proc = subprocess.Popen(self.command(), stdout=sink, stderr=subprocess.STDOUT, cwd=Path(__file__).parent.parent)
        ready = "nodes started" if self.n > 1 else "kbroker started: node"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            text = out.read_text(errors="replace")
            if ready in text:
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"kbroker serve --nodes {self.n} exited: {text[-2000:]}")
            time.sleep(0.2)
        else:
            raise TimeoutError(f"kbroker serve --nodes {self.n} did not start: {out.read_text()[-2000:]}")
        if self.n == 1:
            self.pids = {1: self.proc.pid}  # the single node is the command itself (taskset execs it)
        else:
            self.pids = {int(m.group(1)): int(m.group(2))
                         for m in re.finditer(r"^node (\d+): .* pid=(\d+)", text, re.MULTILINE)}
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(90)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(sorted(self.pids))

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def pid(self, node_id: int) -> int:
        return self.pids[node_id]

    def create_topic(self, topic: str, assignment: str, configs: dict[str, str]) -> None:
        _create_topic(self.bootstrap, topic, assignment, configs)

    def cpu_seconds(self) -> float:
        return sum(proc_cpu_seconds(pid) for pid in self.pids.values())


def _warm_up(bootstrap: str, topic: str, load: dict[str, object], mode: str = "produce") -> None:
    """A short unmeasured kbench run first: connections, metadata, the idempotent producer id, and the
    brokers' first appends to each partition."""
    kbench(mode, {"bootstrap": bootstrap, "topic": topic, "records": 1000, **load}, pin=False, timeout=120)


def p6(system: str, records: int) -> dict[str, float]:
    """Three brokers of `system`, RF 3, min.insync.replicas 2, acks=all: kbench produce, unpinned."""
    ids = (2, 3, 4)
    with tempfile.TemporaryDirectory(prefix=f"bench-p6-{system}-") as d, \
            _Cluster(system, Path(d), ids, {"min.insync.replicas": "2", "replica.lag.time.max.ms": "10000",
                                            "num.partitions": "1"}) as c:
        c.create_topic("p6", "2:3:4,3:4:2,4:2:3", {"min.insync.replicas": "2"})
        _warm_up(c.bootstrap, "p6", P6_LOAD)
        cpu0, t0 = c.cpu_seconds(), time.monotonic()
        r = kbench("produce", {"bootstrap": c.bootstrap, "topic": "p6", "records": records, **P6_LOAD}, pin=False)
        cpu, wall = c.cpu_seconds() - cpu0, time.monotonic() - t0
        return r | {"brokers_cpu_s": cpu, "brokers_cpu_util": cpu / wall, "load_avg_1m": os.getloadavg()[0],
                    "brokers_cpu_us_per_record": cpu * 1e6 / records}


def p7(system: str, nodes: int, records: int, generator: str = "raw", socket_buffers: str = "os") -> dict[str, float]:
    """`nodes` kbroker nodes, one per core (cores 0..nodes-1: `kbroker serve --nodes`), or one Kafka
    broker on those cores, under `generator`'s load (p7_load: kbench produce-raw or kbench produce), the
    brokers' socket buffers as `socket_buffers` says (P7_SOCKET_BUFFERS)."""
    mode, load = p7_load(generator)
    overrides = p7_broker_overrides(socket_buffers)
    cpus = ",".join(str(i) for i in range(nodes))
    with tempfile.TemporaryDirectory(prefix=f"bench-p7-{system}-") as d:
        c: _Cluster | _LocalNodes
        if system == "kbroker":
            c = _LocalNodes(Path(d), nodes, overrides)
        else:
            c = _Cluster(system, Path(d), (2,), overrides)
        with c:
            if system != "kbroker":
                _pin(c.pid(2), cpus)
            ids = c.ids
            c.create_topic("p7", ",".join(str(ids[p % len(ids)]) for p in range(4)), {})
            _warm_up(c.bootstrap, "p7", load, mode)
            with BrokerCpu(c.pid(ids[0])) as cpu_first:
                cpu0 = c.cpu_seconds()
                r = kbench(mode, {"bootstrap": c.bootstrap, "topic": "p7", "records": records, **load}, pin=False)
                cpu = c.cpu_seconds() - cpu0
            return r | {"nodes": len(ids), "cores": nodes, "brokers_cpu_s": cpu,
                        "os_socket_buffers": float(bool(P7_SOCKET_BUFFERS[socket_buffers])),
                        "brokers_cpu_util": cpu / cpu_first.wall_s if cpu_first.wall_s else 0.0}


def sink_ceiling(load: dict[str, object], records: int, topic: str = "ceiling",
                 mode: str = "produce") -> dict[str, float]:
    """kbench `mode` (produce, or produce-raw for P7's default shape) with `load` against the trivial
    sink (sink on core 0, generator on core 1; the sink's topics have 4 partitions, as P7's)."""
    sink = subprocess.Popen(["taskset", "-c", "0", kbench_binary(), "sink", "-listen", "127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert sink.stdout is not None
        line = sink.stdout.readline().strip()
        if not line.startswith("listening="):
            raise RuntimeError(f"kbench sink did not start: {line!r}")
        return kbench(mode, {"bootstrap": line.split("=", 1)[1], "topic": topic, "records": records, **load},
                      pin=True)
    finally:
        sink.kill()
        sink.wait()


def sink_consume_ceiling(records: int, partitions: int = 4, mode: str = "fetch") -> dict[str, float]:
    """P3's generator (`mode`: kbench fetch, P3's default, or kbench consume) in P3's shape against the
    trivial sink's preloaded 1 KiB-record batches: the ceiling of the generator P3 actually used."""
    if mode not in ("fetch", "consume"):
        raise ValueError(f"P3's generator is kbench fetch or consume, not {mode!r}")
    sink = subprocess.Popen(["taskset", "-c", "0", kbench_binary(), "sink", "-listen", "127.0.0.1:0",
                             "-partitions", str(partitions)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    try:
        assert sink.stdout is not None
        boot = sink.stdout.readline().strip().split("=", 1)[1]
        return kbench(mode, {"bootstrap": boot, "topic": "ceiling", "partitions": partitions,
                                  "clients": partitions, "records": records}, pin=True)
    finally:
        sink.kill()
        sink.wait()
