"""Three combined kbroker nodes (process.roles=broker,controller, a three-voter quorum) for the share-group
tests (KIP-932): `__consumer_offsets` with one partition (RF 3) and `__share_group_state` with one
partition by default (RF 3, min ISR 2), fast broker sessions (4 s) and heartbeats (0.5 s).

Users: tests/cluster/test_share_groups_cluster.py (a fresh cluster per test: the tests kill nodes) and
tests/cluster/test_share_group_offsets_cluster.py (one per module, three state partitions).
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.broker import KBroker, free_port
from tests.support.kafka_cluster import new_cluster_id
from tests.support.storage_format import format_node

IDS = (1, 2, 3)


@dataclass
class Node:
    node_id: int
    broker: KBroker
    controller_port: int = field(default_factory=free_port)


def format_nodes(work: Path, extra: dict[str, str] | None = None) -> dict[int, Node]:
    """The three nodes' keys (with `extra` on top), formatted by `kbroker storage format`; not started."""
    nodes = {i: Node(i, KBroker(work / f"node-{i}")) for i in IDS}
    voters = ",".join(f"{i}@127.0.0.1:{n.controller_port}" for i, n in nodes.items())
    cluster_id = new_cluster_id()
    for i, n in nodes.items():
        n.broker.overrides = {
            "process.roles": "broker,controller",
            "node.id": str(i),
            "controller.quorum.voters": voters,
            "controller.listener.names": "CONTROLLER",
            "listeners": f"PLAINTEXT://127.0.0.1:{n.broker.port},CONTROLLER://127.0.0.1:{n.controller_port}",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(n.broker.log_dir),
            "group.initial.rebalance.delay.ms": "0",
            "broker.session.timeout.ms": "4000",
            "broker.heartbeat.interval.ms": "500",
            "offsets.topic.replication.factor": "3",
            "offsets.topic.num.partitions": "1",
            "share.coordinator.state.topic.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "3",
            "share.coordinator.state.topic.min.isr": "2",
            **(extra or {}),
        }
        format_node(n.broker, cluster_id, n.broker.overrides)
    return nodes


@contextmanager
def share_cluster(work: Path, extra: dict[str, str] | None = None) -> Iterator[dict[int, Node]]:
    """The three nodes formatted and started together; SIGTERM (SIGKILL after 20 s) on the way out."""
    nodes = format_nodes(work, extra)
    try:
        with ThreadPoolExecutor(len(nodes)) as pool:
            for f in [pool.submit(n.broker.start, 90) for n in nodes.values()]:
                f.result()
        yield nodes
    finally:
        for n in nodes.values():
            if n.broker.is_running() and n.broker.proc is not None:
                n.broker.proc.send_signal(signal.SIGTERM)
        for n in nodes.values():
            try:
                if n.broker.proc is not None:
                    n.broker.proc.wait(20)
            except subprocess.TimeoutExpired:
                pass
            n.broker.kill()
