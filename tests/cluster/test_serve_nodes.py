"""`kbroker serve --nodes N` (issue 17, P7): one command, a local KRaft cluster of N kbroker processes.

The layout is checked as data (roles, ports, voters, directories, the internal topics' replication);
the command itself with real processes: `kbroker serve --nodes 2` (and 3, `-m slow`) starts, confluent-kafka's
Metadata lists every node, a 12-partition topic created by Kafka 4.3.1's `kafka-topics` has its
leaders spread evenly (`kafka-topics --describe`), records produced and consumed through node 1's
bootstrap come back, SIGTERM to the command stops every node cleanly (exit 0, no node left running),
and a second start reuses the formatted directories (same cluster, the topic and its records back). A
node that cannot start (its port taken) makes the command exit 1 and stop the others.
"""

from __future__ import annotations

import collections
import io
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kbroker.config import KafkaConfig
from kbroker.local_cluster import LocalClusterError, format_nodes, parse_node_count, plan_local_cluster
from tests.support.java import REPO_ROOT, java_unavailable_reason, run_java_main

NODE_LINE = re.compile(r"^node (\d+): roles=(\S+) port=(\d+) pid=(\d+)")


# -- the layout, as data --------------------------------------------------------------------------------


def _config(**props: str) -> KafkaConfig:
    return KafkaConfig({k.replace("_", "."): v for k, v in props.items()})


@pytest.mark.parametrize("n, voters", [(1, 1), (2, 1), (3, 3), (5, 3)])
def test_layout_roles_ports_and_directories(tmp_path: Path, n: int, voters: int) -> None:
    plan = plan_local_cluster(_config(log_dirs=str(tmp_path)), n, cpus=[0, 1])
    assert [p.node_id for p in plan] == list(range(1, n + 1))
    assert [p.port for p in plan] == [9092 + i for i in range(n)]
    assert [p.is_voter for p in plan] == [i < voters for i in range(n)]
    assert [p.cpu for p in plan] == [i % 2 for i in range(n)]
    quorum = ",".join(f"{i}@127.0.0.1:{19092 + i - 1}" for i in range(1, voters + 1))
    rf = min(n, 3)
    for p in plan:
        cfg = KafkaConfig(dict(p.props))
        assert cfg.log_dirs == [tmp_path / f"node-{p.node_id}"]
        assert p.props["controller.quorum.voters"] == quorum
        assert cfg.node_id == p.node_id
        if p.is_voter:
            assert cfg.is_kraft_combined
            assert [e.port for e in cfg.controller_listeners] == [19092 + p.node_id - 1]
        else:
            assert cfg.is_kraft_broker
        assert [e.port for e in cfg.listeners] == [p.port]
        assert cfg["offsets.topic.replication.factor"] == rf
        assert cfg["transaction.state.log.replication.factor"] == rf
        assert cfg["transaction.state.log.min.isr"] == max(1, rf - 1)
        assert cfg["default.replication.factor"] == 1


def test_layout_keeps_the_users_keys_and_shifts_every_listener(tmp_path: Path) -> None:
    cfg = _config(log_dirs=f"{tmp_path}/a,{tmp_path}/b", offsets_topic_replication_factor="1",
                  listeners="PLAINTEXT://127.0.0.1:7000,EXTERNAL://0.0.0.0:8000",
                  advertised_listeners="PLAINTEXT://127.0.0.1:7000,EXTERNAL://example.com:8000",
                  listener_security_protocol_map="PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT",
                  num_partitions="4")
    plan = plan_local_cluster(cfg, 3, controller_port=6000)
    node3 = KafkaConfig(dict(plan[2].props))
    assert [(e.name, e.port) for e in node3.listeners] == [("PLAINTEXT", 7002), ("EXTERNAL", 8002)]
    assert [(e.host, e.port) for e in node3.advertised_listeners] == [("127.0.0.1", 7002), ("example.com", 8002)]
    assert [e.port for e in node3.controller_listeners] == [6002]
    assert node3.log_dirs == [tmp_path / "a" / "node-3", tmp_path / "b" / "node-3"]
    assert node3["offsets.topic.replication.factor"] == 1  # the user's value wins over min(N, 3)
    assert node3["num.partitions"] == 4


