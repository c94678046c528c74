"""The consumer-group seed questions (issue 6) not already in test_groups_clients.py, against a real
kbroker process: each asserts what Apache Kafka 4.3 does.

- auto-commit before processing loses the record a consumer dies on; commit after processing
  re-delivers it instead (librdkafka in a subprocess, killed -9 at an exact point);
- a Java consumer that stops polling for longer than max.poll.interval.ms is removed from the group,
  another member takes over every partition, its commitSync fails with CommitFailedException, the
  coordinator rejects its old member id, and polling again brings it back;
- Java auto-commit commits before partitions are revoked (in onJoinPrepare while the group is
  PreparingRebalance; for KIP-848 before acknowledging a revocation), so clean joins and leaves
  re-deliver nothing;
- a static Java member (group.instance.id) restarted within its session timeout causes no rebalance;

The Java cases run with the classic protocol and with KIP-848's consumer protocol: Kafka 4.3 gives the
same answers to both (checked against the reference broker, tests/support/reference_kafka.py).
- a new group starts at the log start with auto.offset.reset=earliest and at the log end with latest.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.protocol.messages.offset_commit import OffsetCommitRequest
from tests.support.broker import REPO_ROOT, KBroker, running_kbroker
from tests.support.groups_verifiable import (
    VerifiableMember,
    consumption,
    overlapping_ownership,
    ownership_intervals,
    start_verifiable_consumer,
    wait_for,
)
from tests.support.java import java_unavailable_reason, start_java_main
from tests.support.raw_client import RawKafkaClient

pytestmark = pytest.mark.interop

BROKER_OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "5",
    "group.min.session.timeout.ms": "1000",
    # KIP-848 members take their session timeout and heartbeat interval from the broker.
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "500",
}
SLOW_CONSUMER = REPO_ROOT / "tests" / "support" / "groups_java" / "SlowConsumer.java"
UNKNOWN_MEMBER_ID = 25


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KBroker]:
    """One broker for the module: no test restarts it, each uses a topic and a group of its own."""
    with running_kbroker(tmp_path_factory.mktemp("groups-seeds"), BROKER_OVERRIDES) as b:
        yield b


def _java_or_skip() -> None:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)


def produce(bootstrap: str, topic: str, count: int, partitions: int = 1, prefix: str = "m") -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        p.produce(topic, value=f"{prefix}{i}".encode(), partition=i % partitions)
    assert p.flush(30) == 0


def committed(bootstrap: str, group: str, topic: str, partitions: int = 1) -> list[int]:
    """The group's committed offsets (OffsetFetch; this consumer never joins the group)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    finally:
        c.close()
    return [tp.offset for tp in tps]


