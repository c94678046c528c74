"""Issue 12: a KRaft broker forwards DeleteTopics, IncrementalAlterConfigs and AlterConfigs whole, in one
Envelope each (Kafka's `KafkaApis` / `ForwardingManager`), and the controller answers per resource.

Real process: plain `kbroker serve` (a combined one-voter node: its broker listener forwards to its own
controller listener, the same path as a `process.roles=broker` node). The Envelopes are counted by the
node's request metrics (`kafka_network_requestmetrics_requests_total{request="Envelope"}`, Kafka's
RequestMetrics RequestsPerSec), scraped around each request. BROKER_LOGGER resources are the broker's
own: answered without an Envelope.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from kbroker.protocol.messages.alter_configs import AlterConfigsRequest
from kbroker.protocol.messages.create_topics import CreateTopicsRequest
from kbroker.protocol.messages.delete_topics import DeleteTopicsRequest
from kbroker.protocol.messages.describe_configs import DescribeConfigsRequest
from kbroker.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest
from tests.metrics.scrape import http_get, metrics_broker, samples
from tests.support.broker import KBroker
from tests.support.raw_client import RawKafkaClient

pytestmark = pytest.mark.interop

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
SET, DELETE = 0, 1
ZERO = uuid.UUID(int=0)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KBroker, str]]:
    broker, http = metrics_broker(tmp_path_factory.mktemp("fwd"))
    try:
        yield broker, http
    finally:
        broker.stop()


def _envelopes(http: str) -> float:
    text = http_get(f"{http}/metrics")[1]
    return sum(v for (name, labels), v in samples(text).items()
               if name == "kafka_network_requestmetrics_requests_total" and ("request", "Envelope") in labels)


def _create(client: RawKafkaClient, names: list[str]) -> None:
    resp = client.request(19, 7, CreateTopicsRequest(timeout_ms=30000, validate_only=False, topics=[
        CreateTopicsRequest.CreatableTopic(name=n, num_partitions=1, replication_factor=1, assignments=[],
                                           configs=[]) for n in names]))
    assert [t.error_code for t in resp.topics] == [0] * len(names), resp


def _topic_config(client: RawKafkaClient, topic: str, key: str) -> str | None:
    resp = client.request(32, 4, DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=TOPIC, resource_name=topic, configuration_keys=[key])]))
    [result] = resp.results
    assert result.error_code == 0, result
    return next((c.value for c in result.configs if c.name == key and c.config_source == 1), None)


def test_delete_topics_naming_three_topics_is_one_envelope(node: tuple[KBroker, str]) -> None:
    broker, http = node
    with RawKafkaClient(broker.bootstrap) as client:
        _create(client, ["d1", "d2", "d3"])
        before = _envelopes(http)
        assert before >= 1  # the CreateTopics went in one
        resp = client.request(20, 6, DeleteTopicsRequest(timeout_ms=30000, topics=[
            DeleteTopicsRequest.DeleteTopicState(name=n, topic_id=ZERO) for n in ("d1", "d2", "nope", "d3")]))
        assert _envelopes(http) - before == 1
        answers = {r.name: (r.error_code, r.error_message) for r in resp.responses}
        assert answers == {"d1": (0, None), "d2": (0, None), "d3": (0, None),
                           "nope": (3, "This server does not host this topic-partition.")}
        # v1-5 (names only) at the client's version, also one Envelope.
        _create(client, ["d4", "d5"])
        before = _envelopes(http)
        resp = client.request(20, 4, DeleteTopicsRequest(timeout_ms=30000, topic_names=["d4", "d5"]))
        assert _envelopes(http) - before == 1
        assert sorted((r.name, r.error_code) for r in resp.responses) == [("d4", 0), ("d5", 0)]


def test_incremental_alter_configs_naming_three_resources_is_one_envelope(node: tuple[KBroker, str]) -> None:
    broker, http = node
    R, C = IncrementalAlterConfigsRequest.AlterConfigsResource, IncrementalAlterConfigsRequest.AlterableConfig
    with RawKafkaClient(broker.bootstrap) as client:
        _create(client, ["c1", "c2"])

        def request(validate_only: bool) -> list[tuple[int, str, int, str | None]]:
            before = _envelopes(http)
            resp = client.request(44, 1, IncrementalAlterConfigsRequest(validate_only=validate_only, resources=[
                R(resource_type=TOPIC, resource_name="c1", configs=[C(name="retention.ms", config_operation=SET,
                                                                      value="3600000")]),
                R(resource_type=BROKER_LOGGER, resource_name="1", configs=[C(name="root", config_operation=SET,
                                                                             value="INFO")]),
                R(resource_type=TOPIC, resource_name="c2", configs=[C(name="cleanup.policy", config_operation=SET,
                                                                      value="compact")]),
                R(resource_type=TOPIC, resource_name="missing", configs=[C(name="retention.ms",
                                                                           config_operation=SET, value="1")]),
                R(resource_type=BROKER, resource_name="", configs=[C(name="log.cleaner.threads",
                                                                     config_operation=SET, value="2")]),
                R(resource_type=BROKER, resource_name="7", configs=[C(name="log.cleaner.threads",
                                                                      config_operation=SET, value="2")]),
            ]))
            assert _envelopes(http) - before == 1
            return [(r.resource_type, r.resource_name, r.error_code, r.error_message) for r in resp.responses]

        expected = [(TOPIC, "c1", 0, None), (BROKER_LOGGER, "1", 0, None), (TOPIC, "c2", 0, None),
                    (TOPIC, "missing", 3, "The topic 'missing' does not exist."), (BROKER, "", 0, None),
                    (BROKER, "7", 42, "Unexpected broker id, expected 1, but received 7")]
        assert request(validate_only=True) == expected
        assert _topic_config(client, "c1", "retention.ms") is None  # validated only
        assert request(validate_only=False) == expected
        assert _topic_config(client, "c1", "retention.ms") == "3600000"
        assert _topic_config(client, "c2", "cleanup.policy") == "compact"


def test_legacy_alter_configs_is_one_envelope(node: tuple[KBroker, str]) -> None:
    broker, http = node
    R, C = AlterConfigsRequest.AlterConfigsResource, AlterConfigsRequest.AlterableConfig
    with RawKafkaClient(broker.bootstrap) as client:
        _create(client, ["l1", "l2"])
        before = _envelopes(http)
        resp = client.request(33, 2, AlterConfigsRequest(validate_only=False, resources=[
            R(resource_type=TOPIC, resource_name="l1", configs=[C(name="retention.ms", value="60000")]),
            R(resource_type=TOPIC, resource_name="l2", configs=[C(name="retention.ms", value="70000")]),
            R(resource_type=BROKER, resource_name="1", configs=[C(name="log.cleaner.threads", value="2")]),
            R(resource_type=TOPIC, resource_name="l1", configs=[]),
        ]))
        assert _envelopes(http) - before == 1
        assert [(r.resource_name, r.error_code, r.error_message) for r in resp.responses] == [
            ("l1", 42, "Each resource must appear at most once."), ("l2", 0, None), ("1", 0, None),
            ("l1", 42, "Each resource must appear at most once.")]
        assert _topic_config(client, "l2", "retention.ms") == "70000"
        assert _topic_config(client, "l1", "retention.ms") is None
