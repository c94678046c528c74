"""Group configs (the GROUP config resource) in a JVM-free KRaft cluster: one kbroker controller
(`QuorumController`) and one kbroker broker.

IncrementalAlterConfigs on a group, sent to the broker, is forwarded to the controller, which validates
it (`ConfigurationControlManager.incremental_alter_group_configs`, Kafka's `GroupConfig.validate`) and
commits a `ConfigRecord` with resource type GROUP to the metadata log; the broker's image replays it and
DescribeConfigs on the broker shows it. A refused value comes back with Kafka's message.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from kbroker.protocol.messages.describe_configs import DescribeConfigsRequest as D
from kbroker.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest as I
from tests.cluster.test_kbroker_quorum import Quorum, _common, _format, stop_nodes
from tests.support.broker import KBroker
from tests.support.kafka_cluster import new_cluster_id
from tests.support.raw_client import RawKafkaClient

pytestmark = [pytest.mark.interop]


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Quorum]:
    work = tmp_path_factory.mktemp("kquorum-group-configs")
    q = Quorum(new_cluster_id(), work)
    q.controllers[1] = KBroker(work / "controller-1")
    q.brokers[4] = KBroker(work / "broker-4")
    c, b = q.controllers[1], q.brokers[4]
    c.overrides = {**_common(q), "process.roles": "controller", "node.id": "1",
                   "listeners": f"CONTROLLER://127.0.0.1:{c.port}", "log.dirs": str(c.log_dir)}
    _format(q, c, c.overrides)
    b.overrides = {**_common(q), "process.roles": "broker", "node.id": "4",
                   "listeners": f"PLAINTEXT://127.0.0.1:{b.port}", "log.dirs": str(b.log_dir),
                   "broker.heartbeat.interval.ms": "500"}
    _format(q, b, b.overrides)
    try:
        c.start(timeout=60)
        q.wait_leader()
        b.start(timeout=60)
        yield q
    finally:
        stop_nodes([b], [c])


def _alter(c: RawKafkaClient, group: str, key: str, value: str) -> tuple[int, str | None]:
    r = c.request(44, 1, I(resources=[I.AlterConfigsResource(resource_type=32, resource_name=group, configs=[
        I.AlterableConfig(name=key, config_operation=0, value=value)])], validate_only=False))
    return r.responses[0].error_code, r.responses[0].error_message


def _described(c: RawKafkaClient, group: str, key: str) -> Any:
    r = c.request(32, 4, D(resources=[D.DescribeConfigsResource(resource_type=32, resource_name=group,
                                                                 configuration_keys=[key])],
                           include_synonyms=False, include_documentation=False))
    return [(e.name, e.value, e.config_source) for e in r.results[0].configs]


def test_group_configs_through_the_quorum_controller(quorum: Quorum) -> None:
    with RawKafkaClient(quorum.brokers[4].bootstrap) as c:
        deadline = time.monotonic() + 30
        while True:  # the broker may still be catching up with the controller right after start
            result = _alter(c, "jobs", "share.record.lock.duration.ms", "20000")
            if result[0] == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert result == (0, None)
        assert _described(c, "jobs", "share.record.lock.duration.ms") == [("share.record.lock.duration.ms", "20000", 8)]
        assert _alter(c, "jobs", "share.record.lock.duration.ms", "70000") == (
            40, "share.record.lock.duration.ms must be less than or equal to group.share.max.record.lock.duration.ms")
        assert _described(c, "jobs", "share.record.lock.duration.ms") == [("share.record.lock.duration.ms", "20000", 8)]
    controller_log = quorum.controllers[1].log_text()
    assert "Traceback" not in controller_log, controller_log[-3000:]
