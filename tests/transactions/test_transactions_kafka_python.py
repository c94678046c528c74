"""kafka-python's transactional producer against a real kbroker process: a committed and an aborted
transaction, read back by a read_committed kafka-python consumer."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tests.support.broker import KBroker

pytestmark = pytest.mark.interop


def test_kafka_python_transactions(kbroker: KBroker) -> None:
    admin = AdminClient({"bootstrap.servers": kbroker.bootstrap})
    admin.create_topics([NewTopic("kp-txn", 1, 1)])["kp-txn"].result(15)
    producer = KafkaProducer(bootstrap_servers=kbroker.bootstrap, transactional_id="kp-tid")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("kp-txn", b"committed-1")
    producer.send("kp-txn", b"committed-2")
    producer.commit_transaction()
    producer.begin_transaction()
    producer.send("kp-txn", b"aborted")
    producer.flush()
    producer.abort_transaction()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=kbroker.bootstrap, isolation_level="read_committed",
                             auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=5000)
    tp = TopicPartition("kp-txn", 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    values = [m.value for m in consumer]
    assert consumer.end_offsets([tp])[tp] == 5  # 3 data records + 2 markers; no open transaction
    consumer.close()
    assert values == [b"committed-1", b"committed-2"]
