"""Regressions found by the slow quorum-controller simulation (tests/controller/test_quorum_simulation.py).

Seeds 80, 218, 254, 255 and 281 of `test_invariants_hold_over_many_random_runs` ended with a partition
led by a broker whose registration was still in controlled shutdown. Each time the same path:

1. the broker process asked to shut down (registration: in controlled shutdown, leaderships moved away);
2. its session expired (or a controller failover first reset the soft controlled-shutdown state, as
   Kafka's `ClusterControlManager.activate` does: sessions restart from the registrations' `fenced`
   alone), so it was fenced: `BrokerRegistrationChangeRecord(fenced=1)`, which leaves
   `in_controlled_shutdown` as it was (Kafka's `BrokerRegistration.cloneWith` changes only what the
   record names);
3. a heartbeat with that broker epoch arrived *without* want_shut_down, so the heartbeat table
   (FENCED, caught up, no want_shut_down) unfenced it, and `handleBrokerUnfenced` gave it the
   leaderless partitions it could lead: `generateLeaderAndIsrUpdates` accepts the broker being added
   whatever its registration says (only the others must be `isActive`).

That is exactly what Apache Kafka 4.3.1's controller does with those inputs (ReplicationControlManager
`processBrokerHeartbeat` / `handleBrokerUnfenced` / `generateLeaderAndIsrUpdates`' acceptor,
BrokerHeartbeatManager `calculateNextBrokerState`), so the controller is left as it is. The input is
what was wrong: no real broker sends step 3, since `BrokerLifecycleManager` keeps asking to shut down
once it has asked. The simulation produced it when a broker was "restarted" (new incarnation, its
shutdown request forgotten) while a registration of the replaced process was still pending: that
answer, committed later, handed the new process the old process's broker epoch. The simulation now
drops answers meant for a replaced process.

The tests below pin both halves: a broker that keeps asking is told to shut down and leads nothing;
one that stops asking is unfenced and elected as Kafka does (so the invariant "a leader is not in
controlled shutdown" holds only for brokers that behave as Kafka's do).
"""

from __future__ import annotations

import asyncio

import pytest

from kbroker.controller.quorum_controller import QuorumController
from kbroker.metadata.image import NO_LEADER, PartitionRegistration
from tests.controller.quorum_fakes import FakeClock, InMemoryRaftLog, heartbeat, join, new_controller
from tests.controller.test_quorum_simulation import _run

SESSION_MS = 9000  # broker.session.timeout.ms


def _partition(controller: QuorumController, topic: str, index: int) -> PartitionRegistration:
    t = controller.committed_image.topic(topic)
    assert t is not None
    return t.partitions[index]


def _create(controller: QuorumController, raft: InMemoryRaftLog, name: str, partitions: int, rf: int) -> None:
    async def run() -> None:
        task = asyncio.ensure_future(controller.create_topic(name, partitions, rf))
        await asyncio.sleep(0)
        raft.commit()
        await task

    asyncio.run(run())


def _fenced_while_in_controlled_shutdown() -> tuple[QuorumController, InMemoryRaftLog, int]:
    """One broker, leader and whole ISR of t-0: it asks to shut down (CONTROLLED_SHUTDOWN, t-0 left
    leaderless with ISR [1]), then goes silent past its session and is fenced. Its broker epoch."""
    clock = FakeClock()
    controller, raft = new_controller(clock)
    epoch = join(controller, raft, 1)
    _create(controller, raft, "t", 1, 1)
    assert _partition(controller, "t", 0).leader == 1

    asked = controller.broker_heartbeat(heartbeat(1, epoch, raft.end_offset, want_shut_down=True))
    raft.commit()
    reply = asked.result()
    assert (reply.is_fenced, reply.in_controlled_shutdown, reply.should_shut_down) == (False, True, False)
    p = _partition(controller, "t", 0)
    assert (p.leader, p.isr) == (NO_LEADER, (1,))

    clock.advance(SESSION_MS + 1)
    fenced = controller.poll()
    raft.commit()
    assert [op.result() for op in fenced] == [1]
    registration = controller.committed_image.cluster.brokers[1]
    # Kafka's FENCE change leaves in_controlled_shutdown as it was (BrokerRegistration.cloneWith).
    assert registration.fenced and registration.in_controlled_shutdown
    return controller, raft, epoch


def test_fenced_broker_in_controlled_shutdown_that_keeps_asking_is_told_to_shut_down_and_leads_nothing() -> None:
    controller, raft, epoch = _fenced_while_in_controlled_shutdown()
    before = _partition(controller, "t", 0)
    op = controller.broker_heartbeat(heartbeat(1, epoch, raft.end_offset, want_shut_down=True))
    raft.commit()
    reply = op.result()
    assert reply.should_shut_down and reply.is_fenced  # FENCED + want_shut_down -> SHUTDOWN_NOW
    after = _partition(controller, "t", 0)
    assert after.leader == NO_LEADER and after.leader_epoch == before.leader_epoch
    assert controller.committed_image.cluster.brokers[1].fenced


def test_fenced_broker_in_controlled_shutdown_that_stops_asking_is_unfenced_and_elected_as_kafka_does() -> None:
    """The heartbeat the simulation wrongly sent. Kafka 4.3.1: FENCED, caught up, no want_shut_down ->
    UNFENCED; handleBrokerUnfenced writes only UNFENCE and elects the added broker for leaderless
    partitions although its registration is still in controlled shutdown."""
    controller, raft, epoch = _fenced_while_in_controlled_shutdown()
    op = controller.broker_heartbeat(heartbeat(1, epoch, raft.end_offset))
    raft.commit()
    reply = op.result()
    assert not reply.is_fenced and not reply.should_shut_down
    registration = controller.committed_image.cluster.brokers[1]
    assert not registration.fenced and registration.in_controlled_shutdown
    p = _partition(controller, "t", 0)
    assert (p.leader, p.isr) == (1, (1,))


@pytest.mark.parametrize("seed", [80, 218, 254, 255, 281])
def test_simulation_seeds_where_a_replaced_broker_process_inherited_an_old_epoch(seed: int) -> None:
    """Failed before the simulation dropped answers meant for a replaced broker process."""
    counts = _run(seed, 2000)
    assert counts["register"] > 0 and counts["heartbeat"] > 0 and counts["failover"] > 0