def test_layout_refusals(tmp_path: Path) -> None:
    with pytest.raises(LocalClusterError, match="port 0"):
        plan_local_cluster(_config(listeners="PLAINTEXT://127.0.0.1:0"), 2)
    with pytest.raises(LocalClusterError, match="collides"):
        plan_local_cluster(_config(listeners="PLAINTEXT://127.0.0.1:9092"), 4, controller_port=9094)
    with pytest.raises(LocalClusterError, match="65535"):
        plan_local_cluster(_config(listeners="PLAINTEXT://127.0.0.1:65530"), 8)
    format_nodes(plan_local_cluster(_config(log_dirs=str(tmp_path)), 2), io.StringIO())
    with pytest.raises(LocalClusterError, match="voters cannot be added"):
        format_nodes(plan_local_cluster(_config(log_dirs=str(tmp_path)), 3), io.StringIO())
    format_nodes(plan_local_cluster(_config(log_dirs=str(tmp_path)), 1), io.StringIO())  # one voter: fine
    assert parse_node_count("auto") == (os.cpu_count() or 1)
    assert parse_node_count("4") == 4
    for bad in ("0", "-1", "two"):
        with pytest.raises(ValueError):
            parse_node_count(bad)


# -- the command, real processes ------------------------------------------------------------------------


def _free_range(count: int) -> int:
    """A base port with `count` consecutive free ports on loopback."""
    for _ in range(200):
        base = random.randrange(20000, 30000)
        socks = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port range")


@dataclass
class Served:
    proc: subprocess.Popen[str]
    nodes: dict[int, tuple[str, int, int]]  # id -> (roles, port, pid)
    out: list[str]

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.nodes[1][1]}"


def _serve(n: int, data: Path, port: int, controller_port: int, *extra: str, timeout: float = 120) -> Served:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "kbroker", "serve", "--nodes", str(n), "--controller-port", str(controller_port),
         "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override", f"log.dirs={data}",
         "--override", "group.initial.rebalance.delay.ms=0", "--override", "offsets.topic.num.partitions=6", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=REPO_ROOT)
    assert proc.stdout is not None
    out: list[str] = []
    nodes: dict[int, tuple[str, int, int]] = {}
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        out.append(line)
        m = NODE_LINE.match(line)
        if m:
            nodes[int(m.group(1))] = (m.group(2), int(m.group(3)), int(m.group(4)))
        if "nodes started" in line or time.monotonic() > deadline:
            break
    if len(nodes) != n:
        proc.kill()
        proc.wait()
        raise AssertionError("".join(out))
    return Served(proc, nodes, out)


