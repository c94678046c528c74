"""Differential test: the same scripted scenario against Apache Kafka 4.3 and against kbroker.

Kafka's observations are the expected values. Where kbroker differs on purpose, the difference is
listed in KNOWN_DIFFERENCES with the reason, and the test checks that exactly those differ.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.differential import scenario
from tests.support.reference_kafka import reference_unavailable_reason, start_reference_kafka

pytestmark = [pytest.mark.reference, pytest.mark.interop]

# Topic configs Kafka 4.3 reports that kbroker does not (yet) report, each with its reason.
KNOWN_CONFIG_DIFFERENCES: dict[str, str] = {}

# Configs whose value/source differ from Kafka's on purpose, each with its reason. The test checks
# that these, and only these, differ, so the list cannot go stale.
KNOWN_SOURCE_DIFFERENCES: dict[str, str] = {
    # (none: min.insync.replicas, once different, is now DYNAMIC_DEFAULT_BROKER_CONFIG on both, the
    # cluster-level default written when eligible leader replicas are on, KAFKA-16540)
}

# The static server.properties keys benchmarks/reference/kafka.sh gives Kafka, given to kbroker too,
# so config sources (STATIC_BROKER_CONFIG vs DEFAULT_CONFIG) are comparable.
SAME_STATIC_CONFIG = {
    "num.partitions": "1",
    "default.replication.factor": "1",
    "log.segment.bytes": "1073741824",
    "log.retention.hours": "168",
    "log.retention.check.interval.ms": "300000",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "auto.create.topics.enable": "true",
}


@pytest.fixture(scope="module")
def kafka_observations(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    why = reference_unavailable_reason()
    if why:
        pytest.fail(f"the reference Kafka broker is needed for the differential suite: {why}")
    bootstrap, stop = start_reference_kafka(tmp_path_factory.mktemp("kafka"))
    try:
        return scenario.run(bootstrap)
    finally:
        stop()


@pytest.fixture(scope="module")
def kbroker_observations(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from tests.support.broker import KBroker

    broker = KBroker(Path(tmp_path_factory.mktemp("kbroker")), SAME_STATIC_CONFIG)
    broker.start()
    try:
        return scenario.run(broker.bootstrap)
    finally:
        broker.stop()


SCALAR_KEYS = ["create", "create_again", "create_small", "create_bad_config", "metadata", "produce",
               "produce_unknown_topic", "produce_too_large", "produce_bad_crc", "list_offsets", "fetch",
               "fetch_out_of_range", "fetch_kip74_tiny_max", "fetch_v3_connection_closed",
               "produce_partition_twice_one_entry", "produce_partition_twice_two_entries"]


@pytest.mark.parametrize("key", SCALAR_KEYS)
def test_same_observation(key: str, kafka_observations: dict[str, Any], kbroker_observations: dict[str, Any]) -> None:
    assert kbroker_observations[key] == kafka_observations[key]


def test_describe_configs_same_names_values_and_sources(
    kafka_observations: dict[str, Any], kbroker_observations: dict[str, Any]
) -> None:
    kafka, ours = kafka_observations["describe_configs"], kbroker_observations["describe_configs"]
    missing = set(kafka) - set(ours) - set(KNOWN_CONFIG_DIFFERENCES)
    assert not missing, f"configs Kafka reports and kbroker does not: {sorted(missing)}"
    extra = set(ours) - set(kafka)
    assert not extra, f"configs kbroker reports that Kafka does not: {sorted(extra)}"
    differing = {k: (ours[k], kafka[k]) for k in kafka if k in ours and ours[k] != kafka[k]}
    unexpected = {k: v for k, v in differing.items() if k not in KNOWN_SOURCE_DIFFERENCES}
    assert not unexpected, f"(kbroker, kafka) value/source/sensitivity differ: {unexpected}"
    assert set(differing) == set(KNOWN_SOURCE_DIFFERENCES), (
        f"KNOWN_SOURCE_DIFFERENCES is stale: these now match Kafka: {set(KNOWN_SOURCE_DIFFERENCES) - set(differing)}")
