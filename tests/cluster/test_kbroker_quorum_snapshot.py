"""Snapshots in a kbroker controller quorum (issue 13): written, trimmed behind, fetched, loaded.

Real processes: three kbroker controllers (process.roles=controller) with a tiny
`metadata.log.max.record.bytes.between.snapshots`, and a kbroker broker. Creating topics makes every
voter write snapshots of its committed image (`<end offset>-<epoch>.checkpoint`, Kafka's format) and
move its Raft log start offset up behind them. Then:

- a follower killed with SIGKILL misses more topics while the leader snapshots past its log end; on
  restart it loads its own snapshot, replays its log, finds its fetch offset below the leader's log
  start (Fetch answers `snapshot_id`), fetches the leader's snapshot with FetchSnapshot and continues
  from its end until its log end offset equals the leader's;
- a kbroker broker that joins late (fetching from offset 0) loads the snapshot the same way and
  knows every topic;
- Kafka 4.3.1's `kafka-dump-log --cluster-metadata-decoder` decodes a snapshot a kbroker controller
  wrote.

The slow test adds an Apache Kafka 4.3.1 broker joining late (it too must load the snapshot) and reads
the snapshot with `kafka-metadata-shell`.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from kbroker.client import NodeConnection
from kbroker.protocol.messages.describe_quorum import DescribeQuorumRequest, DescribeQuorumResponse
from kbroker.protocol.messages.metadata import MetadataRequest, MetadataResponse
from kbroker.protocol.metadata_records import TopicRecord
from kbroker.snapshot import read_snapshot_file
from tests.cluster.test_kbroker_quorum import Quorum, _common, _format, stop_nodes
from tests.support.broker import KBroker
from tests.support.java import java_unavailable_reason, run_java_main
from tests.support.kafka_cluster import KafkaNode, new_cluster_id

pytestmark = [pytest.mark.interop, pytest.mark.java]

CONTROLLER_IDS = (1, 2, 3)
SNAPSHOT_BYTES = "1000"  # metadata.log.max.record.bytes.between.snapshots: a snapshot every ~4 topics
WROTE = re.compile(r"Wrote KRaft snapshot (\d{20})-(\d{10})\.checkpoint .* now starts at (\d+)")
INSTALLED = re.compile(r"node (\d+) installed snapshot (\d{20})-(\d{10}) \(\d+ bytes\) fetched from leader (\d+)")
LEADER_LINE = re.compile(r"node (\d+) is the leader in epoch (\d+)")


def _meta_dir(node: KBroker) -> Path:
    return node.log_dir / "__cluster_metadata-0"


def _checkpoints(node: KBroker) -> list[Path]:
    return sorted(p for p in _meta_dir(node).glob("*.checkpoint") if not p.name.startswith("00000000000000000000-"))


def _wait(cond: object, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


async def _describe(port: int) -> DescribeQuorumResponse:
    conn = NodeConnection("127.0.0.1", port, client_id="test-describe-quorum")
    await conn.connect()
    try:
        req = DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
            topic_name="__cluster_metadata", partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)])])
        return await conn.request(55, req, DescribeQuorumResponse)
    finally:
        await conn.close()


def _replication(quorum: Quorum, leader: int) -> tuple[int, dict[int, int]]:
    """The leader's high watermark and every voter's log end offset, from the leader's DescribeQuorum."""
    resp = asyncio.run(_describe(quorum.controllers[leader].port))
    p = resp.topics[0].partitions[0]
    assert p.error_code == 0 and p.leader_id == leader, p
    return p.high_watermark, {v.replica_id: v.log_end_offset for v in p.current_voters}


async def _metadata_brokers(port: int) -> list[int]:
    conn = NodeConnection("127.0.0.1", port, client_id="test-metadata")
    await conn.connect()
    try:
        resp = await conn.request(3, MetadataRequest(topics=None), MetadataResponse)
        return [b.node_id for b in resp.brokers]
    finally:
        await conn.close()


def _wait_serving(broker: KBroker) -> None:
    """A kbroker broker logs that it started once the controller unfenced it; its own image shows it
    unfenced a fetch later. librdkafka's admin client keeps a Metadata answer without brokers for a
    long while (it waits "for controller"), so wait until the broker names itself."""
    _wait(lambda: asyncio.run(_metadata_brokers(broker.port)), f"broker {broker.port} never listed itself", 30)


def _leader(quorum: Quorum) -> tuple[int, int]:
    """(epoch, leader) of the newest 'is the leader' line among the running controllers."""
    found = []
    for c in quorum.controllers.values():
        found += [(int(m.group(2)), int(m.group(1))) for m in LEADER_LINE.finditer(c.log_text())]
    assert found
    return max(found)


