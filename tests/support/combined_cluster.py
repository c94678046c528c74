"""Combined kbroker nodes (process.roles=broker,controller) that are the voters of one static quorum, as
the combined-mode, replication-quota and share-group cluster tests run them: each node's keys, starting
them together (a combined node's broker side waits for a quorum leader, which needs a majority) and
stopping them together.

Users: tests/cluster/test_combined_mode.py, test_replication_quotas_cluster.py, and
tests/support/share_cluster.py (the share-group cluster files).
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.broker import KBroker, free_port


@dataclass
class CombinedNode:
    node_id: int
    broker: KBroker
    controller_port: int = field(default_factory=free_port)

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    @property
    def controller(self) -> str:
        return f"127.0.0.1:{self.controller_port}"


def combined_nodes(work: Path, ids: tuple[int, ...], extra: dict[str, str]) -> dict[int, CombinedNode]:
    """Nodes `ids` under `work`, every one a voter of `controller.quorum.voters`; `extra` on top."""
    nodes = {i: CombinedNode(i, KBroker(work / f"node-{i}")) for i in ids}
    voters = ",".join(f"{i}@127.0.0.1:{n.controller_port}" for i, n in nodes.items())
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
            **extra,
        }
    return nodes


def start_all(nodes: dict[int, CombinedNode]) -> None:
    """Every node together: a combined node's broker side waits for a quorum leader, which needs a majority."""
    with ThreadPoolExecutor(len(nodes)) as pool:
        for f in [pool.submit(n.broker.start, 90) for n in nodes.values()]:
            f.result()


def stop_all(nodes: Iterable[CombinedNode], wait_s: float = 5) -> None:
    """SIGTERM every running node, give them `wait_s` together, then SIGKILL what is left. Teardown only:
    nothing is checked about the exit, and when every voter stops at once the last broker side's
    controlled shutdown can wait for a controller that is gone (20 s here on a loaded machine)."""
    nodes = list(nodes)
    for n in nodes:
        if n.broker.is_running() and n.broker.proc is not None:
            n.broker.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    for n in nodes:
        try:
            if n.broker.proc is not None:
                n.broker.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        n.broker.kill()
