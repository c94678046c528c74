"""Bounds on the work one admin request creates (issue 19, finding 4), against a real kbroker.

- Kafka 4.3's controller refuses a CreateTopics whose partitions add up to more than
  MAX_RECORDS_PER_USER_OP (10,000) with POLICY_VIOLATION "Excessively large number of partitions per
  request." for every topic, and a CreatePartitions that adds more than that fails the topic that
  crosses it with UNKNOWN_SERVER_ERROR (both answers observed on Kafka 4.3.1).
- `kbroker.max.partitions` bounds the partitions the broker hosts (Kafka has no such bound).
- A large but allowed creation does not hold the loop: a well-behaved client keeps getting answers
  while thousands of partitions are hosted, the partitions not hosted yet answer
  NOT_LEADER_OR_FOLLOWER (retriable), and every partition is eventually writable.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.protocol import API_SPECS
from kbroker.protocol.records import SimpleRecord, build_batch
from tests.support.broker import KBroker
from tests.support.raw_client import RawKafkaClient

pytestmark = pytest.mark.interop

POLICY_VIOLATION = 44
UNKNOWN_SERVER_ERROR = -1
NOT_LEADER_OR_FOLLOWER = 6
EXCESSIVE = "Excessively large number of partitions per request."

CT = API_SPECS[19].request_class
CP = API_SPECS[37].request_class
PR = API_SPECS[0].request_class


def create_topics(client: RawKafkaClient, topics: dict[str, int]) -> Any:
    return client.request(19, 7, CT(topics=[
        CT.CreatableTopic(name=n, num_partitions=p, replication_factor=1, assignments=[], configs=[])
        for n, p in topics.items()], timeout_ms=30000, validate_only=False))


def create_partitions(client: RawKafkaClient, counts: dict[str, int]) -> Any:
    return client.request(37, 3, CP(topics=[CP.CreatePartitionsTopic(name=n, count=c, assignments=None)
                                            for n, c in counts.items()], timeout_ms=30000, validate_only=False))


def partition_count(client: RawKafkaClient, topic: str) -> int:
    md = client.request(3, 12, API_SPECS[3].request_class(
        topics=[API_SPECS[3].request_class.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False))
    return len(md.topics[0].partitions)


def produce_one(client: RawKafkaClient, topic: str, partition: int) -> int:
    records = bytes(build_batch([SimpleRecord(b"v", b"k", -1)]))
    resp = client.request(0, 9, PR(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        PR.TopicProduceData(name=topic, partition_data=[PR.PartitionProduceData(index=partition, records=records)])]))
    return int(resp.responses[0].partition_responses[0].error_code)


def test_create_topics_above_kafkas_per_request_limit_is_refused_as_a_whole(kbroker: KBroker) -> None:
    with RawKafkaClient(kbroker.bootstrap) as c:
        resp = create_topics(c, {"huge": 10001})
        (t,) = resp.topics
        assert (t.error_code, t.error_message, t.num_partitions) == (POLICY_VIOLATION, EXCESSIVE, -1)
        # Counted over the request: two topics of 6,000 are refused together, neither is created.
        resp = create_topics(c, {"half-a": 6000, "half-b": 6000})
        assert [(t.name, t.error_code, t.error_message) for t in resp.topics] == [
            ("half-a", POLICY_VIOLATION, EXCESSIVE), ("half-b", POLICY_VIOLATION, EXCESSIVE)]
        assert partition_count(c, "half-a") == 0
    # A stock admin client reports it at once, with Kafka's words.
    admin = AdminClient({"bootstrap.servers": kbroker.bootstrap})
    started = time.monotonic()
    future = admin.create_topics([NewTopic("huge", 100_000, 1)], request_timeout=30)["huge"]
    with pytest.raises(KafkaException, match="Excessively large number of partitions"):
        future.result(timeout=30)
    assert time.monotonic() - started < 10


def test_create_partitions_above_the_limit_fails_the_topic_that_crosses_it(kbroker: KBroker) -> None:
    with RawKafkaClient(kbroker.bootstrap) as c:
        assert create_topics(c, {"a": 1, "b": 1}).topics[0].error_code == 0
        resp = create_partitions(c, {"a": 10002})
        assert [(r.name, r.error_code, r.error_message) for r in resp.results] == [("a", UNKNOWN_SERVER_ERROR, None)]
        assert partition_count(c, "a") == 1
        # Counted across the request's topics: 5 + 9,999 added > 10,000, the second topic fails.
        resp = create_partitions(c, {"a": 6, "b": 10000})
        assert [(r.name, r.error_code) for r in resp.results] == [("a", 0), ("b", UNKNOWN_SERVER_ERROR)]
        assert (partition_count(c, "a"), partition_count(c, "b")) == (6, 1)


def test_kbroker_max_partitions_bounds_the_partitions_hosted(kbroker_factory: Callable[..., KBroker]) -> None:
    broker = kbroker_factory(kbroker_max_partitions=20)
    with RawKafkaClient(broker.bootstrap) as c:
        assert create_topics(c, {"first": 15}).topics[0].error_code == 0
        (t,) = create_topics(c, {"second": 6}).topics
        assert t.error_code == POLICY_VIOLATION
        assert "kbroker.max.partitions" in t.error_message and "hosts 15" in t.error_message
        assert create_topics(c, {"second": 5}).topics[0].error_code == 0
        (r,) = create_partitions(c, {"second": 6}).results
        assert r.error_code == POLICY_VIOLATION and "kbroker.max.partitions" in r.error_message
        assert partition_count(c, "second") == 5


def test_a_large_creation_does_not_stop_other_clients(kbroker: KBroker) -> None:
    """2,000 partitions took about 25 s of loop time when hosted in one go (no one else answered);
    hosted in chunks, a client pinging every 10 ms keeps getting answers.

    The pings counted are those from the CreateTopics to the last partition becoming writable; how many
    there are depends on how long hosting takes (about 7 s here now, longer on a loaded machine), so the bound on their number
    is relative to that window, not a fixed count: a stalled loop shows as few pings in a long window."""
    latencies: list[float] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def ping() -> None:
        try:
            with RawKafkaClient(kbroker.bootstrap, timeout=30) as c:
                body = API_SPECS[18].request_class(client_software_name="ping", client_software_version="1")
                while not stop.is_set():
                    t = time.monotonic()
                    c.request(18, 3, body)
                    latencies.append(time.monotonic() - t)
                    time.sleep(0.01)
        except BaseException as e:  # noqa: BLE001 - reported by the test body
            errors.append(e)

    pinger = threading.Thread(target=ping)
    pinger.start()
    try:
        time.sleep(0.3)
        with RawKafkaClient(kbroker.bootstrap, timeout=60) as c:
            before = len(latencies)
            started = time.monotonic()
            (t,) = create_topics(c, {"large": 2000}).topics
            answered_in = time.monotonic() - started
            assert t.error_code == 0
            # The last partitions are not hosted yet: a retriable error, as a Kafka broker catching up.
            assert produce_one(c, "large", 1999) == NOT_LEADER_OR_FOLLOWER
            deadline = time.monotonic() + 180
            while produce_one(c, "large", 1999) != 0:
                assert time.monotonic() < deadline, "partition 1999 never became writable"
                time.sleep(0.2)
            window = time.monotonic() - started
            assert produce_one(c, "large", 0) == 0
    finally:
        stop.set()
        pinger.join()
    assert not errors, errors
    assert answered_in < 5
    hosted = sorted(latencies[before:])
    # A ping takes 10 ms of sleep plus its round trip, about 45% of the ideal rate was seen on a quiet
    # machine (the test's own threads share the GIL); a sixth of the ideal count leaves room for a loaded
    # one. A loop held for seconds also shows in the latency bounds below.
    assert len(hosted) >= max(20, int(window / 0.0105 / 6)), (len(hosted), window)
    # Generous bounds for a shared 2-core machine; before the fix the pinger waited the whole ~25 s.
    assert hosted[-1] < 2.0, hosted[-5:]
    assert hosted[int(len(hosted) * 0.99)] < 0.5, hosted[-20:]
