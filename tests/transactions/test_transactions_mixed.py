"""Transactions across kbroker and Apache Kafka 4.3.1 brokers in one KRaft cluster (Kafka's controller,
one Kafka broker, two kbroker brokers; `__transaction_state` and the data topic at RF 3).

For a coordinator on each of the three brokers, a librdkafka transactional producer commits and aborts
transactions over three partitions led by the three brokers: a Kafka coordinator sends WriteTxnMarkers
to kbroker leaders (which check its coordinator epoch and append with acks=all), a kbroker coordinator
sends them to the Kafka leader, and each leader verifies transactional produces with a coordinator of
the other kind (AddPartitionsToTxn v4+ `verify_only`, KIP-890 part 1). read_committed then reads exactly
the committed records of every producer and reaches every partition's high watermark (all markers in).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.kafka_cluster import KafkaCluster, cluster_unavailable_reason
from tests.transactions.test_transactions_cluster import _state_partition

pytestmark = [pytest.mark.interop, pytest.mark.java]

TOPIC = "mixed-txn"
STATE = "__transaction_state"
OVERRIDES = {"transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2",
             "transaction.state.log.num.partitions": "3", "min.insync.replicas": "2",
             "replica.lag.time.max.ms": "3000"}


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaCluster, str]]:
    reason = cluster_unavailable_reason()
    if reason:
        pytest.skip(reason)
    pytest.importorskip("confluent_kafka")
    c = KafkaCluster(tmp_path_factory.mktemp("txn-mixed"), controller_overrides={"broker.session.timeout.ms": "3000"})
    try:
        c.start_controllers()
        kafka = c.add_kafka_broker(2, OVERRIDES)
        kafka.format()
        kafka.start(120)
        for node_id in (3, 4):
            c.kbroker(node_id, OVERRIDES).start(timeout=90)
        yield c, ",".join([kafka.bootstrap] + [kb.bootstrap for kb in c.kbrokers])
    finally:
        for kb in c.kbrokers:
            kb.kill()
        for node in c.kafka_brokers + c.controllers:
            node.kill()


def _leaders(admin: object, topic: str, n: int) -> dict[int, int]:
    last: dict[int, int] = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            t = admin.list_topics(topic, timeout=10).topics.get(topic)  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - a broker still starting: ask again
            t = None
        if t is not None and t.error is None and len(t.partitions) == n:
            last = {p: pm.leader for p, pm in t.partitions.items()}
            if all(v >= 0 for v in last.values()):
                return last
        time.sleep(0.3)
    raise AssertionError(f"{topic}: no leaders: {last}")


def test_transactions_between_kafka_and_kbroker_brokers(mixed: tuple[KafkaCluster, str], tmp_path: Path) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    c, bootstrap = mixed
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 3, 3)])[TOPIC].result(60)
    data_leaders = _leaders(admin, TOPIC, 3)
    Producer({"bootstrap.servers": bootstrap, "transactional.id": "mixed-setup"}).init_transactions(60)
    state_leaders = _leaders(admin, STATE, 3)
    assert 2 in data_leaders.values() and {3, 4} & set(data_leaders.values()), data_leaders
    coordinators = sorted(set(state_leaders.values()))
    assert 2 in coordinators and {3, 4} & set(coordinators), state_leaders  # both kinds coordinate

    results: dict[str, tuple[list[str], list[str]]] = {}
    for coordinator in coordinators:
        tid = next(t for i in range(1000) if state_leaders[_state_partition(t := f"mixed{coordinator}-{i}")]
                   == coordinator)
        p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
        p.init_transactions(60)
        committed: list[str] = []
        aborted: list[str] = []
        for txn in range(6):
            p.begin_transaction()
            values = [f"{tid}:{txn}:{part}:{i}" for part in range(3) for i in range(3)]
            for v in values:
                p.produce(TOPIC, v.encode(), partition=int(v.split(":")[2]))
            p.flush(30)
            if txn % 2:
                p.abort_transaction(30)
                aborted += values
            else:
                p.commit_transaction(30)
                committed += values
        results[tid] = (committed, aborted)

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "mixed-check", "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(3)])
        seen: list[str] = []
        eof: set[int] = set()
        deadline = time.monotonic() + 60
        while len(eof) < 3 and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() == -191:  # _PARTITION_EOF
                    eof.add(m.partition())
                continue
            eof.discard(m.partition())
            seen.append(m.value().decode())
        positions = {tp.partition: tp.offset for tp in consumer.position([TopicPartition(TOPIC, p) for p in range(3)])}
        highs = {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1] for p in range(3)}
    finally:
        consumer.close()
    for tid, (committed, aborted) in results.items():
        mine = [v for v in seen if v.startswith(f"{tid}:")]
        assert sorted(mine) == sorted(committed), f"{tid}: read_committed differs from the committed records"
        assert not set(mine) & set(aborted)
    assert positions == highs, (positions, highs)  # the LSO reached every HW: every marker arrived


@pytest.mark.slow
def test_kafka_coordinator_killed_kbroker_takes_over(mixed: tuple[KafkaCluster, str]) -> None:
    """kill -9 of the Kafka broker while it coordinates a producer's transactions (and leads a partition):
    a kbroker broker becomes leader of the `__transaction_state` partition, loads what Kafka wrote and
    completes or aborts what was in flight; nothing committed is lost, nothing aborted is visible."""
    import threading

    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.transactions.test_transactions_cluster import TOPIC as DATA
    from tests.transactions.test_transactions_cluster import Outcome, _check, _run_transactions

    c, bootstrap = mixed
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(DATA, 3, 3)])[DATA].result(60)  # the topic _run_transactions writes
    assert 2 in _leaders(admin, DATA, 3).values()
    Producer = pytest.importorskip("confluent_kafka").Producer
    Producer({"bootstrap.servers": bootstrap, "transactional.id": "mixed-setup-2"}).init_transactions(60)
    state_leaders = _leaders(admin, STATE, 3)
    tid = next(t for i in range(1000) if state_leaders[_state_partition(t := f"kafka-coord-{i}")] == 2)

    class _Cluster:  # what _run_transactions / _check need of a cluster
        def __init__(self, bootstrap: str) -> None:
            self.bootstrap = bootstrap

    live = _Cluster(bootstrap)
    out = Outcome()
    stop = threading.Event()
    worker = threading.Thread(target=_run_transactions, args=(live, tid, stop, out), daemon=True)
    worker.start()
    try:
        deadline = time.monotonic() + 60
        while len(out.committed) < 36 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(out.committed) >= 36, out.errors
        c.kafka_brokers[0].kill()
        live.bootstrap = ",".join(kb.bootstrap for kb in c.kbrokers)
        before = len(out.committed)
        deadline = time.monotonic() + 120
        while len(out.committed) < before + 36 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(out.committed) >= before + 36, f"no commits after the failover: {out.errors[-5:]}"
        new_leaders = _leaders(AdminClient({"bootstrap.servers": live.bootstrap}), STATE, 3)
        assert new_leaders[_state_partition(tid)] in (3, 4)
    finally:
        stop.set()
        worker.join(120)
    _check(live, out, [tid])  # type: ignore[arg-type]
