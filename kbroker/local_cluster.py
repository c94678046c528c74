"""`kbroker serve --nodes N`: one command runs a local KRaft cluster of N kbroker node processes, one
per core (issue 17, P7).

kbroker is one process on one core by design (one event loop, one GIL); a host with N cores runs N
kbroker nodes as a cluster, as it would run N Kafka brokers on N hosts. This module owns the layout of
such a cluster and the parent process that supervises it. It imports the config and the storage tool
(to format the nodes' directories) and, from the broker module, only `notify_ready`; it never runs a
broker itself (each node is a child process running `kbroker serve <node config>`, so a node is
exactly what a hand-started one is).

The layout (`plan_local_cluster`, pure; docs/cluster.md "One node per core"):

- nodes 1..N; the first `1` (N < 3) or `3` (N >= 3) nodes are combined (`process.roles=broker,controller`,
  a static KRaft voter quorum in `controller.quorum.voters`: a 2-voter quorum would stop when either
  voter stops, so it is never chosen), the rest `process.roles=broker`;
- node i listens for clients on every configured listener's port + (i - 1), so node 1 keeps 9092 and
  `localhost:9092` bootstraps; a voter's CONTROLLER listener is on `--controller-port` + (i - 1)
  (default: the first listener's port + 10000, i.e. 19092, 19093, 19094), on the first listener's host;
- node i's log dirs are `<d>/node-<i>` for each `d` of `log.dirs` (and `metadata.log.dir`), with its
  generated `server.properties` and, by default, its `server.log` in the first one;
- the internal topics' replication (`offsets.topic.replication.factor`,
  `transaction.state.log.replication.factor`, `share.coordinator.state.topic.replication.factor`)
  defaults to min(N, 3) and their min ISR (`transaction.state.log.min.isr`,
  `share.coordinator.state.topic.min.isr`) to max(1, min(N, 3) - 1): Kafka's 3 / 2 on three or more
  nodes, and never more replicas than brokers (Kafka's INVALID_REPLICATION_FACTOR otherwise). User
  topics keep Kafka's defaults (`default.replication.factor` 1, `min.insync.replicas` 1): every node
  shares the host, so a replica on another local node protects against a process dying but not the
  host, and it costs the cores the layout exists to add. A key set in the config or by `--override`
  wins over each of these defaults.

Formatting: every node directory without `meta.properties` is formatted with one cluster id (the one
already in a formatted node directory, or a new one), as `kbroker storage format -t <id> -c <node
config>` does; a restart finds the directories formatted and reuses them.

The supervisor (`LocalClusterSupervisor`): starts every node at once (voters wait for each other),
pins node i to the (i-1)-th CPU of the parent's affinity mask (`os.sched_setaffinity`, when available
and not `--no-pin`), copies each node's output to its `server.log` (or to stdout, each line prefixed
`[node-<i>] `), prints one line per node once all have started, exits 1 if a node dies or does not
start within `--start-timeout`. A node is started when it says so over systemd's notify protocol
(`NOTIFY_SOCKET`, a unix datagram socket of the supervisor's: "READY=1", `kbroker.broker.notify_ready`),
whatever its log level; the supervisor tells its own `NOTIFY_SOCKET`, if any, once every node has. SIGTERM/SIGINT: the `process.roles=broker` nodes stop first (a
controlled shutdown needs the active controller), then the voters together (stopping them one at a
time would leave the last without a quorum to complete its controlled shutdown; stopped together, the
last voters still lose theirs, and each gives its controlled shutdown up once it has been out of touch
with a quorum for `controller.quorum.fetch.timeout.ms`: `KRaftBroker.controlled_shutdown`); a second signal is
forwarded too (a node exits at once on it). Nodes run in their own process group (a terminal's Ctrl-C
reaches only the parent) with PR_SET_PDEATHSIG, so a parent killed with SIGKILL leaves no node behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import io
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, TextIO

from kbroker.config import ConfigError, Endpoint, KafkaConfig, parse_endpoints
from kbroker.log.checkpoints import random_kafka_uuid, read_properties, uuid_to_base64
from kbroker.storage_tool import META_PROPERTIES, FormatRequest, FormatterError, format_storage

CONTROLLER_LISTENER = "CONTROLLER"
CONTROLLER_PORT_OFFSET = 10000
NODE_CONFIG_FILE = "server.properties"
NODE_LOG_FILE = "server.log"

# Keys the layout writes for each node; the user's values for these are replaced (or shifted).
_LAYOUT_KEYS = ("process.roles", "node.id", "broker.id", "listeners", "advertised.listeners",
                "controller.listener.names", "controller.quorum.voters", "controller.quorum.bootstrap.servers",
                "log.dirs", "log.dir", "metadata.log.dir", "listener.security.protocol.map")


class LocalClusterError(Exception):
    """The layout cannot be built or the nodes' directories cannot be formatted: one line, exit 1."""