def _create_topics(quorum: Quorum, names: list[str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": quorum.bootstrap})
    for _name, fut in admin.create_topics([NewTopic(n, num_partitions=1, replication_factor=1)
                                          for n in names]).items():
        fut.result(60)


def _topic_names(bootstrap: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=20).topics)


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Quorum]:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(f"Kafka tools unavailable: {reason}")
    work = tmp_path_factory.mktemp("ksnapq")
    q = Quorum(new_cluster_id(), work)
    for i in CONTROLLER_IDS:
        q.controllers[i] = KBroker(work / f"controller-{i}")
    q.brokers[4] = KBroker(work / "broker-4")
    for i, c in q.controllers.items():
        c.overrides = {**_common(q), "process.roles": "controller", "node.id": str(i),
                       "listeners": f"CONTROLLER://127.0.0.1:{c.port}", "log.dirs": str(c.log_dir),
                       "broker.session.timeout.ms": "4000",
                       "metadata.log.max.record.bytes.between.snapshots": SNAPSHOT_BYTES,
                       # Retention of 1 byte: every new snapshot moves the log start up to it at once (with
                       # Kafka's 100 MiB the log would keep everything; tests/cluster/test_kraft_metadata_retention.py)
                       "metadata.max.retention.bytes": "1"}
    late = KBroker(work / "broker-5")
    for i, b in [(4, q.brokers[4]), (5, late)]:
        b.overrides = {**_common(q), "process.roles": "broker", "node.id": str(i),
                       "listeners": f"PLAINTEXT://127.0.0.1:{b.port}", "log.dirs": str(b.log_dir),
                       "broker.heartbeat.interval.ms": "500", "offsets.topic.replication.factor": "1",
                       "group.initial.rebalance.delay.ms": "0"}
    with ThreadPoolExecutor(5) as pool:  # formatting is a Python start each: in parallel
        list(pool.map(lambda n: _format(q, n, n.overrides), [*q.controllers.values(), q.brokers[4], late]))
    q.late = late  # type: ignore[attr-defined]
    kafka: list[KafkaNode] = []
    q.kafka_brokers = kafka  # type: ignore[attr-defined]
    try:
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(lambda c: c.start(timeout=60), q.controllers.values()))
        q.wait_leader()
        q.brokers[4].start(timeout=60)
        _wait_serving(q.brokers[4])
        yield q
    finally:
        for k in kafka:
            k.stop(30)
        stop_nodes([*q.brokers.values(), late], list(q.controllers.values()))


