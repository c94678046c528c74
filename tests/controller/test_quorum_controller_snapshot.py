"""`QuorumController.handle_load_snapshot`: a snapshot replaces the committed state whole (issue 13).

A standby that fell behind the leader's log start, or any controller at start, is handed the
snapshot's records (the image as records, `image_records`) and the snapshot's last contained offset.
Its committed image must then equal the image the snapshot was taken of; commits continue after it;
and, as in Kafka (which replays every snapshot record with the snapshot's offset), each broker counts
as registered at that offset: its unfencing heartbeat must report at least that offset.
"""

from __future__ import annotations

from kbroker.metadata.image_writer import image_records
from kbroker.protocol.metadata_records import TopicRecord
from tests.controller.quorum_fakes import FakeClock, InMemoryRaftLog, heartbeat, join, new_controller


def _snapshot_of(clock: FakeClock) -> tuple[list[object], int, int, InMemoryRaftLog]:
    """A leader with three brokers and a topic; its committed image as a snapshot's records."""
    leader, raft = new_controller(clock)
    for b in (1, 2, 3):
        join(leader, raft, b)
    op = leader._topic_write("createTopics", lambda: leader.replication.create_topic("orders", 3, 3, None, None),
                             False)
    raft.commit()
    assert op.result().name == "orders"
    return image_records(leader.committed_image), leader.committed_offset, raft.epoch, raft


def test_a_loaded_snapshot_becomes_the_committed_image() -> None:
    clock = FakeClock()
    records, last, epoch, source = _snapshot_of(clock)
    standby, _ = new_controller(clock, node_id=3001, leader=False)
    standby.handle_load_snapshot(records, last, epoch)
    assert standby.committed_offset == last
    assert image_records(standby.committed_image) == records
    assert standby.committed_image.provenance.last_contained_offset == last
    assert standby.image is standby.committed_image
    assert sorted(standby.committed_image.cluster.brokers) == [1, 2, 3]
    assert [r.name for r in records if isinstance(r, TopicRecord)] == ["orders"]
    # Commits continue after the snapshot: the leader's next batch is replayed on top of it.
    standby_raft = InMemoryRaftLog(listener=standby)
    standby_raft.batches = list(source.batches)
    standby_raft.committed_upto = len(source.batches) - 1
    standby_raft.end_offset = source.end_offset
    standby_raft.epoch = source.epoch
    standby_raft.elect(3001)
    assert standby.is_active()
    assert standby.committed_image.topics.get_topic("orders") is not None  # type: ignore[attr-defined]


def test_brokers_in_a_snapshot_count_as_registered_at_its_offset() -> None:
    clock = FakeClock()
    records, last, epoch, source = _snapshot_of(clock)
    controller, raft = new_controller(clock, node_id=3001, leader=False)
    controller.handle_load_snapshot(records, last, epoch)
    raft.end_offset = last + 1
    raft.epoch = epoch
    raft.listener = controller
    raft.elect(3001)
    broker_epoch = controller.committed_image.cluster.brokers[1].epoch
    # Fence broker 1 (want_fence), then a heartbeat below the snapshot's offset does not unfence it.
    op = controller.broker_heartbeat(heartbeat(1, broker_epoch, raft.end_offset, want_fence=True))
    raft.commit()
    assert op.result().is_fenced
    op = controller.broker_heartbeat(heartbeat(1, broker_epoch, last - 1))
    raft.commit()
    assert op.result().is_fenced
    op = controller.broker_heartbeat(heartbeat(1, broker_epoch, last))
    raft.commit()
    assert not op.result().is_fenced


def test_an_active_controller_handed_a_snapshot_renounces_first() -> None:
    clock = FakeClock()
    records, last, epoch, _ = _snapshot_of(clock)
    other, _ = new_controller(clock, node_id=3002)
    assert other.is_active()
    other.handle_load_snapshot(records, last, epoch)
    assert not other.is_active()
    assert sorted(other.committed_image.cluster.brokers) == [1, 2, 3]
