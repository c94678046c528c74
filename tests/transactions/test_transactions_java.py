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
