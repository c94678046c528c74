"""Randomized runs of two quorum controllers over one in-memory Raft log, checking invariants each step.

Each seed drives a deterministic sequence of broker registrations (new and repeated incarnations),
heartbeats (caught up or not, with controlled shutdown), silences past the session timeout, topic
creation, AlterPartition from the current leader, elections, reassignments, unregistrations, commits,
and leadership moving between the two controllers (losing whatever was not committed). After every
step, on the committed image:
- a partition's leader is -1 or an active broker (registered, unfenced, not shutting down) in its ISR;
  the ISR is a non-empty subset of the replicas; with a leader, every ISR member is active;
- leader and partition epochs never go back; a partition whose registration changed has a higher
  partition epoch;
- both controllers' committed images are the image of the committed log (a standby follows exactly);
- every answer handed out before a commit is complete after it, and every broker epoch answered is
  the registration's batch offset in the committed log.

The brokers behave as Kafka's do: a process heartbeats only with the epoch its own registration was
answered, and once it has asked to shut down it keeps asking (BrokerLifecycleManager). An answer that
arrives after its process was replaced by a new incarnation reaches nobody.
"""

from __future__ import annotations

import random
import uuid

import pytest

from kbroker.controller.quorum_controller import QuorumController
from kbroker.controller.raft_client import LeaderAndEpoch
from kbroker.metadata.delta import MetadataDelta
from kbroker.metadata.image import NO_LEADER, MetadataImage
from kbroker.metadata.loader import MetadataBatch
from kbroker.protocol.errors import KafkaError
from kbroker.protocol.messages.alter_partition import AlterPartitionRequest
from kbroker.protocol.messages.alter_partition_reassignments import (
    AlterPartitionReassignmentsRequest as Reassign,
)
from kbroker.protocol.messages.elect_leaders import ElectLeadersRequest
from tests.controller.quorum_fakes import FakeClock, InMemoryRaftLog, heartbeat, new_controller, registration

CONTROLLERS = (3000, 3001)
BROKERS = (1, 2, 3, 4)


class SharedLog(InMemoryRaftLog):
    """The in-memory log with every controller listening (commits and leader changes reach all)."""

    def __init__(self) -> None:
        super().__init__()
        self.listeners: list[QuorumController] = []

    def commit(self) -> None:
        new = self.uncommitted()
        self.committed_upto = len(self.batches) - 1
        for listener in self.listeners:
            if new:
                listener.handle_commit(new)

    def elect(self, node_id: int, epoch: int | None = None) -> None:
        del self.batches[self.committed_upto + 1:]
        self.end_offset = self.batches[-1].last_offset + 1 if self.batches else 0
        self.epoch = self.epoch + 1 if epoch is None else epoch
        self.batches.append(MetadataBatch(self.end_offset, self.epoch, 0, []))  # LeaderChangeMessage
        self.end_offset += 1
        self.leader_id = node_id
        for listener in self.listeners:
            listener.handle_leader_change(LeaderAndEpoch(node_id, self.epoch))


def _replayed(batches: list[MetadataBatch], image: MetadataImage) -> MetadataImage:
    """`image` after `batches` (the committed log replayed independently of the controllers)."""
    for b in batches:
        delta = MetadataDelta(image)
        delta.replay_all(b.records)
        image = delta.apply()
    return image


def _check(image: MetadataImage, previous: MetadataImage) -> None:
    brokers = image.cluster.brokers

    def active(b: int) -> bool:
        r = brokers.get(b)
        return r is not None and not r.fenced and not r.in_controlled_shutdown

    for topic in image.topics:
        for index, p in topic.partitions.items():
            where = f"{topic.name}-{index} {p}"
            assert p.isr and set(p.isr) <= set(p.replicas), where
            if p.leader != NO_LEADER:
                assert p.leader in p.isr and active(p.leader), where
                assert all(active(r) for r in p.isr), where
            old_topic = previous.topics.topics_by_id.get(topic.id)
            old = None if old_topic is None else old_topic.partitions.get(index)
            if old is not None:
                assert p.leader_epoch >= old.leader_epoch and p.partition_epoch >= old.partition_epoch, where
                if old != p:
                    assert p.partition_epoch > old.partition_epoch, where


