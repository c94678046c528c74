"""Consumer groups with Kafka's own Java consumer (kafka-clients 4.3.1 `VerifiableConsumer`) against a
real kbroker process: the classic protocol with the four stock assignors, and KIP-848's consumer
protocol with both server-side assignors.

The scenario (issue 6): a 6-partition topic under continuous production; three consumers join one
by one, then one leaves cleanly (SIGTERM: the JVM closes its consumer, which sends LeaveGroup) and
one is killed (-9: only session expiry removes it). The checks read the members' own event streams:

- ownership: no two members ever hold the same partition at the same moment (eager assignors revoke
  before rejoining, cooperative-sticky revokes in a first rebalance and reassigns in a second one,
  KIP-848 revokes before the coordinator reassigns), and after each step the live members' holdings
  partition the topic exactly, as the coordinator's DescribeGroups view says too;
- every produced record is consumed;
- nothing is consumed twice unless its first consumer never committed it: VerifiableConsumer
  commits synchronously after every poll, so the only uncommitted consumption is the killed
  member's last batch (and, with cooperative-sticky, a batch whose commit the client failed because
  a rebalance was in progress: Kafka's classic client fails those with RebalanceInProgressException).
  Eager and KIP-848 members never see a commit fail here (checked against Apache Kafka 4.3.1).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.broker import KBroker, running_kbroker
from tests.support.groups_verifiable import (
    FAST_GROUP_OVERRIDES,
    SESSION_TIMEOUT_MS,
    BackgroundProducer,
    Ownership,
    VerifiableMember,
    consumption,
    overlapping_ownership,
    ownership_intervals,
    start_verifiable_consumer,
    wait_for,
)
from tests.support.java import java_unavailable_reason

pytestmark = [pytest.mark.interop, pytest.mark.java]

PARTITIONS = 6
@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KBroker]:
    """One broker for every scenario: each has its own group and topic (named after the scenario), and
    the kills are of members, never of the broker."""
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    with running_kbroker(tmp_path_factory.mktemp("groups-java"), FAST_GROUP_OVERRIDES) as b:
        yield b


def broker_assignments(admin: AdminClient, group: str) -> tuple[str, dict[str, set[int]]]:
    """The coordinator's view: group state and each member's partitions, keyed by client id."""
    try:
        desc = admin.describe_consumer_groups([group])[group].result(timeout=30)
    except KafkaException as exc:  # e.g. NOT_COORDINATOR while __consumer_offsets is being created
        return f"error {exc}", {}
    return str(desc.state.name), {
        m.client_id: {tp.partition for tp in m.assignment.topic_partitions} for m in desc.members
    }


def settle(admin: AdminClient, group: str, live: list[VerifiableMember], everyone: list[VerifiableMember],
           counts: list[int], timeout: float = 40.0) -> None:
    """Wait until the live members' holdings partition the topic with these sizes (for a second),
    then check the coordinator reports the same assignment."""

    def partitioned() -> bool:
        owned = [m.owned() for m in live]
        flat = [p for o in owned for p in o]
        return sorted(len(o) for o in owned) == counts and sorted(flat) == list(range(PARTITIONS))

    def state() -> str:
        tails = {m.name: (sorted(m.owned()), m.snapshot()[-3:], m.stderr_tail(5)) for m in everyone}
        return f"expected sizes {counts}; members: {tails}"

    wait_for(partitioned, timeout, state, settle=1.0)
    expected = {m.name: m.owned() for m in live}
    view: tuple[str, dict[str, set[int]]] = ("", {})

    def agrees() -> bool:
        nonlocal view
        view = broker_assignments(admin, group)
        return view == ("STABLE", expected)

    wait_for(agrees, 15, lambda: f"coordinator says {view}, members hold {expected}")


def handover_ms(intervals: list[Ownership], gone: str, gone_at_ms: int) -> int:
    """How long after `gone` left (or died) another member was first given one of its partitions."""
    held = {o.partition for o in intervals if o.member == gone and o.end_ms == gone_at_ms}
    starts = [o.start_ms for o in intervals if o.member != gone and o.partition in held and o.start_ms >= gone_at_ms]
    assert starts, f"nobody took over {gone}'s partitions {sorted(held)}"
    return min(starts) - gone_at_ms


SCENARIOS = [
    pytest.param("classic", "range", None, id="classic-range"),
    # The broker treats every classic client-side assignor alike (it relays the leader's assignment): the
    # eager range and cooperative-sticky runs cover its two rebalance paths by default; the others are slow.
    pytest.param("classic", "round-robin", None, id="classic-round-robin", marks=pytest.mark.slow),
    pytest.param("classic", "sticky", None, id="classic-sticky", marks=pytest.mark.slow),
    pytest.param("classic", "cooperative-sticky", None, id="classic-cooperative-sticky"),
    pytest.param("consumer", None, "uniform", id="consumer-uniform"),
    # The server-side range assignor runs with Java members by default in
    # test_groups_consumer_protocol.py::test_java_consumers_with_server_side_assignor[range].
    pytest.param("consumer", None, "range", id="consumer-range", marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("protocol", "assignor", "remote_assignor"), SCENARIOS)
def test_join_one_by_one_then_leave_and_kill(
    broker: KBroker, tmp_path: Path, members: list[VerifiableMember], producers: list[BackgroundProducer],
    protocol: str, assignor: str | None, remote_assignor: str | None,
) -> None:
    group = f"g-{protocol}-{assignor or remote_assignor}"
    bs, topic = broker.bootstrap, f"orders-{group}"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=30)
    producer = BackgroundProducer(bs, topic)
    producers.append(producer)
    producer.produce_batch()
    producer.start()

    def join(name: str) -> VerifiableMember:
        if protocol == "classic":
            m = start_verifiable_consumer(
                name, bs, topic, group, tmp_path, assignor=assignor, session_timeout_ms=SESSION_TIMEOUT_MS,
                properties={"heartbeat.interval.ms": "500"},
            )
        else:
            # KIP-848 clients reject session.timeout.ms / heartbeat.interval.ms: the broker sets them.
            m = start_verifiable_consumer(
                name, bs, topic, group, tmp_path, group_protocol="consumer", remote_assignor=remote_assignor,
            )
        members.append(m)
        return m

    c1 = join("c1")
    settle(admin, group, [c1], members, [6])
    c2 = join("c2")
    settle(admin, group, [c1, c2], members, [3, 3])
    c3 = join("c3")
    settle(admin, group, [c1, c2, c3], members, [2, 2, 2])

    c3.terminate()  # clean: close() revokes, then LeaveGroup (ConsumerGroupHeartbeat epoch -1 in KIP-848)
    assert c3.named("shutdown_complete"), c3.stderr_tail()
    settle(admin, group, [c1, c2], members, [3, 3])

    c2.kill()  # no goodbye: its partitions move only when its session expires
    settle(admin, group, [c1], members, [6], timeout=SESSION_TIMEOUT_MS / 1000 + 30)

    producer.stop()
    acked = producer.acked

    def all_consumed() -> bool:
        return acked <= consumption(members).by_offset.keys()

    wait_for(all_consumed, 30, lambda: f"{len(acked - consumption(members).by_offset.keys())} records unconsumed")
    c1.terminate()

    intervals = ownership_intervals(members)
    # The clean leaver's partitions moved on at once (LeaveGroup), the killed member's only when its
    # session expired (Kafka never removes a member because its connection closed).
    left_at, killed_at = max(o.end_ms or 0 for o in intervals if o.member == "c3"), c2.killed_at_ms or 0
    moved_after_leave = handover_ms(intervals, "c3", left_at)
    moved_after_kill = handover_ms(intervals, "c2", killed_at)
    assert moved_after_leave < SESSION_TIMEOUT_MS, f"c3's partitions moved {moved_after_leave} ms after it left"
    assert SESSION_TIMEOUT_MS - 600 <= moved_after_kill <= SESSION_TIMEOUT_MS + 15000, \
        f"c2's partitions moved {moved_after_kill} ms after the kill; its session timeout is {SESSION_TIMEOUT_MS} ms"
    # No moment where two members held one partition.
    assert not overlapping_ownership(intervals), overlapping_ownership(intervals)
    # Every member that ever held a partition gave it up (or died): the ownership log is complete.
    assert all(o.end_ms is not None for o in intervals)

    seen = consumption(members)
    assert acked <= seen.by_offset.keys()
    assert seen.by_offset.keys() <= acked, "consumed offsets that were never produced"
    # Duplicates only where the first consumer never committed past the record.
    assert not seen.unexplained_duplicates, f"consumed again after commit: {seen.unexplained_duplicates[:20]}"
    duplicated_by = {who[0] for who in seen.by_offset.values() if len(who) > 1}
    eager = protocol == "classic" and assignor != "cooperative-sticky"
    if eager:
        # Eager members revoke everything in poll() before rejoining, after the previous poll's
        # commit succeeded: only the killed member can leave consumed-but-uncommitted records.
        assert duplicated_by <= {"c2"}, (duplicated_by, seen.failed_commits)
        assert not seen.failed_commits, seen.failed_commits
    if protocol == "consumer":
        # KIP-848 members keep committing while they reconcile, with whatever epoch they last heard.
        # Kafka 4.3 (KIP-1251, assignment epochs) accepts a commit whose epoch is older than the
        # member's current one for partitions assigned to it at or before that epoch, so a live
        # member's commit never fails here; a strict "epoch == member epoch" check answers
        # STALE_MEMBER_EPOCH to one or two of them per run.
        assert not seen.failed_commits, seen.failed_commits
        assert duplicated_by <= {"c2"}, (duplicated_by, seen.failed_commits)
    # The clean leaver committed everything it consumed before it left.
    assert "c3" not in duplicated_by or any(name == "c3" for name, _ in seen.failed_commits)
    print(f"{protocol}/{assignor or remote_assignor}: {len(acked)} records, handover {moved_after_leave} ms "
          f"after a leave, {moved_after_kill} ms after a kill, "
          f"{sum(len(w) - 1 for w in seen.by_offset.values())} redelivered (from {sorted(duplicated_by)}), "
          f"{len(seen.failed_commits)} failed commits {sorted({str(e.get('error')) for _, e in seen.failed_commits})}")
