"""The quorum controller over an in-memory Raft log, on a fake clock.

Scenarios from issue 13: three brokers register and a topic of RF 3 is placed rack-aware; a broker
that stops heartbeating is fenced after `broker.session.timeout.ms`, leaders move and ISRs shrink
with Kafka's epochs; controlled shutdown; unclean election on and off; answers only after commit;
losing leadership mid-request reverts to the committed image.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from kbroker.controller.raft_client import LeaderAndEpoch
from kbroker.metadata.image import NO_LEADER, LeaderRecoveryState, MetadataImage, PartitionRegistration
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages.alter_partition import AlterPartitionRequest
from kbroker.protocol.messages.broker_heartbeat import BrokerHeartbeatRequest
from kbroker.protocol.messages.elect_leaders import ElectLeadersRequest
from kbroker.protocol.metadata_records import (
    BrokerRegistrationChangeRecord,
    PartitionChangeRecord,
    RegisterBrokerRecord,
)
from tests.controller.quorum_fakes import (
    FakeClock,
    InMemoryRaftLog,
    heartbeat,
    join,
    new_controller,
    registration,
)
from tests.support.sync import run_now

SESSION_MS = 9000


def _partitions(image: MetadataImage, topic: str) -> dict[int, PartitionRegistration]:
    t = image.topic(topic)
    assert t is not None
    return dict(t.partitions)


def _cluster(clock: FakeClock, racks: dict[int, str | None] | None = None, **settings: object):  # type: ignore[no-untyped-def]
    controller, raft = new_controller(clock, **settings)
    racks = racks if racks is not None else {1: None, 2: None, 3: None}
    epochs = {b: join(controller, raft, b, rack) for b, rack in racks.items()}
    return controller, raft, epochs


def _create(controller, raft, name: str, partitions: int, rf: int) -> None:  # type: ignore[no-untyped-def]
    async def run() -> None:
        task = asyncio.ensure_future(controller.create_topic(name, partitions, rf))
        await asyncio.sleep(0)
        assert not task.done(), "create_topic answered before its records committed"
        raft.commit()
        await task

    asyncio.run(run())


def _keep_alive(controller, raft, epochs: dict[int, int], brokers: list[int]) -> None:  # type: ignore[no-untyped-def]
    for b in brokers:
        controller.broker_heartbeat(heartbeat(b, epochs[b], raft.end_offset))
    raft.commit()


# -- registration and placement ----------------------------------------------------------------------


def test_registration_epoch_is_the_record_offset_and_brokers_unfence_when_caught_up() -> None:
    clock = FakeClock()
    controller, raft = new_controller(clock)
    op = controller.register_broker_request(registration(1))
    assert not op.done(), "answered before the registration committed"
    raft.commit()
    epoch = op.result().epoch
    offsets = [b.base_offset + i for b in raft.batches for i, r in enumerate(b.records)
               if isinstance(r, RegisterBrokerRecord)]
    assert offsets == [epoch]
    broker = controller.committed_image.cluster.brokers[1]
    assert broker.fenced and broker.epoch == epoch

    behind = controller.broker_heartbeat(heartbeat(1, epoch, epoch - 1))
    raft.commit()
    assert behind.result().is_fenced and not behind.result().is_caught_up
    caught_up = controller.broker_heartbeat(heartbeat(1, epoch, epoch))
    assert not caught_up.done()
    raft.commit()
    reply = caught_up.result()
    assert reply.is_caught_up and not reply.is_fenced and not reply.should_shut_down
    assert not controller.committed_image.cluster.brokers[1].fenced
    unfence = [r for r in raft.committed_records() if isinstance(r, BrokerRegistrationChangeRecord)]
    assert [(r.broker_id, r.broker_epoch, r.fenced) for r in unfence] == [(1, epoch, -1)]


def test_same_incarnation_keeps_its_epoch_a_new_one_gets_a_new_epoch_and_a_live_session_blocks_others() -> None:
    clock = FakeClock()
    controller, raft = new_controller(clock)
    epoch = join(controller, raft, 1)
    again = controller.register_broker_request(registration(1))
    raft.commit()
    assert again.result().epoch == epoch
    assert not controller.committed_image.cluster.brokers[1].fenced  # amended, still unfenced

    other = controller.register_broker_request(registration(1, incarnation=uuid.uuid4()))
    with pytest.raises(KafkaError) as e:
        other.result()
    assert e.value.error_code is ErrorCode.DUPLICATE_BROKER_REGISTRATION

    clock.advance(SESSION_MS + 1)
    controller.poll()
    raft.commit()
    restarted = controller.register_broker_request(registration(1, incarnation=uuid.uuid4()))
    raft.commit()
    assert restarted.result().epoch > epoch
    assert controller.committed_image.cluster.brokers[1].fenced


@pytest.mark.parametrize(
    ("request_changes", "code", "message"),
    [
        ({"cluster_id": "other"}, ErrorCode.INCONSISTENT_CLUSTER_ID, "Expected cluster ID"),
        ({"log_dirs": []}, ErrorCode.INVALID_REGISTRATION, "No directories specified in request"),
        ({"log_dirs": [uuid.UUID(int=1)]}, ErrorCode.INVALID_REGISTRATION, "Reserved directory ID in request"),
        ({"mv_range": (7, 21)}, ErrorCode.UNSUPPORTED_VERSION,
         "does not support finalized version 30 of metadata.version"),
    ],
)
def test_registration_is_refused_as_kafka_refuses_it(request_changes: dict[str, object], code: ErrorCode,
                                                      message: str) -> None:
    controller, raft = new_controller(FakeClock())
    op = controller.register_broker_request(registration(1, **request_changes))  # type: ignore[arg-type]
    assert op.done()
    with pytest.raises(KafkaError) as e:
        op.result()
    assert e.value.error_code is code and message in str(e.value)
    assert raft.uncommitted() == []


def test_heartbeat_with_a_stale_epoch_is_stale_broker_epoch() -> None:
    controller, raft = new_controller(FakeClock())
    epoch = join(controller, raft, 1)
    with pytest.raises(KafkaError) as e:
        controller.broker_heartbeat(heartbeat(1, epoch - 1, raft.end_offset)).result()
    assert e.value.error_code is ErrorCode.STALE_BROKER_EPOCH
    with pytest.raises(KafkaError) as e:
        controller.broker_heartbeat(heartbeat(9, 0, raft.end_offset)).result()
    assert e.value.error_code is ErrorCode.STALE_BROKER_EPOCH


def test_three_brokers_rf3_topic_is_placed_on_all_racks_with_leaders_spread() -> None:
    clock = FakeClock()
    controller, raft, _ = _cluster(clock, {1: "a", 2: "b", 3: "c", 4: "a", 5: "b", 6: "c"})
    _create(controller, raft, "t", 6, 3)
    parts = _partitions(controller.committed_image, "t")
    racks = {1: "a", 2: "b", 3: "c", 4: "a", 5: "b", 6: "c"}
    for p in parts.values():
        assert len(set(p.replicas)) == 3
        assert {racks[r] for r in p.replicas} == {"a", "b", "c"}, p
        assert p.isr == p.replicas and p.leader == p.replicas[0]
        assert (p.leader_epoch, p.partition_epoch) == (0, 0)
        assert p.directories == tuple(uuid.UUID(int=0xD1500 + r) for r in p.replicas)
    assert len({p.leader for p in parts.values()}) == 6  # one leader per broker


def test_rf_above_registered_brokers_is_kafkas_invalid_replication_factor() -> None:
    controller, raft, _ = _cluster(FakeClock())
    with pytest.raises(KafkaError) as e:
        run_now(controller.create_topic("t", 1, 4))
    assert e.value.error_code is ErrorCode.INVALID_REPLICATION_FACTOR
    assert str(e.value) == ("Unable to replicate the partition 4 time(s): The target replication factor of 4 "
                            "cannot be reached because only 3 broker(s) are registered or some brokers have all "
                            "their log directories cordoned.")


# -- fencing on session expiry ---------------------------------------------------------------------


def test_broker_that_misses_heartbeats_is_fenced_leaders_move_isr_shrinks() -> None:
    clock = FakeClock()
    controller, raft, epochs = _cluster(clock)
    _create(controller, raft, "t", 3, 3)
    before = _partitions(controller.committed_image, "t")
    led_by_2 = [i for i, p in before.items() if p.leader == 2]
    assert led_by_2

    for _ in range(4):  # 1 and 3 keep heartbeating every 2 s, 2 is silent
        clock.advance(2000)
        _keep_alive(controller, raft, epochs, [1, 3])
        assert controller.poll() == []
    clock.advance(1001)  # 9001 ms since 2's last heartbeat
    _keep_alive(controller, raft, epochs, [1, 3])
    fenced = controller.poll()
    assert [op.name for op in fenced] == ["maybeFenceStaleBroker"]
    raft.commit()
    assert fenced[0].result() == 2
    assert controller.committed_image.cluster.brokers[2].fenced

    after = _partitions(controller.committed_image, "t")
    for i, p in after.items():
        old = before[i]
        assert 2 not in p.isr and p.isr == tuple(r for r in old.isr if r != 2)
        assert p.partition_epoch == old.partition_epoch + 1
        if i in led_by_2:
            assert p.leader == next(r for r in old.replicas if r != 2)  # first live ISR replica
            assert p.leader_epoch == old.leader_epoch + 1
        else:
            assert p.leader == old.leader and p.leader_epoch == old.leader_epoch  # ISR-only change
    changes = [r for r in raft.uncommitted() or raft.batches[-1:] for r in r.records]
    assert isinstance(changes[-1], BrokerRegistrationChangeRecord) and changes[-1].fenced == 1
    assert all(isinstance(r, PartitionChangeRecord) for r in changes[:-1])


def test_last_isr_member_fenced_leaves_partition_leaderless_and_it_comes_back_as_leader() -> None:
    clock = FakeClock()
    controller, raft, epochs = _cluster(clock, {1: None})
    _create(controller, raft, "solo", 1, 1)
    clock.advance(SESSION_MS + 1)
    controller.poll()
    raft.commit()
    p = _partitions(controller.committed_image, "solo")[0]
    assert p.leader == NO_LEADER and p.isr == (1,)  # without ELR the ISR is never emptied
    assert (p.leader_epoch, p.partition_epoch) == (1, 1)

    back = controller.broker_heartbeat(heartbeat(1, epochs[1], raft.end_offset))
    raft.commit()
    assert not back.result().is_fenced
    p = _partitions(controller.committed_image, "solo")[0]
    assert p.leader == 1 and (p.leader_epoch, p.partition_epoch) == (2, 2)


# -- unclean election ------------------------------------------------------------------------------


@pytest.mark.parametrize("unclean", [False, True])
def test_unclean_leader_election(unclean: bool) -> None:
    clock = FakeClock()
    controller, raft, epochs = _cluster(clock, {1: None, 2: None}, unclean_leader_election_enable=unclean)
    _create(controller, raft, "u", 1, 2)
    leader = _partitions(controller.committed_image, "u")[0].leader
    follower = 3 - leader
    # The follower falls out of the ISR (the leader says so with AlterPartition).
    p = _partitions(controller.committed_image, "u")[0]
    topic = controller.committed_image.topic("u")
    assert topic is not None
    shrink = controller.alter_partition_request(AlterPartitionRequest(
        broker_id=leader, broker_epoch=epochs[leader], topics=[AlterPartitionRequest.TopicData(
            topic_id=topic.id, partitions=[AlterPartitionRequest.PartitionData(
                partition_index=0, leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch,
                new_isr_with_epochs=[AlterPartitionRequest.BrokerState(broker_id=leader,
                                                                        broker_epoch=epochs[leader])])])]), 3)
    raft.commit()
    assert shrink.result().topics[0].partitions[0].isr == [leader]
    # The leader's session expires while the follower keeps heartbeating.
    for _ in range(5):
        clock.advance(2000)
        _keep_alive(controller, raft, epochs, [follower])
        controller.poll()
        raft.commit()
    p = _partitions(controller.committed_image, "u")[0]
    if unclean:
        assert p.leader == follower and p.isr == (follower,)
        assert p.leader_recovery_state is LeaderRecoveryState.RECOVERING
    else:
        assert p.leader == NO_LEADER and p.isr == (leader,)
        # An explicit unclean ElectLeaders does what the config would have done.
        op = controller.elect_leaders_request(ElectLeadersRequest(
            election_type=1, topic_partitions=[ElectLeadersRequest.TopicPartitions(topic="u", partitions=[0])]))
        raft.commit()
        result = op.result().replica_election_results[0].partition_result[0]
        assert result.error_code == 0
        p = _partitions(controller.committed_image, "u")[0]
        assert p.leader == follower and p.isr == (follower,)


# -- AlterPartition --------------------------------------------------------------------------------


def _alter(controller, raft, epochs, leader: int, isr: list[int], *, leader_epoch: int,  # type: ignore[no-untyped-def]
           partition_epoch: int, topic: str = "t", broker_epoch: int | None = None, version: int = 3):
    t = controller.committed_image.topic(topic)
    op = controller.alter_partition_request(AlterPartitionRequest(
        broker_id=leader, broker_epoch=epochs[leader] if broker_epoch is None else broker_epoch,
        topics=[AlterPartitionRequest.TopicData(topic_id=t.id, partitions=[AlterPartitionRequest.PartitionData(
            partition_index=0, leader_epoch=leader_epoch, partition_epoch=partition_epoch, new_isr=isr,
            new_isr_with_epochs=[AlterPartitionRequest.BrokerState(broker_id=b, broker_epoch=epochs.get(b, -1))
                                 for b in isr])])]), version)
    raft.commit()
    return op


def test_alter_partition_isr_change_bumps_only_the_partition_epoch_and_stale_epochs_are_refused() -> None:
    clock = FakeClock()
    controller, raft, epochs = _cluster(clock)
    _create(controller, raft, "t", 1, 3)
    p = _partitions(controller.committed_image, "t")[0]
    leader = p.leader
    shrunk = [r for r in p.isr if r == leader or r == p.replicas[1]]
    ok = _alter(controller, raft, epochs, leader, shrunk, leader_epoch=0, partition_epoch=0)
    data = ok.result().topics[0].partitions[0]
    assert (data.error_code, data.leader_id, data.leader_epoch, data.partition_epoch, data.isr) == \
        (0, leader, 0, 1, shrunk)

    stale = _alter(controller, raft, epochs, leader, list(p.isr), leader_epoch=0, partition_epoch=0)
    assert stale.result().topics[0].partitions[0].error_code == ErrorCode.INVALID_UPDATE_VERSION
    fenced = _alter(controller, raft, epochs, leader, list(p.isr), leader_epoch=-1, partition_epoch=1)
    assert fenced.result().topics[0].partitions[0].error_code == ErrorCode.FENCED_LEADER_EPOCH
    ahead = _alter(controller, raft, epochs, leader, list(p.isr), leader_epoch=0, partition_epoch=5)
    assert ahead.result().topics[0].partitions[0].error_code == ErrorCode.NOT_CONTROLLER
    follower = p.replicas[1]
    not_leader = _alter(controller, raft, epochs, follower, list(p.isr), leader_epoch=0, partition_epoch=1)
    assert not_leader.result().topics[0].partitions[0].error_code == ErrorCode.INVALID_REQUEST
    with pytest.raises(KafkaError) as e:
        _alter(controller, raft, epochs, leader, list(p.isr), leader_epoch=0, partition_epoch=1,
               broker_epoch=epochs[leader] + 1000).result()
    assert e.value.error_code is ErrorCode.STALE_BROKER_EPOCH
    assert _partitions(controller.committed_image, "t")[0].partition_epoch == 1  # nothing else changed

    # Expanding again to a broker that is fenced: INELIGIBLE_REPLICA.
    third = next(r for r in p.replicas if r not in shrunk)
    clock.advance(SESSION_MS + 1)
    _keep_alive(controller, raft, epochs, [r for r in (1, 2, 3) if r != third])
    controller.poll()
    raft.commit()
    assert controller.committed_image.cluster.brokers[third].fenced
    ineligible = _alter(controller, raft, epochs, leader, shrunk + [third], leader_epoch=0, partition_epoch=1)
    assert ineligible.result().topics[0].partitions[0].error_code == ErrorCode.INELIGIBLE_REPLICA


def test_alter_partition_unknown_topic_id() -> None:
    controller, raft, epochs = _cluster(FakeClock())
    op = controller.alter_partition_request(AlterPartitionRequest(
        broker_id=1, broker_epoch=epochs[1], topics=[AlterPartitionRequest.TopicData(
            topic_id=uuid.uuid4(), partitions=[AlterPartitionRequest.PartitionData(partition_index=0)])]), 3)
    assert op.result().topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID


# -- controlled shutdown ---------------------------------------------------------------------------


def test_controlled_shutdown_moves_leadership_then_grants_shutdown() -> None:
    clock = FakeClock()
    controller, raft, epochs = _cluster(clock)
    _create(controller, raft, "t", 3, 3)
    before = _partitions(controller.committed_image, "t")
    victim = before[0].leader

    first = controller.broker_heartbeat(heartbeat(victim, epochs[victim], raft.end_offset, want_shut_down=True))
    raft.commit()
    reply = first.result()
    assert (reply.is_fenced, reply.in_controlled_shutdown, reply.should_shut_down) == (False, True, False)
    image = controller.committed_image
    assert image.cluster.brokers[victim].in_controlled_shutdown
    for i, p in _partitions(image, "t").items():
        assert p.leader != victim and victim not in p.isr
        if before[i].leader == victim:
            assert p.leader_epoch == before[i].leader_epoch + 1

    # The others have not yet reported the offset of the shutdown records: not yet.
    clock.advance(1000)
    stale_offset = raft.end_offset - 2
    for b in (1, 2, 3):
        if b != victim:
            controller.broker_heartbeat(heartbeat(b, epochs[b], stale_offset))
    raft.commit()
    waiting = controller.broker_heartbeat(heartbeat(victim, epochs[victim], raft.end_offset, want_shut_down=True))
    raft.commit()
    assert not waiting.result().should_shut_down
    _keep_alive(controller, raft, epochs, [b for b in (1, 2, 3) if b != victim])
    done = controller.broker_heartbeat(heartbeat(victim, epochs[victim], raft.end_offset, want_shut_down=True))
    raft.commit()
    reply = done.result()
    assert reply.should_shut_down and reply.is_fenced
    assert controller.committed_image.cluster.brokers[victim].fenced


def test_broker_leading_nothing_shuts_down_at_once() -> None:
    clock = FakeClock()
    controller, raft, epochs = _cluster(clock, {1: None, 2: None})
    op = controller.broker_heartbeat(heartbeat(2, epochs[2], raft.end_offset, want_shut_down=True))
    raft.commit()
    assert op.result().should_shut_down


# -- elections and balancing -----------------------------------------------------------------------


def test_preferred_election_and_auto_rebalance_bring_leadership_back() -> None:
    clock = FakeClock()
    controller, raft, epochs = _cluster(clock, leader_imbalance_check_interval_ms=60_000)
    _create(controller, raft, "t", 3, 3)
    preferred = {i: p.replicas[0] for i, p in _partitions(controller.committed_image, "t").items()}
    # Broker 1 restarts: fenced, then back (it rejoins the ISRs by AlterPartition in real life; here
    # the leaders' AlterPartition puts it back).
    clock.advance(SESSION_MS + 1)
    _keep_alive(controller, raft, epochs, [2, 3])
    controller.poll()
    raft.commit()
    _keep_alive(controller, raft, epochs, [1, 2, 3])
    for i, p in _partitions(controller.committed_image, "t").items():
        op = _alter_index(controller, raft, epochs, p.leader, i, list(p.replicas), p)
        assert op.result().topics[0].partitions[0].error_code == 0
    moved = [i for i, p in _partitions(controller.committed_image, "t").items() if p.leader != preferred[i]]
    assert moved, "broker 1's leaderships moved away"

    election = controller.elect_leaders_request(ElectLeadersRequest(election_type=0, topic_partitions=None))
    raft.commit()
    results = {r.partition_id: r.error_code for t in election.result().replica_election_results
               for r in t.partition_result}
    assert results == dict.fromkeys(moved, 0)  # the not-needed ones are left out
    assert all(p.leader == preferred[i] for i, p in _partitions(controller.committed_image, "t").items())


def _alter_index(controller, raft, epochs, leader, index, isr, p):  # type: ignore[no-untyped-def]
    t = controller.committed_image.topic("t")
    op = controller.alter_partition_request(AlterPartitionRequest(
        broker_id=leader, broker_epoch=epochs[leader], topics=[AlterPartitionRequest.TopicData(
            topic_id=t.id, partitions=[AlterPartitionRequest.PartitionData(
                partition_index=index, leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch,
                new_isr_with_epochs=[AlterPartitionRequest.BrokerState(broker_id=b, broker_epoch=epochs[b])
                                     for b in isr])])]), 3)
    raft.commit()
    return op


def test_auto_rebalance_runs_on_the_imbalance_interval() -> None:
    clock = FakeClock()
    controller, raft, epochs = _cluster(clock, leader_imbalance_check_interval_ms=60_000)
    _create(controller, raft, "t", 3, 3)
    preferred = {i: p.replicas[0] for i, p in _partitions(controller.committed_image, "t").items()}
    clock.advance(SESSION_MS + 1)
    _keep_alive(controller, raft, epochs, [2, 3])
    controller.poll()
    raft.commit()
    _keep_alive(controller, raft, epochs, [1, 2, 3])
    for i, p in _partitions(controller.committed_image, "t").items():
        _alter_index(controller, raft, epochs, p.leader, i, list(p.replicas), p)
    assert any(p.leader != preferred[i] for i, p in _partitions(controller.committed_image, "t").items())
    due = controller._next_rebalance_ms
    assert due is not None and controller.next_deadline_ms() is not None
    while clock() + 2000 < due:  # not yet: nothing moves
        clock.advance(2000)
        _keep_alive(controller, raft, epochs, [1, 2, 3])
        assert controller.poll() == []
    clock.advance(2000)
    _keep_alive(controller, raft, epochs, [1, 2, 3])
    assert [op.name for op in controller.poll()] == ["maybeBalancePartitionLeaders"]
    raft.commit()
    assert all(p.leader == preferred[i] for i, p in _partitions(controller.committed_image, "t").items())


# -- unregistration --------------------------------------------------------------------------------


def test_unregister_broker_removes_it_from_isrs_and_the_image() -> None:
    clock = FakeClock()
    controller, raft, epochs = _cluster(clock)
    _create(controller, raft, "t", 3, 3)
    op = controller.unregister_broker_request(2)
    raft.commit()
    op.result()
    image = controller.committed_image
    assert 2 not in image.cluster.brokers
    assert all(2 not in p.isr and p.leader != 2 for p in _partitions(image, "t").values())
    with pytest.raises(KafkaError) as e:
        controller.unregister_broker_request(2).result()
    assert e.value.error_code is ErrorCode.BROKER_ID_NOT_REGISTERED


# -- commit and leadership -------------------------------------------------------------------------


def test_answers_wait_for_the_commit_and_the_uncommitted_image_serves_the_next_request() -> None:
    controller, raft, _ = _cluster(FakeClock())

    async def run() -> None:
        first = asyncio.ensure_future(controller.create_topic("a", 1, 3))
        await asyncio.sleep(0)
        assert not first.done()
        assert controller.image.topic("a") is not None and controller.committed_image.topic("a") is None
        with pytest.raises(KafkaError) as e:
            await controller.create_topic("a", 1, 3)  # the uncommitted topic already exists
        assert e.value.error_code is ErrorCode.TOPIC_ALREADY_EXISTS
        raft.commit()
        info = await first
        assert info.replication_factor == 3 and controller.committed_image.topic("a") is not None

    asyncio.run(run())


def test_losing_leadership_mid_request_fails_it_and_reverts_to_the_committed_image() -> None:
    clock = FakeClock()
    controller, raft, epochs = _cluster(clock)
    committed = controller.committed_image
    op = controller.register_broker_request(registration(7))
    assert controller.image.cluster.brokers.get(7) is not None
    raft.elect(3001)  # another controller wins; our batch is truncated
    with pytest.raises(KafkaError) as e:
        op.result()
    assert e.value.error_code is ErrorCode.NOT_CONTROLLER
    assert controller.image is committed and 7 not in controller.image.cluster.brokers
    assert not controller.is_active()
    with pytest.raises(KafkaError) as e:
        controller.broker_heartbeat(heartbeat(1, epochs[1], raft.end_offset)).result()
    assert e.value.error_code is ErrorCode.NOT_CONTROLLER


def test_a_standby_follows_commits_and_takes_over_with_fresh_sessions() -> None:
    clock = FakeClock()
    active, raft, epochs = _cluster(clock)
    _create(active, raft, "t", 2, 3)
    standby, _ = new_controller(clock, node_id=3001, leader=False, raft=raft)
    standby.handle_commit(raft.batches)  # a standby replays what is committed
    assert standby.committed_image == active.committed_image
    raft.listener = standby
    raft.elect(3001)
    assert standby.is_active()
    clock.advance(SESSION_MS - 1)  # every broker got a full session at the takeover
    assert standby.poll() == []
    clock.advance(2)
    fenced = standby.poll()
    assert len(fenced) == 3
    raft.commit()
    # Fencing all three (one write each): the last fenced broker stays the leaderless partitions' ISR.
    assert all(b.fenced for b in standby.committed_image.cluster.brokers.values())


def test_append_after_losing_the_epoch_fails_without_changing_the_image() -> None:
    controller, raft, _ = _cluster(FakeClock())
    raft.epoch += 1  # the raft layer moved on and has not told the listener yet
    before = controller.image
    with pytest.raises(KafkaError) as e:
        controller.register_broker_request(registration(9)).result()
    assert e.value.error_code is ErrorCode.NOT_CONTROLLER
    assert controller.image is controller.committed_image is not None
    assert before.cluster.brokers == controller.image.cluster.brokers
    controller.handle_leader_change(LeaderAndEpoch(None, raft.epoch))
    assert not controller.is_active()


def test_empty_log_gets_the_bootstrap_records_on_first_leadership() -> None:
    controller, raft = new_controller(FakeClock())
    assert controller.committed_image.features.metadata_version == 30
    assert controller.committed_image.features.level("group.version") == 1
    assert isinstance(raft, InMemoryRaftLog) and [len(b.records) for b in raft.batches] == [0, 2]


def test_a_restarted_broker_leaves_every_isr_in_its_registration_batch() -> None:
    """Kafka 4.3's BrokerShutdownHandler: the new incarnation's registration batch first takes the old
    one out of the ISRs (moving its leaderships); the broker epoch is the batch's first offset."""
    clock = FakeClock()
    controller, raft, epochs = _cluster(clock)
    _create(controller, raft, "t", 3, 3)
    before = _partitions(controller.committed_image, "t")
    clock.advance(SESSION_MS + 1)  # 2's session is over, but nothing has fenced it yet
    _keep_alive(controller, raft, epochs, [1, 3])
    base = raft.end_offset
    op = controller.register_broker_request(registration(2, incarnation=uuid.uuid4()))
    raft.commit()
    assert op.result().epoch == base
    batch = raft.batches[-1]
    assert isinstance(batch.records[-1], RegisterBrokerRecord) and batch.records[-1].broker_epoch == base
    assert all(isinstance(r, PartitionChangeRecord) for r in batch.records[:-1]) and len(batch.records) == 4
    for i, p in _partitions(controller.committed_image, "t").items():
        assert 2 not in p.isr and p.leader != 2
        assert p.leader_epoch == before[i].leader_epoch + (1 if before[i].leader == 2 else 0)
    assert controller.committed_image.cluster.brokers[2].fenced


