"""CreateTopics sent through a combined node that is not the active controller, while the active
controller is killed: the broker forwards again to the next active controller (Kafka's
`NodeToControllerRequestThread` requeues a NOT_CONTROLLER answer until the request times out), so no
client answer carries NOT_CONTROLLER (41), and every topic exists afterwards. A retried request may see
TOPIC_ALREADY_EXISTS (36) when the first attempt committed but its answer was lost -- Kafka does that too.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from kbroker.client import NodeConnection
from kbroker.protocol.messages.create_topics import CreateTopicsRequest, CreateTopicsResponse
from kbroker.protocol.messages.metadata import MetadataRequest, MetadataResponse
from tests.support.combined_cluster import CombinedNode, combined_nodes, start_all, stop_all
from tests.support.kafka_cluster import new_cluster_id
from tests.support.storage_format import format_node

LEADER_LINE = re.compile(r"node (\d+) is the leader in epoch (\d+)")
NOT_CONTROLLER, TOPIC_ALREADY_EXISTS = 41, 36


@pytest.fixture
def trio(tmp_path: Path) -> Iterator[dict[int, CombinedNode]]:
    nodes = combined_nodes(tmp_path, (1, 2, 3), {"broker.session.timeout.ms": "4000",
                                                 "broker.heartbeat.interval.ms": "500"})
    cluster_id = new_cluster_id()
    for n in nodes.values():
        format_node(n.broker, cluster_id, n.broker.overrides)
    try:
        start_all(nodes)
        yield nodes
    finally:
        stop_all(nodes.values())


def _active_controller(nodes: dict[int, CombinedNode]) -> int:
    seen = sorted((int(m.group(2)), int(m.group(1))) for n in nodes.values()
                  for m in LEADER_LINE.finditer(n.broker.log_text()))
    return seen[-1][1]


async def _create(port: int, names: list[str]) -> dict[str, int]:
    conn = NodeConnection("127.0.0.1", port)
    await conn.connect()
    try:
        req = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name=n, num_partitions=1, replication_factor=2, assignments=[], configs=[]) for n in names],
            timeout_ms=60000)
        resp = await conn.request(19, req, CreateTopicsResponse, timeout_s=90)
        return {t.name: t.error_code for t in resp.topics}
    finally:
        await conn.close()


async def _send_while_killing(via: CombinedNode, victim: CombinedNode) -> dict[str, int]:
    tasks = [asyncio.create_task(_create(via.broker.port, [f"t{i}"])) for i in range(4)]
    await asyncio.sleep(0.05)
    victim.broker.kill()  # SIGKILL: the active controller goes while requests are in flight
    for i in range(4, 24):  # and more keep coming through the election
        tasks.append(asyncio.create_task(_create(via.broker.port, [f"t{i}"])))
        await asyncio.sleep(0.15)
    out: dict[str, int] = {}
    for r in await asyncio.gather(*tasks):
        out.update(r)
    return out


async def _topics(port: int) -> set[str]:
    conn = NodeConnection("127.0.0.1", port)
    await conn.connect()
    try:
        resp = await conn.request(3, MetadataRequest(topics=None), MetadataResponse, timeout_s=30)
        return {t.name for t in resp.topics if t.error_code == 0 and t.name is not None}
    finally:
        await conn.close()


def test_create_topics_through_a_non_controller_survives_a_controller_change(
        trio: dict[int, CombinedNode]) -> None:
    controller = _active_controller(trio)
    via = next(n for i, n in trio.items() if i != controller)
    results = asyncio.run(_send_while_killing(via, trio[controller]))
    assert len(results) == 24
    assert NOT_CONTROLLER not in results.values(), results
    assert set(results.values()) <= {0, TOPIC_ALREADY_EXISTS}, results
    names = asyncio.run(_topics(via.broker.port))
    assert {f"t{i}" for i in range(24)} <= names


async def _send_through_a_deposed_controller(old: CombinedNode, nodes: dict[int, CombinedNode]) -> dict[str, int]:
    """Freeze the active controller until another voter wins an election, queue CreateTopics on the frozen
    node, thaw it: it writes them as the leader of a stale epoch, then learns of the new leader, and
    its controller fails the pending writes with NOT_CONTROLLER naming the new one."""
    import signal
    import time

    assert old.broker.proc is not None
    before = len(LEADER_LINE.findall("".join(n.broker.log_text() for n in nodes.values())))
    old.broker.proc.send_signal(signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 30
        while len(LEADER_LINE.findall("".join(n.broker.log_text() for n in nodes.values()))) <= before:
            assert time.monotonic() < deadline, "no new quorum leader"
            await asyncio.sleep(0.1)
        tasks = [asyncio.create_task(_create(old.broker.port, [f"s{i}"])) for i in range(8)]
        await asyncio.sleep(0.3)
    finally:
        old.broker.proc.send_signal(signal.SIGCONT)
    out: dict[str, int] = {}
    for r in await asyncio.gather(*tasks):
        out.update(r)
    return out


def test_create_topics_through_a_deposed_controller_are_forwarded_to_the_new_one(
        trio: dict[int, CombinedNode]) -> None:
    controller = _active_controller(trio)
    results = asyncio.run(_send_through_a_deposed_controller(trio[controller], trio))
    assert len(results) == 8
    assert NOT_CONTROLLER not in results.values(), results
    assert set(results.values()) <= {0, TOPIC_ALREADY_EXISTS}, results
    via = next(n for i, n in trio.items() if i != controller)
    assert {f"s{i}" for i in range(8)} <= asyncio.run(_topics(via.broker.port))