def parse_node_count(text: str) -> int:
    """`--nodes`: a positive integer, or `auto` for os.cpu_count()."""
    if text.strip().lower() == "auto":
        return max(1, os.cpu_count() or 1)
    try:
        n = int(text)
    except ValueError:
        raise ValueError(f"--nodes expects a positive integer or 'auto', got {text!r}") from None
    if n < 1:
        raise ValueError(f"--nodes expects a positive integer or 'auto', got {text!r}")
    return n


def voter_count(nodes: int) -> int:
    """1 voter below three nodes, else 3: a quorum of 2 tolerates no failure and costs a second voter."""
    return 3 if nodes >= 3 else 1


def internal_replication(nodes: int) -> tuple[int, int]:
    """(replication factor, min ISR) of the internal topics on `nodes` nodes: Kafka's 3 / 2, capped."""
    rf = min(nodes, 3)
    return rf, max(1, rf - 1)


@dataclass(frozen=True, slots=True)
class LocalNode:
    """One node of the layout: its id, roles, client and controller ports, directories and config."""

    node_id: int
    roles: tuple[str, ...]
    listeners: tuple[Endpoint, ...]
    controller_port: int | None
    log_dirs: tuple[Path, ...]
    cpu: int | None
    props: Mapping[str, str] = field(repr=False)

    @property
    def is_voter(self) -> bool:
        return "controller" in self.roles

    @property
    def port(self) -> int:
        return self.listeners[0].port

    @property
    def node_dir(self) -> Path:
        return self.log_dirs[0]

    @property
    def config_file(self) -> Path:
        return self.node_dir / NODE_CONFIG_FILE

    @property
    def log_file(self) -> Path:
        return self.node_dir / NODE_LOG_FILE

    def properties_text(self) -> str:
        return "".join(f"{k}={v}\n" for k, v in self.props.items())


def _endpoint_text(name: str, host: str, port: int) -> str:
    return f"{name}://{f'[{host}]' if ':' in host else host}:{port}"


def _shift(endpoints: Sequence[Endpoint], by: int) -> list[Endpoint]:
    return [Endpoint(e.name, e.host, e.port + by, e.security_protocol) for e in endpoints]


def _shift_http(url: str, by: int) -> str:
    """`kbroker.metrics.listener` (http://host:port) moved by `by` ports; unchanged when it has no port."""
    head, sep, port = url.rpartition(":")
    if not sep or not port.isdigit() or int(port) == 0:
        return url
    return f"{head}:{int(port) + by}"