def test_snapshots_trim_and_catch_up_through_fetch_snapshot(quorum: Quorum) -> None:
    first = [f"snap-a-{i:02d}" for i in range(12)]
    _create_topics(quorum, first)

    # 1. Every voter writes snapshots of its own committed image and trims its log behind them.
    for i, c in quorum.controllers.items():
        _wait(lambda c=c: WROTE.search(c.log_text()) and _checkpoints(c), f"controller {i} wrote no snapshot")
    for c in quorum.controllers.values():
        m = WROTE.findall(c.log_text())[-1]
        assert int(m[0]) == int(m[2]) > 0, m  # the log starts at the latest snapshot's end offset
        snap = read_snapshot_file(_checkpoints(c)[-1])
        assert snap.header.last_contained_log_timestamp > 0
        assert {r.name for r in snap.records if isinstance(r, TopicRecord)} <= set(first)

    # 2. Kafka's own tool decodes a kbroker controller's snapshot, record by record.
    epoch, leader = _leader(quorum)
    latest = _checkpoints(quorum.controllers[leader])[-1]
    dump = run_java_main("kafka-dump-log", ["--cluster-metadata-decoder", "--print-data-log", "--files",
                                            str(latest)], timeout=120)
    assert dump.returncode == 0, dump.stderr
    contents = read_snapshot_file(latest)
    assert dump.stdout.count("SnapshotHeader") == 1 and dump.stdout.count("SnapshotFooter") == 1
    assert dump.stdout.count('payload: {"type":') == len(contents.records)
    assert dump.stdout.count('"type":"TOPIC_RECORD"') == sum(isinstance(r, TopicRecord) for r in contents.records) > 0

    # 3. Kill a follower; the others write on, snapshot past its log end and trim.
    follower = next(i for i in CONTROLLER_IDS if i != leader)
    _, ends = _replication(quorum, leader)
    quorum.controllers[follower].kill()
    killed_end = ends[follower]
    second = [f"snap-b-{i:02d}" for i in range(12)]
    _create_topics(quorum, second)
    lead = quorum.controllers[leader]
    _wait(lambda: any(int(m[2]) > killed_end for m in WROTE.findall(lead.log_text())),
          f"the leader never trimmed past the killed follower's log end {killed_end}")

    # 4. Restarted, the follower loads its own snapshot, then fetches the leader's (FetchSnapshot) and
    #    continues from its end until it has everything the leader has.
    f = quorum.controllers[follower]
    f.start(timeout=60)
    _wait(lambda: INSTALLED.search(f.log_text()), "the restarted follower fetched no snapshot", 30)
    node, offset, _, source = INSTALLED.search(f.log_text()).groups()  # type: ignore[union-attr]
    assert int(node) == follower and int(offset) > killed_end and int(source) == leader
    assert "Loaded metadata snapshot" in f.log_text()
    # The follower keeps the fetched snapshot as its own `<end>-<epoch>.checkpoint`, whole. Read at once:
    # once the follower has replayed 1000 bytes more it writes its own snapshot, and the older goes
    # (controller registrations and heartbeats get there in about a second).
    fetched = f.log_dir / "__cluster_metadata-0" / f"{int(offset):020d}-{int(INSTALLED.search(f.log_text()).group(3)):010d}.checkpoint"  # type: ignore[union-attr]
    try:
        snapshot = read_snapshot_file(fetched)
    except FileNotFoundError:
        newer = [int(m[0]) for m in WROTE.findall(f.log_text()) if int(m[0]) > int(offset)]
        assert newer, f"{fetched.name} is gone and the follower wrote no newer snapshot"
        snapshot = read_snapshot_file(max(p for p in fetched.parent.glob("*.checkpoint")))
    topics_in_fetched = {r.name for r in snapshot.records if isinstance(r, TopicRecord)}
    assert set(first) <= topics_in_fetched <= set(first + second)

    def caught_up() -> bool:
        hw, ends = _replication(quorum, leader)
        return ends.get(follower, -1) >= hw > killed_end

    _wait(caught_up, "the restarted follower did not catch up with the leader", 30)
    print(f"follower {follower}: log end {killed_end} at kill, installed snapshot ending at {int(offset)} "
          f"from leader {leader}, caught up at the high watermark {_replication(quorum, leader)[0]}")

    # 5. A broker joining late fetches from offset 0, below every log start: it loads the snapshot.
    late: KBroker = quorum.late  # type: ignore[attr-defined]
    late.start(timeout=60)
    _wait_serving(late)
    assert "Loaded metadata snapshot" in late.log_text()
    quorum.brokers[5] = late
    assert set(first + second) <= _topic_names(late.bootstrap)



@pytest.mark.slow
def test_apache_kafka_broker_joining_late_loads_the_kbroker_snapshot(quorum: Quorum) -> None:
    """A Kafka 4.3.1 broker (node 6) joins after the kbroker controllers trimmed their logs: its Fetch
    from offset 0 is answered with a snapshot id, it loads the kbroker-written snapshot through
    FetchSnapshot, and it knows every topic. `kafka-metadata-shell` reads the snapshot file too."""
    from tests.snapshot.test_snapshot_java import _shell_classpath
    from tests.support.java import java_command

    names = [f"snap-k-{i:02d}" for i in range(8)]
    _create_topics(quorum, names)
    epoch, leader = _leader(quorum)
    lead = quorum.controllers[leader]
    _wait(lambda: any(int(m[2]) > 0 for m in WROTE.findall(lead.log_text())), "the leader never trimmed")

    node = KafkaNode(quorum, 6, "broker")  # type: ignore[arg-type]  # a cluster: workdir, cluster_id, voters
    quorum.kafka_brokers.append(node)  # type: ignore[attr-defined]
    node.start(timeout=120)
    snaps = [p for p in (node.data / "__cluster_metadata-0").glob("*.checkpoint")
             if not p.name.startswith("00000000000000000000-")]
    assert snaps, "the Kafka broker holds no snapshot: it did not go through FetchSnapshot"
    listed = _topic_names(node.bootstrap)
    assert set(names) <= listed, sorted(listed)

    latest = _checkpoints(lead)[-1]
    in_snapshot = sorted(r.name for r in read_snapshot_file(latest).records if isinstance(r, TopicRecord))
    cmd = java_command("org.apache.kafka.shell.MetadataShell", ["--snapshot", str(latest), "ls", "/image/topics/byName"])
    cmd[cmd.index("-cp") + 1] = _shell_classpath()
    shown: list[str] = []
    for _ in range(6):  # Kafka's shell sometimes prints nothing (its own race, see test_snapshot_java)
        shell = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
        assert shell.returncode == 0, shell.stderr
        shown = sorted(shell.stdout.split())
        if shown:
            break
    assert shown == in_snapshot