def test_an_unexpected_error_in_a_write_makes_the_controller_step_down() -> None:
    controller, raft, _ = _cluster(FakeClock())
    committed = controller.committed_image

    def broken() -> object:
        raise RuntimeError("bug")

    op = controller._write("broken", broken)  # type: ignore[arg-type]
    with pytest.raises(KafkaError) as e:
        op.result()
    assert e.value.error_code is ErrorCode.UNKNOWN_SERVER_ERROR
    assert not controller.is_active() and raft.leader_id is None  # resigned: another controller takes over
    assert controller.image is committed


@pytest.mark.parametrize("racks", [{1: "a", 2: "b", 3: "c"}, {1: "a", 2: "a", 3: "b"}])
def test_three_brokers_rf3_topic_spans_every_rack(racks: dict[int, str | None]) -> None:
    controller, raft, _ = _cluster(FakeClock(), racks)
    _create(controller, raft, "t", 6, 3)
    parts = _partitions(controller.committed_image, "t")
    for p in parts.values():
        assert sorted(p.replicas) == [1, 2, 3] and p.isr == p.replicas
        # the first two replicas (the preferred leader and the next) are on different racks
        assert racks[p.replicas[0]] != racks[p.replicas[1]]
    if len(set(racks.values())) == 3:
        assert {p.leader for p in parts.values()} == {1, 2, 3}


