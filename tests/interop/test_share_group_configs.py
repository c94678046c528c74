"""Group configs (the GROUP config resource, KIP-848 / KIP-932) against a real kbroker process.

- `kafka-configs --entity-type groups` (kafka-tools 4.3.1) sets, describes and refuses group configs
  with Kafka's messages; ListConfigResources (KIP-1142) then lists the group.
- `share.auto.offset.reset=earliest` makes a new share group start at the log start: the Java
  `KafkaShareConsumer` receives records produced before it ever fetched (with Kafka's default `latest`
  it would receive none of them).
- Per-group `share.record.lock.duration.ms` is the `AcquisitionLockTimeoutMs` of the group's ShareFetch,
  `share.heartbeat.interval.ms` the interval its heartbeats get, and `share.session.timeout.ms` fences a
  silent member of that group while a member of a group without the config stays (the broker's bounds
  lowered so the test takes seconds).
- `by_duration` starts the share-partition at the first record younger than the duration.

The raw answers (values, sources, synonyms, error codes and messages) were compared with Kafka 4.3.1's
field by field in tests/differential/test_group_configs_vs_kafka.py.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.protocol.messages.find_coordinator import FindCoordinatorRequest
from kbroker.protocol.messages.list_config_resources import ListConfigResourcesRequest
from kbroker.protocol.messages.metadata import MetadataRequest
from kbroker.protocol.messages.share_fetch import ShareFetchRequest as F
from kbroker.protocol.messages.share_group_describe import ShareGroupDescribeRequest
from kbroker.protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest as H
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

SCENARIO = Path(__file__).resolve().parent / "java" / "ShareConfigScenario.java"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KBroker]:
    # Bounds lowered so a per-group session timeout of 2 s is allowed (Kafka checks group configs against them).
    b = KBroker(tmp_path_factory.mktemp("share-configs"), {
        "group.share.min.session.timeout.ms": "1000", "group.share.min.heartbeat.interval.ms": "500"})
    b.start()
    try:
        yield b
    finally:
        b.stop()


def _topic(broker: KBroker) -> str:
    name = f"cfg-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    return name


def _produce(broker: KBroker, topic: str, n: int) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(n):
        producer.produce(topic, value=b"v%d" % i)
    producer.flush(10)


def _configs(broker: KBroker, *args: str) -> subprocess.CompletedProcess[str]:
    return run_java_main("kafka-configs", ["--bootstrap-server", broker.bootstrap, "--entity-type", "groups",
                                           *args], timeout=60)


def _join(c: RawKafkaClient, group: str, member: str, topic: str) -> Any:
    deadline = time.monotonic() + 30
    while True:  # __consumer_offsets is created by the first FindCoordinator, then loaded
        c.request(10, 6, FindCoordinatorRequest(key_type=0, coordinator_keys=[group]))
        hb = c.request(76, 1, H(group_id=group, member_id=member, member_epoch=0, subscribed_topic_names=[topic]))
        if hb.error_code == 0 or time.monotonic() > deadline:
            return hb
        time.sleep(0.2)


def _fetch(c: RawKafkaClient, group: str, member: str, epoch: int, tid: uuid.UUID) -> Any:
    return c.request(78, 1, F(group_id=group, member_id=member, share_session_epoch=epoch, max_wait_ms=500,
                              min_bytes=1, max_bytes=1 << 20, max_records=100, batch_size=100,
                              topics=[F.FetchTopic(topic_id=tid, partitions=[F.FetchPartition(partition_index=0)])]))


def _topic_id(c: RawKafkaClient, topic: str) -> uuid.UUID:
    r = c.request(3, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]))
    return r.topics[0].topic_id  # type: ignore[no-any-return]


def test_kafka_configs_sets_describes_and_refuses_group_configs(broker: KBroker) -> None:
    group = f"g-{uuid.uuid4().hex[:6]}"
    ok = _configs(broker, "--entity-name", group, "--alter", "--add-config",
                  "share.auto.offset.reset=earliest,share.record.lock.duration.ms=20000")
    assert ok.returncode == 0, ok.stderr
    shown = _configs(broker, "--entity-name", group, "--describe")
    assert shown.returncode == 0, shown.stderr
    assert "share.auto.offset.reset=earliest" in shown.stdout, shown.stdout
    assert "share.record.lock.duration.ms=20000" in shown.stdout, shown.stdout
    bad = _configs(broker, "--entity-name", group, "--alter", "--add-config", "share.record.lock.duration.ms=70000")
    assert bad.returncode != 0
    assert ("share.record.lock.duration.ms must be less than or equal to group.share.max.record.lock.duration.ms"
            in bad.stdout + bad.stderr), bad.stdout + bad.stderr
    unknown = _configs(broker, "--entity-name", group, "--alter", "--add-config", "share.nope=1")
    assert unknown.returncode != 0
    with RawKafkaClient(broker.bootstrap) as c:
        listed = c.request(74, 1, ListConfigResourcesRequest(resource_types=[32]))
        assert listed.error_code == 0
        assert (group, 32) in {(r.resource_name, r.resource_type) for r in listed.config_resources}
    gone = _configs(broker, "--entity-name", group, "--alter", "--delete-config",
                    "share.auto.offset.reset,share.record.lock.duration.ms")
    assert gone.returncode == 0, gone.stderr
    with RawKafkaClient(broker.bootstrap) as c:
        listed = c.request(74, 1, ListConfigResourcesRequest(resource_types=[32]))
        assert group not in {r.resource_name for r in listed.config_resources}


def test_earliest_makes_a_new_share_group_read_from_the_log_start(broker: KBroker, tmp_path: Path) -> None:
    why = java_unavailable_reason()
    if why:
        pytest.fail(f"Java and the Kafka 4.3.1 jars are needed: {why}")
    topic, group = _topic(broker), f"early-{uuid.uuid4().hex[:6]}"
    _produce(broker, topic, 20)  # before the group exists: `latest` would never deliver these
    ok = _configs(broker, "--entity-name", group, "--alter", "--add-config", "share.auto.offset.reset=earliest")
    assert ok.returncode == 0, ok.stderr
    cmd = [java_executable() or "java", *DEFAULT_JVM_OPTS, "-cp", java_classpath(), str(SCENARIO),
           "consume", broker.bootstrap, topic, group, "20", "60"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    offsets = sorted(x["offset"] for x in lines if "offset" in x)
    assert offsets == list(range(20)), proc.stdout[-2000:]
    assert {x["delivery"] for x in lines if "delivery" in x} == {1}


def test_group_lock_duration_heartbeat_interval_and_session_timeout(broker: KBroker) -> None:
    topic = _topic(broker)
    tuned, plain = f"tuned-{uuid.uuid4().hex[:6]}", f"plain-{uuid.uuid4().hex[:6]}"
    ok = _configs(broker, "--entity-name", tuned, "--alter", "--add-config",
                  "share.record.lock.duration.ms=15000,share.heartbeat.interval.ms=600,share.session.timeout.ms=2000")
    assert ok.returncode == 0, ok.stderr
    with RawKafkaClient(broker.bootstrap) as c:
        tid = _topic_id(c, topic)
        hb_tuned, hb_plain = _join(c, tuned, "tuned-member-00000000", topic), _join(c, plain, "plain-member-00000000", topic)
        assert (hb_tuned.error_code, hb_tuned.heartbeat_interval_ms) == (0, 600)
        assert (hb_plain.error_code, hb_plain.heartbeat_interval_ms) == (0, 5000)
        assert _fetch(c, tuned, "tuned-member-00000000", 0, tid).acquisition_lock_timeout_ms == 15000
        assert _fetch(c, plain, "plain-member-00000000", 0, tid).acquisition_lock_timeout_ms == 30000
        # Neither member heartbeats again: the tuned group's 2 s session fences its member.
        deadline = time.monotonic() + 15
        while True:
            d = c.request(77, 1, ShareGroupDescribeRequest(group_ids=[tuned, plain]))
            members = {g.group_id: len(g.members) for g in d.groups}
            if members[tuned] == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert members == {tuned: 0, plain: 1}


def test_by_duration_starts_at_the_first_record_younger_than_the_duration(broker: KBroker) -> None:
    topic, group = _topic(broker), f"dur-{uuid.uuid4().hex[:6]}"
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    old = int(time.time() * 1000) - 3_600_000  # two hours and one hour ago, then now
    for i, ts in enumerate((old - 3_600_000, old, int(time.time() * 1000))):
        producer.produce(topic, value=b"v%d" % i, timestamp=ts)
        producer.flush(10)
    ok = _configs(broker, "--entity-name", group, "--alter", "--add-config", "share.auto.offset.reset=by_duration:PT90M")
    assert ok.returncode == 0, ok.stderr
    with RawKafkaClient(broker.bootstrap) as c:
        tid = _topic_id(c, topic)
        _join(c, group, "dur-member-0000000000", topic)
        acquired: list[tuple[int, int]] = []
        deadline, epoch = time.monotonic() + 20, 0
        while not acquired and time.monotonic() < deadline:
            r = _fetch(c, group, "dur-member-0000000000", epoch, tid)
            epoch += 1
            acquired = [(a.first_offset, a.last_offset) for t in r.responses for p in t.partitions
                        for a in p.acquired_records]
        assert acquired == [(1, 2)]
