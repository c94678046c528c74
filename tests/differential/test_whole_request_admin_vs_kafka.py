"""Differential test (issue 12): multi-resource DeleteTopics, IncrementalAlterConfigs and AlterConfigs,
each sent as one request, answered per resource as Kafka 4.3.1 answers them.

kbroker is plain `kbroker serve` (a combined node: its broker listener forwards each request whole to its
controller, which applies it in one write); the reference is Apache Kafka 4.3.1 (also combined, node 1).
The requests mix successes with Kafka's broker-side answers (a resource named twice, a key named twice,
a null value, BROKER naming another node or not a number, BROKER_LOGGER of this and another node, APPEND
on a non-list key, an unknown resource type) and controller-side ones (an unknown topic, a bad value,
the empty group name), validate-only and not. Every (type, name, code, message) must be Kafka's, in
the request's order. Deliberate differences: CLIENT_METRICS resources are left out (kbroker does not
have them); DeleteTopics answers are compared as a set (Kafka's order follows its hash maps).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from kbroker.protocol.messages.alter_configs import AlterConfigsRequest as A
from kbroker.protocol.messages.create_topics import CreateTopicsRequest
from kbroker.protocol.messages.delete_topics import DeleteTopicsRequest
from kbroker.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest as I
from tests.support.broker import KBroker
from tests.support.raw_client import RawKafkaClient
from tests.support.reference_kafka import reference_unavailable_reason, start_reference_kafka

pytestmark = [pytest.mark.reference, pytest.mark.interop]

SET, DELETE, APPEND = 0, 1, 2
TOPIC, BROKER, BROKER_LOGGER, GROUP = 2, 4, 8, 32


def _script(bootstrap: str) -> list[Any]:
    out: list[Any] = []
    R, C = I.AlterConfigsResource, I.AlterableConfig
    L, LC = A.AlterConfigsResource, A.AlterableConfig
    with RawKafkaClient(bootstrap) as c:
        r = c.request(19, 7, CreateTopicsRequest(timeout_ms=30000, validate_only=False, topics=[
            CreateTopicsRequest.CreatableTopic(name=n, num_partitions=1, replication_factor=1, assignments=[],
                                               configs=[]) for n in ("t1", "t2", "t3", "t4")]))
        out.append([(t.name, t.error_code) for t in r.topics])
        for validate_only in (True, False):
            r = c.request(44, 1, I(validate_only=validate_only, resources=[
                R(resource_type=TOPIC, resource_name="t1", configs=[C(name="retention.ms", config_operation=SET,
                                                                      value="1000")]),
                R(resource_type=TOPIC, resource_name="t2", configs=[C(name="retention.ms", config_operation=SET,
                                                                      value="x")]),
                R(resource_type=TOPIC, resource_name="nope", configs=[C(name="retention.ms",
                                                                        config_operation=SET, value="5")]),
                R(resource_type=TOPIC, resource_name="t3", configs=[C(name="retention.ms", config_operation=SET,
                                                                      value=None)]),
                R(resource_type=TOPIC, resource_name="t4", configs=[C(name="retention.ms",
                                                                      config_operation=DELETE, value=None)]),
                R(resource_type=BROKER, resource_name="7", configs=[C(name="log.cleaner.threads",
                                                                      config_operation=SET, value="2")]),
                R(resource_type=BROKER, resource_name="x", configs=[C(name="log.cleaner.threads",
                                                                      config_operation=SET, value="2")]),
                R(resource_type=BROKER, resource_name="1", configs=[C(name="log.cleaner.threads",
                                                                      config_operation=APPEND, value="2")]),
                R(resource_type=BROKER, resource_name="", configs=[
                    C(name="log.cleaner.threads", config_operation=SET, value="2"),
                    C(name="log.cleaner.threads", config_operation=SET, value="3")]),
                R(resource_type=BROKER_LOGGER, resource_name="1", configs=[C(name="root", config_operation=SET,
                                                                             value="INFO")]),
                R(resource_type=BROKER_LOGGER, resource_name="2", configs=[C(name="root", config_operation=SET,
                                                                             value="INFO")]),
                R(resource_type=GROUP, resource_name="", configs=[C(name="consumer.session.timeout.ms",
                                                                    config_operation=SET, value="50000")]),
                R(resource_type=GROUP, resource_name="g", configs=[C(name="consumer.session.timeout.ms",
                                                                     config_operation=SET, value="50000")]),
                R(resource_type=99, resource_name="z", configs=[]),
                R(resource_type=TOPIC, resource_name="t1", configs=[]) if not validate_only else
                R(resource_type=TOPIC, resource_name="t4", configs=[]),
            ]))
            out.append([(x.resource_type, x.resource_name, x.error_code, x.error_message) for x in r.responses])
        r = c.request(33, 2, A(validate_only=False, resources=[
            L(resource_type=TOPIC, resource_name="t2", configs=[LC(name="retention.ms", value="60000")]),
            L(resource_type=TOPIC, resource_name="t3", configs=[LC(name="retention.ms", value="y")]),
            L(resource_type=TOPIC, resource_name="nope", configs=[LC(name="retention.ms", value="1")]),
            L(resource_type=BROKER, resource_name="1", configs=[LC(name="log.cleaner.threads", value="2")]),
            L(resource_type=BROKER, resource_name="7", configs=[LC(name="log.cleaner.threads", value="2")]),
            L(resource_type=BROKER_LOGGER, resource_name="1", configs=[LC(name="root", value="INFO")]),
            L(resource_type=TOPIC, resource_name="t4", configs=[LC(name="retention.ms", value=None)]),
        ]))
        out.append([(x.resource_type, x.resource_name, x.error_code, x.error_message) for x in r.responses])
        r = c.request(20, 6, DeleteTopicsRequest(timeout_ms=30000, topics=[
            DeleteTopicsRequest.DeleteTopicState(name=n, topic_id=uuid.UUID(int=0))
            for n in ("t1", "nope", "t2", "t1", "t3")] + [
            DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=uuid.UUID(int=5))]))
        out.append(sorted((x.name or "", x.error_code, x.error_message or "") for x in r.responses))
    return out


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    reason = reference_unavailable_reason()
    if reason:
        pytest.skip(reason)
    bootstrap, stop = start_reference_kafka(Path(tmp_path_factory.mktemp("ref-whole")))
    try:
        return _script(bootstrap)
    finally:
        stop()


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    broker = KBroker(tmp_path_factory.mktemp("kb-whole")).start()
    try:
        return _script(broker.bootstrap)
    finally:
        broker.stop()


@pytest.mark.parametrize("step", ["create", "incremental_validate_only", "incremental", "legacy", "delete"])
def test_same_answers_as_kafka(step: str, kafka: list[Any], ours: list[Any]) -> None:
    i = ["create", "incremental_validate_only", "incremental", "legacy", "delete"].index(step)
    assert ours[i] == kafka[i]