def plan_local_cluster(config: KafkaConfig, nodes: int, *, controller_port: int | None = None,
                       cpus: Sequence[int] | None = None) -> list[LocalNode]:
    """The layout of `nodes` local nodes from one config (its `originals`: the file and the overrides)."""
    if nodes < 1:
        raise LocalClusterError("--nodes must be at least 1")
    base = dict(config.originals)
    controller_names = config.controller_listener_names
    protocol_map = config.security_protocol_map
    listeners = [e for e in config.listeners if e.name not in controller_names]
    if not listeners:
        raise LocalClusterError("--nodes needs a client listener in listeners (e.g. PLAINTEXT://127.0.0.1:9092)")
    if any(e.port == 0 for e in listeners):
        raise LocalClusterError("--nodes needs fixed listener ports (node i listens on the port + i - 1), not port 0")
    raw_advertised = config["advertised.listeners"]
    advertised = [e for e in parse_endpoints("advertised.listeners", list(raw_advertised), protocol_map)
                  if e.name not in controller_names] if raw_advertised else []
    controller_name = sorted(controller_names)[0] if controller_names else CONTROLLER_LISTENER
    if any(e.name == controller_name for e in listeners):
        raise LocalClusterError(f"listener {controller_name} is the controller listener; name client listeners otherwise")
    first_port = listeners[0].port
    cport = first_port + CONTROLLER_PORT_OFFSET if controller_port is None else controller_port
    voters = voter_count(nodes)
    top = max(e.port for e in listeners) + nodes - 1
    if top > 65535 or cport + voters - 1 > 65535:
        raise LocalClusterError(f"{nodes} nodes need ports up to {max(top, cport + voters - 1)}: above 65535")
    client_ports = {e.port + i for e in listeners for i in range(nodes)}
    controller_ports = {cport + i for i in range(voters)}
    if client_ports & controller_ports:
        raise LocalClusterError(f"controller port {cport} collides with the client ports: pick another with "
                                "--controller-port")
    host = listeners[0].host or "127.0.0.1"
    quorum = ",".join(f"{i}@{host}:{cport + i - 1}" for i in range(1, voters + 1))
    mapping = list(config["listener.security.protocol.map"])
    if controller_name not in protocol_map:
        mapping.append(f"{controller_name}:PLAINTEXT")
    rf, min_isr = internal_replication(nodes)
    defaults = {
        "offsets.topic.replication.factor": str(rf),
        "transaction.state.log.replication.factor": str(rf),
        "share.coordinator.state.topic.replication.factor": str(rf),
        "transaction.state.log.min.isr": str(min_isr),
        "share.coordinator.state.topic.min.isr": str(min_isr),
    }
    metadata_dir = base.get("metadata.log.dir")
    plan: list[LocalNode] = []
    for i in range(1, nodes + 1):
        voter = i <= voters
        own = _shift(listeners, i - 1)
        texts = [_endpoint_text(e.name, e.host, e.port) for e in own]
        if voter:
            texts.append(_endpoint_text(controller_name, host, cport + i - 1))
        dirs = tuple(d / f"node-{i}" for d in config.log_dirs)
        props: dict[str, str] = {k: v for k, v in base.items() if k not in _LAYOUT_KEYS}
        for key, value in defaults.items():
            props.setdefault(key, value)
        metrics = props.get("kbroker.metrics.listener")
        if metrics:
            props["kbroker.metrics.listener"] = _shift_http(metrics, i - 1)
        props.update({
            "process.roles": "broker,controller" if voter else "broker",
            "node.id": str(i),
            "controller.quorum.voters": quorum,
            "controller.listener.names": controller_name,
            "listeners": ",".join(texts),
            "listener.security.protocol.map": ",".join(mapping),
            "log.dirs": ",".join(str(d) for d in dirs),
        })
        if advertised:
            props["advertised.listeners"] = ",".join(
                _endpoint_text(e.name, e.host, e.port) for e in _shift(advertised, i - 1))
        if metadata_dir:
            props["metadata.log.dir"] = str(Path(metadata_dir).expanduser().absolute() / f"node-{i}")
        plan.append(LocalNode(
            node_id=i, roles=("broker", "controller") if voter else ("broker",), listeners=tuple(own),
            controller_port=cport + i - 1 if voter else None, log_dirs=dirs,
            cpu=cpus[(i - 1) % len(cpus)] if cpus else None, props=props))
    return plan


def node_config(node: LocalNode) -> KafkaConfig:
    try:
        return KafkaConfig(dict(node.props))
    except ConfigError as e:
        raise LocalClusterError(f"node {node.node_id}: {e}") from None


