"""Consumer groups against a real kbroker process with stock clients: confluent-kafka (librdkafka),
kafka-python, aiokafka and Kafka's own Java tools (kafka-consumer-groups, kafka-consumer-perf-test)."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.broker import KBroker
from tests.support.java import java_unavailable_reason, run_java_main

pytestmark = pytest.mark.interop

GROUP_OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "5",
}


@pytest.fixture
def broker(kbroker_factory: Callable[..., KBroker]) -> KBroker:
    return kbroker_factory(GROUP_OVERRIDES)


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)


def produce(bootstrap: str, topic: str, values: list[str], partitions: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, v in enumerate(values):
        p.produce(topic, value=v.encode(), partition=i % partitions)
    assert p.flush(30) == 0


class Member:
    """A confluent-kafka group consumer whose assignment is tracked through the rebalance callbacks."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str, owners: dict[int, str], **conf: Any) -> None:
        self.name = name
        self.owners = owners  # partition -> member name, shared: must never hold two owners
        self.errors: list[Any] = []
        self.assigned: set[int] = set()
        self.consumed: list[str] = []
        self.assigns = 0
        self.revokes = 0
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "heartbeat.interval.ms": 300, "session.timeout.ms": 6000, "client.id": name,
            "error_cb": self.errors.append, **conf,
        })
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self.assigns += 1
        for tp in partitions:
            other = self.owners.get(tp.partition)
            assert other is None, f"partition {tp.partition} assigned to {self.name} while {other} owns it"
            self.owners[tp.partition] = self.name
            self.assigned.add(tp.partition)

    def _on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self.revokes += 1
        for tp in partitions:
            if self.owners.get(tp.partition) == self.name:
                del self.owners[tp.partition]
            self.assigned.discard(tp.partition)

    def poll(self, timeout: float = 0.05) -> None:
        msg = self.consumer.poll(timeout)
        if msg is not None:
            if msg.error() is None:
                self.consumed.append((msg.value() or b"").decode())
            else:
                self.errors.append(msg.error())

    def close(self) -> None:
        self.consumer.close()
        for p in list(self.assigned):
            if self.owners.get(p) == self.name:
                del self.owners[p]
        self.assigned.clear()


def poll_until(members: list[Member], cond: Callable[[], bool], timeout: float = 60.0, settle: float = 0.0) -> None:
    deadline = time.monotonic() + timeout
    met_at: float | None = None
    while time.monotonic() < deadline:
        for m in members:
            m.poll()
        if cond():
            met_at = met_at or time.monotonic()
            if time.monotonic() - met_at >= settle:
                return
        else:
            met_at = None
    state = {m.name: (sorted(m.assigned), m.errors) for m in members}
    raise AssertionError(f"condition not met within {timeout}s; assignments: {state}")


