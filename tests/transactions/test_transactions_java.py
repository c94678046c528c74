"""The Java client's (kafka-clients 4.3.1) transactional producer against kbroker: commit, abort, a
zombie fenced by a new incarnation (ProducerFencedException), and a read_committed consumer that
reads exactly the committed records."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.broker import KBroker
from tests.support.java import java_unavailable_reason, run_java_main

pytestmark = [pytest.mark.interop, pytest.mark.java]

TXN_CLIENT = Path(__file__).parent / "java" / "TxnClient.java"


def test_java_transactional_producer(kbroker: KBroker) -> None:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    admin = AdminClient({"bootstrap.servers": kbroker.bootstrap})
    admin.create_topics([NewTopic("java-txn", 1, 1)])["java-txn"].result(15)
    proc = run_java_main(str(TXN_CLIENT), [kbroker.bootstrap, "java-txn", "java-tid"], timeout=180)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "fenced ProducerFencedException" in lines, proc.stdout + proc.stderr
    assert "read c0,c1,c2,fresh" in lines, proc.stdout + proc.stderr
    # kafka-transactions (ListTransactions, DescribeTransactions, DescribeProducers).
    listed = run_java_main("kafka-transactions", ["--bootstrap-server", kbroker.bootstrap, "list"], timeout=120)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert any(line.split()[:1] == ["java-tid"] and "CompleteCommit" in line for line in listed.stdout.splitlines()), \
        listed.stdout
    described = run_java_main("kafka-transactions", ["--bootstrap-server", kbroker.bootstrap, "describe",
                                                     "--transactional-id", "java-tid"], timeout=120)
    assert described.returncode == 0 and "CompleteCommit" in described.stdout, described.stdout + described.stderr
    producers = run_java_main("kafka-transactions", ["--bootstrap-server", kbroker.bootstrap, "describe-producers",
                                                     "--topic", "java-txn", "--partition", "0"], timeout=120)
    assert producers.returncode == 0, producers.stdout + producers.stderr
    assert len(producers.stdout.strip().splitlines()) >= 2, producers.stdout  # a header and the producer
