"""The KIP-848 consumer protocol (`group.protocol=consumer`) against a real kbroker process.

- confluent-kafka (librdkafka 2.16) consumers, each in its own process so one can be killed with
  SIGKILL: they join a 6-partition topic one by one, then one leaves and one is killed; at each
  step every partition has exactly one owner, no partition is ever held by two members at once
  (ownership intervals from the rebalance callbacks' timestamps), and every produced record is
  consumed.
- The Java consumer (kafka-clients 4.3.1, Kafka's VerifiableConsumer) with `--group-protocol consumer`
  and the server-side assignors `uniform` and `range`: the same scenario.
- `kafka-consumer-groups --describe` on a consumer group (ConsumerGroupDescribe, OffsetFetch).
- A broker killed with SIGKILL and restarted keeps the group (epochs, members) from its records.
- A regular-expression subscription, a topic created later and partitions added.

The broker's heartbeat interval and session timeout are lowered (their minimums too) so that
rebalances and the expiry of a killed member take seconds, not Kafka's 5 s / 45 s defaults.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from kbroker.protocol.messages.consumer_group_describe import ConsumerGroupDescribeRequest
from tests.support.broker import KBroker, running_kbroker
from tests.support.groups_verifiable import (
    VerifiableMember,
    consumption,
    overlapping_ownership,
    ownership_intervals,
    start_verifiable_consumer,
    wait_for,
)
from tests.support.java import java_unavailable_reason, run_java_main
from tests.support.raw_client import RawKafkaClient

pytestmark = pytest.mark.interop

PARTITIONS = 6
OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "5",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "500",
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.session.timeout.ms": "6000",
}

# One confluent-kafka consumer: prints a JSON line per rebalance callback and per record, with the
# time it happened (revocations are printed before the callback returns, i.e. before the member
# acknowledges them to the coordinator).
WORKER = r"""
import json, select, sys, time
from confluent_kafka import Consumer
bootstrap, group, topic, name = sys.argv[1:5]
def out(**kw):
    kw["ts"] = time.time()
    print(json.dumps(kw), flush=True)
def on_assign(c, parts):
    out(ev="assign", p=[p.partition for p in parts])
def on_revoke(c, parts):
    out(ev="revoke", p=[p.partition for p in parts])
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
              "auto.offset.reset": "earliest", "client.id": name, "auto.commit.interval.ms": 200})
c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
out(ev="started")
try:
    while True:
        m = c.poll(0.1)
        if m is not None and not m.error():
            out(ev="msg", p=m.partition(), o=m.offset())
        if select.select([sys.stdin], [], [], 0)[0]:
            if sys.stdin.readline().strip() == "close":
                break
finally:
    c.close()
    out(ev="closed")
