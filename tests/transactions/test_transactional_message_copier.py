"""Apache Kafka's TransactionalMessageCopier (kafka-tools 4.3.1, the program Kafka's own transactions
system test runs) copies a topic to another in transactions of 100 records, with random aborts and the
group-metadata offset commit (KIP-447); a read_committed consumer then finds every input record exactly
once in the output. No broker restarts here (the issue's kill/restart matrix is not run)."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.broker import KBroker
from tests.support.java import java_unavailable_reason, run_java_main

pytestmark = [pytest.mark.interop, pytest.mark.java]

N = 2000


def test_copier_copies_exactly_once(kbroker: KBroker) -> None:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    admin = AdminClient({"bootstrap.servers": kbroker.bootstrap})
    for f in admin.create_topics([NewTopic("copier-in", 1, 1), NewTopic("copier-out", 1, 1)]).values():
        f.result(15)
    p = Producer({"bootstrap.servers": kbroker.bootstrap, "linger.ms": 5})
    for i in range(N):
        p.produce("copier-in", str(i).encode())
    p.flush(30)
    proc = run_java_main("org.apache.kafka.tools.TransactionalMessageCopier", [
        "--broker-list", kbroker.bootstrap, "--input-topic", "copier-in", "--input-partition", "0",
        "--output-topic", "copier-out", "--transactional-id", "copier-tid", "--consumer-group", "copier-group",
        "--transaction-size", "100", "--max-messages", str(N), "--enable-random-aborts", "--use-group-metadata",
    ], timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert any(e.get("message") == "ShutdownComplete" or e.get("remaining") == 0 for e in events), proc.stdout[-2000:]
    c = Consumer({"bootstrap.servers": kbroker.bootstrap, "group.id": "copier-verify", "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed", "enable.partition.eof": True})
    c.subscribe(["copier-out"])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                break
            continue
        values.append(m.value())
    c.close()
    assert sorted(int(v) for v in values) == list(range(N))  # every input record, exactly once


@pytest.mark.slow
def test_copier_exactly_once_across_broker_kills(kbroker: KBroker) -> None:
    """The copier runs while the broker is killed (SIGKILL) and restarted (up to twice, at least once); a copier that dies
    is started again (as Kafka's system test does). The output under read_committed holds every input
    record exactly once."""
    from tests.support.java import start_java_main

    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    n = 60_000
    admin = AdminClient({"bootstrap.servers": kbroker.bootstrap})
    for f in admin.create_topics([NewTopic("kc-in", 1, 1), NewTopic("kc-out", 1, 1)]).values():
        f.result(15)
    p = Producer({"bootstrap.servers": kbroker.bootstrap, "linger.ms": 5})
    for i in range(n):
        p.produce("kc-in", str(i).encode())
    p.flush(30)
    args = ["--broker-list", kbroker.bootstrap, "--input-topic", "kc-in", "--input-partition", "0",
            "--output-topic", "kc-out", "--transactional-id", "kc-tid", "--consumer-group", "kc-group",
            "--transaction-size", "200", "--max-messages", str(n), "--use-group-metadata"]
    kills = 0
    for _attempt in range(8):
        copier = start_java_main("org.apache.kafka.tools.TransactionalMessageCopier", args)
        try:
            while kills < 2:
                time.sleep(3)
                if copier.poll() is not None:
                    break
                kbroker.kill()
                kills += 1
                time.sleep(1)
                kbroker.start()
            out, _err = copier.communicate(timeout=240)
        finally:
            if copier.poll() is None:
                copier.kill()
                copier.wait()
        if copier.returncode == 0 and '"remaining":0' in out.replace(" ", ""):
            break
    assert kills >= 1
    c = Consumer({"bootstrap.servers": kbroker.bootstrap, "group.id": "kc-verify", "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed", "enable.partition.eof": True})
    c.subscribe(["kc-out"])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                break
            continue
        values.append(m.value())
    c.close()
    got = sorted(int(v) for v in values)
    assert got == list(range(n)), (len(got), len(set(got)))
