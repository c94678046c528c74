"""Share groups (KIP-932) on a three-node kbroker cluster: the share-partition leaders persist their state
through the network persister (Kafka's DefaultStatePersister) to a share coordinator on another broker.

Three combined kbroker nodes (process.roles=broker,controller, a three-voter quorum), real processes.
`__share_group_state` has one partition (RF 3, min ISR 2), so one broker is the share coordinator; the
work topic's two partitions (RF 3) are led by the two other brokers. Three confluent-kafka
`ShareConsumer`s (librdkafka 2.16, explicit acknowledgement) consume it: offsets ending in 3 are
RELEASEd at their first delivery, offsets ending in 7 REJECTed, everything else ACCEPTed. Mid-way the
broker hosting the share coordinator is killed with SIGKILL (default test), or the broker leading
partition 0 (slow test). Afterwards:

- no record whose ACCEPT or REJECT the broker confirmed is delivered again;
- a record's delivery counts never go down, and go strictly up when only the coordinator died (the
  leader kept its in-memory counts); a confirmed RELEASE is redelivered with the next delivery count;
- every record is eventually accepted or rejected (none lost).

The coordinator's failover works because the persister retries NOT_COORDINATOR /
COORDINATOR_LOAD_IN_PROGRESS / a lost connection with backoff, finding the new `__share_group_state`
leader in the metadata image; a leader's failover because the new leader reads the state (with its
leader epoch, fencing the old one) before it acquires anything.
"""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType, KafkaException, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.coord.share_coordinator import coordinator_key
from kbroker.protocol.messages.find_coordinator import FindCoordinatorRequest
from kbroker.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest
from tests.support.raw_client import RawKafkaClient
from tests.support.share_cluster import IDS, Node, share_cluster

pytestmark = [pytest.mark.interop]

STATE_TOPIC = "__share_group_state"
PER_PARTITION = 150
PACE_S = 0.03


@pytest.fixture
def trio(tmp_path: Path) -> Iterator[dict[int, Node]]:
    with share_cluster(tmp_path) as nodes:
        yield nodes


def _bootstrap(nodes: dict[int, Node], alive: bool = True) -> str:
    return ",".join(n.broker.bootstrap for n in nodes.values() if not alive or n.broker.is_running())


def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=20)
    t = md.topics.get(topic)
    return {} if t is None or t.error is not None else {p: int(pm.leader) for p, pm in t.partitions.items()}


def _create_state_topic(node: Node, group: str) -> int:
    """FindCoordinator SHARE creates `__share_group_state` (one partition here); its leader is returned."""
    key = coordinator_key((group, uuid.uuid4(), 0))
    deadline = time.monotonic() + 60
    while True:
        with RawKafkaClient(node.broker.bootstrap) as c:
            r = c.request(10, 6, FindCoordinatorRequest(key_type=2, coordinator_keys=[key]))
        coordinator = r.coordinators[0]
        if coordinator.error_code == 0:
            return int(coordinator.node_id)
        assert time.monotonic() < deadline, coordinator
        time.sleep(0.5)


def _set_earliest(node: Node, group: str) -> None:
    Q = IncrementalAlterConfigsRequest
    body = Q(resources=[Q.AlterConfigsResource(resource_type=32, resource_name=group, configs=[
        Q.AlterableConfig(name="share.auto.offset.reset", config_operation=0, value="earliest")])])
    deadline = time.monotonic() + 30
    while True:
        with RawKafkaClient(node.broker.bootstrap) as c:
            r = c.request(44, 1, body)
        if r.responses[0].error_code == 0:
            return
        assert time.monotonic() < deadline, r.responses[0]
        time.sleep(0.5)


@dataclass
class Run:
    deliveries: list[tuple[float, int, int, int, int, str]] = field(default_factory=list)  # t, consumer, p, o, count, ack
    confirmed: list[tuple[float, int, int, int, str]] = field(default_factory=list)  # t, consumer, p, o, ack
    failed: list[tuple[int, int, int, str, str]] = field(default_factory=list)  # consumer, p, o, ack, error
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def done(self) -> set[tuple[int, int]]:
        with self.lock:
            return {(p, o) for _t, _c, p, o, a in self.confirmed if a in ("accept", "reject")}


def _ack_type(offset: int, count: int) -> tuple[str, AcknowledgeType]:
    if offset % 10 == 3 and count == 1:
        return "release", AcknowledgeType.RELEASE
    if offset % 10 == 7:
        return "reject", AcknowledgeType.REJECT
    return "accept", AcknowledgeType.ACCEPT