"""


class Worker:
    def __init__(self, bootstrap: str, group: str, topic: str, name: str) -> None:
        self.name = name
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.killed_at: float | None = None
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER, bootstrap, group, topic, name],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                with self.lock:
                    self.events.append(json.loads(line))

    def snapshot(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.events)

    def owned(self) -> set[int]:
        owned: set[int] = set()
        if self.killed_at is not None:
            return owned
        for e in self.snapshot():
            if e["ev"] == "assign":
                owned |= set(e["p"])
            elif e["ev"] == "revoke":
                owned -= set(e["p"])
            elif e["ev"] == "closed":
                owned = set()
        return owned

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("close\n")
        self.proc.stdin.flush()
        self.proc.wait(30)
        self.reader.join(10)

    def kill(self) -> None:
        self.proc.kill()
        self.killed_at = time.time()
        self.proc.wait(30)
        self.reader.join(10)

    def intervals(self) -> list[tuple[int, float, float]]:
        """(partition, from, to) holds of this member."""
        out = []
        held: dict[int, float] = {}
        for e in self.snapshot():
            if e["ev"] == "assign":
                for p in e["p"]:
                    assert p not in held, f"{self.name} assigned {p} twice"
                    held[p] = e["ts"]
            elif e["ev"] in ("revoke", "closed"):
                for p in e["p"] if e["ev"] == "revoke" else list(held):
                    if p in held:
                        out.append((p, held.pop(p), e["ts"]))
        end = self.killed_at if self.killed_at is not None else float("inf")
        out += [(p, start, end) for p, start in held.items()]
        return out


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KBroker]:
    """One broker for the module: each test has topics and groups of its own; the one that kills the
    broker starts its own (kbroker_factory)."""
    with running_kbroker(tmp_path_factory.mktemp("consumer-protocol"), OVERRIDES) as b:
        yield b


def _topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(timeout=30)


def _produce(bootstrap: str, topic: str, start: int, count: int) -> set[tuple[int, int]]:
    """Produce `count` records round-robin over the partitions; their (partition, offset)s."""
    written: set[tuple[int, int]] = set()
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + count):
        p.produce(topic, value=str(i).encode(), partition=i % PARTITIONS,
                  on_delivery=lambda err, m: written.add((int(m.partition() or 0), int(m.offset() or 0)))
                  if err is None else None)
    assert p.flush(30) == 0
    assert len(written) == count
    return written


def _wait_settled(live: list[Worker], timeout: float = 45.0) -> None:
    def settled() -> bool:
        owned = [w.owned() for w in live]
        return sum(len(o) for o in owned) == PARTITIONS and set().union(*owned) == set(range(PARTITIONS)) \
            and (len(live) > PARTITIONS or all(o for o in owned))

    wait_for(settled, timeout, lambda: f"assignments {[(w.name, sorted(w.owned())) for w in live]}", settle=1.5)


def test_confluent_consumers_join_leave_and_are_killed(broker: KBroker) -> None:
    bs = broker.bootstrap
    _topic(bs, "cp6")
    produced: set[tuple[int, int]] = set()
    workers: list[Worker] = []
    live: list[Worker] = []

    def consumed() -> set[tuple[int, int]]:
        return {(e["p"], e["o"]) for w in workers for e in w.snapshot() if e["ev"] == "msg"}

    def step(timeout: float = 45.0) -> None:
        """The group settles (every partition exactly one owner) and everything produced is consumed."""
        _wait_settled(live, timeout)
        wait_for(lambda: produced <= consumed(), 45, lambda: f"missing {sorted(produced - consumed())[:10]}")

    try:
        for i in range(3):
            produced |= _produce(bs, "cp6", i * 60, 60)
            w = Worker(bs, "cpg", "cp6", f"c{i}")
            workers.append(w)
            live.append(w)
            step()
            # uniform: balanced within one
            sizes = [len(x.owned()) for x in live]
            assert max(sizes) - min(sizes) <= 1, sizes
        produced |= _produce(bs, "cp6", 180, 60)
        live[1].close()
        live.pop(1)
        step()
        produced |= _produce(bs, "cp6", 240, 60)
        live[0].kill()  # SIGKILL: the coordinator fences it after group.consumer.session.timeout.ms
        live.pop(0)
        produced |= _produce(bs, "cp6", 300, 60)
        step(timeout=60)
        assert live[0].owned() == set(range(PARTITIONS))
        # No partition was ever held by two members at the same moment.
        holds = [(w.name, *h) for w in workers for h in w.intervals()]
        for a in holds:
            for b in holds:
                if a[0] < b[0] and a[1] == b[1]:
                    assert a[3] <= b[2] or b[3] <= a[2], f"overlapping ownership {a} {b}"
    finally:
        for w in workers:
            if w.proc.poll() is None:
                w.proc.kill()


def _java_scenario(broker: KBroker, tmp_path: Path, assignor: str) -> None:
    bs = broker.bootstrap
    topic, group = f"jv-{assignor}", f"jvg-{assignor}"
    _topic(bs, topic)
    produced: set[tuple[int, int]] = set()
    members: list[VerifiableMember] = []
    live: list[VerifiableMember] = []

    def settled() -> bool:
        owned = [m.owned() for m in live]
        return sum(len(o) for o in owned) == PARTITIONS and set().union(*owned) == set(range(PARTITIONS)) \
            and all(owned)

    def state() -> str:
        return f"assignments {[(m.name, sorted(m.owned())) for m in live]}; stderr: {live[-1].stderr_tail(5)}"

    try:
        for i in range(3):
            produced |= _produce(bs, topic, i * 60, 60)
            m = start_verifiable_consumer(f"j{i}", bs, topic, group, tmp_path, group_protocol="consumer",
                                          remote_assignor=assignor)
            members.append(m)
            live.append(m)
            wait_for(settled, 90, state, settle=1.5)
        sizes = sorted(len(m.owned()) for m in live)
        assert sizes == [2, 2, 2], sizes
        live[1].terminate()
        live.pop(1)
        wait_for(settled, 60, state, settle=1.5)
        live[0].kill()
        live.pop(0)
        wait_for(settled, 60, state, settle=1.5)
        produced |= _produce(bs, topic, 180, 60)
        wait_for(lambda: produced <= set(consumption(members).by_offset), 60,
                 lambda: f"missing {sorted(produced - set(consumption(members).by_offset))[:10]}")
        assert overlapping_ownership(ownership_intervals(members)) == []
        c = consumption(members)
        assert c.failed_commits == [] and c.unexplained_duplicates == []
    finally:
        for m in members:
            if m.alive():
                m.kill()


@pytest.mark.skipif(java_unavailable_reason() is not None, reason=str(java_unavailable_reason()))
# uniform with Java members runs by default in test_groups_java.py::test_join_one_by_one_then_leave_and_kill[consumer-uniform].
@pytest.mark.parametrize("assignor", [pytest.param("uniform", marks=pytest.mark.slow), "range"])
def test_java_consumers_with_server_side_assignor(broker: KBroker, tmp_path: Path, assignor: str) -> None:
    _java_scenario(broker, tmp_path, assignor)


@pytest.mark.skipif(java_unavailable_reason() is not None, reason=str(java_unavailable_reason()))
def test_kafka_consumer_groups_describes_a_consumer_group(broker: KBroker, tmp_path: Path) -> None:
    bs = broker.bootstrap
    _topic(bs, "dsc")
    _produce(bs, "dsc", 0, 30)
    m = start_verifiable_consumer("d0", bs, "dsc", "dgroup", tmp_path, group_protocol="consumer")
    try:
        wait_for(lambda: len(m.owned()) == PARTITIONS and len(m.named("offsets_committed")) > 0
                 and sum(int(e["count"]) for e in m.named("records_consumed")) >= 30, 90,
                 lambda: f"owned {sorted(m.owned())}: {m.stderr_tail(5)}")
        listed = run_java_main("kafka-consumer-groups", ["--bootstrap-server", bs, "--list", "--type"], timeout=90)
        assert listed.returncode == 0, listed.stderr
        assert any(line.split()[:2] == ["dgroup", "Consumer"] for line in listed.stdout.splitlines()), listed.stdout
        members = run_java_main("kafka-consumer-groups",
                                ["--bootstrap-server", bs, "--describe", "--group", "dgroup", "--members",
                                 "--verbose"], timeout=90)
        assert members.returncode == 0, members.stderr
        rows = [line.split() for line in members.stdout.splitlines() if line.strip()]
        header = rows[0]
        assert header[-4:] == ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"], \
            members.stdout
        # GROUP, CONSUMER-ID, HOST, CLIENT-ID, #PARTITIONS, CURRENT-EPOCH, CURRENT-ASSIGNMENT, TARGET-EPOCH, ...
        assert len(rows) == 2 and rows[1][0] == "dgroup" and rows[1][3:] == \
            ["d0", "6", "1", "dsc:0,1,2,3,4,5", "1", "dsc:0,1,2,3,4,5"], members.stdout
        state = run_java_main("kafka-consumer-groups",
                              ["--bootstrap-server", bs, "--describe", "--group", "dgroup", "--state"], timeout=90)
        assert state.returncode == 0 and "Stable" in state.stdout and "uniform" in state.stdout, state.stdout
        offsets = run_java_main("kafka-consumer-groups",
                                ["--bootstrap-server", bs, "--describe", "--group", "dgroup"], timeout=90)
        assert offsets.returncode == 0, offsets.stderr
        lines = [line.split() for line in offsets.stdout.splitlines() if line.startswith("dgroup")]
        assert sorted(int(x[2]) for x in lines) == list(range(PARTITIONS)), offsets.stdout
        assert sum(int(x[3]) for x in lines) == 30 and all(x[5] == "0" for x in lines), offsets.stdout
        m.terminate()
        # The group is Empty now: offsets can be reset (admin commit) and the group deleted.
        reset = run_java_main("kafka-consumer-groups",
                              ["--bootstrap-server", bs, "--reset-offsets", "--group", "dgroup", "--topic", "dsc",
                               "--to-earliest", "--execute"], timeout=90)
        assert reset.returncode == 0, reset.stdout + reset.stderr
        after = run_java_main("kafka-consumer-groups",
                              ["--bootstrap-server", bs, "--describe", "--group", "dgroup"], timeout=90)
        rows = [line.split() for line in after.stdout.splitlines() if line.startswith("dgroup")]
        assert len(rows) == PARTITIONS and all(x[3] == "0" for x in rows), after.stdout
        deleted = run_java_main("kafka-consumer-groups",
                                ["--bootstrap-server", bs, "--delete", "--group", "dgroup"], timeout=90)
        assert deleted.returncode == 0 and "successful" in deleted.stdout, deleted.stdout + deleted.stderr
        assert _describe(bs, "dgroup").error_code == 69  # GROUP_ID_NOT_FOUND
    finally:
        if m.alive():
            m.kill()


def _describe(bootstrap: str, group: str) -> Any:
    with RawKafkaClient(bootstrap) as client:
        return client.request(69, 1, ConsumerGroupDescribeRequest(group_ids=[group])).groups[0]


def test_members_and_epochs_survive_a_broker_kill(kbroker_factory: Callable[..., KBroker]) -> None:
    """kill -9 of the broker: the consumer-group records in __consumer_offsets bring back the group
    epoch and the members, who carry on without rejoining (a rejoin would start a new epoch)."""
    broker = kbroker_factory(OVERRIDES)  # its own: killed and restarted here
    bs = broker.bootstrap
    _topic(bs, "rs6")
    produced = _produce(bs, "rs6", 0, 60)
    workers: list[Worker] = []
    try:
        for i in range(3):
            workers.append(Worker(bs, "rsg", "rs6", f"r{i}"))
            _wait_settled(workers)
        workers[2].close()
        live = workers[:2]
        _wait_settled(live)
        before = _describe(bs, "rsg")
        assert before.error_code == 0 and before.group_state == "Stable" and len(before.members) == 2
        broker.kill()
        broker.start()
        time.sleep(3)  # several heartbeats against the restarted broker
        _wait_settled(live)
        after = _describe(bs, "rsg")
        assert (after.group_state, after.group_epoch, after.assignment_epoch) == \
            ("Stable", before.group_epoch, before.assignment_epoch)
        assert sorted((m.member_id, m.member_epoch) for m in after.members) == \
            sorted((m.member_id, m.member_epoch) for m in before.members)
        produced |= _produce(bs, "rs6", 60, 60)

        def consumed() -> set[tuple[int, int]]:
            return {(e["p"], e["o"]) for w in workers for e in w.snapshot() if e["ev"] == "msg"}

        wait_for(lambda: produced <= consumed(), 45, lambda: f"missing {sorted(produced - consumed())[:10]}")
    finally:
        for w in workers:
            if w.proc.poll() is None:
                w.proc.kill()


def test_regex_subscription_and_topic_changes(broker: KBroker) -> None:
    """librdkafka's `^`-prefixed subscription is sent as SubscribedTopicRegex (v1); a topic created
    later and partitions added to a subscribed topic reach the member without it rejoining."""
    bs = broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic("rx-a", 2, 1), NewTopic("other", 1, 1)])["rx-a"].result(timeout=30)
    consumer = Consumer({"bootstrap.servers": bs, "group.id": "rxg", "group.protocol": "consumer",
                         "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 1000})
    consumer.subscribe(["^rx-.*"])

    def assigned() -> list[tuple[str, int]]:
        consumer.poll(0.1)
        return sorted((tp.topic, tp.partition) for tp in consumer.assignment())

    try:
        wait_for(lambda: assigned() == [("rx-a", 0), ("rx-a", 1)], 30, lambda: str(assigned()))
        admin.create_topics([NewTopic("rx-b", 1, 1)])["rx-b"].result(timeout=30)
        wait_for(lambda: assigned() == [("rx-a", 0), ("rx-a", 1), ("rx-b", 0)], 30, lambda: str(assigned()))
        admin.create_partitions([NewPartitions("rx-a", 3)])["rx-a"].result(timeout=30)
        wait_for(lambda: assigned() == [("rx-a", 0), ("rx-a", 1), ("rx-a", 2), ("rx-b", 0)], 30,
                 lambda: str(assigned()))
        group = _describe(bs, "rxg")
        assert group.members[0].subscribed_topic_regex == "(^rx-.*)"  # librdkafka wraps each pattern
    finally:
        consumer.close()


@pytest.mark.skipif(java_unavailable_reason() is not None, reason=str(java_unavailable_reason()))
def test_java_static_member_restart_keeps_its_partitions(broker: KBroker, tmp_path: Path) -> None:
    """group.instance.id with the consumer protocol: close() leaves with epoch -2, the partitions stay
    reserved, and the restarted instance (a new member id) gets the same partitions back while the
    other member's assignment never changes."""
    bs = broker.bootstrap
    _topic(bs, "st6")
    a = start_verifiable_consumer("s0", bs, "st6", "stg", tmp_path, group_protocol="consumer",
                                  group_instance_id="inst-0")
    members = [a]
    try:
        wait_for(lambda: len(a.owned()) == PARTITIONS, 90, lambda: a.stderr_tail(5))
        b = start_verifiable_consumer("s1", bs, "st6", "stg", tmp_path, group_protocol="consumer",
                                      group_instance_id="inst-1")
        members.append(b)
        wait_for(lambda: len(a.owned()) == 3 and len(b.owned()) == 3, 90, lambda: f"{a.owned()} {b.owned()}",
                 settle=1.0)
        a_parts, b_events = a.owned(), len(b.snapshot())
        a.terminate()
        before = _describe(bs, "stg")
        assert sorted(m.member_epoch for m in before.members)[0] == -2  # left temporarily, still a member
        a2 = start_verifiable_consumer("s0b", bs, "st6", "stg", tmp_path, group_protocol="consumer",
                                       group_instance_id="inst-0")
        members.append(a2)
        wait_for(lambda: a2.owned() == a_parts, 90, lambda: f"{a2.owned()} {a2.stderr_tail(5)}")
        assert not [e for e in b.snapshot()[b_events:] if e["name"].startswith("partitions_")]
        after = _describe(bs, "stg")
        assert len(after.members) == 2 and min(m.member_epoch for m in after.members) > 0
    finally:
        for m in members:
            if m.alive():
                m.kill()
