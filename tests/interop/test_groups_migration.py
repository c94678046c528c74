"""Online migration between the group protocols with Kafka's own Java consumer (VerifiableConsumer,
kafka-clients 4.3.1) against a real kbroker process: the rolling upgrade Kafka documents (restart the
classic consumers one by one with `group.protocol=consumer`) and the rolling downgrade back.

Three classic members (range or cooperative-sticky) share a 6-partition topic under continuous
production. Each is stopped (SIGTERM: LeaveGroup) and replaced by a consumer-protocol member: the
first replacement converts the classic group into a consumer group whose classic members go on with
JoinGroup/SyncGroup/Heartbeat (kbroker.coord.migration). Then each consumer-protocol member is
replaced by a classic one; when the last one leaves, the group becomes a classic group again.
Checks, from the members' own events: after each step the live members' holdings partition the
topic, no two members ever hold a partition at the same moment, every acknowledged record is
consumed, and a record is consumed twice only where its first consumer never committed past it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.broker import KBroker
from tests.support.groups_verifiable import (
    FAST_GROUP_OVERRIDES,
    SESSION_TIMEOUT_MS,
    BackgroundProducer,
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
@pytest.fixture
def broker(kbroker_factory: Callable[..., KBroker]) -> KBroker:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    return kbroker_factory(FAST_GROUP_OVERRIDES)


def partitioned(live: list[VerifiableMember], everyone: list[VerifiableMember], timeout: float = 60.0) -> None:
    """Wait until the live members' holdings are disjoint, cover the topic and are balanced (2 each)."""

    def ok() -> bool:
        owned = [m.owned() for m in live]
        flat = sorted(p for o in owned for p in o)
        return flat == list(range(PARTITIONS)) and sorted(len(o) for o in owned) == [2] * len(live)

    def state() -> str:
        return str({m.name: (sorted(m.owned()), m.snapshot()[-2:], m.stderr_tail(4)) for m in everyone})

    wait_for(ok, timeout, state, settle=1.0)


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_rolling_upgrade_then_rolling_downgrade(
    broker: KBroker, tmp_path: Path, members: list[VerifiableMember], producers: list[BackgroundProducer],
    assignor: str,
) -> None:
    started = time.monotonic()
    group = f"migrate-{assignor}"
    bs, topic = broker.bootstrap, f"orders-{group}"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=30)
    producer = BackgroundProducer(bs, topic)
    producers.append(producer)
    producer.produce_batch()
    producer.start()

    def classic(name: str) -> VerifiableMember:
        m = start_verifiable_consumer(name, bs, topic, group, tmp_path, assignor=assignor,
                                      session_timeout_ms=SESSION_TIMEOUT_MS,
                                      properties={"heartbeat.interval.ms": "500"})
        members.append(m)
        return m

    def consumer(name: str) -> VerifiableMember:
        m = start_verifiable_consumer(name, bs, topic, group, tmp_path, group_protocol="consumer")
        members.append(m)
        return m

    live = [classic("c1"), classic("c2"), classic("c3")]
    partitioned(live, members)

    # Rolling upgrade: each classic member restarts with group.protocol=consumer.
    for i in range(3):
        live[i].terminate()
        assert live[i].named("shutdown_complete"), live[i].stderr_tail()
        live[i] = consumer(f"n{i + 1}")
        partitioned(live, members)
    upgraded_at = time.monotonic() - started
    assert "online upgrade" in broker.log_text(), "the classic group was never converted"
    # Rolling downgrade: back to the classic protocol; the last leaver turns the group classic again.
    for i in range(3):
        live[i].terminate()
        assert live[i].named("shutdown_complete"), live[i].stderr_tail()
        live[i] = classic(f"d{i + 1}")
        partitioned(live, members)

    assert "online downgrade" in broker.log_text(), "the consumer group was never converted back"
    producer.stop()
    acked = producer.acked
    wait_for(lambda: acked <= consumption(members).by_offset.keys(), 30,
             lambda: f"{len(acked - consumption(members).by_offset.keys())} records unconsumed")
    for m in live:
        m.terminate()

    intervals = ownership_intervals(members)
    assert not overlapping_ownership(intervals), overlapping_ownership(intervals)
    assert all(o.end_ms is not None for o in intervals)
    seen = consumption(members)
    assert acked <= seen.by_offset.keys()
    assert seen.by_offset.keys() <= acked, "consumed offsets that were never produced"
    assert not seen.unexplained_duplicates, f"consumed again after commit: {seen.unexplained_duplicates[:20]}"
    failed = sorted({str(e.get("error")) for _, e in seen.failed_commits})
    if assignor == "range":
        # Eager members commit after every poll and before they revoke: nothing fails, as on Kafka.
        assert not seen.failed_commits, seen.failed_commits
    else:
        # The classic cooperative client refuses to commit while it rebalances
        # (RebalanceInProgressException, client-side); those records may be consumed again.
        assert all("rebalance" in str(e.get("error")) for _, e in seen.failed_commits), seen.failed_commits
    print(f"{assignor}: {len(acked)} records, upgraded after {upgraded_at:.1f} s, done after "
          f"{time.monotonic() - started:.1f} s, {sum(len(w) - 1 for w in seen.by_offset.values())} redelivered, "
          f"{len(seen.failed_commits)} failed commits {failed}")
