"""Share groups (KIP-932) against a real kbroker process with Kafka 4.3.1's own clients.

- The Java `KafkaShareConsumer` (kafka-clients 4.3.1; tests/interop/java/ShareGroupScenario.java,
  compiled once per module): 4 consumers on a 1-partition topic, and 6 on 2 partitions, all receive
  records, and every record is delivered once (delivery count 1) when all acknowledge; RELEASE redelivers a record with
  delivery count 2, REJECT never again (explicit acknowledgement).
- An acquisition lock that expires (a member that fetched and never acknowledged) hands the records to
  another member with delivery count 2 (raw ShareFetch requests, the lock lowered to 1 s).
- `kafka-share-groups --describe` (start offset and lag) and `--describe --members` (kafka-tools 4.3.1)
  show the group.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.protocol.messages.find_coordinator import FindCoordinatorRequest
from kbroker.protocol.messages.metadata import MetadataRequest
from kbroker.protocol.messages.share_fetch import ShareFetchRequest
from kbroker.protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest
from tests.support.broker import KBroker
from tests.support.java import (
    DEFAULT_JVM_OPTS,
    java_classpath,
    java_executable,
    java_unavailable_reason,
    run_java_main,
)
from tests.support.raw_client import RawKafkaClient

pytestmark = pytest.mark.interop

SCENARIO = Path(__file__).resolve().parent / "java" / "ShareGroupScenario.java"
LOCK_MS = 1000
F = ShareFetchRequest


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KBroker]:
    # Kafka requires the lock duration to be at least group.share.min.record.lock.duration.ms (15 s by
    # default; 1 s at the least), for the broker and for a group's share.record.lock.duration.ms.
    # The share assignor hands out a share-partition only once it is initialized, on a member's next
    # heartbeat (Kafka's initializedAssignmentPending): with the default 5 s heartbeat interval the first
    # member to heartbeat after that could take every record of the spread test before the others were
    # assigned, so the members heartbeat every second here.
    b = KBroker(tmp_path_factory.mktemp("share"), {"group.share.record.lock.duration.ms": str(LOCK_MS),
                                                   "group.share.min.record.lock.duration.ms": str(LOCK_MS),
                                                   "group.share.min.heartbeat.interval.ms": "500",
                                                   "group.share.heartbeat.interval.ms": "1000"})
    b.start()
    try:
        yield b
    finally:
        b.stop()


def _topic(broker: KBroker, partitions: int = 1) -> str:
    name = f"share-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


@pytest.fixture(scope="module")
def scenario_classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ShareGroupScenario.java compiled once for the module (javac against the Kafka 4.3.1 jars)."""
    why = java_unavailable_reason()
    if why:
        pytest.fail(f"Java and the Kafka 4.3.1 jars are needed: {why}")
    out = tmp_path_factory.mktemp("classes")
    javac = str(Path(java_executable() or "java").with_name("javac"))
    subprocess.run([javac, "-nowarn", "-cp", java_classpath(), "-d", str(out), str(SCENARIO)], check=True,
                   capture_output=True, timeout=120)
    return out


