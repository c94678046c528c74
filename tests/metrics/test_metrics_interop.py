"""A real broker process, a real client (confluent-kafka): the scraped counters match what was produced.

The producer sends N records of a fixed size to one topic; BytesIn must grow by exactly the bytes of
the batches the broker appended (what the log grew by: kafka_log_log_size), MessagesIn by N, and a
consumer reading them back makes BytesOut reach the same figure. The request metrics count the
Produce requests by version, and the health endpoints answer as documented.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.metrics.scrape import http_get, metrics_broker, samples, undocumented, value

pytestmark = pytest.mark.interop

N = 2000
SIZE = 200


def _create(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]).values():
        f.result(30)


def test_produced_bytes_and_records_are_counted(tmp_path: Path) -> None:
    broker, http = metrics_broker(tmp_path)
    try:
        status, body = http_get(f"{http}/health/ready")
        assert status == 200 and '"status": "UP"' in body and '"broker_state": "RUNNING"' in body
        status, body = http_get(f"{http}/health/live")
        assert status == 200 and "event_loop_lag_ms" in body
        assert http_get(f"{http}/nope")[0] == 404
        assert f"metrics and health on {http}/metrics" in broker.log_text()

        _create(broker.bootstrap, "m1")
        before = http_get(f"{http}/metrics")[1]
        assert ("kafka_server_brokertopicmetrics_bytesin_total", (("topic", "m1"),)) in samples(before)
        assert value(before, "kafka_server_brokertopicmetrics_bytesin_total", topic="m1") == 0

        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5,
                             "compression.type": "none", "acks": "1"})
        for i in range(N):
            producer.produce("m1", value=bytes([i % 251]) * SIZE)
        assert producer.flush(30) == 0

        after = http_get(f"{http}/metrics")[1]
        bytes_in = value(after, "kafka_server_brokertopicmetrics_bytesin_total", topic="m1")
        log_size = value(after, "kafka_log_log_size", topic="m1", partition="0")
        assert bytes_in == log_size  # every appended byte, batch headers included
        assert N * SIZE < bytes_in < N * SIZE * 1.2  # the payload plus per-record and per-batch framing
        assert value(after, "kafka_server_brokertopicmetrics_messagesin_total", topic="m1") == N
        assert value(after, "kafka_log_log_logendoffset", topic="m1", partition="0") == N
        assert value(after, "kafka_log_log_numlogsegments", topic="m1", partition="0") == 1
        # The broker-wide series (no topic label) include this topic.
        assert value(after, "kafka_server_brokertopicmetrics_bytesin_total") >= bytes_in
        produce_requests = sum(v for (name, labels), v in samples(after).items()
                               if name == "kafka_network_requestmetrics_requests_total"
                               and ("request", "Produce") in labels)
        assert produce_requests == value(after, "kafka_server_brokertopicmetrics_totalproducerequests_total",
                                         topic="m1")
        assert produce_requests >= 1
        assert value(after, "kafka_network_requestmetrics_totaltimems_count", request="Produce") == produce_requests
        assert value(after, "kafka_server_socket_server_metrics_connection_count", listener="PLAINTEXT") >= 1

        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "metrics-g",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.assign([TopicPartition("m1", 0, 0)])
        got = 0
        deadline = time.monotonic() + 30
        while got < N and time.monotonic() < deadline:
            for m in consumer.consume(500, 1.0):
                assert m.error() is None
                got += 1
        assert got == N
        consumer.commit(offsets=[TopicPartition("m1", 0, N // 2)], asynchronous=False)
        consumer.close()
        final = http_get(f"{http}/metrics")[1]
        assert value(final, "kafka_server_brokertopicmetrics_bytesout_total", topic="m1") == bytes_in
        assert value(final, "kafka_consumergroup_current_offset", consumergroup="metrics-g", topic="m1",
                     partition="0") == N // 2
        assert value(final, "kafka_consumergroup_lag", consumergroup="metrics-g", topic="m1",
                     partition="0") == N - N // 2
        fetch = sum(v for (name, labels), v in samples(final).items()
                    if name == "kafka_network_requestmetrics_requests_total" and ("request", "Fetch") in labels)
        assert fetch >= 1
        missing = undocumented(final)  # every name of a real broker's scrape is in docs/operations.md
        assert not missing, f"not in docs/operations.md, Metrics: {missing}"

        # Deleting the topic removes its series (Kafka's removeMetrics); the broker-wide counter keeps its bytes.
        total = value(final, "kafka_server_brokertopicmetrics_bytesin_total")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.delete_topics(["m1"]).values():
            f.result(30)
        deadline = time.monotonic() + 10
        while True:
            gone = http_get(f"{http}/metrics")[1]
            if ("kafka_log_log_size", (("partition", "0"), ("topic", "m1"))) not in samples(gone):
                break
            assert time.monotonic() < deadline, "the deleted topic's log is still reported"
            time.sleep(0.1)
        assert ("kafka_server_brokertopicmetrics_bytesin_total", (("topic", "m1"),)) not in samples(gone)
        assert value(gone, "kafka_server_brokertopicmetrics_bytesin_total") >= total
    finally:
        assert broker.stop() == 0, broker.log_text()


def test_metrics_off_records_nothing_but_still_serves_health(tmp_path: Path) -> None:
    broker, http = metrics_broker(tmp_path, **{"kbroker.metrics.enable": "false"})
    try:
        _create(broker.bootstrap, "m2")
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce("m2", value=b"x" * 100)
        assert producer.flush(30) == 0
        assert http_get(f"{http}/health/ready")[0] == 200
        text = http_get(f"{http}/metrics")[1]
        assert not any(name == "kafka_network_requestmetrics_requests_total" for name, _ in samples(text))
        assert ("kafka_server_brokertopicmetrics_bytesin_total", (("topic", "m2"),)) not in samples(text)
        assert value(text, "kafka_log_log_size", topic="m2", partition="0") > 100  # collect-time gauges stay
    finally:
        assert broker.stop() == 0, broker.log_text()


def test_a_taken_metrics_port_is_a_one_line_startup_error(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        from tests.support.broker import KBroker, KBrokerError

        broker = KBroker(tmp_path, {"kbroker.metrics.listener": f"http://127.0.0.1:{port}"})
        with pytest.raises(KBrokerError, match="Cannot listen on kbroker.metrics.listener"):
            broker.start(timeout=20)
        broker.kill()
        assert not broker.log_dir.exists()  # refused before the data directory was created
    bad = KBroker(tmp_path / "bad", {"kbroker.metrics.listener": "tcp://nowhere"})
    with pytest.raises(KBrokerError, match="kbroker.metrics.listener: expected http://host:port"):
        bad.start(timeout=20)
    bad.kill()
    assert not (tmp_path / "bad" / "data").exists()  # refused before anything was written
