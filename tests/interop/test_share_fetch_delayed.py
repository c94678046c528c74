"""A ShareFetch with nothing to acquire waits (Kafka's DelayedShareFetch), against a real kbroker process.

Raw ShareFetch v2 requests (kbroker's codecs over a socket) and a confluent-kafka producer:

- on an empty share-partition a fetch with MaxWaitMs 500 answers after about 500 ms, empty;
- a record produced during a 10 s wait completes the fetch at once with the record;
- a record RELEASEd by another member completes a waiting fetch at once (delivery count 2);
- an acquisition lock expiring (lock duration 2 s, its minimum lowered too, as Kafka requires) completes
  a waiting fetch of another member with the record (delivery count 2) at about the lock's deadline;
- MinBytes above what is there keeps the fetch waiting until MaxWaitMs, then it answers what it acquired.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from kbroker.protocol.messages.create_topics import CreateTopicsRequest as CT
from kbroker.protocol.messages.find_coordinator import FindCoordinatorRequest
from kbroker.protocol.messages.metadata import MetadataRequest
from kbroker.protocol.messages.share_acknowledge import ShareAcknowledgeRequest as A
from kbroker.protocol.messages.share_fetch import ShareFetchRequest as F
from kbroker.protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest as H
from tests.support.broker import KBroker
from tests.support.raw_client import RawKafkaClient

pytestmark = pytest.mark.interop

LOCK_MS = 2000
ACCEPT, RELEASE = 1, 2


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KBroker]:
    b = KBroker(tmp_path_factory.mktemp("share-delayed"), {
        "group.share.min.record.lock.duration.ms": "1000",
        "group.share.record.lock.duration.ms": str(LOCK_MS),
    })
    b.start()
    try:
        yield b
    finally:
        b.stop()


class Member:
    """One share-group member speaking raw ShareFetch / ShareAcknowledge on its own connection."""

    def __init__(self, bootstrap: str, group: str, topic: str, tid: Any) -> None:
        self.client = RawKafkaClient(bootstrap)
        self.group, self.topic, self.tid = group, topic, tid
        self.member_id = uuid.uuid4().hex[:22]
        self.epoch = 0
        deadline = time.monotonic() + 60
        while True:  # __consumer_offsets is created by the first FindCoordinator, then loaded
            found = [x.error_code for x in self.client.request(
                10, 6, FindCoordinatorRequest(key_type=0, coordinator_keys=[group])).coordinators]
            hb = self.client.request(76, 1, H(group_id=group, member_id=self.member_id, member_epoch=0,
                                              subscribed_topic_names=[topic]))
            if (found == [0] and hb.error_code == 0) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert hb.error_code == 0, hb

    def fetch(self, wait_ms: int, min_bytes: int = 1,
              acks: list[tuple[int, int, int]] | None = None) -> tuple[float, list[tuple[int, int, int]]]:
        batches = [F.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=[t])
                   for f, last, t in acks or []]
        start = time.monotonic()
        r = self.client.request(78, 2, F(
            group_id=self.group, member_id=self.member_id, share_session_epoch=self.epoch, max_wait_ms=wait_ms,
            min_bytes=min_bytes, max_bytes=1 << 20, max_records=100, batch_size=100, share_acquire_mode=1,
            topics=[F.FetchTopic(topic_id=self.tid, partitions=[
                F.FetchPartition(partition_index=0, acknowledgement_batches=batches)])]))
        elapsed = time.monotonic() - start
        assert r.error_code == 0, r
        self.epoch += 1
        return elapsed, [(a.first_offset, a.last_offset, a.delivery_count)
                         for t in r.responses for p in t.partitions for a in p.acquired_records]

    def acknowledge(self, first: int, last: int, kind: int) -> None:
        r = self.client.request(79, 2, A(group_id=self.group, member_id=self.member_id,
                                         share_session_epoch=self.epoch, topics=[
            A.AcknowledgeTopic(topic_id=self.tid, partitions=[A.AcknowledgePartition(partition_index=0,
                acknowledgement_batches=[A.AcknowledgementBatch(first_offset=first, last_offset=last,
                                                                acknowledge_types=[kind])])])]))
        assert r.error_code == 0 and all(p.error_code == 0 for t in r.responses for p in t.partitions), r
        self.epoch += 1

    def close(self) -> None:
        self.client.close()


def _setup(broker: KBroker, members: int) -> tuple[str, list[Member]]:
    topic, group = f"delayed-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    with RawKafkaClient(broker.bootstrap) as c:
        r = c.request(19, 7, CT(topics=[CT.CreatableTopic(name=topic, num_partitions=1, replication_factor=1,
                                                          assignments=[], configs=[])], timeout_ms=30000))
        assert r.topics[0].error_code == 0, r
        tid = c.request(3, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)])
                        ).topics[0].topic_id
    ms = [Member(broker.bootstrap, group, topic, tid) for _ in range(members)]
    for m in ms:
        m.fetch(0)  # opens the share session
    # The share-partition starts at the end of the log (latest) once __share_group_state is loaded:
    # a marker record acquired (and accepted) says it is initialized.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        _produce_later(broker, topic, 0).join()
        _elapsed, acquired = ms[0].fetch(1000)
        if acquired:
            ms[0].acknowledge(acquired[0][0], acquired[-1][1], ACCEPT)
            return topic, ms
    raise AssertionError("the share-partition was never initialized")


def _produce_later(broker: KBroker, topic: str, delay_s: float) -> threading.Thread:
    def run() -> None:
        time.sleep(delay_s)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        producer.produce(topic, value=b"late", partition=0)
        producer.flush(10)

    t = threading.Thread(target=run)
    t.start()
    return t


def test_empty_partition_waits_max_wait(broker: KBroker) -> None:
    _topic, (m,) = _setup(broker, 1)
    try:
        elapsed, acquired = m.fetch(500)
        assert acquired == []
        assert 0.45 <= elapsed < 2.0, elapsed
        elapsed, acquired = m.fetch(0)
        assert acquired == [] and elapsed < 0.4, elapsed
    finally:
        m.close()


def test_produce_completes_waiting_fetch_early(broker: KBroker) -> None:
    topic, (m,) = _setup(broker, 1)
    try:
        producer = _produce_later(broker, topic, 0.5)
        elapsed, acquired = m.fetch(10_000)
        producer.join()
        assert [(d) for _f, _l, d in acquired] == [1], acquired
        assert elapsed < 5.0, elapsed  # answered by the append, far before MaxWaitMs
    finally:
        m.close()


def test_release_completes_waiting_fetch_of_another_member(broker: KBroker) -> None:
    topic, (a, b) = _setup(broker, 2)
    try:
        _produce_later(broker, topic, 0).join()
        _elapsed, acquired = a.fetch(5000)
        assert len(acquired) == 1 and acquired[0][2] == 1, acquired
        offset = acquired[0][0]
        timer = threading.Timer(0.5, a.acknowledge, (offset, offset, RELEASE))
        timer.start()
        elapsed, got = b.fetch(10_000)
        timer.join()
        assert got == [(offset, offset, 2)], got
        assert 0.4 <= elapsed < 5.0, elapsed
    finally:
        a.close()
        b.close()


def test_lock_expiry_completes_waiting_fetch(broker: KBroker) -> None:
    topic, (a, b) = _setup(broker, 2)
    try:
        _produce_later(broker, topic, 0).join()
        _elapsed, acquired = a.fetch(5000)
        assert len(acquired) == 1, acquired
        acquired_at = time.monotonic()
        offset = acquired[0][0]
        _elapsed, got = b.fetch(15_000)
        waited = time.monotonic() - acquired_at
        assert got == [(offset, offset, 2)], got
        assert LOCK_MS / 1000 - 0.3 <= waited < LOCK_MS / 1000 + 3.0, waited
    finally:
        a.close()
        b.close()


def test_min_bytes_waits_then_answers_what_is_there(broker: KBroker) -> None:
    topic, (m,) = _setup(broker, 1)
    try:
        _produce_later(broker, topic, 0).join()
        elapsed, acquired = m.fetch(1500, min_bytes=1 << 20)
        assert 1.4 <= elapsed < 4.0, elapsed
        assert len(acquired) == 1 and acquired[0][2] == 1, acquired
    finally:
        m.close()