def existing_cluster_id(plan: Sequence[LocalNode]) -> str | None:
    """The cluster id already in the nodes' directories; LocalClusterError if they disagree."""
    found: dict[str, Path] = {}
    for node in plan:
        cfg = node_config(node)
        for d in {*cfg.log_dirs, cfg.metadata_log_dir}:
            props = read_properties(d / META_PROPERTIES)
            if props and props.get("cluster.id"):
                found.setdefault(props["cluster.id"], d)
    if len(found) > 1:
        listed = ", ".join(f"{cid} in {d}" for cid, d in found.items())
        raise LocalClusterError(f"the node directories belong to different clusters ({listed}); remove them or "
                                "choose another log.dirs")
    return next(iter(found), None)


LAYOUT_FILE = "kbroker-nodes.properties"


def _check_voters(plan: Sequence[LocalNode]) -> None:
    """The voter ids must stay those the cluster was formatted with: a static quorum cannot add or
    remove voters (KIP-853's AddRaftVoter is not implemented), so going from fewer than 3 nodes to 3
    or more (1 voter to 3) is refused. Kept in `<log dir>/kbroker-nodes.properties`."""
    voters = ",".join(str(n.node_id) for n in plan if n.is_voter)
    path = plan[0].node_dir.parent / LAYOUT_FILE
    stored = read_properties(path)
    if stored is not None and stored.get("voters") not in (None, voters):
        raise LocalClusterError(
            f"these directories were formatted with voters {stored['voters']} ({path}); --nodes {len(plan)} needs "
            f"voters {voters}, and voters cannot be added or removed: use a number of nodes with the same voters "
            "(below 3, or 3 and more), or another log.dirs")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"voters={voters}\nnodes={len(plan)}\n", encoding="utf-8")
    except OSError as e:
        raise LocalClusterError(f"Cannot write {path}: {e.strerror or e}") from None


def format_nodes(plan: Sequence[LocalNode], out: TextIO) -> str:
    """Write each node's server.properties and format its unformatted directories with one cluster id
    (`kbroker storage format --ignore-formatted`, its output dropped); one line per formatted node on
    `out`; the cluster id."""
    cluster_id = existing_cluster_id(plan) or uuid_to_base64(random_kafka_uuid())
    _check_voters(plan)
    for node in plan:
        cfg = node_config(node)
        try:
            node.node_dir.mkdir(parents=True, exist_ok=True)
            node.config_file.write_text(node.properties_text(), encoding="utf-8")
        except OSError as e:
            raise LocalClusterError(f"Cannot write {node.config_file}: {e.strerror or e}") from None
        dirs = {*cfg.log_dirs, cfg.metadata_log_dir}
        if all(read_properties(d / META_PROPERTIES) is not None for d in dirs):
            continue
        try:
            format_storage(cfg, FormatRequest(cluster_id=cluster_id, ignore_formatted=True), out=io.StringIO())
        except FormatterError as e:
            raise LocalClusterError(f"node {node.node_id}: {e}") from None
        print(f"kbroker: formatted {', '.join(str(d) for d in sorted(dirs))} (node {node.node_id}, "
              f"cluster {cluster_id})", file=out)
    return cluster_id


# -- the supervisor ------------------------------------------------------------------------------------

_PR_SET_PDEATHSIG = 1


def _child_setup(cpu: int | None) -> Callable[[], None]:
    """Runs in the child between fork and exec: die with the parent, and take one core."""
    libc_name = ctypes.util.find_library("c") if sys.platform.startswith("linux") else None
    libc = ctypes.CDLL(libc_name, use_errno=True) if libc_name else None

    def setup() -> None:
        if libc is not None:
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})

    return setup