def broker_view(bootstrap: str, group: str) -> tuple[str, list[list[int]]]:
    """The group's state and each member's partitions as the coordinator reports them (DescribeGroups)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    desc = admin.describe_consumer_groups([group])[group].result(timeout=30)
    return str(desc.state.name), [sorted(tp.partition for tp in m.assignment.topic_partitions) for m in desc.members]


def assert_partitioned(bootstrap: str, group: str, members: list[Member], partitions: int, counts: list[int]) -> None:
    """Client view and coordinator view agree: every partition has exactly one owner."""
    poll_until(members, lambda: sorted(len(m.assigned) for m in members) == counts, settle=1.0)
    owned = [p for m in members for p in m.assigned]
    assert sorted(owned) == list(range(partitions)) if sum(counts) == partitions else len(set(owned)) == len(owned)
    state, assignments = broker_view(bootstrap, group)
    assert state == "STABLE"
    flat = [p for a in assignments for p in a]
    assert len(flat) == len(set(flat)) and sorted(len(a) for a in assignments) == counts


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_members_join_one_by_one_and_leave(broker: KBroker, strategy: str) -> None:
    """Eager and cooperative (incremental) rebalancing: the coordinator is protocol-agnostic."""
    bs = broker.bootstrap
    create_topic(bs, "orders", 6)
    produced = [f"v{i}" for i in range(600)]
    produce(bs, "orders", produced, 6)
    owners: dict[int, str] = {}
    members: list[Member] = []
    for n, counts in ((1, [6]), (2, [3, 3]), (3, [2, 2, 2])):
        members.append(Member(bs, "g-orders", "orders", f"m{n}", owners, **{"partition.assignment.strategy": strategy}))
        assert_partitioned(bs, "g-orders", members, 6, counts)
    everyone = list(members)
    more = [f"w{i}" for i in range(300)]
    produce(bs, "orders", more, 6)
    for counts in ([3, 3], [6]):
        members.pop().close()
        assert_partitioned(bs, "g-orders", members, 6, counts)
    # At least once: every record was consumed by some member (closed members included).
    poll_until(members, lambda: set(produced + more) <= {v for m in everyone for v in m.consumed}, timeout=60)
    members[0].close()
    state, assignments = broker_view(bs, "g-orders")
    assert state == "EMPTY" and assignments == []


def test_seed_four_partitions_three_then_four_consumers(broker: KBroker) -> None:
    bs = broker.bootstrap
    create_topic(bs, "seed4", 4)
    owners: dict[int, str] = {}
    members = [Member(bs, "g4", "seed4", f"c{i}", owners) for i in range(3)]
    assert_partitioned(bs, "g4", members, 4, [1, 1, 2])
    members.append(Member(bs, "g4", "seed4", "c3", owners))
    assert_partitioned(bs, "g4", members, 4, [1, 1, 1, 1])
    for m in members:
        m.close()


def test_seed_ten_consumers_on_five_partitions_leaves_five_idle(broker: KBroker) -> None:
    bs = broker.bootstrap
    create_topic(bs, "seed5", 5)
    owners: dict[int, str] = {}
    members = [Member(bs, "g5", "seed5", f"c{i}", owners) for i in range(3)]
    assert_partitioned(bs, "g5", members, 5, [1, 2, 2])
    members += [Member(bs, "g5", "seed5", f"c{i}", owners) for i in range(3, 10)]
    assert_partitioned(bs, "g5", members, 5, [0] * 5 + [1] * 5)
    for m in members:
        m.close()


def test_static_member_restart_causes_no_rebalance_and_duplicates_are_fenced(broker: KBroker) -> None:
    bs = broker.bootstrap
    create_topic(bs, "static", 4)
    owners: dict[int, str] = {}
    a = Member(bs, "g-static", "static", "a", owners, **{"group.instance.id": "inst-a"})
    b = Member(bs, "g-static", "static", "b", owners, **{"group.instance.id": "inst-b"})
    assert_partitioned(bs, "g-static", [a, b], 4, [2, 2])
    revokes_before = a.revokes
    b.close()  # a static member leaves no LeaveGroup behind (KIP-345)
    b2 = Member(bs, "g-static", "static", "b2", owners, **{"group.instance.id": "inst-b"})
    assert_partitioned(bs, "g-static", [a, b2], 4, [2, 2])
    poll_until([a, b2], lambda: True, settle=2.0)
    assert a.revokes == revokes_before, "a static member's restart rebalanced the group"
    # A second live member with the same instance id fences the older one.
    dup = Member(bs, "g-static", "static", "dup", {}, **{"group.instance.id": "inst-a"})
    poll_until([a, b2, dup], lambda: any(e.code() == KafkaError._FATAL and "fenced" in e.str() for e in a.errors), timeout=30)
    for m in (b2, dup):
        m.close()


def _commit_half(bs: str, group: str) -> dict[int, int]:
    """Join `group` on a 2-partition topic of 100 records per partition and commit offsets 30 and 70."""
    create_topic(bs, "durable", 2)
    produce(bs, "durable", [f"d{i}" for i in range(200)], 2)
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe(["durable"])
    deadline = time.monotonic() + 60
    while len(c.assignment()) < 2 and time.monotonic() < deadline:
        c.poll(0.2)
    assert len(c.assignment()) == 2
    wanted = {0: 30, 1: 70}
    c.commit(offsets=[TopicPartition("durable", p, o) for p, o in wanted.items()], asynchronous=False)
    committed = {tp.partition: tp.offset for tp in c.committed([TopicPartition("durable", p) for p in (0, 1)])}
    c.close()
    assert committed == wanted
    return committed


def _committed(bs: str, group: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bs, "group.id": group})
    tps = c.committed([TopicPartition("durable", p) for p in (0, 1)], timeout=30)
    c.close()
    return {tp.partition: tp.offset for tp in tps}


def _first_offsets_consumed(bs: str, group: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "auto.offset.reset": "earliest"})
    c.subscribe(["durable"])
    first: dict[int, int] = {}
    deadline = time.monotonic() + 60
    while len(first) < 2 and time.monotonic() < deadline:
        msg = c.poll(0.5)
        if msg is not None and msg.error() is None:
            first.setdefault(int(msg.partition() or 0), int(msg.offset() or 0))
    c.close()
    return first


def _restart(broker: KBroker, how: str) -> None:
    if how == "sigterm":
        assert broker.stop() == 0
    else:
        broker.kill()
    broker.start()


@pytest.mark.parametrize("how", ["sigterm", "kill-9"])
def test_committed_offsets_survive_restart(broker: KBroker, how: str) -> None:
    committed = _commit_half(broker.bootstrap, "durable-g")
    _restart(broker, how)
    assert _committed(broker.bootstrap, "durable-g") == committed


@pytest.mark.parametrize("how", ["sigterm", "kill-9"])
def test_consumption_resumes_at_committed_offsets_after_restart(broker: KBroker, how: str) -> None:
    committed = _commit_half(broker.bootstrap, "durable-g")
    _restart(broker, how)
    assert _first_offsets_consumed(broker.bootstrap, "durable-g") == committed


def test_kafka_python_group_consumer(broker: KBroker) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    bs = broker.bootstrap
    create_topic(bs, "kp", 3)
    produce(bs, "kp", [f"k{i}" for i in range(90)], 3)
    c = KafkaConsumer("kp", bootstrap_servers=bs, group_id="kp-g", auto_offset_reset="earliest",
                      enable_auto_commit=False, consumer_timeout_ms=15000)
    got = []
    for msg in c:
        got.append(msg.value.decode())
        if len(got) == 90:
            break
    c.commit()
    assert sorted(got) == sorted(f"k{i}" for i in range(90))
    assert sum(c.committed(KTP("kp", p)) or 0 for p in range(3)) == 90
    c.close()


def test_aiokafka_group_consumer(broker: KBroker) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATP

    bs = broker.bootstrap
    create_topic(bs, "ak", 3)
    produce(bs, "ak", [f"a{i}" for i in range(90)], 3)

    async def run() -> tuple[list[str], int]:
        c = AIOKafkaConsumer("ak", bootstrap_servers=bs, group_id="ak-g", auto_offset_reset="earliest",
                             enable_auto_commit=False)
        await c.start()
        got: list[str] = []
        try:
            async with asyncio.timeout(30):
                async for msg in c:
                    got.append(msg.value.decode())
                    if len(got) == 90:
                        break
            await c.commit()
            total = 0
            for p in range(3):
                total += await c.committed(ATP("ak", p)) or 0
        finally:
            await c.stop()
        return got, total

    got, total = asyncio.run(run())
    assert sorted(got) == sorted(f"a{i}" for i in range(90)) and total == 90


# -- Java tools ------------------------------------------------------------------------------------


def _java_or_skip() -> None:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)


def _groups_tool(bs: str, *args: str) -> str:
    proc = run_java_main("kafka-consumer-groups", ["--bootstrap-server", bs, *args], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.java
def test_kafka_consumer_groups_describe_reset_delete(broker: KBroker) -> None:
    _java_or_skip()
    bs = broker.bootstrap
    committed = _commit_half(bs, "tool-g")
    produce(bs, "durable", [f"e{i}" for i in range(10)], 2)  # lag grows by 5 per partition
    out = _groups_tool(bs, "--describe", "--group", "tool-g")
    rows = {}
    for line in out.splitlines():
        cols = line.split()
        if len(cols) >= 6 and cols[0] == "tool-g" and cols[1] == "durable":
            rows[int(cols[2])] = (int(cols[3]), int(cols[4]), int(cols[5]))
    assert rows == {p: (committed[p], 105, 105 - committed[p]) for p in (0, 1)}, out
    assert "tool-g" in _groups_tool(bs, "--list")
    out = _groups_tool(bs, "--reset-offsets", "--to-earliest", "--execute", "--group", "tool-g", "--topic", "durable")
    assert re.search(r"tool-g\s+durable\s+0\s+0", out), out
    c = Consumer({"bootstrap.servers": bs, "group.id": "tool-g"})
    assert [tp.offset for tp in c.committed([TopicPartition("durable", p) for p in (0, 1)], timeout=30)] == [0, 0]
    c.close()
    out = _groups_tool(bs, "--delete", "--group", "tool-g")
    assert "successful" in out, out
    assert "tool-g" not in _groups_tool(bs, "--list")


@pytest.mark.java
@pytest.mark.slow
def test_consumer_perf_test_one_million_records(broker: KBroker) -> None:
    _java_or_skip()
    bs = broker.bootstrap
    create_topic(bs, "perf", 6)
    prod = run_java_main("kafka-producer-perf-test", [
        "--topic", "perf", "--num-records", "1000000", "--record-size", "100", "--throughput", "-1",
        "--producer-props", f"bootstrap.servers={bs}", "acks=1", "linger.ms=20", "batch.size=262144",
    ], timeout=600)
    assert prod.returncode == 0, prod.stdout + prod.stderr
    cons = run_java_main("kafka-consumer-perf-test", [
        "--bootstrap-server", bs, "--topic", "perf", "--num-records", "1000000", "--group", "perf-g",
        "--timeout", "120000",
    ], timeout=600)
    assert cons.returncode == 0, cons.stdout + cons.stderr
    lines = [line for line in cons.stdout.splitlines() if line.strip()]
    at = next(i for i, line in enumerate(lines) if line.startswith("start.time"))
    header = [h.strip() for h in lines[at].split(",")]
    values = [v.strip() for v in lines[at + 1].split(",")]
    row = dict(zip(header, values, strict=False))
    assert int(row["data.consumed.in.nMsg"]) >= 1_000_000, cons.stdout
    print(f"ConsumerPerformance through group perf-g: {row['MB.sec']} MB/s, {row['nMsg.sec']} msg/s")
    c = Consumer({"bootstrap.servers": bs, "group.id": "perf-g"})
    assert sum(tp.offset for tp in c.committed([TopicPartition("perf", p) for p in range(6)], timeout=30)) > 0
    c.close()
