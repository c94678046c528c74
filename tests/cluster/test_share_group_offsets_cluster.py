"""Share-group offsets and member departures on a three-node kbroker cluster, with real processes and clients.

Three combined kbroker nodes (a three-voter quorum), `__consumer_offsets` with one partition (so one
broker, G, is the group coordinator), `__share_group_state` with three partitions (one led by each
broker), and a work topic whose partitions are all led by the two brokers other than G.

1. `kafka-share-groups` (kafka-tools 4.3.1) against the cluster: the tool asks G, which answers through
   the persister as Kafka's group coordinator does: `--describe` from ReadShareGroupStateSummary to
   each share-partition's share coordinator (some on brokers other than G), `--reset-offsets` with
   InitializeShareGroupState, `--delete-offsets` with DeleteShareGroupState. Checked: the start offsets
   and lags follow the consumption that happened on the other brokers; after a reset a consumer gets
   every record again from the new start offset (the leaders read the reset state); after a delete
   the partitions have no start offset and a second delete answers "no offset information".
2. A share consumer that acquired records is killed with SIGKILL: each partition leader (not G) releases
   its records when the consumer's connection closes (Kafka's ShareSessionCache disconnect listener),
   so another consumer gets them with delivery count 2 long before the acquisition locks (60 s here)
   or the member's session (45 s) expire.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.coord.share_coordinator import partition_for
from kbroker.protocol.messages.describe_share_group_offsets import DescribeShareGroupOffsetsRequest as D
from kbroker.protocol.messages.find_coordinator import FindCoordinatorRequest
from kbroker.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest
from kbroker.protocol.messages.metadata import MetadataRequest
from tests.cluster.test_share_groups_cluster import (
    STATE_TOPIC,
    _create_state_topic,
    _leaders,
)
from tests.support.java import REPO_ROOT, run_java_main
from tests.support.raw_client import RawKafkaClient
from tests.support.share_cluster import IDS, Node, share_cluster

pytestmark = [pytest.mark.interop]

PARTITIONS = 4
STATE_PARTITIONS = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, Node]]:
    with share_cluster(tmp_path_factory.mktemp("share-offsets-cluster"),
                       {"share.coordinator.state.topic.num.partitions": str(STATE_PARTITIONS)}) as nodes:
        yield nodes


def _bootstrap(nodes: dict[int, Node]) -> str:
    return ",".join(n.broker.bootstrap for n in nodes.values())


def _group_coordinator(node: Node, group: str) -> int:
    deadline = time.monotonic() + 60
    while True:
        with RawKafkaClient(node.broker.bootstrap) as c:
            r = c.request(10, 6, FindCoordinatorRequest(key_type=0, coordinator_keys=[group]))
        if r.coordinators[0].error_code == 0:
            return int(r.coordinators[0].node_id)
        assert time.monotonic() < deadline, r.coordinators[0]
        time.sleep(0.5)


def _group_configs(node: Node, group: str, configs: dict[str, str]) -> None:
    Q = IncrementalAlterConfigsRequest
    body = Q(resources=[Q.AlterConfigsResource(resource_type=32, resource_name=group, configs=[
        Q.AlterableConfig(name=k, config_operation=0, value=v) for k, v in configs.items()])])
    deadline = time.monotonic() + 30
    while True:
        with RawKafkaClient(node.broker.bootstrap) as c:
            r = c.request(44, 1, body)
        if r.responses[0].error_code == 0:
            return
        assert time.monotonic() < deadline, r.responses[0]
        time.sleep(0.5)


def _setup(nodes: dict[int, Node], records: int, partitions: int = PARTITIONS
           ) -> tuple[str, str, int, dict[int, int], dict[int, int]]:
    """A group and a topic with `records` records per partition: (group, topic, group coordinator,
    work partition -> leader, work partition -> share coordinator)."""
    group, topic = f"g-{uuid.uuid4().hex[:6]}", f"work-{uuid.uuid4().hex[:6]}"
    bootstrap = _bootstrap(nodes)
    gc = _group_coordinator(nodes[1], group)
    _create_state_topic(nodes[1], group)
    deadline = time.monotonic() + 60
    while len(state := _leaders(bootstrap, STATE_TOPIC)) < STATE_PARTITIONS or -1 in state.values():
        assert time.monotonic() < deadline, state
        time.sleep(0.5)
    others = [i for i in IDS if i != gc]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replica_assignment=[
        [others[p % 2], others[(p + 1) % 2], gc] for p in range(partitions)])])[topic].result(30)
    leaders = _leaders(bootstrap, topic)
    assert sorted(leaders) == list(range(partitions)) and gc not in leaders.values(), leaders
    with RawKafkaClient(nodes[1].broker.bootstrap) as c:
        tid = c.request(3, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)])).topics[0].topic_id
    coordinators = {p: state[partition_for((group, tid, p), STATE_PARTITIONS)] for p in range(partitions)}
    _produce(bootstrap, topic, records, partitions)
    return group, topic, gc, leaders, coordinators


def _produce(bootstrap: str, topic: str, per_partition: int, partitions: int = PARTITIONS) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, value=b"v%d" % i, partition=p)
    assert producer.flush(30) == 0


def _tool(nodes: dict[int, Node], *args: str) -> subprocess.CompletedProcess[str]:
    done = run_java_main("kafka-share-groups", ["--bootstrap-server", _bootstrap(nodes), *args], timeout=90)
    assert done.returncode == 0 and "Error" not in done.stdout + done.stderr, done.stdout + done.stderr
    return done


def _described(nodes: dict[int, Node], group: str, topic: str) -> dict[int, tuple[int, int]]:
    """`kafka-share-groups --describe --offsets`: partition -> (start offset, lag)."""
    shown = _tool(nodes, "--describe", "--offsets", "--group", group)
    rows = [line.split() for line in shown.stdout.splitlines() if line.startswith(group)]
    out = {}
    for row in rows:
        assert row[1] == topic, shown.stdout
        out[int(row[2])] = (int(row[-2]), int(row[-1]) if row[-1] != "-" else -1)
    return out


def _consume_all(nodes: dict[int, Node], group: str, topic: str, expected: int, timeout: float = 60.0
                 ) -> list[tuple[int, int, int]]:
    """A share consumer (implicit acknowledgement) until `expected` records arrived: (p, offset, count)."""
    c = ShareConsumer({"bootstrap.servers": _bootstrap(nodes), "group.id": group})
    got: list[tuple[int, int, int]] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(got) < expected and time.monotonic() < deadline:
            for m in c.poll(0.5):
                if m.error() is None:
                    got.append((m.partition(), m.offset(), m.delivery_count()))
        c.commit_sync(30)
    finally:
        c.close()
    return got


def _start_offsets(nodes: dict[int, Node], group: str, topic: str, via: int) -> list[int]:
    with RawKafkaClient(nodes[via].broker.bootstrap) as c:
        r = c.request(90, 1, D(groups=[D.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=[
            D.DescribeShareGroupOffsetsRequestTopic(topic_name=topic, partitions=list(range(PARTITIONS)))])]))
    return [int(p.start_offset) for p in r.groups[0].topics[0].partitions]


def test_describe_reset_and_delete_offsets_through_the_share_coordinators(cluster: dict[int, Node]) -> None:
    group, topic, gc, leaders, coordinators = _setup(cluster, 10)
    # the point of the test: share coordinators on brokers other than the one asked (G)
    assert any(c != gc for c in coordinators.values()), (gc, coordinators)

    _tool(cluster, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
    assert _described(cluster, group, topic) == {p: (0, 10) for p in range(PARTITIONS)}

    got = _consume_all(cluster, group, topic, 10 * PARTITIONS)  # on the two leaders, none of them G
    assert sorted((p, o) for p, o, _d in got) == [(p, o) for p in range(PARTITIONS) for o in range(10)]
    _produce(_bootstrap(cluster), topic, 5)
    deadline = time.monotonic() + 20
    while (shown := _described(cluster, group, topic)) != {p: (10, 5) for p in range(PARTITIONS)}:
        assert time.monotonic() < deadline, shown  # the leaders' last writes land at their coordinators
        time.sleep(1)

    # Reset to the earliest: the leaders read the new state, every record is delivered again (count 1).
    _tool(cluster, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
    assert _described(cluster, group, topic) == {p: (0, 15) for p in range(PARTITIONS)}
    again = _consume_all(cluster, group, topic, 15 * PARTITIONS)
    assert sorted(again) == [(p, o, 1) for p in range(PARTITIONS) for o in range(15)]

    _tool(cluster, "--delete-offsets", "--group", group, "--topic", topic)
    assert _start_offsets(cluster, group, topic, gc) == [-1] * PARTITIONS
    assert _described(cluster, group, topic) == {}
    second = run_java_main("kafka-share-groups", ["--bootstrap-server", _bootstrap(cluster), "--delete-offsets",
                                                  "--group", group, "--topic", topic], timeout=90)
    assert "There is no offset information to delete" in second.stdout + second.stderr, second.stdout + second.stderr


_VICTIM = """
import os, signal, sys, time
from confluent_kafka import ShareConsumer
c = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                   "share.acknowledgement.mode": "explicit"})
c.subscribe([sys.argv[3]])
got = []
deadline = time.monotonic() + 60
while not got and time.monotonic() < deadline:  # explicit mode: one poll's records, never acknowledged
    got += [(m.partition(), m.offset()) for m in c.poll(0.5) if m.error() is None]
