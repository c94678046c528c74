"""A KIP-853 quorum (kraft.version 1) of kbroker controllers, and one mixed with an Apache Kafka voter.

Every controller is formatted with the same `--initial-controllers id@host:port:directoryid,...` (kbroker's
by `kbroker storage format`, Kafka's by `kafka-storage format`), which writes the voters as a
`VotersRecord` into the bootstrap checkpoint; every node (controllers and brokers) names the quorum with
`controller.quorum.bootstrap.servers` only. The kbroker controllers take their voter set from that
checkpoint; each voter's ReplicaKey (id and directory id) is in its Vote and BeginQuorumEpoch requests,
in its quorum-state (data_version 1, votedDirectoryId), and in DescribeQuorum, so Kafka's
`kafka-metadata-quorum describe --replication` prints the directory ids given at format time.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.cluster.test_kraft_mixed_quorum import (
    KBROKER_BROKER,
    _create_topic,
    _fail_over_to,
    _replication,
    _status,
    _wait_served,
)
from tests.support.broker import KBroker
from tests.support.java import java_unavailable_reason, run_java_main
from tests.support.mixed_quorum import MixedQuorum

pytestmark = [pytest.mark.interop, pytest.mark.java]


@pytest.fixture
def skip_without_java() -> None:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(f"Kafka tools unavailable: {reason}")


def _check_replication_directory_ids(q: MixedQuorum, leader: int) -> None:
    rows = _replication(q)
    assert rows[leader][-1] == "Leader", rows
    for i in q.controllers:
        assert rows[i][0] == q.directory_ids[i], (i, rows)
        assert rows[i][-1] in ("Leader", "Follower"), rows


def test_kbroker_initial_controllers_quorum(tmp_path: Path, skip_without_java: None) -> None:
    q = MixedQuorum(tmp_path, "kkk", dynamic=True)
    try:
        q.start_controllers()
        epoch, leader = q.wait_leader()
        q.add_kbroker_broker(KBROKER_BROKER)
        q.start_brokers()
        _create_topic(q, "dynamic-1", 2)
        _wait_served(q, {"dynamic-1": 2})
        status = _status(q)
        assert int(status["LeaderId"]) == leader
        for i in q.controllers:
            assert f'"id": {i}' in status["CurrentVoters"], status
        _check_replication_directory_ids(q, leader)
        # quorum-state v1 on every voter: the vote names the candidate's directory id.
        for i in q.controllers:
            state = json.loads((q.metadata_dir(i) / "quorum-state").read_text())
            assert state["data_version"] == 1, state
            if state["votedId"] >= 0:
                assert state["votedDirectoryId"] == q.directory_ids[state["votedId"]], state
        # A failover keeps working with the voter set from the checkpoint.
        dead = leader
        q.kill(leader)
        epoch, leader = q.wait_leader(after_epoch=epoch, timeout=30)
        _create_topic(q, "dynamic-2", 1)
        _wait_served(q, {"dynamic-1": 2, "dynamic-2": 1})
        # KIP-853: the dead voter is removed with Kafka's tool (RemoveRaftVoter; more in
        # tests/cluster/test_kraft_add_remove_voter.py), and the two others go on.
        removed = run_java_main("kafka-metadata-quorum", [
            "--bootstrap-controller", q.bootstrap_controllers(), "remove-controller", "--controller-id", str(dead),
            "--controller-directory-id", q.directory_ids[dead]], timeout=120)
        assert removed.returncode == 0, removed.stdout + removed.stderr
        voters = _status(q)["CurrentVoters"]
        assert f'"id": {dead}' not in voters and all(f'"id": {i}' in voters for i in q.controllers if i != dead)
        _create_topic(q, "dynamic-3", 1)
        _wait_served(q, {"dynamic-1": 2, "dynamic-2": 1, "dynamic-3": 1})
    finally:
        q.stop_all()


def test_kbroker_controller_without_voters_is_an_observer(tmp_path: Path) -> None:
    """A controller formatted with --no-initial-controllers (no VotersRecord) and configured with only
    controller.quorum.bootstrap.servers starts as an observer of the quorum (KIP-853), waiting to be
    added with `kafka-metadata-quorum add-controller` (tests/cluster/test_kraft_add_remove_voter.py)."""
    from tests.support.kafka_cluster import new_cluster_id
    from tests.support.mixed_quorum import COMMON, kbroker_format

    node = KBroker(tmp_path / "c1")
    props = {**COMMON, "process.roles": "controller", "node.id": "1",
             "listeners": f"CONTROLLER://127.0.0.1:{node.port}", "log.dirs": str(node.log_dir),
             "controller.quorum.bootstrap.servers": f"127.0.0.1:{node.port}"}
    kbroker_format(node, new_cluster_id(), props, "--no-initial-controllers")
    node.overrides = props
    try:
        node.start(timeout=30)
        text = "".join(p.read_text(errors="replace") for p in node.workdir.glob("kbroker-*.log"))
        assert "runs as an observer" in text
    finally:
        node.kill()


@pytest.mark.slow  # the static mixed quorum (test_kraft_mixed_quorum.py) and the kbroker kraft.version 1 quorum
# above run by default
def test_mixed_initial_controllers_quorum(tmp_path: Path, skip_without_java: None) -> None:
    """2 kbroker + 1 Kafka voter, kraft.version 1, formatted by each kind's tool with one
    --initial-controllers: leadership moves between the kinds and a kbroker broker is served."""
    q = MixedQuorum(tmp_path, "kkj", dynamic=True)
    try:
        q.start_controllers()
        epoch, leader = q.wait_leader()
        q.add_kbroker_broker(KBROKER_BROKER)
        q.start_brokers()
        topics = {}
        epoch, leader = _fail_over_to(q, "kbroker", epoch, leader)
        _create_topic(q, "v1-under-kbroker", 1)
        topics["v1-under-kbroker"] = 1
        _wait_served(q, topics)
        _check_replication_directory_ids(q, leader)
        epoch, leader = _fail_over_to(q, "kafka", epoch, leader)
        _create_topic(q, "v1-under-kafka", 2)
        topics["v1-under-kafka"] = 2
        _wait_served(q, topics)
        _check_replication_directory_ids(q, leader)
        time.sleep(1)
    finally:
        q.stop_all()