class _NodeProcess:
    """One running node: its process and the thread copying its output (and watching for start-up)."""

    def __init__(self, node: LocalNode, proc: subprocess.Popen[str], sink: IO[str], prefix: str | None) -> None:
        self.node, self.proc = node, proc
        self.started = threading.Event()
        self.tail: list[str] = []
        self._sink, self._prefix = sink, prefix
        self._thread = threading.Thread(target=self._copy, name=f"node-{node.node_id}-output", daemon=True)
        self._thread.start()

    def _copy(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.tail = [*self.tail[-19:], line]
            with contextlib.suppress(OSError, ValueError):
                self._sink.write(line if self._prefix is None else f"{self._prefix}{line}")
                self._sink.flush()

    def join_output(self, timeout: float) -> None:
        self._thread.join(timeout)


class LocalClusterSupervisor:
    """Starts the nodes, waits for them, forwards signals, stops them in order, returns the exit code."""

    def __init__(self, plan: Sequence[LocalNode], *, serve_args: Sequence[str], log_to_stdout: bool,
                 start_timeout_s: float, stop_timeout_s: float, out: TextIO = sys.stdout,
                 err: TextIO = sys.stderr) -> None:
        self.plan = list(plan)
        self.serve_args = list(serve_args)
        self.log_to_stdout = log_to_stdout
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.out, self.err = out, err
        self.running: list[_NodeProcess] = []
        self._signals = 0
        self._files: list[IO[str]] = []

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        if self._signals > 1:  # a second Ctrl-C / SIGTERM: pass it on, each node then exits at once
            for p in self.running:
                with contextlib.suppress(ProcessLookupError):
                    p.proc.send_signal(signal.SIGTERM)

    def _say(self, text: str, stream: TextIO | None = None) -> None:
        s = stream or self.out
        print(text, file=s, flush=True)

    def _spawn(self, node: LocalNode, notify_socket: str) -> _NodeProcess:
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        env["NOTIFY_SOCKET"] = notify_socket
        cmd = [sys.executable, "-m", "kbroker", "serve", str(node.config_file), *self.serve_args]
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, bufsize=1, env=env, process_group=0,
                                preexec_fn=_child_setup(node.cpu))
        if self.log_to_stdout:
            return _NodeProcess(node, proc, self.out, f"[node-{node.node_id}] ")
        sink = open(node.log_file, "a", encoding="utf-8")  # noqa: SIM115 - closed in run()
        self._files.append(sink)
        return _NodeProcess(node, proc, sink, None)

    def run(self) -> int:
        handlers = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        with tempfile.TemporaryDirectory(prefix="kbroker-nodes-") as d, \
                socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
            notify.bind(os.path.join(d, "notify"))
            notify.setblocking(False)
            try:
                return self._run(notify)
            finally:
                for s, h in handlers.items():
                    signal.signal(s, h)
                for f in self._files:
                    f.close()

    def _take_notifications(self, notify: socket.socket) -> None:
        """READY=1 datagrams from the nodes (`kbroker.broker.notify_ready`), matched by MAINPID."""
        by_pid = {p.proc.pid: p for p in self.running}
        while True:
            try:
                data = notify.recv(4096)
            except (BlockingIOError, InterruptedError):
                return
            fields = dict(line.partition("=")[::2] for line in data.decode(errors="replace").splitlines())
            p = by_pid.get(int(fields["MAINPID"])) if fields.get("MAINPID", "").isdigit() else None
            if p is not None and fields.get("READY") == "1":
                p.started.set()

    def _run(self, notify: socket.socket) -> int:
        for node in self.plan:
            self.running.append(self._spawn(node, notify.getsockname()))
        deadline = time.monotonic() + self.start_timeout_s
        while not all(p.started.is_set() for p in self.running):
            self._take_notifications(notify)
            dead = [p for p in self.running if p.proc.poll() is not None and not p.started.is_set()]
            if dead:
                p = dead[0]
                p.join_output(2)
                where = "" if self.log_to_stdout else f" (log: {p.node.log_file})"
                self._say(f"kbroker: error: node {p.node.node_id} exited with code {p.proc.returncode} during "
                          f"start-up{where}", self.err)
                for line in p.tail[-5:]:
                    self._say(f"  node {p.node.node_id}: {line.rstrip()}", self.err)
                self._stop()
                return 1
            if self._signals:
                self._say("kbroker: stopping during start-up", self.err)
                self._stop()
                return 1
            if time.monotonic() > deadline:
                late = ", ".join(str(p.node.node_id) for p in self.running if not p.started.is_set())
                self._say(f"kbroker: error: node(s) {late} did not start within {self.start_timeout_s:.0f}s", self.err)
                self._stop()
                return 1
            time.sleep(0.05)
        for p in self.running:
            n = p.node
            listeners = ",".join(_endpoint_text(e.name, e.host, e.port) for e in n.listeners)
            extra = f" controller={n.props['listeners'].split(',')[-1]}" if n.is_voter else ""
            cpu = f" cpu={n.cpu}" if n.cpu is not None else ""
            log = "stdout" if self.log_to_stdout else str(n.log_file)
            self._say(f"node {n.node_id}: roles={','.join(n.roles)} port={n.port} pid={p.proc.pid}"
                      f"{cpu} listeners={listeners}{extra} log={log}")
        from kbroker.broker import notify_ready

        notify_ready()  # our own supervisor (systemd Type=notify), if any: the cluster serves
        boot = self.plan[0].listeners[0]
        self._say(f"kbroker: {len(self.plan)} nodes started, bootstrap {boot.host or '127.0.0.1'}:{boot.port}. "
                  f"Stop them with Ctrl-C or `kill -TERM {os.getpid()}`.")
        died: set[int] = set()
        while not self._signals:
            for p in self.running:
                if p.proc.poll() is not None and p.node.node_id not in died:
                    died.add(p.node.node_id)
                    self._say(f"kbroker: node {p.node.node_id} (pid {p.proc.pid}) exited with code "
                              f"{p.proc.returncode}; the other nodes go on", self.err)
            if len(died) == len(self.running):
                self._say("kbroker: every node has exited", self.err)
                return 1
            time.sleep(0.1)
        codes = self._stop()
        failed = {i: c for i, c in codes.items() if c != 0}
        if failed:
            self._say("kbroker: nodes exited uncleanly: " + ", ".join(f"node {i} code {c}" for i, c in failed.items()),
                      self.err)
            return 1
        self._say(f"kbroker: {len(self.plan)} nodes shut down cleanly")
        return 0

    def _stop(self) -> dict[int, int]:
        """SIGTERM the brokers, wait, then the voters together; SIGKILL what outlives the timeout."""
        codes: dict[int, int] = {}
        for group in ([p for p in self.running if not p.node.is_voter], [p for p in self.running if p.node.is_voter]):
            for p in group:
                if p.proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        p.proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + self.stop_timeout_s
            for p in group:
                try:
                    p.proc.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    self._say(f"kbroker: node {p.node.node_id} did not stop within {self.stop_timeout_s:.0f}s: "
                              "killing it", self.err)
                    p.proc.kill()
                    p.proc.wait()
                p.join_output(5)
                codes[p.node.node_id] = int(p.proc.returncode)
        return codes


