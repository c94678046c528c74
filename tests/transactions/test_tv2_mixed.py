"""Transactions version 2 across Apache Kafka 4.3.1 and kbroker brokers in one KRaft cluster (Kafka's
controller, which finalizes `transaction.version` 2; one Kafka broker, two kbroker brokers; topics and
`__transaction_state` at RF 3).

For a transaction coordinator of each kind, the Java client's version-2 consume-transform-produce loop
(`java/TxnV2Client.java`) writes an output topic whose three partitions are led by the three brokers:
each leader adds its partition to the transaction itself (Produce v12) and, when the coordinator is on
another broker, of the other kind, sends it AddPartitionsToTxn v5 `verify_only=false`; the group's
offsets go through TxnOffsetCommit v5 the same way; EndTxn v5 bumps the epoch and the markers reach
both kinds of leaders with it. Each input record is read exactly once with read_committed, the group's
offset is the input's end, the epoch counts the transactions, a zombie is fenced.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.java import run_java_main
from tests.support.kafka_cluster import KafkaCluster, cluster_unavailable_reason
from tests.transactions.test_transactions_cluster import _state_partition
from tests.transactions.test_transactions_mixed import OVERRIDES, STATE, _leaders
from tests.transactions.test_tv2_java import CLIENT

pytestmark = [pytest.mark.interop, pytest.mark.java]

RECORDS = 45


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaCluster, str]]:
    reason = cluster_unavailable_reason()
    if reason:
        pytest.skip(reason)
    c = KafkaCluster(tmp_path_factory.mktemp("tv2-mixed"), controller_overrides={"broker.session.timeout.ms": "3000"})
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


def test_java_tv2_between_kafka_and_kbroker(mixed: tuple[KafkaCluster, str], tmp_path: Path) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    c, bootstrap = mixed
    admin = AdminClient({"bootstrap.servers": bootstrap})
    Producer({"bootstrap.servers": bootstrap, "transactional.id": "tv2m-setup"}).init_transactions(60)
    state_leaders = _leaders(admin, STATE, 3)
    coordinators = sorted(set(state_leaders.values()))
    assert 2 in coordinators and {3, 4} & set(coordinators), state_leaders
    for coordinator in (2, next(k for k in coordinators if k != 2)):
        tid = next(t for i in range(1000) if state_leaders[_state_partition(t := f"tv2m{coordinator}-{i}")]
                   == coordinator)
        source, sink = f"tv2m-in-{coordinator}", f"tv2m-out-{coordinator}"
        for f in admin.create_topics([NewTopic(source, 1, 3), NewTopic(sink, 3, 3)]).values():
            f.result(60)
        assert sorted(_leaders(admin, sink, 3).values()) == [2, 3, 4]  # each kind leads a partition
        proc = run_java_main(str(CLIENT), [bootstrap, source, sink, tid, f"g-{tid}", str(RECORDS)], timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
        out = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in proc.stdout.splitlines() if " " in line}
        ends = int(out["ends"])
        assert ends >= 3 and int(out["epoch"]) == ends, (coordinator, out)  # transactions version 2
        assert out["fenced"] == "ProducerFencedException", (coordinator, out)
        assert out["output"] == f"{RECORDS + 1} {RECORDS + 1} exactly-once=true zombie=false fresh=true", \
            (coordinator, out)
        assert out["offset"] == str(RECORDS), (coordinator, out)