def _java(classes: Path, args: list[str], timeout: float = 150) -> list[dict[str, Any]]:
    cmd = [java_executable() or "java", *DEFAULT_JVM_OPTS, "-cp", f"{classes}:{java_classpath()}",
           "ShareGroupScenario", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


@pytest.mark.parametrize(("consumers", "partitions", "records"), [(4, 1, 300), (6, 2, 600)])
def test_more_consumers_than_partitions_all_receive_each_record_once(
        broker: KBroker, scenario_classes: Path, consumers: int, partitions: int, records: int) -> None:
    """4 consumers on 1 partition, and the seed question: 6 consumers on 2 partitions (a classic group
    would idle 4 of them) all get records."""
    topic = _topic(broker, partitions=partitions)
    lines = _java(scenario_classes, ["spread", broker.bootstrap, topic, f"g-{topic}", str(consumers), str(records)])
    assert lines[-1] == {"done": True, "distinct": records}
    got = [x for x in lines if "consumer" in x]
    per_consumer = Counter(x["consumer"] for x in got)
    assert sorted(per_consumer) == list(range(consumers)), per_consumer  # every consumer got records
    delivered = Counter((x["partition"], x["offset"]) for x in got)
    assert len(delivered) == records
    assert [k for k, n in delivered.items() if n > 1] == []  # each record delivered once ...
    assert {x["delivery"] for x in got} == {1}  # ... at its first delivery


def test_release_redelivers_with_delivery_count_and_reject_does_not(broker: KBroker, scenario_classes: Path) -> None:
    topic = _topic(broker)
    lines = _java(scenario_classes, ["redeliver", broker.bootstrap, topic, f"g-{topic}", "10"])
    assert lines[-1] == {"done": True, "accepted": 9}
    events = [(x["offset"], x["delivery"], x["ack"]) for x in lines if "offset" in x]
    assert (0, 1, "release") in events and (1, 1, "release") in events
    assert (0, 2, "accept") in events and (1, 2, "accept") in events
    assert [e for e in events if e[0] == 2] == [(2, 1, "reject")]
    assert not [e for e in events if e[2] == "LATE"]
    assert sorted(o for o, _, a in events if a == "accept") == [0, 1, 3, 4, 5, 6, 7, 8, 9]


def _share_fetch(c: RawKafkaClient, group: str, member: str, epoch: int, tid: uuid.UUID,
                 acks: list[F.AcknowledgementBatch] | None = None, wait_ms: int = 2000) -> Any:
    r = c.request(78, 1, F(group_id=group, member_id=member, share_session_epoch=epoch, max_wait_ms=wait_ms,
                           max_records=100, batch_size=100,
                           topics=[F.FetchTopic(topic_id=tid, partitions=[
                               F.FetchPartition(partition_index=0, acknowledgement_batches=acks or [])])]))
    assert r.error_code == 0, r
    return r


def _open_initialized(c: RawKafkaClient, group: str, member: str, tid: uuid.UUID) -> None:
    """Open a share session (epoch 0) until the share-partition is initialized: the first fetch of a
    share group creates and loads __share_group_state, and the share-partition starts (latest) once
    its state can be written."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert _acquired(_share_fetch(c, group, member, 0, tid, wait_ms=0)) == []
        if _share_partitions(c, group):
            return
        time.sleep(0.1)
    raise AssertionError("the share-partition was never initialized")


def _acquired(r: Any) -> list[tuple[int, int, int]]:
    return [(a.first_offset, a.last_offset, a.delivery_count)
            for t in r.responses for p in t.partitions for a in p.acquired_records]


def test_an_expired_lock_redelivers_to_another_member(broker: KBroker) -> None:
    topic = _topic(broker)
    group = f"g-{topic}"
    with RawKafkaClient(broker.bootstrap) as a, RawKafkaClient(broker.bootstrap) as b:
        a.request(10, 6, FindCoordinatorRequest(key_type=0, coordinator_keys=[group]))
        tid = a.request(3, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)])).topics[0].topic_id
        for member, c in (("ma", a), ("mb", b)):
            hb = c.request(76, 1, ShareGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=0,
                                                             subscribed_topic_names=[topic]))
            assert hb.error_code == 0 and hb.assignment is not None
        # Both open a share session; the share-partition starts at the end of the log (latest).
        _open_initialized(a, group, "ma", tid)
        assert _acquired(_share_fetch(b, group, "mb", 0, tid, wait_ms=0)) == []
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(5):
            producer.produce(topic, value=b"v%d" % i)
        producer.flush(10)
        assert _acquired(_share_fetch(a, group, "ma", 1, tid)) == [(0, 4, 1)]
        # b finds nothing while a holds the locks; after LOCK_MS they are b's, second delivery.
        start = time.monotonic()
        got = _acquired(_share_fetch(b, group, "mb", 1, tid, wait_ms=5000))
        assert got == [(0, 4, 2)] and time.monotonic() - start >= LOCK_MS / 1000 * 0.5
        # a's late acknowledgement is refused; b's is accepted.
        late = _share_fetch(a, group, "ma", 2, tid, [F.AcknowledgementBatch(first_offset=0, last_offset=4,
                                                                             acknowledge_types=[1])], wait_ms=0)
        assert [p.acknowledge_error_code for t in late.responses for p in t.partitions] == [121]  # INVALID_RECORD_STATE
        ok = _share_fetch(b, group, "mb", 2, tid, [F.AcknowledgementBatch(first_offset=0, last_offset=4,
                                                                          acknowledge_types=[1])], wait_ms=0)
        assert [p.acknowledge_error_code for t in ok.responses for p in t.partitions] == [0]
        # Session epochs: a stale epoch and an unknown session are refused.
        stale = a.request(78, 1, F(group_id=group, member_id="ma", share_session_epoch=1))
        assert stale.error_code == 123  # INVALID_SHARE_SESSION_EPOCH
        unknown = a.request(78, 1, F(group_id=group, member_id="nobody", share_session_epoch=5))
        assert unknown.error_code == 122  # SHARE_SESSION_NOT_FOUND


def test_kafka_share_groups_tool_describes(broker: KBroker) -> None:
    topic = _topic(broker, partitions=2)
    group = f"tool-{topic}"
    with RawKafkaClient(broker.bootstrap) as c:
        c.request(10, 6, FindCoordinatorRequest(key_type=0, coordinator_keys=[group]))
        for m in ("m1", "m2", "m3"):
            assert c.request(76, 1, ShareGroupHeartbeatRequest(
                group_id=group, member_id=m, member_epoch=0, subscribed_topic_names=[topic])).error_code == 0
        members = run_java_main("kafka-share-groups", ["--bootstrap-server", broker.bootstrap, "--describe",
                                                        "--members", "--group", group], timeout=60)
        assert members.returncode == 0, members.stderr
        rows = [line.split() for line in members.stdout.splitlines() if line.startswith(group)]
        assert len(rows) == 3, members.stdout
        assert all(topic in " ".join(r) for r in rows), members.stdout
        # (--list and --describe --state were checked too, one JVM each; left out to keep the suite fast:
        # ListGroups and the state are covered by tests/coord/test_share_group.py.)
        # Offsets (DescribeShareGroupOffsets): partition 0 initialized by a fetch, 3 records produced,
        # 1 accepted: start offset 1, lag 2. Partition 1 was never fetched: not listed.
        tid = c.request(3, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)])).topics[0].topic_id
        _open_initialized(c, group, "m1", tid)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(3):
            producer.produce(topic, value=b"v%d" % i, partition=0)
        producer.flush(10)
        assert _acquired(_share_fetch(c, group, "m1", 1, tid)) == [(0, 2, 1)]
        _share_fetch(c, group, "m1", 2, tid, [F.AcknowledgementBatch(first_offset=0, last_offset=0,
                                                                      acknowledge_types=[1])], wait_ms=0)
        offsets = run_java_main("kafka-share-groups", ["--bootstrap-server", broker.bootstrap, "--describe",
                                                        "--group", group], timeout=60)
        assert offsets.returncode == 0, offsets.stderr
        rows = [line.split() for line in offsets.stdout.splitlines() if line.startswith(group)]
        assert rows == [[group, topic, "0", "1", "2"]], offsets.stdout  # GROUP TOPIC PARTITION START-OFFSET LAG


def test_share_partition_state_survives_kill_9(tmp_path: Path) -> None:
    """Acknowledged records are not delivered again after a kill -9 and restart; released and
    in-flight ones are, with their delivery counts (the share coordinator's ShareSnapshot records on
    __share_group_state). The share group's membership comes back from __consumer_offsets."""
    b = KBroker(tmp_path, {"group.share.record.lock.duration.ms": str(LOCK_MS),
                           "group.share.min.record.lock.duration.ms": str(LOCK_MS)})
    b.start()
    try:
        topic = _topic(b)
        group = f"g-{topic}"
        with RawKafkaClient(b.bootstrap) as c:
            c.request(10, 6, FindCoordinatorRequest(key_type=0, coordinator_keys=[group]))
            tid = c.request(3, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)])).topics[0].topic_id
            hb = c.request(76, 1, ShareGroupHeartbeatRequest(group_id=group, member_id="m", member_epoch=0,
                                                             subscribed_topic_names=[topic]))
            assert hb.error_code == 0
            _open_initialized(c, group, "m", tid)
            producer = Producer({"bootstrap.servers": b.bootstrap})
            for i in range(10):
                producer.produce(topic, value=b"v%d" % i)
            producer.flush(10)
            assert _acquired(_share_fetch(c, group, "m", 1, tid)) == [(0, 9, 1)]
            r = _share_fetch(c, group, "m", 2, tid, [
                F.AcknowledgementBatch(first_offset=0, last_offset=3, acknowledge_types=[1]),
                F.AcknowledgementBatch(first_offset=4, last_offset=4, acknowledge_types=[3]),
                F.AcknowledgementBatch(first_offset=5, last_offset=5, acknowledge_types=[2])], wait_ms=0)
            assert _acquired(r) == []  # a record released by this request is acquired by a later one (Kafka)
        b.kill()
        b.start()
        with RawKafkaClient(b.bootstrap) as c:
            c.request(10, 6, FindCoordinatorRequest(key_type=0, coordinator_keys=[group]))
            # The member is known again (epoch 1): its heartbeat is accepted. Its share-partition was
            # initialized after its first heartbeat, so this one bumps the group epoch and hands it out
            # (Kafka's initializedAssignmentPending).
            hb = c.request(76, 1, ShareGroupHeartbeatRequest(group_id=group, member_id="m", member_epoch=1))
            assert (hb.error_code, hb.member_epoch) == (0, 2)
            assert hb.assignment is not None
            assert [(t.topic_id, t.partitions) for t in hb.assignment.topic_partitions] == [(tid, [0])]
            got: list[tuple[int, int, int]] = []
            deadline = time.monotonic() + 20
            while not got and time.monotonic() < deadline:  # (a new session each time, until loaded)
                got = _acquired(_share_fetch(c, group, "m", 0, tid, wait_ms=500))
            # 0-3 accepted and 4 rejected before the crash: gone. 5 was released (count 1 written)
            # and 6-9 were in flight (count 1): all delivered again, at their second delivery.
            assert got == [(5, 9, 2)]
    finally:
        b.stop()