def test_a_log_directory_reported_offline_takes_its_replicas_out_of_the_isrs() -> None:
    clock = FakeClock()
    controller, raft, epochs = _cluster(clock)
    _create(controller, raft, "t", 3, 3)
    lost = uuid.UUID(int=0xD1502)  # broker 2's only directory when the topic was created
    assert all(p.directory(2) == lost for p in _partitions(controller.committed_image, "t").values())
    spare = uuid.UUID(int=0xD2502)
    amend = controller.register_broker_request(registration(2, log_dirs=[lost, spare]))  # same incarnation
    raft.commit()
    assert amend.result().epoch == epochs[2]
    before = _partitions(controller.committed_image, "t")
    op = controller.broker_heartbeat(BrokerHeartbeatRequest(broker_id=2, broker_epoch=epochs[2],
                                                            current_metadata_offset=raft.end_offset,
                                                            offline_log_dirs=[lost]))
    raft.commit()
    assert not op.result().is_fenced
    image = controller.committed_image
    assert image.cluster.brokers[2].directories == (spare,)
    changes = [r for r in raft.batches[-1].records]
    assert isinstance(changes[-1], BrokerRegistrationChangeRecord) and changes[-1].log_dirs == [spare]
    for i, p in _partitions(image, "t").items():
        assert 2 not in p.isr and p.leader != 2
        assert p.partition_epoch == before[i].partition_epoch + 1
    again = controller.broker_heartbeat(BrokerHeartbeatRequest(broker_id=2, broker_epoch=epochs[2],
                                                               current_metadata_offset=raft.end_offset,
                                                               offline_log_dirs=[lost]))
    raft.commit()
    again.result()
    assert controller.committed_image is image or controller.committed_image.topics == image.topics
