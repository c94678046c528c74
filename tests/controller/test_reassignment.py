"""Partition reassignment on the quorum controller (KIP-455): start, catch up, complete, cancel.

Replacing one replica writes replicas = target + removing with adding/removing set; the new replica
joins the ISR through the leader's AlterPartition, which completes the reassignment in the same
record (the removed replica leaves replicas and ISR, the leader epoch is bumped because the replica
set lost a member, and NEW_LEADER_ELECTED when the leader itself was removed). Cancelling reverts to
the original replicas. Errors are Kafka's.
"""

from __future__ import annotations

import pytest

from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.alter_partition import AlterPartitionRequest
from kbroker.protocol.messages.alter_partition_reassignments import AlterPartitionReassignmentsRequest as Req
from kbroker.protocol.messages.list_partition_reassignments import (
    ListPartitionReassignmentsRequest as ListReq,
)
from tests.controller.quorum_fakes import FakeClock, join, new_controller


def _setup():  # type: ignore[no-untyped-def]
    controller, raft = new_controller(FakeClock())
    epochs = {b: join(controller, raft, b) for b in (1, 2, 3, 4)}
    op = controller._write("createTopics", lambda: controller.replication.create_topic(
        "t", -1, -1, None, {0: [1, 2, 3]}))
    raft.commit()
    op.result()
    return controller, raft, epochs


def _reassign(controller, raft, replicas: list[int] | None, *, allow_rf: bool = True,  # type: ignore[no-untyped-def]
              topic: str = "t", index: int = 0):
    op = controller.alter_partition_reassignments_request(Req(allow_replication_factor_change=allow_rf, topics=[
        Req.ReassignableTopic(name=topic, partitions=[Req.ReassignablePartition(partition_index=index,
                                                                                replicas=replicas)])]))
    raft.commit()
    return op.result().responses[0].partitions[0]


def _partition(controller):  # type: ignore[no-untyped-def]
    return controller.committed_image.topic("t").partitions[0]


def _expand(controller, raft, epochs, isr: list[int]):  # type: ignore[no-untyped-def]
    p = _partition(controller)
    t = controller.committed_image.topic("t")
    op = controller.alter_partition_request(AlterPartitionRequest(
        broker_id=p.leader, broker_epoch=epochs[p.leader], topics=[AlterPartitionRequest.TopicData(
            topic_id=t.id, partitions=[AlterPartitionRequest.PartitionData(
                partition_index=0, leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch,
                new_isr_with_epochs=[AlterPartitionRequest.BrokerState(broker_id=b, broker_epoch=epochs[b])
                                     for b in isr])])]), 3)
    raft.commit()
    return op.result().topics[0].partitions[0]


@pytest.mark.parametrize(("target", "leader_moves"), [([4, 2, 3], True), ([1, 2, 4], False)])
def test_reassignment_adds_catches_up_and_completes(target: list[int], leader_moves: bool) -> None:
    controller, raft, epochs = _setup()
    replaced = ({1, 2, 3} - set(target)).pop()
    assert (replaced == 1) is leader_moves  # broker 1 leads from the creation
    result = _reassign(controller, raft, target)
    assert (result.error_code, result.error_message) == (0, None)
    p = _partition(controller)
    assert p.replicas == (*target, replaced) and p.adding_replicas == (4,) and p.removing_replicas == (replaced,)
    assert p.isr == (1, 2, 3) and p.leader == 1 and p.leader_epoch == 0 and p.partition_epoch == 1

    listed = controller.list_partition_reassignments_request(ListReq(topics=None)).result()
    assert [(t.name, [(x.partition_index, x.replicas, x.adding_replicas, x.removing_replicas)
                      for x in t.partitions]) for t in listed.topics] == \
        [("t", [(0, [*target, replaced], [4], [replaced])])]

    done = _expand(controller, raft, epochs, [1, 2, 3, 4])
    p = _partition(controller)
    assert p.replicas == tuple(target) and not p.is_reassigning()
    assert p.isr == tuple(r for r in (1, 2, 3, 4) if r != replaced)
    assert p.leader_epoch == 1  # the replica set lost a member: followers of the old set are fenced
    if replaced == 1:  # the leader was reassigned away: it learns it must refresh
        assert done.error_code == ErrorCode.NEW_LEADER_ELECTED and p.leader == target[0]
    else:
        assert done.error_code == 0 and p.leader == 1
    assert controller.list_partition_reassignments_request(ListReq(topics=None)).result().topics == []


def test_cancel_reverts_to_the_original_replicas() -> None:
    controller, raft, epochs = _setup()
    _reassign(controller, raft, [4, 2, 3])
    result = _reassign(controller, raft, None)
    assert result.error_code == 0
    p = _partition(controller)
    # Kafka's PartitionReassignmentReplicas.originalReplicas: the reassignment's list without the adding
    # replicas, so the removed replica comes back at the end (the preferred leader changes, as in Kafka).
    assert p.replicas == (2, 3, 1) and p.isr == (1, 2, 3) and not p.is_reassigning()
    assert p.leader == 1 and p.leader_epoch == 1  # the adding replica left the replica set
    again = _reassign(controller, raft, None)
    assert (again.error_code, again.error_message) == (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                                                       "No partition reassignment is in progress.")


@pytest.mark.parametrize(("replicas", "allow_rf", "topic", "index", "code", "message"), [
    ([1, 2], False, "t", 0, ErrorCode.INVALID_REPLICATION_FACTOR, "The replication factor is changed from 3 to 2"),
    ([1, 2, 9], True, "t", 0, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
     "The manual partition assignment includes broker 9, but no such broker is registered."),
    ([1, 1, 2], True, "t", 0, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
     "The manual partition assignment includes the broker 1 more than once."),
    ([1], True, "nope", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find a topic named nope."),
    ([1], True, "t", 3, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find partition t:3."),
])
def test_reassignment_errors(replicas: list[int], allow_rf: bool, topic: str, index: int, code: ErrorCode,
                             message: str) -> None:
    controller, raft, _ = _setup()
    result = _reassign(controller, raft, replicas, allow_rf=allow_rf, topic=topic, index=index)
    assert (result.error_code, result.error_message) == (code, message)
    assert not _partition(controller).is_reassigning()
