"""Client quotas against a real kbroker process with real clients.

- `kafka-configs` (Kafka's Java tool) sets, describes and deletes client and user quotas.
- A librdkafka producer limited by `producer_byte_rate` is held near its quota and is told to back off
  (throttle_cb with throttle times > 0); a librdkafka consumer limited by `consumer_byte_rate` likewise.
- KIP-219: a throttled response comes at once, and the connection is then not read for the throttle
  time (a request sent right after waits that long).
- `controller_mutation_rate`: CreateTopics v6 is refused with THROTTLING_QUOTA_EXCEEDED once the bucket
  is empty, v5 is permissive and carries the throttle time.
- `request_percentage`: a client hammering Metadata gets throttle times.

The broker runs with `quota.window.num=4` and `controller.quota.window.num=4` (3 s of history instead of 10) so rates converge within
the few seconds a default-suite test may take; the arithmetic is the same.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.protocol.messages.alter_client_quotas import AlterClientQuotasRequest
from kbroker.protocol.messages.api_versions import ApiVersionsRequest
from kbroker.protocol.messages.create_topics import CreateTopicsRequest
from kbroker.protocol.messages.produce import ProduceRequest
from kbroker.protocol.records import SimpleRecord, build_batch
from tests.metrics.scrape import http_get, undocumented, value
from tests.support.broker import KBroker, free_port
from tests.support.java import java_unavailable_reason, run_java_main
from tests.support.raw_client import RawKafkaClient
from tests.support.reference_kafka import reference_unavailable_reason, start_reference_kafka

pytestmark = [pytest.mark.interop]

RATE = 200_000  # bytes per second
MEASURE_FROM, MEASURE_TO = 3.0, 7.0


HTTP_PORT = free_port()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KBroker]:
    with KBroker(tmp_path_factory.mktemp("quotas"), overrides={
            "quota.window.num": "4", "controller.quota.window.num": "4",
            "kbroker.metrics.listener": f"http://127.0.0.1:{HTTP_PORT}"}) as b:
        yield b


def set_quota(bootstrap: str, entity: list[tuple[str, str | None]], key: str, value: float | None) -> None:
    with RawKafkaClient(bootstrap) as c:
        resp = c.request(49, 1, AlterClientQuotasRequest(entries=[AlterClientQuotasRequest.EntryData(
            entity=[AlterClientQuotasRequest.EntityData(entity_type=t, entity_name=n) for t, n in entity],
            ops=[AlterClientQuotasRequest.OpData(key=key, value=value or 0.0, remove=value is None)])]))
    assert [e.error_code for e in resp.entries] == [0], resp


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def _rate(samples: list[tuple[float, int]], start: float, since: float, until: float) -> float:
    window = [n for t, n in samples if since <= t - start <= until]
    return sum(window) / (until - since)


def run_producer(bootstrap: str, client_id: str, topic: str, duration: float) -> tuple[list[tuple[float, int]],
                                                                                         float, list[float]]:
    """Produce 1 kB values as fast as the broker lets a librdkafka producer: (acks, start, throttles)."""
    throttles: list[float] = []
    acked: list[tuple[float, int]] = []
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                         "batch.size": 16384, "acks": 1,
                         "throttle_cb": lambda e: throttles.append(e.throttle_time)})

    def delivered(err: object, msg: object) -> None:
        if err is None:
            acked.append((time.monotonic(), 1024))

    value = b"x" * 1024
    sent = 0
    start = time.monotonic()
    while time.monotonic() - start < duration:
        # At most 256 kB waiting in the client: the broker, not the client's buffer, sets the pace.
        if sent - len(acked) < 256:
            producer.produce(topic, value, on_delivery=delivered)
            sent += 1
            producer.poll(0)
        else:
            producer.poll(0.005)
    producer.flush(30)
    return acked, start, throttles


def fill_topic(bootstrap: str, topic: str, megabytes: int) -> None:
    # Batches of 16 kB: a batch above the most one window lets through (quota * (num - 1) s) would be
    # throttled and taken back on every fetch, as in Kafka.
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 16384})
    for _ in range(megabytes * 1024):
        producer.produce(topic, b"y" * 1024)
        producer.poll(0)
    assert producer.flush(60) == 0


def run_consumer(bootstrap: str, client_id: str, topic: str, duration: float) -> tuple[list[tuple[float, int]],
                                                                                         float, list[float]]:
    throttles: list[float] = []
    consumed: list[tuple[float, int]] = []
    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id, "group.id": f"{client_id}-g",
                         "enable.auto.commit": False, "throttle_cb": lambda e: throttles.append(e.throttle_time),
                         # Fetches of 64 kB: a fetch as large as a whole window of quota (the broker's cap,
                         # maxValueInQuotaWindow) is followed by a throttle as long as that window.
                         "max.partition.fetch.bytes": 65536})
    consumer.assign([TopicPartition(topic, 0, 0)])
    start = time.monotonic()
    try:
        while time.monotonic() - start < duration:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                consumed.append((time.monotonic(), len(msg.value() or b"")))
    finally:
        consumer.close()
    return consumed, start, throttles


def test_producer_and_consumer_held_to_their_byte_rates(broker: KBroker) -> None:
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "quota-produce")
    create_topic(bootstrap, "quota-fetch")
    fill_topic(bootstrap, "quota-fetch", 3)  # more than the consumer may read meanwhile
    set_quota(bootstrap, [("client-id", "limited-producer")], "producer_byte_rate", RATE)
    set_quota(bootstrap, [("client-id", "limited-consumer")], "consumer_byte_rate", RATE)
    consumer_result: list[tuple[list[tuple[float, int]], float, list[float]]] = []
    reader = threading.Thread(target=lambda: consumer_result.append(
        run_consumer(bootstrap, "limited-consumer", "quota-fetch", MEASURE_TO)))
    reader.start()
    acked, start, p_throttles = run_producer(bootstrap, "limited-producer", "quota-produce", MEASURE_TO)
    reader.join(60)
    consumed, c_start, c_throttles = consumer_result[0]
    p_rate = _rate(acked, start, MEASURE_FROM, MEASURE_TO)
    c_rate = _rate(consumed, c_start, MEASURE_FROM, MEASURE_TO)
    print(f"producer: {p_rate:.0f} B/s, consumer: {c_rate:.0f} B/s (quotas {RATE}); "
          f"throttles {p_throttles[:3]}, {c_throttles[:3]}")
    assert p_throttles and max(p_throttles) > 0
    assert c_throttles and max(c_throttles) > 0
    # Kafka's quota sensors, scraped: the producer's byte rate and throttle time under its client id.
    text = http_get(f"http://127.0.0.1:{HTTP_PORT}/metrics")[1]
    assert not undocumented(text)
    assert value(text, "kafka_server_produce_byte_rate", user="", client_id="limited-producer") > 0
    assert value(text, "kafka_server_produce_throttle_time", user="", client_id="limited-producer") > 0
    assert value(text, "kafka_server_fetch_throttle_time", user="", client_id="limited-consumer") > 0
    # Values only (the quota counts whole requests); a few seconds of measurement: loose bounds here,
    # the slow test holds a minute to 10 %.
    assert 0.6 * RATE <= p_rate <= 1.25 * RATE
    assert 0.6 * RATE <= c_rate <= 1.25 * RATE


@pytest.mark.slow
@pytest.mark.parametrize("server", ["kbroker", "kafka"])
def test_producer_held_within_ten_percent_over_a_minute(server: str, tmp_path: Path) -> None:
    """The issue's proof: N bytes/s held within 10 % over a minute, Kafka's default 11 x 1 s windows;
    the same test against the reference Kafka 4.3.1."""
    rate = 500_000
    if server == "kafka":
        reason = reference_unavailable_reason()
        if reason:
            pytest.skip(reason)
        port = free_port()
        _, stop = start_reference_kafka(tmp_path / "kafka", port=port)
        bootstrap = f"127.0.0.1:{port}"
    else:
        kb = KBroker(tmp_path / "kbroker").start()
        stop, bootstrap = kb.stop, kb.bootstrap
    try:
        create_topic(bootstrap, "minute")
        set_quota(bootstrap, [("client-id", "minute-producer")], "producer_byte_rate", rate)
        acked, start, throttles = run_producer(bootstrap, "minute-producer", "minute", 75)
    finally:
        stop()
    measured = _rate(acked, start, 15, 75)
    print(f"{server}: {measured:.0f} B/s of values over a minute with producer_byte_rate={rate}")
    assert throttles and max(throttles) > 0
    assert 0.9 * rate <= measured <= 1.1 * rate


def _consume_a_minute(bootstrap: str, rate: int) -> tuple[float, list[float]]:
    create_topic(bootstrap, "minute-fetch")
    fill_topic(bootstrap, "minute-fetch", 16)
    set_quota(bootstrap, [("client-id", "minute-consumer")], "consumer_byte_rate", rate)
    consumed, start, throttles = run_consumer(bootstrap, "minute-consumer", "minute-fetch", 75)
    return _rate(consumed, start, 15, 75), throttles


@pytest.mark.slow
def test_consumer_over_a_minute_as_kafka(tmp_path: Path) -> None:
    """The consumer side, against the reference Kafka 4.3.1 too. A librdkafka consumer under a
    consumer_byte_rate quota settles below it on Kafka as well (each throttled fetch answers empty
    and costs the client the throttle time): measured 174 kB/s on Kafka and 169 kB/s on kbroker for
    200 kB/s. So: kbroker within 5 % of the quota of what Kafka gives, both at most the quota + 10 %."""
    reason = reference_unavailable_reason()
    if reason:
        pytest.skip(reason)
    rate = 200_000
    port = free_port()
    _, stop = start_reference_kafka(tmp_path / "kafka", port=port)
    try:
        kafka, kafka_throttles = _consume_a_minute(f"127.0.0.1:{port}", rate)
    finally:
        stop()
    with KBroker(tmp_path / "kbroker") as kb:
        ours, throttles = _consume_a_minute(kb.bootstrap, rate)
    print(f"consumer over a minute, consumer_byte_rate={rate}: kafka {kafka:.0f} B/s, kbroker {ours:.0f} B/s")
    assert throttles and max(throttles) > 0 and kafka_throttles and max(kafka_throttles) > 0
    assert ours <= 1.1 * rate and kafka <= 1.1 * rate
    assert abs(ours - kafka) <= 0.05 * rate


def test_throttled_connection_is_muted_for_the_throttle_time(broker: KBroker) -> None:
    """KIP-219: the throttled response comes at once; the next request on that connection waits."""
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "quota-mute")
    set_quota(bootstrap, [("client-id", "muted")], "producer_byte_rate", 10_000)
    batch = bytes(build_batch([SimpleRecord(value=b"z" * 60_000)]))
    req = ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name="quota-mute", partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=batch)])])
    with RawKafkaClient(bootstrap, client_id="muted") as c:
        t0 = time.monotonic()
        resp = c.request(0, 11, req)
        answered = time.monotonic() - t0
        assert resp.responses[0].partition_responses[0].error_code == 0
        # 60 kB against 10 kB/s over a 3 s minimum window: (20 000 - 10 000) / 10 000 * 3 s = 3 s.
        assert resp.throttle_time_ms >= 2000, resp.throttle_time_ms
        assert answered < 1.0
        t1 = time.monotonic()
        c.request(18, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        waited = time.monotonic() - t1
    assert waited >= resp.throttle_time_ms / 1000 - 0.1, (waited, resp.throttle_time_ms)


def test_controller_mutation_rate_strict_and_permissive(broker: KBroker) -> None:
    bootstrap = broker.bootstrap
    set_quota(bootstrap, [("client-id", "mutator")], "controller_mutation_rate", 1.0)

    def create(name: str, version: int) -> tuple[int, str | None, int]:
        with RawKafkaClient(bootstrap, client_id="mutator") as c:
            resp = c.request(19, version, CreateTopicsRequest(timeout_ms=10_000, topics=[
                CreateTopicsRequest.CreatableTopic(name=name, num_partitions=10, replication_factor=1)]))
        (t,) = resp.topics
        return t.error_code, t.error_message, resp.throttle_time_ms

    # Burst: 1 partition/s * 4 windows of 1 s = 4 tokens; the first request may take them below zero.
    assert create("mut-1", 7)[0] == 0
    code, message, throttle = create("mut-2", 7)
    assert (code, message) == (89, "The throttling quota has been exceeded.")
    assert 4000 <= throttle <= 6000  # 4 - 10 = -6 tokens, refilled at 1/s
    code, _, throttle = create("mut-3", 5)  # permissive below v6: created, told to back off
    assert code == 0 and throttle > 0


def test_request_percentage_throttles_a_busy_client(broker: KBroker) -> None:
    bootstrap = broker.bootstrap
    set_quota(bootstrap, [("client-id", "busy")], "request_percentage", 0.01)
    throttle = 0
    with RawKafkaClient(bootstrap, client_id="busy") as c:
        deadline = time.monotonic() + 10
        while throttle == 0 and time.monotonic() < deadline:
            throttle = c.request(18, 3, ApiVersionsRequest(client_software_name="t",
                                                           client_software_version="1")).throttle_time_ms
    # 0.01 % of the loop is 0.1 ms per second: a few requests exceed it; the throttle is at most a window.
    assert 0 < throttle <= 1000


def test_kafka_configs_round_trip(broker: KBroker) -> None:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    b = ["--bootstrap-server", broker.bootstrap]
    r = run_java_main("kafka-configs", [*b, "--alter", "--entity-type", "clients", "--entity-name", "x",
                                        "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048"],
                      timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Completed updating config for client x." in r.stdout, r.stdout
    r = run_java_main("kafka-configs", [*b, "--describe", "--entity-type", "clients", "--entity-name", "x"],
                      timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Quota configs for client-id 'x' are consumer_byte_rate=2048.0, producer_byte_rate=1024.0" in r.stdout, r.stdout


@pytest.mark.slow
def test_kafka_configs_defaults_and_delete(broker: KBroker) -> None:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    b = ["--bootstrap-server", broker.bootstrap]
    r = run_java_main("kafka-configs", [*b, "--alter", "--entity-type", "users", "--entity-default",
                                        "--entity-type", "clients", "--entity-default",
                                        "--add-config", "request_percentage=200"], timeout=120)
    assert r.returncode == 0, r.stderr
    r = run_java_main("kafka-configs", [*b, "--alter", "--entity-type", "users", "--entity-name", "alice",
                                        "--add-config", "producer_byte_rate=4096"], timeout=120)
    assert r.returncode == 0, r.stderr
    r = run_java_main("kafka-configs", [*b, "--alter", "--entity-type", "users", "--entity-name", "alice",
                                        "--delete-config", "producer_byte_rate"], timeout=120)
    assert r.returncode == 0, r.stderr
    r = run_java_main("kafka-configs", [*b, "--describe", "--entity-type", "users", "--entity-type", "clients"],
                      timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Quota configs for the default user-principal, the default client-id are request_percentage=200.0" \
        in r.stdout, r.stdout
    r = run_java_main("kafka-configs", [*b, "--describe", "--entity-type", "users"], timeout=120)
    assert r.returncode == 0, r.stderr
    assert "alice" not in r.stdout, r.stdout