print(" ".join(f"{p}:{o}" for p, o in got), flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # dies holding its acquisition locks, acknowledging nothing
"""


def test_a_killed_consumers_records_are_released_by_every_leader(cluster: dict[int, Node]) -> None:
    # One partition: the second consumer shares it with the dead member (still in the group until its
    # session times out), as the simple assignor gives a partition to every member when they outnumber it.
    group, topic, gc, leaders, _coordinators = _setup(cluster, 20, partitions=1)
    _group_configs(cluster[gc], group, {"share.auto.offset.reset": "earliest",
                                        "share.record.lock.duration.ms": "60000"})
    total = 20
    victim = subprocess.run([sys.executable, "-c", _VICTIM, _bootstrap(cluster), group, topic, str(total)],
                            capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert victim.returncode == -signal.SIGKILL, victim.stderr[-2000:]
    held = sorted((int(p), int(o)) for p, o in (x.split(":") for x in victim.stdout.split()))
    assert held, victim.stdout
    killed_at = time.monotonic()

    c = ShareConsumer({"bootstrap.servers": _bootstrap(cluster), "group.id": group})
    got: list[tuple[int, int, int]] = []
    try:
        c.subscribe([topic])
        while len(got) < total and time.monotonic() - killed_at < 40:
            got += [(m.partition(), m.offset(), m.delivery_count()) for m in c.poll(0.5) if m.error() is None]
        elapsed = time.monotonic() - killed_at
        c.commit_sync(30)
    finally:
        c.close()
    # every record, those the killed consumer held (and any it had prefetched) as a second delivery,
    # from leaders that are not the group coordinator
    assert sorted((p, o) for p, o, _d in got) == [(0, o) for o in range(total)], got
    assert {(p, o) for p, o, d in got if d == 2} >= set(held), (held, got)
    assert all(d in (1, 2) for _p, _o, d in got), got
    assert all(leader != gc for leader in leaders.values())
    assert elapsed < 30, f"released only after {elapsed:.1f}s: the locks (60 s) or the session (45 s) expired"
    print(f"killed consumer's {len(held)} records redelivered {elapsed:.1f}s after the kill "
          f"(leaders {sorted(set(leaders.values()))}, group coordinator {gc})")