def run_local_cluster(config: KafkaConfig, nodes: int, *, serve_args: Sequence[str], pin: bool,
                      controller_port: int | None, log_to_stdout: bool, start_timeout_s: float) -> int:
    """`kbroker serve --nodes N`: plan, format, supervise. The exit code."""
    cpus: list[int] | None = None
    if pin and hasattr(os, "sched_setaffinity"):
        cpus = sorted(os.sched_getaffinity(0))
        if nodes > len(cpus):
            print(f"kbroker: warning: {nodes} nodes on {len(cpus)} cores: some nodes share a core", file=sys.stderr)
    try:
        plan = plan_local_cluster(config, nodes, controller_port=controller_port, cpus=cpus)
        cluster_id = format_nodes(plan, out=sys.stderr)
    except LocalClusterError as e:
        print(f"kbroker: error: {e}", file=sys.stderr)
        return 1
    voters = sum(1 for n in plan if n.is_voter)
    print(f"kbroker: starting {nodes} nodes (cluster {cluster_id}, {voters} voter{'s' if voters > 1 else ''})",
          file=sys.stdout, flush=True)
    stop_timeout = float(config["kbroker.shutdown.timeout.ms"]) / 1000 + 15
    return LocalClusterSupervisor(plan, serve_args=serve_args, log_to_stdout=log_to_stdout,
                                  start_timeout_s=start_timeout_s, stop_timeout_s=stop_timeout).run()
