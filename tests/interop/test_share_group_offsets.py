"""AlterShareGroupOffsets (91) and DeleteShareGroupOffsets (92) against a real kbroker process, through
`kafka-share-groups` (kafka-tools 4.3.1) and raw requests.

- `--reset-offsets --to-earliest / --to-latest --execute` (and a raw AlterShareGroupOffsets to an
  offset: the share tool has no `--to-offset`) move an empty group's start offset (DescribeShareGroupOffsets shows it, the next ShareFetch acquires from it); a group that does
  not exist yet is created by the reset, as Kafka 4.3 does; a group with a member is refused
  (NON_EMPTY_GROUP) and keeps its offsets.
- `--delete-offsets --topic` forgets the share-partitions (the next fetch initializes them again);
  raw requests get Kafka's per-topic errors: an unknown topic, a topic without offsets, an unknown
  partition, an unknown group.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.protocol.messages.alter_share_group_offsets import AlterShareGroupOffsetsRequest as A
from kbroker.protocol.messages.delete_share_group_offsets import DeleteShareGroupOffsetsRequest as Del
from kbroker.protocol.messages.describe_share_group_offsets import DescribeShareGroupOffsetsRequest as D
from kbroker.protocol.messages.find_coordinator import FindCoordinatorRequest
from kbroker.protocol.messages.metadata import MetadataRequest
from kbroker.protocol.messages.share_fetch import ShareFetchRequest as F
from kbroker.protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest as H
from tests.support.broker import KBroker
from tests.support.java import run_java_main
from tests.support.raw_client import RawKafkaClient

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KBroker]:
    b = KBroker(tmp_path_factory.mktemp("share-offsets"), {})
    b.start()
    try:
        yield b
    finally:
        b.stop()


def _topic(broker: KBroker, records: int) -> str:
    name = f"offs-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(records):
        producer.produce(name, value=b"v%d" % i)
    producer.flush(10)
    return name


def _tool(broker: KBroker, *args: str) -> subprocess.CompletedProcess[str]:
    return run_java_main("kafka-share-groups", ["--bootstrap-server", broker.bootstrap, *args], timeout=60)


def _heartbeat(c: RawKafkaClient, group: str, member: str, epoch: int, topic: str | None = None) -> Any:
    deadline = time.monotonic() + 30
    while True:  # __consumer_offsets is created by the first FindCoordinator, then loaded
        c.request(10, 6, FindCoordinatorRequest(key_type=0, coordinator_keys=[group]))
        hb = c.request(76, 1, H(group_id=group, member_id=member, member_epoch=epoch,
                                subscribed_topic_names=[topic] if topic else None))
        if hb.error_code == 0 or time.monotonic() > deadline:
            return hb
        time.sleep(0.2)


def _alter(c: RawKafkaClient, group: str, topic: str, offset: int) -> Any:
    return c.request(91, 0, A(group_id=group, topics=[A.AlterShareGroupOffsetsRequestTopic(
        topic_name=topic, partitions=[A.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=offset)])]))


def _start_offset(c: RawKafkaClient, group: str, topic: str) -> int:
    r = c.request(90, 1, D(groups=[D.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=[
        D.DescribeShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[0])])]))
    return int(r.groups[0].topics[0].partitions[0].start_offset)


def _acquire_once(c: RawKafkaClient, group: str, topic: str) -> list[tuple[int, int]]:
    """A member joins, fetches once (long enough to initialize and acquire), and leaves."""
    tid = c.request(3, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)])).topics[0].topic_id
    member = f"m-{uuid.uuid4().hex[:16]}"
    hb = _heartbeat(c, group, member, 0, topic)
    assert hb.error_code == 0
    got: list[tuple[int, int]] = []
    deadline, epoch = time.monotonic() + 10, 0
    while not got and time.monotonic() < deadline:
        r = c.request(78, 1, F(group_id=group, member_id=member, share_session_epoch=epoch, max_wait_ms=300,
                               min_bytes=1, max_bytes=1 << 20, max_records=100, batch_size=100,
                               topics=[F.FetchTopic(topic_id=tid, partitions=[F.FetchPartition(partition_index=0)])]))
        epoch += 1
        got = [(a.first_offset, a.last_offset) for t in r.responses for p in t.partitions for a in p.acquired_records]
    c.request(78, 1, F(group_id=group, member_id=member, share_session_epoch=-1, max_wait_ms=0, min_bytes=1,
                       max_bytes=1 << 20, max_records=0, batch_size=0, topics=[]))
    assert _heartbeat(c, group, member, -1).error_code == 0
    return got


def test_reset_offsets_with_kafka_share_groups(broker: KBroker) -> None:
    topic, group = _topic(broker, 10), f"reset-{uuid.uuid4().hex[:6]}"
    with RawKafkaClient(broker.bootstrap) as c:
        # A group that does not exist yet: the reset creates it (Kafka 4.3), the fetch starts at 0.
        done = _tool(broker, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
        assert done.returncode == 0 and "Error" not in done.stdout + done.stderr, done.stdout + done.stderr
        assert _start_offset(c, group, topic) == 0
        assert _acquire_once(c, group, topic) == [(0, 9)]
        assert _alter(c, group, topic, 4).error_code == 0
        assert _start_offset(c, group, topic) == 4
        for args, expected in ((["--to-latest"], 10), (["--to-earliest"], 0)):
            done = _tool(broker, "--reset-offsets", "--group", group, "--topic", topic, *args, "--execute")
            assert done.returncode == 0 and "Error" not in done.stdout + done.stderr, done.stdout + done.stderr
            assert _start_offset(c, group, topic) == expected, args
        shown = _tool(broker, "--describe", "--group", group)
        assert [line.split() for line in shown.stdout.splitlines() if line.startswith(group)] == [
            [group, topic, "0", "0", "10"]], shown.stdout  # GROUP TOPIC PARTITION START-OFFSET LAG
        assert _alter(c, group, topic, 7).error_code == 0
        assert _acquire_once(c, group, topic) == [(7, 9)]
        # A member in the group: refused, nothing moves.
        assert _heartbeat(c, group, "stays-0000000000000000", 0, topic).error_code == 0
        r = _alter(c, group, topic, 1)
        assert (r.error_code, r.error_message) == (68, "The group is not empty.")
        assert _start_offset(c, group, topic) == 7


def test_delete_offsets_with_kafka_share_groups(broker: KBroker) -> None:
    topic, other, group = _topic(broker, 5), _topic(broker, 0), f"del-{uuid.uuid4().hex[:6]}"
    with RawKafkaClient(broker.bootstrap) as c:
        done = _tool(broker, "--reset-offsets", "--group", group, "--topic", topic, "--to-latest", "--execute")
        assert done.returncode == 0 and "Error" not in done.stdout + done.stderr, done.stdout + done.stderr
        assert _start_offset(c, group, topic) == 5
        deleted = _tool(broker, "--delete-offsets", "--group", group, "--topic", topic)
        assert deleted.returncode == 0 and "Error" not in deleted.stdout + deleted.stderr, deleted.stdout + deleted.stderr
        assert _start_offset(c, group, topic) == -1  # not initialized any more
        r = c.request(92, 0, Del(group_id=group, topics=[Del.DeleteShareGroupOffsetsRequestTopic(topic_name=n)
                                                         for n in (topic, other, "no-such-topic")]))
        assert r.error_code == 0
        assert [(t.topic_name, t.error_code, t.error_message) for t in r.responses] == [
            (topic, 3, "There is no offset information to delete."),
            (other, 3, "There is no offset information to delete."),
            ("no-such-topic", 3, "This server does not host this topic-partition."),
        ]
        missing = c.request(92, 0, Del(group_id="never-there", topics=[Del.DeleteShareGroupOffsetsRequestTopic(
            topic_name=topic)]))
        assert (missing.error_code, missing.error_message) == (69, "Group never-there not found.")
        bad = c.request(91, 0, A(group_id=group, topics=[
            A.AlterShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[
                A.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=3),
                A.AlterShareGroupOffsetsRequestPartition(partition_index=5, start_offset=3)]),
            A.AlterShareGroupOffsetsRequestTopic(topic_name="no-such-topic", partitions=[
                A.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=0)])]))
        assert bad.error_code == 0
        assert [(t.topic_name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in bad.responses] == [
            ("no-such-topic", [(0, 3)]), (topic, [(0, 0), (5, 3)])]  # Kafka answers unknown topics first
        assert _start_offset(c, group, topic) == 3