def _consume(run: Run, i: int, bootstrap: str, topic: str, group: str, stop: threading.Event) -> None:
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit",
                       "socket.timeout.ms": "60000"})
    sent: dict[tuple[int, int], str] = {}

    def on_commit(offsets: dict[object, set[int]], exc: object) -> None:
        now = time.monotonic()
        with run.lock:
            for tp, offs in offsets.items():
                for o in offs:
                    ack = sent.get((tp.partition, o), "?")  # type: ignore[attr-defined]
                    if exc is None:
                        run.confirmed.append((now, i, tp.partition, o, ack))  # type: ignore[attr-defined]
                    else:
                        run.failed.append((i, tp.partition, o, ack, str(exc)))  # type: ignore[attr-defined]

    c.set_acknowledgement_commit_callback(on_commit)
    c.subscribe([topic])
    try:
        while not stop.is_set():
            try:
                msgs = c.poll(0.3)
            except KafkaException as exc:
                run.errors.append(str(exc))
                continue
            for m in msgs:
                if m.error() is not None:
                    run.errors.append(str(m.error()))
                    continue
                p, o, d = m.partition(), m.offset(), m.delivery_count()
                name, ack = _ack_type(o, d)
                with run.lock:
                    run.deliveries.append((time.monotonic(), i, p, o, d, name))
                sent[(p, o)] = name
                c.acknowledge(m, ack)
                time.sleep(PACE_S)  # the work: consumption lasts across the failover
            if msgs:
                try:
                    c.commit_sync(30)
                except KafkaException as exc:
                    run.errors.append(str(exc))
    finally:
        try:
            c.close()
        except KafkaException as exc:
            run.errors.append(str(exc))


def _check(run: Run, records: set[tuple[int, int]], strictly_increasing: bool) -> None:
    assert run.done() == records, f"missing {sorted(records - run.done())[:20]}; errors {run.errors[-5:]}"
    by_record: dict[tuple[int, int], list[tuple[float, int, int, str]]] = {}
    for t, c, p, o, d, ack in sorted(run.deliveries):
        by_record.setdefault((p, o), []).append((t, c, d, ack))
    for t_conf, c, p, o, ack in run.confirmed:
        history = by_record[(p, o)]
        # the delivery this confirmation acknowledged: the consumer's last one before the confirmation
        mine = [h for h in history if h[1] == c and h[0] <= t_conf]
        assert mine, (p, o, history)
        acked = mine[-1]
        later = [h for h in history if h[0] > acked[0]]
        if ack in ("accept", "reject"):
            assert later == [], f"{(p, o)} {ack} confirmed, then delivered again: {history}"
        elif ack == "release" and later:
            assert later[0][2] == acked[2] + 1, f"{(p, o)} released at count {acked[2]}: {history}"
    for key, history in by_record.items():
        counts = [d for _t, _c, d, _a in history]
        assert counts[0] >= 1 and counts == sorted(counts), (key, history)
        if strictly_increasing:
            assert len(set(counts)) == len(counts), (key, history)
    released = [k for k in records if k[1] % 10 == 3]
    assert all(any(d == 2 for _t, _c, d, _a in by_record[k]) for k in released if any(
        h[3] == "release" for h in by_record[k])), "a released record was not redelivered with count 2"


