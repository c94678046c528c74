"""UpdateRaftVoter (API 82, KIP-853) on real kbroker controllers: a voter restarts on another port.

Three kbroker controllers formatted with one `--initial-controllers` (kraft.version 1) and a kbroker
broker. A follower is stopped and started again with its CONTROLLER listener on a new port: its entry in
the voter set (the bootstrap VotersRecord) still names the old one, so, three fetch timeouts after it
follows the leader again, it sends UpdateRaftVoter; the leader appends a VotersRecord with the new
endpoint. Kafka 4.3.1's `kafka-metadata-quorum describe --status` then lists the voter at its new port
(and `--replication` lists it, through its new port alone). The leader is then killed: the two others,
one of them the moved voter, elect a leader over the new endpoint, and topics are still created.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.cluster.test_kraft_mixed_quorum import KBROKER_BROKER, _create_topic, _status, _wait_served
from tests.support.broker import KBroker, free_port
from tests.support.java import java_unavailable_reason
from tests.support.mixed_quorum import MixedQuorum

pytestmark = [pytest.mark.interop, pytest.mark.java]


@pytest.fixture
def skip_without_java() -> None:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(f"Kafka tools unavailable: {reason}")


def _voter_endpoints(status: dict[str, str]) -> dict[int, list[str]]:
    return {int(v["id"]): list(v.get("endpoints", [])) for v in json.loads(status["CurrentVoters"])}


def test_a_voter_restarted_on_a_new_port_updates_its_endpoint(tmp_path: Path, skip_without_java: None) -> None:
    q = MixedQuorum(tmp_path, "kkk", dynamic=True)
    try:
        q.start_controllers()
        epoch, leader = q.wait_leader()
        q.add_kbroker_broker(KBROKER_BROKER)
        q.start_brokers()
        _create_topic(q, "before-move", 1)
        moved = next(i for i in q.controllers if i != leader)
        node = q.controllers[moved]
        assert isinstance(node, KBroker)
        old_port = node.port
        assert _voter_endpoints(_status(q))[moved] == [f"CONTROLLER://127.0.0.1:{old_port}"]

        node.stop()
        node.port = free_port()
        node.overrides["listeners"] = f"CONTROLLER://127.0.0.1:{node.port}"
        started = time.monotonic()
        node.start(timeout=60)
        deadline = time.monotonic() + 60
        endpoints: dict[int, list[str]] = {}
        while time.monotonic() < deadline:
            endpoints = _voter_endpoints(_status(q))
            if endpoints[moved] == [f"CONTROLLER://127.0.0.1:{node.port}"]:
                break
            time.sleep(1)
        took = time.monotonic() - started
        assert endpoints[moved] == [f"CONTROLLER://127.0.0.1:{node.port}"], endpoints
        print(f"voter {moved} moved {old_port} -> {node.port}: the voter set had its new endpoint after {took:.1f} s")
        assert "sending UpdateRaftVoter" in node.log_text()
        # The moved voter answers DescribeQuorum on its new port alone and is a follower there.
        proc = q.describe("--replication", node.bootstrap)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        rows = {int(c[0]): c for c in (line.split() for line in proc.stdout.splitlines()[1:]) if c and c[0].isdigit()}
        assert rows[moved][-1] == "Follower" and rows[leader][-1] == "Leader", proc.stdout

        # The leader goes: the survivors (one at its new port) must reach each other to elect.
        q.kill(leader)
        epoch, new_leader = q.wait_leader(after_epoch=epoch, timeout=60)
        assert new_leader != leader
        _create_topic(q, "after-move", 1)
        _wait_served(q, {"before-move": 1, "after-move": 1})
        survivors = ",".join(q.controllers[i].bootstrap for i in q.controllers if i != leader)
        status = _status(q, survivors)
        assert int(status["LeaderId"]) == new_leader
        assert _voter_endpoints(status)[moved] == [f"CONTROLLER://127.0.0.1:{node.port}"]
    finally:
        q.stop_all()