def _share_partitions(c: RawKafkaClient, group: str) -> list[tuple[str, int]]:
    """The share group's initialized partitions, as DescribeShareGroupOffsets lists them."""
    from kbroker.protocol.messages.describe_share_group_offsets import DescribeShareGroupOffsetsRequest as D

    r = c.request(90, 1, D(groups=[D.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None)]))
    return [(g.group_id, p.partition_index) for g in r.groups for t in g.topics for p in t.partitions
            if p.start_offset >= 0]


def test_bad_share_requests_get_kafkas_errors(broker: KBroker) -> None:
    from kbroker.protocol.messages.share_acknowledge import ShareAcknowledgeRequest as A

    topic = _topic(broker)
    group = f"bad-{topic}"
    with RawKafkaClient(broker.bootstrap) as c:
        tid = c.request(3, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)])).topics[0].topic_id
        ack = [F.AcknowledgementBatch(first_offset=0, last_offset=0, acknowledge_types=[1])]
        # Acknowledgements on a new session, no member id, no group id.
        r = c.request(78, 2, F(group_id=group, member_id="m", share_session_epoch=0, topics=[
            F.FetchTopic(topic_id=tid, partitions=[F.FetchPartition(partition_index=0, acknowledgement_batches=ack)])]))
        assert r.error_code == 42  # INVALID_REQUEST
        assert c.request(78, 1, F(group_id=group, member_id="", share_session_epoch=0)).error_code == 42
        assert c.request(78, 1, F(group_id="", member_id="m", share_session_epoch=0)).error_code == 24  # INVALID_GROUP_ID
        assert c.request(79, 1, A(group_id=group, member_id="m", share_session_epoch=0)).error_code == 123
        # An unknown topic id and a partition that does not exist answer per partition.
        r = c.request(78, 1, F(group_id=group, member_id="m", share_session_epoch=0, topics=[
            F.FetchTopic(topic_id=uuid.uuid4(), partitions=[F.FetchPartition(partition_index=0)]),
            F.FetchTopic(topic_id=tid, partitions=[F.FetchPartition(partition_index=7)])]))
        assert r.error_code == 0
        assert sorted(p.error_code for t in r.responses for p in t.partitions) == [3, 100]  # UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID
        # Malformed acknowledgement batches: INVALID_REQUEST for the partition, the session goes on.
        r = c.request(78, 1, F(group_id=group, member_id="m", share_session_epoch=1, topics=[
            F.FetchTopic(topic_id=tid, partitions=[F.FetchPartition(partition_index=0, acknowledgement_batches=[
                F.AcknowledgementBatch(first_offset=5, last_offset=2, acknowledge_types=[1])])])]))
        assert r.error_code == 0
        assert [p.acknowledge_error_code for t in r.responses for p in t.partitions if t.topic_id == tid
                and p.partition_index == 0] in ([42], [121])
        # The broker is still serving.
        assert c.request(78, 1, F(group_id=group, member_id="m", share_session_epoch=2)).error_code == 0