def _create(c: QuorumController, name: str, count: int, rf: int) -> object:
    return c._write("createTopics", lambda: c.replication.create_topic(name, count, rf))


def _run(seed: int, steps: int) -> dict[str, int]:
    rnd = random.Random(seed)
    clock = FakeClock()
    raft = SharedLog()
    controllers = {}
    for node in CONTROLLERS:
        c, _ = new_controller(clock, node_id=node, leader=False, raft=raft, seed=seed,
                              unclean_leader_election_enable=rnd.random() < 0.3,
                              leader_imbalance_check_interval_ms=20_000)
        controllers[node] = c
        raft.listeners.append(c)
    raft.elect(CONTROLLERS[0])
    raft.commit()
    epochs: dict[int, int] = {}
    incarnations: dict[int, uuid.UUID] = {b: uuid.UUID(int=seed * 100 + b) for b in BROKERS}
    pending: list[tuple[str, object, object]] = []  # (kind, op, extra)
    down: set[int] = set()  # brokers whose process exited after should_shut_down
    shutting: set[int] = set()  # brokers that asked to shut down
    known_epoch: dict[int, int] = {}  # the broker epoch each running broker process was answered
    topics = 0
    counts: dict[str, int] = {}
    previous = MetadataImage.EMPTY
    replayed = 0

    def active() -> QuorumController:
        return controllers[raft.leader_id] if raft.leader_id is not None else controllers[CONTROLLERS[0]]

    for _ in range(steps):
        c = active()
        image = c.image
        action = rnd.choices(
            ["register", "heartbeat", "silence", "create", "alter", "elect", "reassign", "unregister", "commit",
             "failover"], weights=[4, 14, 3, 3, 6, 2, 2, 1, 12, 2])[0]
        counts[action] = counts.get(action, 0) + 1
        if action == "register":
            b = rnd.choice(BROKERS)
            if rnd.random() < 0.5 or b in down:  # a restart (or the return of a shut-down broker): a new process
                incarnations[b] = uuid.UUID(int=rnd.getrandbits(64) + 1)
                down.discard(b)
                shutting.discard(b)
                known_epoch.pop(b, None)
            pending.append(("register", c.register_broker_request(registration(b, incarnation=incarnations[b])),
                            (b, incarnations[b])))
        elif action == "heartbeat":
            b = rnd.choice(BROKERS)
            if b in known_epoch and b not in down:  # a running process heartbeats with the epoch it was given
                offset = raft.end_offset if rnd.random() < 0.8 else max(0, raft.end_offset - rnd.randint(1, 20))
                if rnd.random() < 0.05:
                    shutting.add(b)  # once it asks to shut down, a broker keeps asking (BrokerLifecycleManager)
                op = c.broker_heartbeat(heartbeat(b, known_epoch[b], offset, want_shut_down=b in shutting))
                pending.append(("heartbeat", op, (b, incarnations[b])))
        elif action == "silence":
            clock.advance(rnd.randint(1000, 12_000))
            c.poll()
        elif action == "create":
            topics += 1
            pending.append(("create", _create(c, f"t{topics}", rnd.randint(1, 3), rnd.randint(1, 3)), None))
        elif action == "alter":
            parts = [(t, i, p) for t in image.topics for i, p in t.partitions.items() if p.leader != NO_LEADER]
            if parts:
                t, i, p = rnd.choice(parts)
                others = [r for r in p.replicas if r != p.leader]
                isr = [p.leader] + rnd.sample(others, rnd.randint(0, len(others)))
                reg = image.cluster.brokers[p.leader]
                c.alter_partition_request(AlterPartitionRequest(
                    broker_id=p.leader, broker_epoch=reg.epoch, topics=[AlterPartitionRequest.TopicData(
                        topic_id=t.id, partitions=[AlterPartitionRequest.PartitionData(
                            partition_index=i, leader_epoch=p.leader_epoch,
                            partition_epoch=p.partition_epoch - rnd.choice([0, 0, 0, 1]),
                            new_isr_with_epochs=[AlterPartitionRequest.BrokerState(
                                broker_id=r, broker_epoch=image.cluster.brokers[r].epoch
                                if r in image.cluster.brokers else -1) for r in isr])])]), 3)
        elif action == "elect":
            c.elect_leaders_request(ElectLeadersRequest(election_type=rnd.randint(0, 1), topic_partitions=None))
        elif action == "reassign":
            names = sorted(image.topics.topics_by_name)
            if names:
                name = rnd.choice(names)
                index = rnd.choice(sorted(image.topics.topics_by_name[name].partitions))
                replicas = None if rnd.random() < 0.3 else rnd.sample(BROKERS, rnd.randint(1, 3))
                c.alter_partition_reassignments_request(Reassign(topics=[Reassign.ReassignableTopic(
                    name=name, partitions=[Reassign.ReassignablePartition(partition_index=index,
                                                                          replicas=replicas)])]))
        elif action == "unregister":
            b = rnd.choice(BROKERS)
            c.unregister_broker_request(b)
        elif action == "commit":
            raft.commit()
            for kind, op, extra in pending:
                assert op.done(), kind  # type: ignore[attr-defined]
                if kind in ("register", "heartbeat"):
                    b, incarnation = extra  # type: ignore[misc]
                    # An answer to a process that has since been replaced (a restart with a new incarnation)
                    # reaches nobody: the new process must not inherit the old one's broker epoch. Else it
                    # would heartbeat with that epoch without want_shut_down although the old process had
                    # asked to shut down -- a heartbeat no real broker sends (BrokerLifecycleManager keeps
                    # asking once it has), after which Kafka's controller may unfence and elect a broker
                    # whose registration is still in controlled shutdown (seeds 80, 218, 254, 255, 281).
                    current = incarnations[b] == incarnation
                    if kind == "register" and op.exception() is None:  # type: ignore[attr-defined]
                        epochs[b] = op.result().epoch  # type: ignore[attr-defined]
                        if current:
                            known_epoch[b] = epochs[b]
                    if kind == "heartbeat" and current and op.exception() is None \
                            and op.result().should_shut_down:  # type: ignore[attr-defined]
                        down.add(b)  # the process exits
            pending.clear()
        elif action == "failover":
            other = CONTROLLERS[1] if raft.leader_id == CONTROLLERS[0] else CONTROLLERS[0]
            raft.elect(other)
            for kind, op, _extra in pending:
                assert op.done(), kind  # type: ignore[attr-defined]
                if kind == "create" and op.exception() is not None:  # type: ignore[attr-defined]
                    assert isinstance(op.exception(), KafkaError)  # type: ignore[attr-defined]
            pending.clear()

        committed = raft.batches[: raft.committed_upto + 1]
        truth = _replayed(committed[replayed:], previous)
        replayed = len(committed)
        for controller in controllers.values():
            assert controller.committed_image.topics == truth.topics
            assert controller.committed_image.cluster == truth.cluster
        _check(truth, previous)
        previous = truth
        # Broker epochs answered are registration batch offsets of the committed log.
        for b, epoch in epochs.items():
            reg = truth.cluster.brokers.get(b)
            if reg is not None and reg.epoch == epoch:
                assert any(batch.base_offset == epoch for batch in committed)
    return counts


@pytest.mark.parametrize("seed", range(30))
def test_invariants_hold_over_random_runs(seed: int) -> None:
    counts = _run(seed, 300)
    assert counts["commit"] > 0 and counts["heartbeat"] > 0 and counts["failover"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(30, 400))
def test_invariants_hold_over_many_random_runs(seed: int) -> None:
    _run(seed, 2000)