def _scenario(trio: dict[int, Node], victim: str) -> None:
    group, topic = f"g-{uuid.uuid4().hex[:6]}", f"work-{uuid.uuid4().hex[:6]}"
    coordinator = _create_state_topic(trio[1], group)
    others = [i for i in IDS if i != coordinator]
    bootstrap = _bootstrap(trio)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=2, replica_assignment=[[others[0], others[1], coordinator],
                                                              [others[1], others[0], coordinator]],
                                  config={"min.insync.replicas": "2"})])[topic].result(30)
    assert _leaders(bootstrap, STATE_TOPIC) == {0: coordinator}
    leaders = _leaders(bootstrap, topic)
    assert leaders == {0: others[0], 1: others[1]}, leaders  # share-partition leaders != share coordinator
    _set_earliest(trio[1], group)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for p in (0, 1):
        for n in range(PER_PARTITION):
            producer.produce(topic, value=b"%d-%d" % (p, n), partition=p)
    assert producer.flush(30) == 0
    records = {(p, o) for p in (0, 1) for o in range(PER_PARTITION)}

    run, stop = Run(), threading.Event()
    threads = [threading.Thread(target=_consume, args=(run, i, bootstrap, topic, group, stop), daemon=True)
               for i in range(3)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 60
        while len(run.done()) < len(records) // 4:
            assert time.monotonic() < deadline, f"{len(run.done())} done before the kill; errors {run.errors[-5:]}"
            time.sleep(0.05)
        killed = coordinator if victim == "coordinator" else others[0]
        done_at_kill = len(run.done())
        trio[killed].broker.kill()  # SIGKILL
        killed_at = time.monotonic()
        moved_topic, moved_partition = (STATE_TOPIC, 0) if victim == "coordinator" else (topic, 0)
        done_when_moved, moved_at, next_look = -1, 0.0, 0.0
        deadline = time.monotonic() + 90
        while run.done() != records:
            assert time.monotonic() < deadline, \
                f"{len(run.done())}/{len(records)} done after killing node {killed}; errors {run.errors[-5:]}"
            if done_when_moved < 0 and time.monotonic() >= next_look:
                done_now = len(run.done())
                new = _leaders(_bootstrap(trio), moved_topic).get(moved_partition, -1)
                if new not in (-1, killed):
                    done_when_moved, moved_at = done_now, time.monotonic()
                next_look = time.monotonic() + 0.3
            time.sleep(0.05)
        print(f"share failover ({victim}): node {killed} killed with {done_at_kill}/{len(records)} done; "
              f"{moved_topic}-{moved_partition} moved {moved_at - killed_at:.1f}s later with {done_when_moved} done; "
              f"all done {time.monotonic() - killed_at:.1f}s after the kill; {len(run.deliveries)} deliveries, "
              f"{len(run.failed)} acknowledgements failed")
        # The failover happened mid-consumption: records were still unacknowledged at the kill and were
        # acknowledged afterwards, so through the new leader (the old one is dead). On a quiet machine the
        # rest can finish between two 0.3 s looks at the leader (a CI run saw -1 here): look once more.
        assert done_at_kill < len(records), done_at_kill
        if done_when_moved < 0:
            new = _leaders(_bootstrap(trio), moved_topic).get(moved_partition, -1)
            assert new not in (-1, killed), new
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    _check(run, records, strictly_increasing=victim == "coordinator")


def test_share_coordinator_killed_mid_consumption(trio: dict[int, Node]) -> None:
    _scenario(trio, "coordinator")


@pytest.mark.slow
def test_share_partition_leader_killed_mid_consumption(trio: dict[int, Node]) -> None:
    _scenario(trio, "leader")


@pytest.mark.slow
@pytest.mark.java
def test_java_share_consumer_on_the_cluster(trio: dict[int, Node], tmp_path: Path) -> None:
    """Kafka 4.3.1's KafkaShareConsumer (tests/interop/java/ShareGroupScenario.java `redeliver`: explicit
    acknowledgement, offsets 0-1 RELEASEd once, offset 2 REJECTed) on a partition whose leader is not
    the share coordinator: RELEASE redelivers with delivery count 2, REJECT never again."""
    import json

    from tests.support.java import DEFAULT_JVM_OPTS, java_classpath, java_executable, java_unavailable_reason

    why = java_unavailable_reason()
    if why:
        pytest.fail(f"Java and the Kafka 4.3.1 jars are needed: {why}")
    group, topic = f"g-{uuid.uuid4().hex[:6]}", f"java-{uuid.uuid4().hex[:6]}"
    coordinator = _create_state_topic(trio[1], group)
    leader = next(i for i in IDS if i != coordinator)
    bootstrap = _bootstrap(trio)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[
        [leader, *[i for i in IDS if i != leader]]])])[topic].result(30)
    assert _leaders(bootstrap, topic) == {0: leader} and leader != coordinator
    _set_earliest(trio[1], group)
    scenario = Path(__file__).resolve().parents[1] / "interop" / "java" / "ShareGroupScenario.java"
    javac = str(Path(java_executable() or "java").with_name("javac"))
    subprocess.run([javac, "-nowarn", "-cp", java_classpath(), "-d", str(tmp_path), str(scenario)], check=True,
                   capture_output=True, timeout=120)
    proc = subprocess.run([java_executable() or "java", *DEFAULT_JVM_OPTS, "-cp", f"{tmp_path}:{java_classpath()}",
                           "ShareGroupScenario", "redeliver", bootstrap, topic, group, "10"],
                          capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines[-1] == {"done": True, "accepted": 9}
    events = [(x["offset"], x["delivery"], x["ack"]) for x in lines if "offset" in x]
    assert (0, 1, "release") in events and (0, 2, "accept") in events
    assert (1, 1, "release") in events and (1, 2, "accept") in events
    assert [e for e in events if e[0] == 2] == [(2, 1, "reject")]
    assert not [e for e in events if e[2] == "LATE"]
