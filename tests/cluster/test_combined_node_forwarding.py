"""A combined node (`process.roles=broker,controller`, one voter): its broker listener forwards admin
requests to the controller side (`RemoteController.forward`, Kafka's ForwardingManager) and its
controller listener serves them itself, as a Kafka controller does. A `process.roles=broker` node
forwards the same way.

- UpdateFeatures through `kafka-features --bootstrap-controller` (the controller listener: the
  QuorumController's FeatureControlManager rules) and through `--bootstrap-server` (forwarded): both
  move the finalized `transaction.version` that the broker listener's ApiVersions reports.
- CreateTopics with a manual assignment and a partition count or replication factor is INVALID_REQUEST
  with Kafka's message (the request reaches the controller as the client sent it).
- CreateTopics naming a topic twice: the duplicate is answered once, at the end, and the other topic
  is created (the controller sees the whole request).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from kbroker.protocol import API_SPECS
from kbroker.protocol.messages.api_versions import ApiVersionsRequest
from tests.support.broker import KBroker, free_port
from tests.support.java import java_unavailable_reason, run_java_main
from tests.support.raw_client import RawKafkaClient

pytestmark = pytest.mark.interop

CT = API_SPECS[19].request_class
INVALID_REQUEST = 42


@pytest.fixture
def node(tmp_path: Path) -> Iterator[KBroker]:
    """One combined node, a quorum of itself: it formats its empty dirs on first start."""
    broker = KBroker(tmp_path)
    controller_port = free_port()
    broker.overrides = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "controller.listener.names": "CONTROLLER",
        "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},CONTROLLER://127.0.0.1:{controller_port}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
    }
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def _controller_bootstrap(broker: KBroker) -> str:
    return broker.overrides["controller.quorum.voters"].split("@", 1)[1]


def _finalized_transaction_version(bootstrap: str) -> int:
    with RawKafkaClient(bootstrap) as c:
        v = c.request(18, 4, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    return next((f.max_version_level for f in v.finalized_features if f.name == "transaction.version"), 0)


def _features(flag: str, bootstrap: str, *args: str) -> str:
    proc = run_java_main("kafka-features", [flag, bootstrap, *args], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.java
def test_update_features_on_the_controller_listener_and_forwarded(node: KBroker) -> None:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    controller = _controller_bootstrap(node)
    assert _finalized_transaction_version(node.bootstrap) == 2
    out = _features("--bootstrap-controller", controller, "downgrade", "--feature", "transaction.version=1")
    assert "transaction.version was downgraded to 1." in out
    assert _finalized_transaction_version(node.bootstrap) == 1
    described = _features("--bootstrap-controller", controller, "describe")
    assert re.search(r"Feature: transaction.version\s+SupportedMinVersion: 0\s+SupportedMaxVersion: 2\s+"
                     r"FinalizedVersionLevel: 1", described), described
    # Forwarded by the broker listener; answered only once the broker's image holds the new level.
    out = _features("--bootstrap-server", node.bootstrap, "upgrade", "--feature", "transaction.version=2")
    assert "transaction.version was upgraded to 2." in out
    assert _finalized_transaction_version(node.bootstrap) == 2
    refused = run_java_main("kafka-features", ["--bootstrap-controller", controller, "upgrade", "--feature",
                                               "transaction.version=3"], timeout=120)
    assert "Local controller 1 only supports versions 0-2" in refused.stdout + refused.stderr


def test_create_topics_with_an_assignment_and_a_count_is_invalid_request(node: KBroker) -> None:
    def topic(name: str, partitions: int, rf: int) -> object:
        return CT.CreatableTopic(name=name, num_partitions=partitions, replication_factor=rf, configs=[],
                                 assignments=[CT.CreatableReplicaAssignment(partition_index=0, broker_ids=[1])])

    with RawKafkaClient(node.bootstrap) as c:
        resp = c.request(19, 7, CT(topics=[topic("both-count", 1, -1), topic("both-rf", -1, 1),
                                           topic("assigned", -1, -1)], timeout_ms=30000, validate_only=False))
    got = {t.name: (t.error_code, t.error_message) for t in resp.topics}
    assert got == {
        "both-count": (INVALID_REQUEST, "A manual partition assignment was specified, but numPartitions was not "
                                        "set to -1."),
        "both-rf": (INVALID_REQUEST, "A manual partition assignment was specified, but replication factor was not "
                                     "set to -1."),
        "assigned": (0, None),
    }


def test_create_topics_duplicates_are_counted_over_the_request(node: KBroker) -> None:
    def topic(name: str) -> object:
        return CT.CreatableTopic(name=name, num_partitions=2, replication_factor=1, configs=[], assignments=[])

    with RawKafkaClient(node.bootstrap) as c:
        resp = c.request(19, 7, CT(topics=[topic("dup"), topic("single"), topic("dup")], timeout_ms=30000,
                                   validate_only=False))
    assert [(t.name, t.error_code, t.error_message) for t in resp.topics] == [
        ("single", 0, None), ("dup", INVALID_REQUEST, "Duplicate topic name.")]
    assert resp.topics[0].num_partitions == 2
