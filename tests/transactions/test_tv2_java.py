"""The Java client (kafka-clients 4.3.1) on transactions version 2: kbroker finalizes `transaction.version`
2, so the client sends no AddPartitionsToTxn / AddOffsetsToTxn, produces with v12, commits offsets with
TxnOffsetCommit v5 and ends transactions with EndTxn v5 (an epoch bump each). A consume-transform-produce
loop (every third transaction aborted and redone) copies each input record exactly once to a
read_committed reader, the group's committed offset is the input's end, the producer's epoch counts
its transactions (the proof the client used version 2: version 1 keeps epoch 0), a zombie is fenced
by a new incarnation. The same program against Apache Kafka 4.3.1 (marker `reference`) prints the same."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.broker import KBroker
from tests.support.java import java_unavailable_reason, run_java_main
from tests.support.reference_kafka import start_reference_kafka

pytestmark = [pytest.mark.interop, pytest.mark.java]

CLIENT = Path(__file__).parent / "java" / "TxnV2Client.java"
RECORDS = 60


def _run(bootstrap: str) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic("tv2-in", 1, 1), NewTopic("tv2-out", 1, 1)]).values():
        f.result(30)
    proc = run_java_main(str(CLIENT), [bootstrap, "tv2-in", "tv2-out", "tv2-tid", "tv2-group", str(RECORDS)],
                         timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in proc.stdout.splitlines() if " " in line}


def _check(out: dict[str, str]) -> None:
    ends = int(out["ends"])
    assert ends >= 3, out
    assert int(out["epoch"]) == ends, out  # one bump per transaction end: transactions version 2
    assert out["fenced"] == "ProducerFencedException", out
    assert out["output"] == f"{RECORDS + 1} {RECORDS + 1} exactly-once=true zombie=false fresh=true", out
    assert out["offset"] == str(RECORDS), out


def test_java_client_transactions_v2(kbroker: KBroker) -> None:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    _check(_run(kbroker.bootstrap))


@pytest.mark.reference
def test_java_client_transactions_v2_on_kafka(tmp_path: Path) -> None:
    """The same program and checks against Kafka 4.3.1: what the test asserts of kbroker is Kafka's."""
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    bootstrap, stop = start_reference_kafka(tmp_path, overrides={"transaction.state.log.replication.factor": "1",
                                                                 "transaction.state.log.min.isr": "1"})
    try:
        _check(_run(bootstrap))
    finally:
        stop()
