"""Issue 12 against Apache Kafka 4.3.1's controller: a kbroker broker (`process.roles=broker`) forwards
DeleteTopics, IncrementalAlterConfigs and AlterConfigs whole, in one Envelope each, and relays Kafka's
`ControllerApis` answers per resource; what the broker answers itself (a duplicated resource,
BROKER_LOGGER, a BROKER resource naming another broker) is merged back in the request's order, as
Kafka's `ConfigAdminManager.reassemble*Response` does. Real processes: a Kafka controller and kbroker.
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
from kbroker.protocol.messages.metadata import MetadataRequest
from tests.support.kafka_cluster import KafkaCluster, cluster_unavailable_reason
from tests.support.raw_client import RawKafkaClient

pytestmark = [pytest.mark.interop, pytest.mark.java]

KB_ID = 3
TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
SET = 0
ZERO = uuid.UUID(int=0)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    reason = cluster_unavailable_reason()
    if reason:
        pytest.skip(reason)
    c = KafkaCluster(tmp_path_factory.mktemp("kraft-fwd"))
    try:
        c.start_controllers()
        c.kbroker(KB_ID, {}).start(timeout=90)
        yield c
    finally:
        c.stop_all()


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


def test_delete_topics_and_config_changes_through_a_kafka_controller(cluster: KafkaCluster) -> None:
    kb = cluster.kbrokers[0]
    with RawKafkaClient(kb.bootstrap) as client:
        _create(client, ["k1", "k2", "k3"])
        R, C = IncrementalAlterConfigsRequest.AlterConfigsResource, IncrementalAlterConfigsRequest.AlterableConfig
        resp = client.request(44, 1, IncrementalAlterConfigsRequest(validate_only=False, resources=[
            R(resource_type=TOPIC, resource_name="k1", configs=[C(name="retention.ms", config_operation=SET,
                                                                  value="3600000")]),
            R(resource_type=BROKER_LOGGER, resource_name=str(KB_ID), configs=[C(name="root", config_operation=SET,
                                                                                value="INFO")]),
            R(resource_type=TOPIC, resource_name="k2", configs=[C(name="retention.ms", config_operation=SET,
                                                                  value="oops")]),
            R(resource_type=BROKER, resource_name=str(KB_ID), configs=[C(name="log.cleaner.threads",
                                                                        config_operation=SET, value="2")]),
            R(resource_type=BROKER, resource_name="99", configs=[C(name="log.cleaner.threads",
                                                                   config_operation=SET, value="2")]),
        ]))
        assert [(r.resource_type, r.resource_name, r.error_code) for r in resp.responses] == [
            (TOPIC, "k1", 0), (BROKER_LOGGER, str(KB_ID), 0), (TOPIC, "k2", 40), (BROKER, str(KB_ID), 0),
            (BROKER, "99", 42)]
        assert _topic_config(client, "k1", "retention.ms") == "3600000"

        L, LC = AlterConfigsRequest.AlterConfigsResource, AlterConfigsRequest.AlterableConfig
        resp = client.request(33, 2, AlterConfigsRequest(validate_only=False, resources=[
            L(resource_type=TOPIC, resource_name="k2", configs=[LC(name="retention.ms", value="70000")]),
            L(resource_type=TOPIC, resource_name="k3", configs=[LC(name="retention.ms", value="80000")]),
        ]))
        assert [(r.resource_name, r.error_code) for r in resp.responses] == [("k2", 0), ("k3", 0)]
        assert (_topic_config(client, "k2", "retention.ms"), _topic_config(client, "k3", "retention.ms")) == (
            "70000", "80000")

        resp = client.request(20, 6, DeleteTopicsRequest(timeout_ms=30000, topics=[
            DeleteTopicsRequest.DeleteTopicState(name=n, topic_id=ZERO) for n in ("k1", "k2", "nope", "k3")]))
        assert sorted((r.name, r.error_code) for r in resp.responses) == [
            ("k1", 0), ("k2", 0), ("k3", 0), ("nope", 3)]
        # The broker answered once its image no longer held them.
        md = client.request(3, 12, MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                   include_topic_authorized_operations=False))
        assert not {"k1", "k2", "k3"} & {t.name for t in md.topics}
