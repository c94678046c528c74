"""A combined node restarted after kill -9 re-registers its broker side at once.

A combined node's controller and broker side are one process. When the process is killed, its broker
registration stays unfenced in the log; the controller of the next process activates and, as Kafka's
`ClusterControlManager.activate`, gives every registered broker a full session -- so the new broker
side (a new incarnation id) would be refused with DUPLICATE_BROKER_REGISTRATION until
`broker.session.timeout.ms` passed (Kafka 4.3 waits it out; KAFKA-19130 spared only clean restarts).
kbroker's controller knows its own broker side's incarnation (`local_broker_incarnation_id`): a
registration of its own node id by another incarnation is the dead previous process, whose session
ends at activation. Other brokers, and a controller that is not combined, keep Kafka's full session.
"""

from __future__ import annotations

import uuid

import pytest

from kbroker.protocol.errors import ErrorCode, KafkaError
from tests.controller.quorum_fakes import FakeClock, join, new_controller, registration


def _restart(local_incarnation: uuid.UUID | None, node_id: int):  # type: ignore[no-untyped-def]
    """Node `node_id`'s broker and brokers 2 and 3 registered and unfenced; then a new controller of the
    same node id takes the log over (a restarted process), knowing `local_incarnation` as its broker's."""
    clock = FakeClock()
    old, raft = new_controller(clock, node_id=node_id)
    for b in (node_id, 2, 3):
        join(old, raft, b)
    new, _ = new_controller(clock, node_id=node_id, leader=False, raft=raft,
                            local_broker_incarnation_id=local_incarnation)
    new.handle_commit(raft.batches)
    raft.listener = new
    raft.elect(node_id)
    assert new.is_active()
    return new, raft


def test_the_restarted_combined_node_registers_at_once_with_a_new_broker_epoch() -> None:
    me = uuid.uuid4()
    controller, raft = _restart(me, 1)
    before = controller.committed_image.cluster.brokers[1].epoch
    op = controller.register_broker_request(registration(1, incarnation=me))
    raft.commit()
    assert op.result().epoch > before
    registered = controller.committed_image.cluster.brokers[1]
    assert registered.incarnation_id == me and registered.epoch == op.result().epoch


def test_other_brokers_keep_their_full_session() -> None:
    controller, raft = _restart(uuid.uuid4(), 1)
    stranger = controller.register_broker_request(registration(2, incarnation=uuid.uuid4()))
    with pytest.raises(KafkaError) as e:
        stranger.result()
    assert e.value.error_code is ErrorCode.DUPLICATE_BROKER_REGISTRATION


def test_without_a_local_broker_the_session_is_kafkas() -> None:
    """A controller that is not combined (no local broker incarnation): Kafka's behaviour, the
    restarted broker waits for its old session to expire."""
    controller, raft = _restart(None, 1)
    again = controller.register_broker_request(registration(1, incarnation=uuid.uuid4()))
    with pytest.raises(KafkaError) as e:
        again.result()
    assert e.value.error_code is ErrorCode.DUPLICATE_BROKER_REGISTRATION
