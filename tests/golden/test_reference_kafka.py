"""The reference Apache Kafka (benchmarks/reference/kafka.sh) starts, serves Kafka's own tools, and
stops: differential tests and the golden captures depend on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.reference.metadata_probe import probe
from tests.support.java import run_java_main
from tests.support.reference_kafka import reference_unavailable_reason, start_reference_kafka

pytestmark = [pytest.mark.java, pytest.mark.reference]


def test_reference_kafka_serves_java_tools_and_stops(tmp_path: Path) -> None:
    reason = reference_unavailable_reason()
    if reason:
        pytest.skip(reason)
    bootstrap, stop = start_reference_kafka(tmp_path)
    try:
        host, _, port = bootstrap.rpartition(":")
        assert probe(host, int(port), 5.0) == 1
        created = run_java_main("kafka-topics", ["--bootstrap-server", bootstrap, "--create", "--topic", "ref",
                                                 "--partitions", "2"], timeout=120)
        assert created.returncode == 0, created.stderr
        produced = run_java_main("kafka-console-producer", ["--bootstrap-server", bootstrap, "--topic", "ref"],
                                 timeout=120, input="a\nb\nc\n")
        assert produced.returncode == 0, produced.stderr
        offsets = run_java_main("kafka-get-offsets", ["--bootstrap-server", bootstrap, "--topic", "ref"],
                                timeout=120)
        assert offsets.returncode == 0, offsets.stderr
        # GetOffsetShell prints TOPIC:PARTITION:END_OFFSET per partition.
        ends = {int(p): int(end) for _, p, end in (line.split(":") for line in offsets.stdout.split())}
        assert sorted(ends) == [0, 1] and sum(ends.values()) == 3
        # The Kafka defaults kbroker mirrors are what the reference runs with.
        configs = run_java_main("kafka-configs", ["--bootstrap-server", bootstrap, "--describe", "--entity-type",
                                                  "brokers", "--entity-name", "1", "--all"], timeout=120)
        assert configs.returncode == 0, configs.stderr
        assert "num.partitions=1 " in configs.stdout
        assert "group.initial.rebalance.delay.ms=0 " in configs.stdout
    finally:
        stop()
    with pytest.raises(OSError):
        probe(host, int(port), 2.0)
