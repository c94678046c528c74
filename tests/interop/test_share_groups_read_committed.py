"""`share.isolation.level=read_committed` (a share group's config, Kafka 4.3.1): share consumers get only
committed records; the records of aborted transactions are archived by the share-partition, never
delivered; read_uncommitted (the default) delivers them.

A real kbroker process; confluent-kafka's transactional Producer writes a committed, an aborted and a
committed transaction; two share groups (one per isolation level, both `share.auto.offset.reset=
earliest`, set with IncrementalAlterConfigs on the GROUP resource) read the topic with confluent-kafka's
`ShareConsumer`.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest
from tests.support.broker import KBroker
from tests.support.raw_client import RawKafkaClient

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KBroker]:
    b = KBroker(tmp_path_factory.mktemp("share-rc"), {})
    b.start()
    try:
        yield b
    finally:
        b.stop()


def _group_configs(broker: KBroker, group: str, configs: dict[str, str]) -> None:
    Q = IncrementalAlterConfigsRequest
    with RawKafkaClient(broker.bootstrap) as c:
        r = c.request(44, 1, Q(resources=[Q.AlterConfigsResource(resource_type=32, resource_name=group, configs=[
            Q.AlterableConfig(name=k, config_operation=0, value=v) for k, v in configs.items()])]))
    assert r.responses[0].error_code == 0, r.responses[0]


def _consume(broker: KBroker, topic: str, group: str, expected: int, timeout: float = 30) -> list[bytes]:
    c = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    got: list[bytes] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + timeout
        quiet_until = None
        while time.monotonic() < deadline:
            msgs = c.poll(0.3)
            for m in msgs:
                assert m.error() is None, m.error()
                got.append(m.value())
            if len(got) >= expected:
                quiet_until = quiet_until or time.monotonic() + 2  # nothing more should come
                if time.monotonic() >= quiet_until:
                    break
    finally:
        c.close()
    return got


def test_read_committed_share_group_skips_aborted_records(broker: KBroker) -> None:
    topic = f"txn-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(30)
    for name, commit in (("c1", True), ("a", False), ("c2", True)):
        producer.begin_transaction()
        for i in range(5):
            producer.produce(topic, value=f"{name}-{i}".encode(), partition=0)
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    committed = {f"{n}-{i}".encode() for n in ("c1", "c2") for i in range(5)}
    aborted = {f"a-{i}".encode() for i in range(5)}

    rc, ru = f"rc-{topic}", f"ru-{topic}"
    _group_configs(broker, rc, {"share.auto.offset.reset": "earliest", "share.isolation.level": "read_committed"})
    _group_configs(broker, ru, {"share.auto.offset.reset": "earliest"})

    got_rc = _consume(broker, topic, rc, len(committed))
    assert Counter(got_rc) == Counter(committed)  # each committed record once, no aborted one
    got_ru = _consume(broker, topic, ru, len(committed) + len(aborted))
    assert Counter(got_ru) == Counter(committed | aborted)  # read_uncommitted delivers the aborted ones too