class LineProcess:
    """A subprocess whose stdout lines are read in the background, to wait for one exactly."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))

    def wait_line(self, pred: Callable[[str], bool], timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no matching line within {timeout}s; got {self.lines}")
            try:
                line = self._queue.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                if self.proc.poll() is not None and self._queue.empty():
                    raise AssertionError(f"process exited {self.proc.returncode}; got {self.lines}") from None
                continue
            self.lines.append(line)
            if pred(line):
                return line

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)


@pytest.fixture
def processes() -> Iterator[list[LineProcess]]:
    started: list[LineProcess] = []
    yield started
    for p in started:
        p.kill()


def offsets(lines: list[str], verb: str) -> list[int]:
    return [int(line.split()[1]) for line in lines if line.startswith(verb + " ")]


# -- auto-commit before processing vs commit after processing --------------------------------------


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
@pytest.mark.parametrize("mode", ["auto", "manual"])
def test_consumer_killed_mid_record_auto_commit_loses_it_manual_commit_redelivers_it(
    broker: KBroker, processes: list[LineProcess], mode: str, protocol: str
) -> None:
    bs, topic, group, n, last = broker.bootstrap, f"seed-commit-{mode}-{protocol}", f"g-{mode}-{protocol}", 5, 9
    create_topic(bs, topic, 1)
    produce(bs, topic, last + 1)

    def worker(*extra: str) -> LineProcess:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.groups_commit_worker", bs, topic, group, "--mode", mode,
             "--until", str(last), "--protocol", protocol, *extra],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True, cwd=REPO_ROOT,
        )
        lp = LineProcess(proc)
        processes.append(lp)
        return lp

    first = worker("--hang-at", str(n))
    if mode == "auto":
        # poll() returned record N; librdkafka's background committer commits N+1 although N is
        # still being processed.
        first.wait_line(lambda line: line == f"received {n}", 60)
        wait_for(lambda: committed(bs, group, topic) == [n + 1], 15,
                 lambda: f"committed {committed(bs, group, topic)}, expected {n + 1} before the kill")
    else:
        first.wait_line(lambda line: line == f"processed {n}", 60)
        assert committed(bs, group, topic) == [n], "commit after processing: N processed, not yet committed"
    first.kill()

    second = worker()
    second.wait_line(lambda line: line == "done", 60)
    before, after = offsets(first.lines, "processed"), offsets(second.lines, "processed")
    if mode == "auto":
        assert before == list(range(n)), first.lines
        assert after == list(range(n + 1, last + 1)), second.lines
        assert n not in before + after, "the record the consumer died on was lost"
    else:
        assert before == list(range(n + 1)), first.lines
        assert after == list(range(n, last + 1)), second.lines
        assert (before + after).count(n) == 2 and sorted(set(before + after)) == list(range(last + 1))
    assert committed(bs, group, topic) == [last + 1]


# -- max.poll.interval.ms -------------------------------------------------------------------------------


def describe(admin: AdminClient, group: str) -> tuple[str, dict[str, list[int]]]:
    try:
        desc = admin.describe_consumer_groups([group])[group].result(timeout=30)
    except KafkaException as exc:  # e.g. NOT_COORDINATOR while __consumer_offsets is being created
        return f"error {exc}", {}
    return str(desc.state.name), {
        m.client_id: sorted(tp.partition for tp in m.assignment.topic_partitions) for m in desc.members
    }


@pytest.mark.java
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_consumer_exceeding_max_poll_interval_is_removed_and_its_commit_fails(
    broker: KBroker, processes: list[LineProcess], protocol: str
) -> None:
    _java_or_skip()
    bs, topic, group = broker.bootstrap, f"seed-slow-{protocol}", f"g-slow-{protocol}"
    create_topic(bs, topic, 4)
    produce(bs, topic, 40, partitions=4)
    admin = AdminClient({"bootstrap.servers": bs})
    timeouts = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500} if protocol == "classic" else {}
    fast = Consumer({
        "bootstrap.servers": bs, "group.id": group, "client.id": "fast", "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "group.protocol": protocol, **timeouts,
    })
    fast.subscribe([topic])
    view: tuple[str, dict[str, list[int]]] = ("", {})

    def broker_says(expected: dict[str, list[int]]) -> Callable[[], bool]:
        def check() -> bool:
            nonlocal view
            fast.poll(0.1)
            view = describe(admin, group)
            return view == ("STABLE", expected)
        return check

    try:
        wait_for(broker_says({"fast": [0, 1, 2, 3]}), 30, lambda: f"coordinator says {view}")
        slow = LineProcess(start_java_main(str(SLOW_CONSUMER), [bs, topic, group, "3000", protocol],
                                           stdin=subprocess.PIPE, stderr=subprocess.DEVNULL))
        processes.append(slow)

        def slow_says(prefix: str, timeout: float) -> str:
            """Wait for the slow consumer's next line starting with `prefix`, polling `fast` meanwhile
            (librdkafka serves its rebalances from poll())."""
            said: list[str] = []

            def check() -> bool:
                fast.poll(0.1)
                try:
                    said.append(slow.wait_line(lambda line: line.startswith(prefix), 0.1))
                except AssertionError:
                    return False
                return True

            wait_for(check, timeout, lambda: f"slow consumer said {slow.lines}")
            return said[0]

        assigned = [slow_says("ASSIGNED", 60)]
        # ASSIGNED [0, 1] MEMBER <id> GENERATION <n>
        words = assigned[0].split()
        member_id, generation = words[words.index("MEMBER") + 1], int(words[words.index("GENERATION") + 1])
        slow_says("CONSUMED", 10)
        # The slow member stops polling; after max.poll.interval.ms (3 s) its heartbeat thread leaves
        # the group and the coordinator hands every partition to the member that keeps polling.
        wait_for(broker_says({"fast": [0, 1, 2, 3]}), 30, lambda: f"coordinator says {view}")

        slow.send("commit")
        outcome = slow_says("COMMIT_", 30)
        assert outcome.startswith("COMMIT_FAILED org.apache.kafka.clients.consumer.CommitFailedException"), outcome

        # The client fails that commit itself (it knows it left); the coordinator would too: the
        # removed member id is unknown to the group (OffsetCommit v9+ carries the KIP-848 member epoch).
        request = OffsetCommitRequest(
            group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
            topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[
                OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=10)])],
        )
        with RawKafkaClient(bs) as raw:
            response = raw.request(8, 8 if protocol == "classic" else 9, request)
        assert [p.error_code for t in response.topics for p in t.partitions] == [UNKNOWN_MEMBER_ID]

        # Polling again rejoins, in a later generation (epoch), with half the partitions.
        slow.send("poll")
        rejoined = slow_says("REJOINED", 60)  # REJOINED [2, 3] GENERATION <n>
        assert int(rejoined.split()[-1]) > generation, rejoined
        mine = sorted(int(p) for p in rejoined[rejoined.index("[") + 1:rejoined.index("]")].split(","))
        assert len(mine) == 2, rejoined
        others = sorted(set(range(4)) - set(mine))
        wait_for(broker_says({"fast": others, "slow": mine}), 30, lambda: f"coordinator says {view}")
        slow.send("close")
        slow_says("CLOSED", 30)
    finally:
        fast.close()


# -- Java auto-commit on rebalance, static membership -------------------------------------------------


@pytest.fixture
def members() -> Iterator[list[VerifiableMember]]:
    started: list[VerifiableMember] = []
    yield started
    for m in started:
        if m.alive():
            m.proc.kill()
            m.proc.wait(30)


def _settled(live: list[VerifiableMember], partitions: int, counts: list[int]) -> Callable[[], bool]:
    def check() -> bool:
        owned = [m.owned() for m in live]
        flat = sorted(p for o in owned for p in o)
        return sorted(len(o) for o in owned) == counts and flat == list(range(partitions))
    return check


@pytest.mark.java
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_java_auto_commit_on_rebalance_redelivers_nothing(
    broker: KBroker, tmp_path: Path, members: list[VerifiableMember], protocol: str
) -> None:
    """Java's auto-commit commits the consumed position before partitions are revoked: in
    onJoinPrepare for an eager classic member (the coordinator must accept it while the group is
    PreparingRebalance, as Kafka does), before acknowledging a revocation for a KIP-848 member (with
    the member epoch it last heard, KIP-1251). Otherwise the next owner would re-read what was
    already consumed."""
    _java_or_skip()
    bs, topic, group = broker.bootstrap, f"seed-autocommit-{protocol}", f"g-autocommit-{protocol}"
    create_topic(bs, topic, 4)
    produce(bs, topic, 400, partitions=4)

    def join(name: str) -> VerifiableMember:
        props = {"max.poll.records": "10", "auto.commit.interval.ms": "60000"}
        if protocol == "classic":
            m = start_verifiable_consumer(name, bs, topic, group, tmp_path, assignor="range", auto_commit=True,
                                          session_timeout_ms=3000,
                                          properties={**props, "heartbeat.interval.ms": "500"})
        else:
            m = start_verifiable_consumer(name, bs, topic, group, tmp_path, group_protocol="consumer",
                                          remote_assignor="range", auto_commit=True, properties=props)
        members.append(m)
        return m

    def describe_members() -> str:
        return str({m.name: (sorted(m.owned()), m.snapshot()[-2:], m.stderr_tail(3)) for m in members})

    a = join("a")
    wait_for(_settled([a], 4, [4]), 40, describe_members)
    # Let `a` get part-way through, then join `b`; more records arrive meanwhile.
    wait_for(lambda: sum(e["count"] for e in a.named("records_consumed")) >= 40, 30, describe_members)
    b = join("b")
    produce(bs, topic, 200, partitions=4, prefix="x")
    wait_for(_settled([a, b], 4, [2, 2]), 40, describe_members, settle=1.0)
    b.terminate()  # close() commits (auto-commit) and leaves
    wait_for(_settled([a], 4, [4]), 40, describe_members, settle=1.0)
    wait_for(lambda: len(consumption(members).by_offset) == 600, 30, describe_members)
    a.terminate()

    seen = consumption(members)
    assert sorted(seen.by_offset) == sorted((p, o) for p in range(4) for o in range(150))
    twice = {k: v for k, v in seen.by_offset.items() if len(v) > 1}
    assert not twice, f"re-delivered after a clean rebalance: {sorted(twice.items())[:10]}"
    assert not overlapping_ownership(ownership_intervals(members))
    assert committed(bs, group, topic, 4) == [150] * 4


@pytest.mark.java
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_java_static_member_restart_within_session_timeout_causes_no_rebalance(
    broker: KBroker, tmp_path: Path, members: list[VerifiableMember], protocol: str
) -> None:
    _java_or_skip()
    bs, topic, group = broker.bootstrap, f"seed-static-{protocol}", f"g-static-java-{protocol}"
    create_topic(bs, topic, 4)
    produce(bs, topic, 40, partitions=4)
    admin = AdminClient({"bootstrap.servers": bs})

    def join(name: str, instance: str) -> VerifiableMember:
        if protocol == "classic":
            m = start_verifiable_consumer(name, bs, topic, group, tmp_path, assignor="range",
                                          group_instance_id=instance, session_timeout_ms=10000,
                                          properties={"heartbeat.interval.ms": "500"})
        else:
            m = start_verifiable_consumer(name, bs, topic, group, tmp_path, group_protocol="consumer",
                                          remote_assignor="range", group_instance_id=instance)
        members.append(m)
        return m

    def state() -> str:
        return str({m.name: (sorted(m.owned()), m.snapshot()[-2:], m.stderr_tail(3)) for m in members})

    a = join("a", "inst-a")
    b = join("b", "inst-b")
    wait_for(_settled([a, b], 4, [2, 2]), 40, state, settle=1.0)
    generation = admin.describe_consumer_groups([group])[group].result(timeout=30)
    held_by_b = b.owned()
    a_events = len(a.snapshot())
    # A static member sends no LeaveGroup on close (KIP-345; KIP-848: a heartbeat with epoch -2,
    # "leaving temporarily"): the coordinator keeps its place and its partitions.
    b.terminate()
    b2 = join("b2", "inst-b")
    wait_for(lambda: b2.owned() == held_by_b, 30, state)
    time.sleep(2)  # a rebalance would reach `a` within a few heartbeats
    assert not [e for e in a.snapshot()[a_events:] if e["name"].startswith("partitions_")], \
        f"the static member's restart rebalanced the group: {a.snapshot()[a_events:]}"
    after = admin.describe_consumer_groups([group])[group].result(timeout=30)
    assert str(after.state.name) == "STABLE"
    assert sorted(m.group_instance_id for m in after.members) == ["inst-a", "inst-b"]
    assert {m.group_instance_id: m.member_id for m in after.members}["inst-a"] == \
        {m.group_instance_id: m.member_id for m in generation.members}["inst-a"]
    a.terminate()
    b2.terminate()


# -- auto.offset.reset for a new group --------------------------------------------------------------------


@pytest.mark.parametrize(("reset", "first"), [("earliest", "m0"), ("latest", "late0")])
def test_new_group_starts_where_auto_offset_reset_says(broker: KBroker, reset: str, first: str) -> None:
    bs, topic = broker.bootstrap, f"seed-reset-{reset}"
    create_topic(bs, topic, 1)
    produce(bs, topic, 10)
    fetch_state: list[str] = []

    def on_stats(raw: str) -> None:
        partition = json.loads(raw).get("topics", {}).get(topic, {}).get("partitions", {}).get("0", {})
        fetch_state.append(str(partition.get("fetch_state")))

    c = Consumer({"bootstrap.servers": bs, "group.id": f"g-{reset}", "auto.offset.reset": reset,
                  "enable.auto.commit": False, "statistics.interval.ms": 100, "stats_cb": on_stats})
    c.subscribe([topic])
    got: list[Any] = []
    try:
        deadline = time.monotonic() + 30
        # No committed offset: the consumer resets (ListOffsets) before fetching. Produce more only
        # once librdkafka fetches, so that `latest` has resolved to 10 and not to 13.
        while (not fetch_state or fetch_state[-1] != "active") and time.monotonic() < deadline:
            msg = c.poll(0.1)
            if msg is not None and msg.error() is None:
                got.append(msg)
        assert fetch_state and fetch_state[-1] == "active", f"never fetching: {fetch_state[-5:]}"
        produce(bs, topic, 3, prefix="late")
        while len(got) < (13 if reset == "earliest" else 3) and time.monotonic() < deadline:
            msg = c.poll(0.1)
            if msg is not None and msg.error() is None:
                got.append(msg)
    finally:
        c.close()
    assert got and (got[0].value() or b"").decode() == first
    assert [int(m.offset() or 0) for m in got] == list(range(0 if reset == "earliest" else 10, 13))
