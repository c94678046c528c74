"""Differential test: one scripted sequence of share-group requests against Kafka 4.3.1 and kbroker.

Raw requests (kbroker's codecs, `tests/support/raw_client.py`), so every field is compared as sent:
a member joins a share group (ShareGroupHeartbeat), opens a share session until the share-partition is
initialized (DescribeShareGroupOffsets shows a start offset), ten records are produced (one batch each),
then ShareFetch v2 in record_limit mode acquires them four at a time while acknowledging (ACCEPT,
RELEASE, REJECT), ShareAcknowledge repeats an acknowledgement, stale and unknown sessions are tried,
and the start offset and lag are read back. The acquired ranges, delivery counts and every error code
must be Kafka's.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from kbroker.protocol.messages.create_topics import CreateTopicsRequest as CT
from kbroker.protocol.messages.describe_share_group_offsets import DescribeShareGroupOffsetsRequest as D
from kbroker.protocol.messages.find_coordinator import FindCoordinatorRequest
from kbroker.protocol.messages.metadata import MetadataRequest
from kbroker.protocol.messages.share_acknowledge import ShareAcknowledgeRequest as A
from kbroker.protocol.messages.share_fetch import ShareFetchRequest as F
from kbroker.protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest as H
from tests.support.raw_client import RawKafkaClient
from tests.support.reference_kafka import reference_unavailable_reason, start_reference_kafka

pytestmark = [pytest.mark.reference, pytest.mark.interop]

TOPIC, GROUP, MEMBER = "share-diff", "share-diff-group", "member-one-000000000"
ACCEPT, RELEASE, REJECT = 1, 2, 3


def _fetch(c: RawKafkaClient, epoch: int, tid: Any, acks: list[tuple[int, int, int]] | None = None,
           max_records: int = 4, wait_ms: int = 3000, member: str = MEMBER) -> tuple[Any, ...]:
    batches = [F.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=[t]) for f, last, t in acks or []]
    r = c.request(78, 2, F(group_id=GROUP, member_id=member, share_session_epoch=epoch, max_wait_ms=wait_ms,
                           min_bytes=1, max_bytes=1 << 20, max_records=max_records, batch_size=max_records,
                           share_acquire_mode=1,
                           topics=[F.FetchTopic(topic_id=tid, partitions=[
                               F.FetchPartition(partition_index=0, acknowledgement_batches=batches)])]))
    parts = [(p.partition_index, p.error_code, p.acknowledge_error_code,
              [(a.first_offset, a.last_offset, a.delivery_count) for a in p.acquired_records])
             for t in r.responses for p in t.partitions]
    return r.error_code, parts


def _offsets(c: RawKafkaClient) -> list[tuple[int, int, int, int]]:
    r = c.request(90, 1, D(groups=[D.DescribeShareGroupOffsetsRequestGroup(group_id=GROUP, topics=[
        D.DescribeShareGroupOffsetsRequestTopic(topic_name=TOPIC, partitions=[0])])]))
    return [(g.error_code, p.partition_index, p.start_offset, p.lag) for g in r.groups for t in g.topics
            for p in t.partitions]


def scenario(bootstrap: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with RawKafkaClient(bootstrap) as c:
        c.request(19, 7, CT(topics=[CT.CreatableTopic(name=TOPIC, num_partitions=1, replication_factor=1,
                                                      assignments=[], configs=[])], timeout_ms=30000))
        deadline = time.monotonic() + 60
        while True:  # __consumer_offsets is created by the first FindCoordinator, then loaded
            found = [x.error_code for x in c.request(
                10, 6, FindCoordinatorRequest(key_type=0, coordinator_keys=[GROUP])).coordinators]
            hb = c.request(76, 1, H(group_id=GROUP, member_id=MEMBER, member_epoch=0, subscribed_topic_names=[TOPIC]))
            if (found == [0] and hb.error_code == 0) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        out["find_coordinator"] = found
        tid = c.request(3, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)])).topics[0].topic_id
        out["join"] = (hb.error_code, hb.member_epoch > 0, hb.heartbeat_interval_ms)
        out["unknown_member"] = c.request(76, 1, H(group_id=GROUP, member_id="nobody-000000000000", member_epoch=3)).error_code
        out["fenced_epoch"] = c.request(76, 1, H(group_id=GROUP, member_id=MEMBER, member_epoch=hb.member_epoch + 5)).error_code
        # The share-partition is initialized (latest) by the first fetches; Kafka's DescribeShareGroupOffsets
        # shows no start offset until a state write, so readiness is a marker record acquired.
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        base, deadline = -1, time.monotonic() + 60
        _fetch(c, 0, tid, wait_ms=0)
        epoch = 1
        while base < 0 and time.monotonic() < deadline:
            producer.produce(TOPIC, value=b"marker", partition=0)
            producer.flush(10)
            _e, parts = _fetch(c, epoch, tid, wait_ms=1000)
            epoch += 1
            acquired = [r for _p, _err, _ack, ranges in parts for r in ranges]
            if acquired:
                base = acquired[-1][1] + 1
                _fetch(c, epoch, tid, [(acquired[0][0], acquired[-1][1], ACCEPT)], wait_ms=0)
                epoch += 1
        assert base >= 0, "the share-partition was never initialized"

        def rel(result: tuple[Any, ...]) -> tuple[Any, ...]:
            error, parts = result
            return error, [(p, e, a, [(f - base, last - base, d) for f, last, d in ranges]) for p, e, a, ranges in parts]

        def acks(*batches: tuple[int, int, int]) -> list[tuple[int, int, int]]:
            return [(f + base, last + base, t) for f, last, t in batches]

        for i in range(10):
            producer.produce(TOPIC, value=b"v%d" % i, partition=0)
            producer.flush(10)
        out["fetch1"] = rel(_fetch(c, epoch, tid))
        out["fetch2"] = rel(_fetch(c, epoch + 1, tid, acks((0, 1, ACCEPT), (2, 2, RELEASE), (3, 3, REJECT))))
        out["fetch3"] = rel(_fetch(c, epoch + 2, tid, acks((4, 7, ACCEPT))))
        r = c.request(79, 1, A(group_id=GROUP, member_id=MEMBER, share_session_epoch=epoch + 3, topics=[
            A.AcknowledgeTopic(topic_id=tid, partitions=[A.AcknowledgePartition(partition_index=0, acknowledgement_batches=[
                A.AcknowledgementBatch(first_offset=base, last_offset=base, acknowledge_types=[ACCEPT])])])]))
        out["ack_again"] = (r.error_code, [p.error_code for t in r.responses for p in t.partitions])
        r = c.request(79, 1, A(group_id=GROUP, member_id=MEMBER, share_session_epoch=epoch + 4, topics=[
            A.AcknowledgeTopic(topic_id=tid, partitions=[A.AcknowledgePartition(partition_index=0, acknowledgement_batches=[
                A.AcknowledgementBatch(first_offset=base + 5, last_offset=base + 5, acknowledge_types=[ACCEPT])])])]))
        out["ack_acknowledged_in_flight"] = (r.error_code, [p.error_code for t in r.responses for p in t.partitions])
        out["stale_epoch"] = c.request(78, 2, F(group_id=GROUP, member_id=MEMBER, share_session_epoch=2)).error_code
        out["no_session"] = c.request(78, 2, F(group_id=GROUP, member_id="nobody-000000000000",
                                              share_session_epoch=1)).error_code
        out["ack_epoch_0"] = c.request(79, 1, A(group_id=GROUP, member_id=MEMBER, share_session_epoch=0)).error_code
        # The lag (KIP-1226); the start offset is left out: Kafka moves the one it reports lazily.
        out["lag"] = [(e, p, lag) for e, p, _start, lag in _offsets(c)]
        out["close"] = rel(_fetch(c, -1, tid, acks((2, 2, ACCEPT), (8, 9, ACCEPT)), wait_ms=0))
        out["lag_after"] = [(e, p, lag) for e, p, _start, lag in _offsets(c)]
    return out


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    why = reference_unavailable_reason()
    if why:
        pytest.fail(f"the reference Kafka broker is needed for the differential suite: {why}")
    bootstrap, stop = start_reference_kafka(tmp_path_factory.mktemp("kafka"))
    try:
        return scenario(bootstrap)
    finally:
        stop()


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from tests.support.broker import KBroker

    broker = KBroker(Path(tmp_path_factory.mktemp("kbroker")), {"group.initial.rebalance.delay.ms": "0"})
    broker.start()
    try:
        return scenario(broker.bootstrap)
    finally:
        broker.stop()


def test_same_acquisitions_delivery_counts_and_errors(kafka: dict[str, Any], ours: dict[str, Any]) -> None:
    assert ours == kafka
