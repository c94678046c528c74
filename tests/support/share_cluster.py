"""Three combined kbroker nodes (process.roles=broker,controller, a three-voter quorum) for the share-group
tests (KIP-932): `__consumer_offsets` with one partition (RF 3) and `__share_group_state` with one
partition by default (RF 3, min ISR 2), fast broker sessions (4 s) and heartbeats (0.5 s).

Users: tests/cluster/test_share_groups_cluster.py (a fresh cluster per test: the tests kill nodes) and
tests/cluster/test_share_group_offsets_cluster.py (one per module, three state partitions).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.combined_cluster import CombinedNode, combined_nodes, start_all, stop_all
from tests.support.kafka_cluster import new_cluster_id
from tests.support.storage_format import format_node

IDS = (1, 2, 3)


Node = CombinedNode


def format_nodes(work: Path, extra: dict[str, str] | None = None) -> dict[int, Node]:
    """The three nodes' keys (with `extra` on top), formatted by `kbroker storage format`; not started."""
    nodes = combined_nodes(work, IDS, {
        "broker.session.timeout.ms": "4000",
        "broker.heartbeat.interval.ms": "500",
        "offsets.topic.replication.factor": "3",
        "offsets.topic.num.partitions": "1",
        "share.coordinator.state.topic.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": "3",
        "share.coordinator.state.topic.min.isr": "2",
        **(extra or {}),
    })
    cluster_id = new_cluster_id()
    for n in nodes.values():
        format_node(n.broker, cluster_id, n.broker.overrides)
    return nodes


@contextmanager
def share_cluster(work: Path, extra: dict[str, str] | None = None) -> Iterator[dict[int, Node]]:
    """The three nodes formatted and started together; SIGTERM (SIGKILL after 5 s) on the way out."""
    nodes = format_nodes(work, extra)
    try:
        start_all(nodes)
        yield nodes
    finally:
        stop_all(nodes.values())
