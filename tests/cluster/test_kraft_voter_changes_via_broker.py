"""KIP-853 voter changes sent to a broker: `kafka-metadata-quorum --bootstrap-server <broker>
add-controller / remove-controller` against kbroker.

Kafka 4.3.1's broker advertises AddRaftVoter (80, v0-1) and RemoveRaftVoter (81, v0) and forwards them,
as they came, to the active controller in an Envelope (`KafkaApis.forwardToController`); UpdateRaftVoter
(82) is controller-only; DescribeQuorum (55) is forwarded as well (`describe --status / --replication`
through a broker). A kbroker KRaft broker does the same: controller 1 is formatted `--standalone`,
controller 2 `--no-initial-controllers` (an observer), and Kafka's tool adds and then removes controller 2
through the kbroker broker's listener.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cluster.test_kraft_add_remove_voter import _leader, _retry, _status, _voter_ids
from tests.support.broker import KBroker
from tests.support.java import java_unavailable_reason
from tests.support.kafka_cluster import new_cluster_id
from tests.support.mixed_quorum import COMMON, kbroker_format, metadata_quorum
from tests.support.raw_client import RawKafkaClient

pytestmark = [pytest.mark.interop, pytest.mark.java]


@pytest.fixture
def skip_without_java() -> None:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(f"Kafka tools unavailable: {reason}")


def _via_broker(broker: KBroker, *args: str) -> str:
    return metadata_quorum("--bootstrap-server", broker.bootstrap, *args)


def _api_ranges(bootstrap: str) -> dict[int, tuple[int, int]]:
    from kbroker.protocol import API_SPECS

    with RawKafkaClient(bootstrap) as c:
        r = c.request(18, 3, API_SPECS[18].request_class(client_software_name="t", client_software_version="1"))
        return {a.api_key: (a.min_version, a.max_version) for a in r.api_keys}


def test_add_and_remove_a_controller_through_a_broker(tmp_path: Path, skip_without_java: None) -> None:
    cluster_id = new_cluster_id()
    controllers = {i: KBroker(tmp_path / f"controller-{i}") for i in (1, 2)}
    bootstrap = ",".join(n.bootstrap for n in controllers.values())
    broker = KBroker(tmp_path / "broker-11")
    try:
        for i, n in controllers.items():
            n.overrides = {**COMMON, "process.roles": "controller", "node.id": str(i),
                           "listeners": f"CONTROLLER://127.0.0.1:{n.port}", "log.dirs": str(n.log_dir),
                           "controller.quorum.bootstrap.servers": bootstrap, "broker.session.timeout.ms": "4000"}
            kbroker_format(n, cluster_id, n.overrides, "--standalone" if i == 1 else "--no-initial-controllers")
        controllers[1].start(timeout=60)
        assert _leader(controllers)[1] == 1
        controllers[2].start(timeout=60)
        broker.overrides = {**COMMON, "process.roles": "broker", "node.id": "11",
                            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port}", "log.dirs": str(broker.log_dir),
                            "controller.quorum.bootstrap.servers": bootstrap, "broker.heartbeat.interval.ms": "500",
                            "offsets.topic.replication.factor": "1"}
        kbroker_format(broker, cluster_id, broker.overrides)
        broker.start(timeout=90)
        ranges = _api_ranges(broker.bootstrap)
        assert ranges.get(80) == (0, 1) and ranges.get(81) == (0, 0) and 82 not in ranges, ranges
        assert ranges.get(55) == (0, 2), ranges  # DescribeQuorum, forwarded too

        props = controllers[2].workdir / "add-controller.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in controllers[2].overrides.items()))
        out = _retry("add-controller through the broker", lambda: _via_broker(
            broker, "--command-config", str(props), "add-controller"))
        assert "Added controller 2" in out, out
        status = _status(bootstrap)
        assert _voter_ids(status) == [1, 2], status
        # describe through the broker (DescribeQuorum forwarded to the active controller) says the same.
        out = _via_broker(broker, "describe", "--status")
        via_broker = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in out.splitlines()) if v}
        assert _voter_ids(via_broker) == [1, 2] and via_broker["LeaderId"] == "1", out
        rows = _via_broker(broker, "describe", "--replication")
        assert "Leader" in rows and "Follower" in rows and "Observer" in rows, rows

        directory = {int(v["id"]): v["directoryId"] for v in json.loads(status["CurrentVoters"])}[2]
        out = _via_broker(broker, "remove-controller", "--controller-id", "2", "--controller-directory-id", directory)
        assert " ".join(out.split()).startswith("Removed KRaft controller 2"), out
        assert _voter_ids(_status(bootstrap)) == [1]
    finally:
        broker.kill()
        for n in controllers.values():
            n.kill()
