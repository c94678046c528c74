"""Kafka's own ClientCompatibilityTest (kafka-tools 4.3.1) passes against kbroker.

The tool drives the Java producer, consumer and Admin client through the features its flags name;
the flags say what kbroker supports today. ACLs are not implemented, but like a Kafka broker without an
authorizer kbroker answers DescribeAcls with SECURITY_DISABLED, which the tool accepts as "supported"
(its describeAcls check returns on SecurityDisabledException), so both brokers get the same flags. The same tool also runs against the
reference Kafka broker with Kafka's flags, so a failure of the tool itself is told apart from ours.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.java import java_unavailable_reason, run_java_main
from tests.support.reference_kafka import reference_unavailable_reason, start_reference_kafka

pytestmark = [pytest.mark.java, pytest.mark.interop]


def _flags(describe_acls: bool) -> list[str]:
    return [
        "--offsets-for-times-supported", "true",
        "--cluster-id-supported", "true",
        "--expect-record-too-large-exception", "false",  # KIP-74: the oversized first batch is returned
        "--num-cluster-nodes", "1",
        "--create-topics-supported", "true",
        "--describe-acls-supported", "true" if describe_acls else "false",
        "--describe-configs-supported", "true",
        "--idempotent-producer-supported", "true",
    ]


def _run(bootstrap: str, topic: str, describe_acls: bool) -> None:
    why = java_unavailable_reason()
    if why:
        pytest.fail(f"Java tools are needed: {why}")
    out = run_java_main("kafka-client-compatibility",
                        ["--bootstrap-server", bootstrap, "--topic", topic, *_flags(describe_acls)], timeout=240)
    assert out.returncode == 0, f"ClientCompatibilityTest failed:\n{out.stdout[-3000:]}\n{out.stderr[-5000:]}"


def test_client_compatibility_against_kbroker(tmp_path: Path) -> None:
    from tests.support.broker import KBroker

    broker = KBroker(tmp_path)
    broker.start()
    try:
        _run(broker.bootstrap, "compat-kbroker", describe_acls=True)
    finally:
        broker.stop()


@pytest.mark.reference
def test_client_compatibility_against_reference_kafka(tmp_path: Path) -> None:
    why = reference_unavailable_reason()
    if why:
        pytest.fail(f"the reference Kafka broker is needed: {why}")
    bootstrap, stop = start_reference_kafka(tmp_path)
    try:
        _run(bootstrap, "compat-kafka", describe_acls=True)
    finally:
        stop()
