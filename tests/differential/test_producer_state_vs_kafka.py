"""Differential test of the producer-state rules: one seeded random walk of idempotent batches,
WriteTxnMarkers (transaction versions 0 and 2) and DeleteRecords on one partition
(`producer_state_walk.py`), against Apache Kafka 4.3.1 and against kbroker. Every step's answer must
be Kafka's.

ci28 found a sequence rule where kbroker differed from Kafka with a stock Java client in a mixed
cluster; this walk looks for the next one from outside, step by step, on both brokers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.differential import producer_state_walk
from tests.differential.test_vs_kafka import SAME_STATIC_CONFIG
from tests.support.reference_kafka import reference_unavailable_reason, start_reference_kafka

pytestmark = [pytest.mark.reference, pytest.mark.interop]

SEEDS = (1, 2)
STEPS = 300
# Without KIP-890 verification a raw transactional batch needs no coordinator (see the walk's docstring).
NO_VERIFICATION = {"transaction.partition.verification.enable": "false"}


def _first_difference(ours: list[Any], kafka: list[Any]) -> str:
    for a, b in zip(ours, kafka, strict=False):
        if a != b:
            return f"first difference: kbroker {a} against Kafka {b}"
    return f"lengths differ: {len(ours)} against {len(kafka)}"


@pytest.fixture(scope="module")
def kafka_traces(tmp_path_factory: pytest.TempPathFactory) -> dict[int, list[Any]]:
    why = reference_unavailable_reason()
    if why:
        pytest.fail(f"the reference Kafka broker is needed for the differential suite: {why}")
    traces = {}
    for seed in SEEDS:
        bootstrap, stop = start_reference_kafka(tmp_path_factory.mktemp(f"kafka-{seed}"), overrides=NO_VERIFICATION)
        try:
            traces[seed] = producer_state_walk.run(bootstrap, seed, STEPS)
        finally:
            stop()
    return traces


@pytest.mark.parametrize("seed", SEEDS)
def test_the_walk_answers_as_kafka(seed: int, kafka_traces: dict[int, list[Any]], tmp_path: Path) -> None:
    from tests.support.broker import KBroker

    broker = KBroker(tmp_path / "kbroker", {**SAME_STATIC_CONFIG, **NO_VERIFICATION})
    broker.start()
    try:
        ours = producer_state_walk.run(broker.bootstrap, seed, STEPS)
    finally:
        broker.stop()
    kafka = kafka_traces[seed]
    # The walk must reach the rules it is for, on the reference broker.
    kinds = {(s[2], s[7]) for s in kafka if s[1] == "produce"}
    assert {("next", 0), ("gap", 45)} <= kinds, sorted(kinds)
    assert any(s[1] == "produce" and s[2] == "repeat" and s[7] == 0 for s in kafka)
    assert any(s[1] == "marker" and s[-1] == 0 for s in kafka)
    assert any(s[1] == "marker" and s[-1] != 0 for s in kafka)
    assert any(s[1] == "produce" and s[-1] and s[7] == 0 for s in kafka)  # transactional batches written
    assert any(s[1] == "produce" and s[7] == 48 for s in kafka)  # INVALID_TXN_STATE
    assert ours == kafka, _first_difference(ours, kafka)
