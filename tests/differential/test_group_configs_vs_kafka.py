"""Differential test: the GROUP config resource (type 32) against Kafka 4.3.1 and kbroker.

One scripted sequence of raw IncrementalAlterConfigs and DescribeConfigs requests on group resources:
valid and invalid values of every kind (unknown key, not a number, below a key's minimum, outside the
broker's `group.*.min/max.*` bounds, session not above heartbeat, enums, `by_duration`, booleans, a null
SET, APPEND on a non-list key, DELETE, validate-only, the empty group name), then DescribeConfigs of a
configured group, an unconfigured one, a key subset without synonyms and the empty name. Every error
code and message, and every described value, source, type and synonym list (in order), must be Kafka's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kbroker.protocol.messages.describe_configs import DescribeConfigsRequest as D
from kbroker.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest as I
from tests.support.broker import KBroker
from tests.support.raw_client import RawKafkaClient
from tests.support.reference_kafka import reference_unavailable_reason, start_reference_kafka

pytestmark = [pytest.mark.reference, pytest.mark.interop]

SET, DELETE, APPEND = 0, 1, 2
ALTERS: list[list[tuple[str, int, str | None]]] = [
    [("share.auto.offset.reset", SET, "earliest")],
    [("share.auto.offset.reset", SET, "bogus")],
    [("share.session.timeout.ms", SET, "1000")],
    [("share.session.timeout.ms", SET, "abc")],
    [("nope.key", SET, "1")],
    [("share.session.timeout.ms", SET, "16000"), ("share.heartbeat.interval.ms", SET, "16000")],
    [("share.session.timeout.ms", SET, "50000"), ("share.heartbeat.interval.ms", SET, "6000")],
    [("consumer.session.timeout.ms", SET, "46000"), ("consumer.heartbeat.interval.ms", SET, "14000")],
    [("share.record.lock.duration.ms", SET, "500")],
    [("share.record.lock.duration.ms", SET, "15000")],
    [("share.auto.offset.reset", SET, "by_duration:PT1H")],
    [("share.auto.offset.reset", SET, "by_duration:xx")],
    [("share.isolation.level", SET, "read_committed")],
    [("share.isolation.level", SET, "READ_COMMITTED")],
    [("share.auto.offset.reset", SET, None)],
    [("share.auto.offset.reset", APPEND, "x")],
    [("share.delivery.count.limit", SET, "1")],
    [("share.delivery.count.limit", SET, "11")],
    [("share.partition.max.record.locks", SET, "5000")],
    [("streams.num.standby.replicas", SET, "3")],
    [("consumer.assignment.interval.ms", SET, "5")],
    [("share.renew.acknowledge.enable", SET, "maybe")],
    [("share.renew.acknowledge.enable", SET, "false")],
    [("share.delivery.count.limit", DELETE, None)],
    [("share.heartbeat.interval.ms", DELETE, None)],
]


def _alter(c: RawKafkaClient, name: str, ops: list[tuple[str, int, str | None]],
           validate_only: bool = False) -> list[tuple[int, str | None]]:
    r = c.request(44, 1, I(resources=[I.AlterConfigsResource(resource_type=32, resource_name=name, configs=[
        I.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops])], validate_only=validate_only))
    return [(x.error_code, x.error_message) for x in r.responses]


def _describe(c: RawKafkaClient, name: str, keys: list[str] | None = None, synonyms: bool = True) -> Any:
    r = c.request(32, 4, D(resources=[D.DescribeConfigsResource(resource_type=32, resource_name=name,
                                                                 configuration_keys=keys)],
                           include_synonyms=synonyms, include_documentation=False))
    return [(res.error_code, res.error_message,
             [(e.name, e.value, e.read_only, e.config_source, e.is_sensitive, e.config_type,
               [(s.name, s.value, s.source) for s in e.synonyms]) for e in res.configs]) for res in r.results]


def scenario(bootstrap: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with RawKafkaClient(bootstrap) as c:
        out["describe_unknown_group"] = _describe(c, "never-configured")
        for i, ops in enumerate(ALTERS):
            out[f"alter_{i}"] = _alter(c, "g1", ops)
        out["alter_default_name"] = _alter(c, "", [("share.auto.offset.reset", SET, "earliest")])
        out["alter_validate_only"] = _alter(c, "g2", [("share.auto.offset.reset", SET, "earliest")], True)
        out["describe_g1"] = _describe(c, "g1")
        out["describe_g2"] = _describe(c, "g2")
        out["describe_keys"] = _describe(c, "g1", ["share.auto.offset.reset", "no.such.key"], synonyms=False)
        out["describe_empty_name"] = _describe(c, "")
    return out


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    reason = reference_unavailable_reason()
    if reason:
        pytest.fail(reason)
    bootstrap, stop = start_reference_kafka(Path(tmp_path_factory.mktemp("ref-group-configs")))
    try:
        return scenario(bootstrap)
    finally:
        stop()


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    with KBroker(tmp_path_factory.mktemp("kb-group-configs"), {}) as broker:
        return scenario(broker.bootstrap)


@pytest.mark.parametrize("step", ["describe_unknown_group", *(f"alter_{i}" for i in range(len(ALTERS))),
                                  "alter_default_name", "alter_validate_only", "describe_g1", "describe_g2",
                                  "describe_keys", "describe_empty_name"])
def test_same_answer_as_kafka(step: str, kafka: dict[str, Any], ours: dict[str, Any]) -> None:
    assert ours[step] == kafka[step]