def _stop(s: Served, timeout: float = 60) -> tuple[int, str]:
    s.proc.send_signal(signal.SIGTERM)
    rest, _ = s.proc.communicate(timeout=timeout)
    return s.proc.returncode, rest


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _leaders(bootstrap: str, topic: str) -> collections.Counter[int]:
    proc = run_java_main("kafka-topics", ["--bootstrap-server", bootstrap, "--describe", "--topic", topic],
                         timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return collections.Counter(int(m) for m in re.findall(r"\bLeader: (\d+)", proc.stdout))


def _produce(bootstrap: str, topic: str, count: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(count):
        p.produce(topic, f"v{i}".encode(), partition=i % 12)
    assert p.flush(30) == 0


def _consume(bootstrap: str, topic: str, group: str, count: int) -> set[bytes]:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: set[bytes] = set()
    deadline = time.monotonic() + 40
    try:
        while len(got) < count and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.add(m.value())
    finally:
        c.close()
    return got


@pytest.fixture
def java() -> None:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(f"Kafka tools unavailable: {reason}")


@pytest.fixture
def reap() -> Iterator[list[Served]]:
    started: list[Served] = []
    yield started
    for s in started:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()
        for _, _, pid in s.nodes.values():
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _check_cluster(s: Served, n: int, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": s.bootstrap}).list_topics(timeout=20)
    assert sorted(md.brokers) == list(range(1, n + 1))
    assert sorted(b.port for b in md.brokers.values()) == [port for _, port, _ in s.nodes.values()]
    created = run_java_main("kafka-topics", ["--bootstrap-server", s.bootstrap, "--create", "--topic", topic,
                                             "--partitions", "12"], timeout=90)
    assert created.returncode == 0, created.stdout + created.stderr
    leaders = _leaders(s.bootstrap, topic)
    # The controller's striped placement: a round over the unfenced brokers gives each one leader.
    assert leaders == collections.Counter({i: 12 // n for i in range(1, n + 1)}), leaders


@pytest.mark.interop
@pytest.mark.java
def test_serve_two_nodes_then_restart(tmp_path: Path, java: None, reap: list[Served]) -> None:
    port, cport = _free_range(2), _free_range(1)
    s = _serve(2, tmp_path / "data", port, cport)
    reap.append(s)
    assert s.nodes[1][:2] == ("broker,controller", port) and s.nodes[2][:2] == ("broker", port + 1)
    cluster = re.search(r"cluster (\S+),", "".join(s.out))
    assert cluster is not None
    assert "".join(s.out).count("kbroker: formatted") == 2
    for i in (1, 2):
        assert (tmp_path / "data" / f"node-{i}" / "meta.properties").exists()
        if hasattr(os, "sched_getaffinity"):
            assert len(os.sched_getaffinity(s.nodes[i][2])) == 1  # pinned: one core each
    _check_cluster(s, 2, "t12")
    _produce(s.bootstrap, "t12", 240)
    assert _consume(s.bootstrap, "t12", "g1", 240) == {f"v{i}".encode() for i in range(240)}
    code, rest = _stop(s)
    assert code == 0, rest
    assert "2 nodes shut down cleanly" in rest
    assert not any(_alive(pid) for _, _, pid in s.nodes.values())
    for i in (1, 2):
        assert "shut down cleanly" in (tmp_path / "data" / f"node-{i}" / "server.log").read_text()

    # Readiness comes over NOTIFY_SOCKET, not from the log: a node logging only warnings still starts.
    again = _serve(2, tmp_path / "data", port, cport, "--log-level", "WARN")
    reap.append(again)
    text = "".join(again.out)
    assert "kbroker: formatted" not in text and f"cluster {cluster.group(1)}," in text, text
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": again.bootstrap}).list_topics(timeout=20)
    assert sorted(md.brokers) == [1, 2]
    assert len(md.topics["t12"].partitions) == 12
    assert _consume(again.bootstrap, "t12", "g2", 240) == {f"v{i}".encode() for i in range(240)}
    code, rest = _stop(again)
    assert code == 0, rest
    assert not any(_alive(pid) for _, _, pid in again.nodes.values())


@pytest.mark.slow  # three combined voters: 28 s at load 14 on the shared 2-core machine, 80 s at load 18
@pytest.mark.interop
@pytest.mark.java
def test_serve_three_nodes(tmp_path: Path, java: None, reap: list[Served]) -> None:
    port, cport = _free_range(3), _free_range(3)
    s = _serve(3, tmp_path / "data", port, cport)
    reap.append(s)
    assert [s.nodes[i][0] for i in (1, 2, 3)] == ["broker,controller"] * 3
    _check_cluster(s, 3, "t12")
    _produce(s.bootstrap, "t12", 120)
    assert len(_consume(s.bootstrap, "t12", "g", 120)) == 120
    code, rest = _stop(s)
    assert code == 0, rest
    assert not any(_alive(pid) for _, _, pid in s.nodes.values())


@pytest.mark.interop
def test_a_node_that_cannot_start_fails_the_command(tmp_path: Path) -> None:
    port, cport = _free_range(2), _free_range(1)
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port + 1))  # node 2's port
        taken.listen()
        proc = subprocess.run(
            [sys.executable, "-m", "kbroker", "serve", "--nodes", "2", "--controller-port", str(cport),
             "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override", f"log.dirs={tmp_path}"],
            capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=90)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "node 2 exited with code 1 during start-up" in proc.stderr, proc.stderr
    assert f"port {port + 1} is already in use" in proc.stderr
    # node 1 was stopped: its port is free again
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", port))
