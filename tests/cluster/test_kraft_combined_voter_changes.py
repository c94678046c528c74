"""KIP-853 voter changes on combined nodes (`process.roles=broker,controller`), with Kafka 4.3.1's tools.

Node 1 is formatted `--standalone` (a quorum of itself), node 2 `--no-initial-controllers`: node 2's
controller side starts as an observer that finds the leader through `controller.quorum.bootstrap.servers`
(before this, a combined node without a voter set ran as a quorum of itself), while its broker side
registers and serves as any broker. `kafka-metadata-quorum --bootstrap-controller ... add-controller`
makes node 2 a voter; `remove-controller` then removes node 1, the leader: it resigns, node 2 leads, and
both brokers go on serving (node 1's broker side forwards to node 2's controller). Topics are created
through both broker listeners between the steps.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cluster.test_kraft_add_remove_voter import _leader, _retry, _status, _voter_ids
from tests.support.broker import KBroker, free_port
from tests.support.java import java_unavailable_reason, run_java_main
from tests.support.kafka_cluster import new_cluster_id
from tests.support.mixed_quorum import COMMON, kbroker_format, metadata_quorum

pytestmark = [pytest.mark.interop, pytest.mark.java]


@pytest.fixture
def skip_without_java() -> None:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(f"Kafka tools unavailable: {reason}")


def _quorum_tool(bootstrap: str, *args: str) -> str:
    return metadata_quorum("--bootstrap-controller", bootstrap, *args)


def _create_topic(node: KBroker, name: str) -> None:
    proc = run_java_main("kafka-topics", ["--bootstrap-server", node.bootstrap, "--create", "--topic", name,
                                          "--partitions", "2", "--replication-factor", "2"], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _topics(node: KBroker) -> set[str]:
    proc = run_java_main("kafka-topics", ["--bootstrap-server", node.bootstrap, "--list"], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return set(proc.stdout.split())


def test_add_and_remove_combined_nodes_as_voters(tmp_path: Path, skip_without_java: None) -> None:
    cluster_id = new_cluster_id()
    nodes = {i: KBroker(tmp_path / f"node-{i}") for i in (1, 2)}
    cports = {i: free_port() for i in nodes}
    controllers = {i: f"127.0.0.1:{cports[i]}" for i in nodes}
    bootstrap_controllers = ",".join(controllers.values())
    try:
        for i, n in nodes.items():
            n.overrides = {**COMMON, "process.roles": "broker,controller", "node.id": str(i),
                           "listeners": f"PLAINTEXT://127.0.0.1:{n.port},CONTROLLER://127.0.0.1:{cports[i]}",
                           "log.dirs": str(n.log_dir), "controller.quorum.bootstrap.servers": bootstrap_controllers,
                           "broker.session.timeout.ms": "4000", "broker.heartbeat.interval.ms": "500",
                           "offsets.topic.replication.factor": "1", "inter.broker.listener.name": "PLAINTEXT"}
            kbroker_format(n, cluster_id, n.overrides, "--standalone" if i == 1 else "--no-initial-controllers")
        nodes[1].start(timeout=90)
        assert _leader(nodes)[1] == 1
        nodes[2].start(timeout=90)
        assert "runs as an observer of the quorum" in nodes[2].log_text()
        assert _voter_ids(_status(bootstrap_controllers)) == [1]
        _retry("create a topic with both brokers", lambda: _create_topic(nodes[2], "one-voter"))

        props = nodes[2].workdir / "add-controller.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in nodes[2].overrides.items()))
        out = _retry("add-controller 2", lambda: _quorum_tool(
            controllers[1], "--command-config", str(props), "add-controller"))
        assert "Added controller 2" in out, out
        status = _status(bootstrap_controllers)
        assert _voter_ids(status) == [1, 2], status
        _create_topic(nodes[1], "two-voters")

        # Remove the leader (node 1): it answers once the change commits, resigns, and node 2 leads.
        directory = {int(v["id"]): v["directoryId"] for v in json.loads(status["CurrentVoters"])}[1]
        out = _quorum_tool(controllers[2], "remove-controller", "--controller-id", "1",
                           "--controller-directory-id", directory)
        assert " ".join(out.split()).startswith("Removed KRaft controller 1"), out
        _retry("describe after the leader's removal", lambda: _status(controllers[2]))
        status = _status(controllers[2])
        assert _voter_ids(status) == [2] and status["LeaderId"] == "2", status

        def node_1_observes() -> dict[str, str]:
            # Node 1 follows on as an observer: it is listed once its first Fetch as one reaches the
            # new leader (a moment after the removal commits, longer on a loaded machine).
            st = _status(controllers[2])
            assert '"id": 1' in st["CurrentObservers"], st
            return st

        _retry("node 1 listed as an observer", node_1_observes, timeout=30)
        _retry("create a topic through node 1 after its removal", lambda: _create_topic(nodes[1], "after-removal"))
        for n in nodes.values():
            assert {"one-voter", "two-voters", "after-removal"} <= _topics(n)
    finally:
        for n in nodes.values():
            n.kill()
