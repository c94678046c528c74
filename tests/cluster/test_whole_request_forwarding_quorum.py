"""Issue 12 in a JVM-free KRaft cluster: one kbroker controller (`process.roles=controller`, node 1) and
one kbroker broker (`process.roles=broker`, node 4). The broker forwards DeleteTopics and the config
changes whole; the controller's request metrics count one Envelope per request. Legacy AlterConfigs on
the broker's own BROKER resource reaches the controller as sent, and the controller replaces the
dynamic configs of the broker the resource names (node 4, not itself).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from kbroker.protocol.messages.alter_configs import AlterConfigsRequest as A
from kbroker.protocol.messages.create_topics import CreateTopicsRequest
from kbroker.protocol.messages.delete_topics import DeleteTopicsRequest
from kbroker.protocol.messages.describe_configs import DescribeConfigsRequest as D
from kbroker.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest as I
from tests.cluster.test_kbroker_quorum import Quorum, _common, _format, stop_nodes
from tests.metrics.scrape import http_get, samples
from tests.support.broker import KBroker, free_port
from tests.support.kafka_cluster import new_cluster_id
from tests.support.raw_client import RawKafkaClient

pytestmark = [pytest.mark.interop]

BROKER, TOPIC = 4, 2
DYNAMIC_BROKER_CONFIG = 2


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Quorum, str]]:
    work = tmp_path_factory.mktemp("kquorum-fwd")
    q = Quorum(new_cluster_id(), work)
    q.controllers[1] = KBroker(work / "controller-1")
    q.brokers[4] = KBroker(work / "broker-4")
    c, b = q.controllers[1], q.brokers[4]
    http = f"http://127.0.0.1:{free_port()}"
    c.overrides = {**_common(q), "process.roles": "controller", "node.id": "1",
                   "listeners": f"CONTROLLER://127.0.0.1:{c.port}", "log.dirs": str(c.log_dir),
                   "kbroker.metrics.listener": http}
    _format(q, c, c.overrides)
    b.overrides = {**_common(q), "process.roles": "broker", "node.id": "4",
                   "listeners": f"PLAINTEXT://127.0.0.1:{b.port}", "log.dirs": str(b.log_dir),
                   "broker.heartbeat.interval.ms": "500"}
    _format(q, b, b.overrides)
    try:
        c.start(timeout=60)
        q.wait_leader()
        b.start(timeout=60)
        yield q, http
    finally:
        stop_nodes([b], [c])


def _envelopes(http: str) -> float:
    return sum(v for (name, labels), v in samples(http_get(f"{http}/metrics")[1]).items()
               if name == "kafka_network_requestmetrics_requests_total" and ("request", "Envelope") in labels)


def _dynamic_broker_configs(c: RawKafkaClient) -> dict[str, str]:
    r = c.request(32, 4, D(resources=[D.DescribeConfigsResource(resource_type=BROKER, resource_name="4",
                                                                 configuration_keys=None)],
                           include_synonyms=False, include_documentation=False))
    return {e.name: e.value for e in r.results[0].configs if e.config_source == DYNAMIC_BROKER_CONFIG}


def test_one_envelope_per_request_and_legacy_broker_replace(quorum: tuple[Quorum, str]) -> None:
    q, http = quorum
    with RawKafkaClient(q.brokers[4].bootstrap) as c:
        deadline = time.monotonic() + 30
        while True:  # the broker may still be registering right after start
            resp = c.request(19, 7, CreateTopicsRequest(timeout_ms=30000, validate_only=False, topics=[
                CreateTopicsRequest.CreatableTopic(name=n, num_partitions=1, replication_factor=1, assignments=[],
                                                   configs=[]) for n in ("q1", "q2", "q3")]))
            if all(t.error_code == 0 for t in resp.topics) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert [t.error_code for t in resp.topics] == [0, 0, 0], resp

        before = _envelopes(http)
        r = c.request(44, 1, I(validate_only=False, resources=[
            I.AlterConfigsResource(resource_type=BROKER, resource_name="4", configs=[
                I.AlterableConfig(name="log.cleaner.threads", config_operation=0, value="2"),
                I.AlterableConfig(name="log.retention.ms", config_operation=0, value="7200000")]),
            I.AlterConfigsResource(resource_type=TOPIC, resource_name="q1", configs=[
                I.AlterableConfig(name="retention.ms", config_operation=0, value="1000")]),
            I.AlterConfigsResource(resource_type=TOPIC, resource_name="q2", configs=[
                I.AlterableConfig(name="retention.ms", config_operation=0, value="2000")])]))
        assert [(x.resource_name, x.error_code) for x in r.responses] == [("4", 0), ("q1", 0), ("q2", 0)]
        assert _envelopes(http) - before == 1
        assert _dynamic_broker_configs(c) == {"log.cleaner.threads": "2", "log.retention.ms": "7200000"}

        before = _envelopes(http)
        r = c.request(33, 2, A(validate_only=False, resources=[
            A.AlterConfigsResource(resource_type=BROKER, resource_name="4", configs=[
                A.AlterableConfig(name="log.cleaner.threads", value="3")]),
            A.AlterConfigsResource(resource_type=TOPIC, resource_name="q3", configs=[
                A.AlterableConfig(name="retention.ms", value="3000")])]))
        assert [(x.resource_name, x.error_code, x.error_message) for x in r.responses] == [("4", 0, None),
                                                                                        ("q3", 0, None)]
        assert _envelopes(http) - before == 1
        # The whole set replaced broker 4's: log.retention.ms is gone.
        assert _dynamic_broker_configs(c) == {"log.cleaner.threads": "3"}

        before = _envelopes(http)
        r = c.request(20, 6, DeleteTopicsRequest(timeout_ms=30000, topics=[
            DeleteTopicsRequest.DeleteTopicState(name=n, topic_id=uuid.UUID(int=0)) for n in ("q1", "q2", "q3")]))
        assert sorted((x.name, x.error_code) for x in r.responses) == [("q1", 0), ("q2", 0), ("q3", 0)]
        assert _envelopes(http) - before == 1
    controller_log = q.controllers[1].log_text()
    assert "Traceback" not in controller_log, controller_log[-3000:]
