"""kbroker's default single node is a combined node of a one-voter KRaft quorum.

`kbroker serve` with no process.roles and no controller listener (what `make run` starts) runs the Raft
client, the QuorumController and the broker side of a combined node, on an implicit controller listener
`CONTROLLER://127.0.0.1:<free port>`; it formats its empty data dir on first start as before. A data dir
the old single-node controller (LocalController over ClusterMetadataLog) wrote starts as it is: its
`__cluster_metadata` becomes the Raft log.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from kbroker.config import KafkaConfig
from kbroker.services import build_services, shutdown_services
from tests.support.broker import KBroker
from tests.support.sync import SyncAdmin

pytestmark = [pytest.mark.interop]

CONTROLLER = re.compile(r"controller on CONTROLLER://127\.0\.0\.1:(\d+)")


def _produce_consume(bootstrap: str, topic: str, n: int) -> list[bytes]:
    from confluent_kafka import Consumer, Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(n):
        producer.produce(topic, value=b"%s-%d" % (topic.encode(), i))
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    consumer.close()
    return got


def test_the_default_node_is_a_one_voter_quorum(tmp_path: Path) -> None:
    with KBroker(tmp_path / "n") as node:
        log = node.log_text()
        m = CONTROLLER.search(log)
        assert m is not None, log[-2000:]
        assert "node 1 is the leader in epoch 1" in log
        assert "The controller unfenced broker 1" in log
        assert (node.log_dir / "__cluster_metadata-0" / "quorum-state").exists()
        assert sorted(_produce_consume(node.bootstrap, "d", 5)) == sorted(b"d-%d" % i for i in range(5))
        node.stop()
        node.start()
        assert "node 1 is the leader in epoch 2" in node.log_text()
        assert sorted(_produce_consume(node.bootstrap, "d", 5)) == sorted(b"d-%d" % i for i in range(5))


def test_after_kill_9_the_default_node_registers_at_once(tmp_path: Path) -> None:
    """Its previous process's registration (left unfenced by the kill) does not hold the new one back for
    broker.session.timeout.ms (9 s): the controller ends that session at activation."""
    with KBroker(tmp_path / "n") as node:
        assert sorted(_produce_consume(node.bootstrap, "k", 3)) == sorted(b"k-%d" % i for i in range(3))
        node.kill()
        node.start()
        log = node.log_text()
        assert "Registered broker 1 with the controller" in log, log[-3000:]
        assert "Broker registration failed" not in log, log[-3000:]
        assert sorted(_produce_consume(node.bootstrap, "k", 3)) == sorted(b"k-%d" % i for i in range(3))


def test_a_data_dir_of_the_old_single_node_starts_as_a_one_voter_quorum(tmp_path: Path) -> None:
    """The old single node's metadata log (written here in process by the LocalController, as the old
    `kbroker serve` did) becomes the Raft log: the topic and its records are there."""
    node = KBroker(tmp_path / "n")
    services = build_services(KafkaConfig({"log.dirs": str(node.log_dir), "node.id": "1"}))
    try:
        services.controller.register_broker([("PLAINTEXT", "127.0.0.1", node.port, "PLAINTEXT")], None)
        SyncAdmin(services.controller, services.configs).create_topic("old", 2)
    finally:
        shutdown_services(services)
    assert not (node.log_dir / "__cluster_metadata-0" / "quorum-state").exists()
    with node:
        log = node.log_text()
        assert "was written by kbroker's single-node controller" in log
        from confluent_kafka.admin import AdminClient

        md = AdminClient({"bootstrap.servers": node.bootstrap}).list_topics(timeout=20)
        assert len(md.topics["old"].partitions) == 2
        assert sorted(_produce_consume(node.bootstrap, "old", 4)) == sorted(b"old-%d" % i for i in range(4))
