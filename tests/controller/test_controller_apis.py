"""The controller-side API handlers, through the dispatcher of a controller listener and the wire codecs.

A `QuorumController` over the in-memory Raft log stands behind the handlers: requests are encoded as
a broker would send them, decoded, dispatched, answered after the commit, and the responses decoded
again. Also: the broker listener's handler set is unchanged (single-node mode advertises what it did).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from kbroker.api.context import BrokerServices, RequestContext
from kbroker.api.dispatcher import ApiDispatcher, discover_handlers
from kbroker.config import KafkaConfig
from kbroker.protocol import (
    decode_request_frame,
    decode_response_frame,
    encode_request_frame,
    encode_response_frame,
)
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.allocate_producer_ids import AllocateProducerIdsRequest
from kbroker.protocol.messages.alter_partition import AlterPartitionRequest
from kbroker.protocol.messages.broker_heartbeat import BrokerHeartbeatRequest
from kbroker.protocol.messages.elect_leaders import ElectLeadersRequest
from kbroker.protocol.messages.unregister_broker import UnregisterBrokerRequest
from kbroker.services import build_services, shutdown_services
from tests.controller.quorum_fakes import FakeClock, InMemoryRaftLog, new_controller, registration
from tests.support.sync import run_now

CONTROLLER_ONLY = {56, 62, 63, 64, 67, 43, 45, 46}


def test_broker_listener_serves_what_it_did_and_the_controller_listener_the_cluster_apis() -> None:
    broker = discover_handlers()
    controller = discover_handlers(listener="controller")
    assert not CONTROLLER_ONLY & set(broker)
    assert CONTROLLER_ONLY <= set(controller)
    assert 0 not in controller  # Produce is a broker API only


def _services(controller: object) -> BrokerServices:
    return BrokerServices(config=None, log_manager=None, metadata=None, configs=None,  # type: ignore[arg-type]
                          controller=controller, producer_id_manager=None, replica_manager=None,  # type: ignore[arg-type]
                          group_coordinator=None, transaction_coordinator=None,  # type: ignore[arg-type]
                          cluster_id="c", node_id=3000)


class Wire:
    """Requests in as bytes, responses out as bytes, through the dispatcher."""

    def __init__(self, dispatcher: ApiDispatcher, raft: InMemoryRaftLog) -> None:
        self.dispatcher = dispatcher
        self.raft = raft
        self.correlation_id = 0

    async def call(self, api_key: int, version: int, body: Any) -> Any:
        self.correlation_id += 1
        frame = encode_request_frame(RequestHeader(api_key=api_key, api_version=version,
                                                   correlation_id=self.correlation_id, client_id="broker"), body)
        header, decoded = decode_request_frame(memoryview(frame)[4:])
        result = self.dispatcher.handle(RequestContext(listener_name="CONTROLLER"), header, decoded)
        if asyncio.iscoroutine(result) or asyncio.isfuture(result):
            task = asyncio.ensure_future(result)
            await asyncio.sleep(0)
            self.raft.commit()
            result = await task
        parts = encode_response_frame(api_key, version, self.correlation_id, result)
        raw = b"".join(bytes(p) for p in parts)  # type: ignore[arg-type]
        correlation_id, response = decode_response_frame(api_key, version, memoryview(raw)[4:])
        assert correlation_id == self.correlation_id
        return response


def test_a_broker_registers_heartbeats_gets_producer_ids_and_its_leader_alters_isr_over_the_wire() -> None:
    clock = FakeClock()
    controller, raft = new_controller(clock)
    wire = Wire(ApiDispatcher(_services(controller), listener="controller"), raft)

    async def run() -> None:
        epochs = {}
        for b in (1, 2):
            reg = await wire.call(62, 4, registration(b))
            assert reg.error_code == 0 and reg.broker_epoch >= 0
            epochs[b] = reg.broker_epoch
            hb = await wire.call(63, 2, BrokerHeartbeatRequest(broker_id=b, broker_epoch=reg.broker_epoch,
                                                               current_metadata_offset=raft.end_offset))
            assert (hb.error_code, hb.is_caught_up, hb.is_fenced, hb.should_shut_down) == (0, True, False, False)
        stale = await wire.call(63, 2, BrokerHeartbeatRequest(broker_id=1, broker_epoch=epochs[1] + 99,
                                                              current_metadata_offset=raft.end_offset))
        assert stale.error_code == ErrorCode.STALE_BROKER_EPOCH and stale.is_fenced

        ids = await wire.call(67, 0, AllocateProducerIdsRequest(broker_id=1, broker_epoch=epochs[1]))
        assert (ids.error_code, ids.producer_id_start, ids.producer_id_len) == (0, 0, 1000)
        ids = await wire.call(67, 0, AllocateProducerIdsRequest(broker_id=2, broker_epoch=epochs[2]))
        assert (ids.error_code, ids.producer_id_start) == (0, 1000)

    asyncio.run(run())


def test_alter_partition_elect_leaders_and_unregister_over_the_wire() -> None:
    clock = FakeClock()
    controller, raft = new_controller(clock)
    wire = Wire(ApiDispatcher(_services(controller), listener="controller"), raft)

    async def run() -> None:
        epochs = {}
        for b in (1, 2):
            reg = await wire.call(62, 4, registration(b))
            epochs[b] = reg.broker_epoch
            await wire.call(63, 2, BrokerHeartbeatRequest(broker_id=b, broker_epoch=reg.broker_epoch,
                                                          current_metadata_offset=raft.end_offset))
        task = asyncio.ensure_future(controller.create_topic("t", 1, 2))
        await asyncio.sleep(0)
        raft.commit()
        await task
        topic = controller.committed_image.topic("t")
        assert topic is not None
        p = topic.partitions[0]
        follower = p.replicas[1]
        shrink = await wire.call(56, 3, AlterPartitionRequest(
            broker_id=p.leader, broker_epoch=epochs[p.leader], topics=[AlterPartitionRequest.TopicData(
                topic_id=topic.id, partitions=[AlterPartitionRequest.PartitionData(
                    partition_index=0, leader_epoch=0, partition_epoch=0,
                    new_isr_with_epochs=[AlterPartitionRequest.BrokerState(broker_id=p.leader,
                                                                            broker_epoch=epochs[p.leader])])])]))
        data = shrink.topics[0].partitions[0]
        assert (shrink.error_code, data.error_code, data.isr, data.leader_epoch, data.partition_epoch) == \
            (0, 0, [p.leader], 0, 1)
        again = await wire.call(56, 2, AlterPartitionRequest(
            broker_id=p.leader, broker_epoch=epochs[p.leader], topics=[AlterPartitionRequest.TopicData(
                topic_id=topic.id, partitions=[AlterPartitionRequest.PartitionData(
                    partition_index=0, leader_epoch=0, partition_epoch=0, new_isr=[p.leader, follower])])]))
        assert again.topics[0].partitions[0].error_code == ErrorCode.INVALID_UPDATE_VERSION
        stale = await wire.call(56, 3, AlterPartitionRequest(broker_id=p.leader, broker_epoch=-5, topics=[]))
        assert stale.error_code == ErrorCode.STALE_BROKER_EPOCH

        elect = await wire.call(43, 2, ElectLeadersRequest(election_type=0, topic_partitions=[
            ElectLeadersRequest.TopicPartitions(topic="t", partitions=[0, 7]),
            ElectLeadersRequest.TopicPartitions(topic="nope", partitions=[0])]))
        results = [(r.topic, x.partition_id, x.error_code, x.error_message)
                   for r in elect.replica_election_results for x in r.partition_result]
        assert results == [
            ("t", 0, ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."),
            ("t", 7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "No such partition as t-7"),
            ("nope", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "No such topic as nope"),
        ]
        bad = await wire.call(43, 2, ElectLeadersRequest(election_type=5, topic_partitions=[
            ElectLeadersRequest.TopicPartitions(topic="t", partitions=[0])]))
        assert bad.error_code == ErrorCode.INVALID_REQUEST
        assert bad.replica_election_results[0].partition_result[0].error_code == ErrorCode.INVALID_REQUEST

        gone = await wire.call(64, 0, UnregisterBrokerRequest(broker_id=follower))
        assert (gone.error_code, gone.error_message) == (0, None)
        unknown = await wire.call(64, 0, UnregisterBrokerRequest(broker_id=42))
        assert (unknown.error_code, unknown.error_message) == (
            ErrorCode.BROKER_ID_NOT_REGISTERED, "Broker ID 42 is not currently registered")

    asyncio.run(run())


def test_a_standby_answers_not_controller() -> None:
    clock = FakeClock()
    controller, raft = new_controller(clock, leader=False)
    wire = Wire(ApiDispatcher(_services(controller), listener="controller"), raft)

    async def run() -> None:
        reg = await wire.call(62, 4, registration(1))
        assert (reg.error_code, reg.broker_epoch) == (ErrorCode.NOT_CONTROLLER, -1)

    asyncio.run(run())


def test_single_node_local_controller_elects_nothing_and_refuses_brokers(tmp_path: Path) -> None:
    """LocalController (the default without a quorum): ElectLeaders answers ELECTION_NOT_NEEDED on its
    one-replica partitions and writes nothing; other brokers cannot register (NOT_CONTROLLER)."""
    services = build_services(KafkaConfig({"log.dirs": str(tmp_path / "data"), "node.id": "1"}))
    try:
        controller = services.controller
        run_now(controller.create_topic("t", 2))
        before = services.metadata.image
        response = run_now(controller.elect_leaders(ElectLeadersRequest(election_type=0, topic_partitions=None)))
        assert [(r.topic, r.partition_result) for r in response.replica_election_results] == [("t", [])]
        response = run_now(controller.elect_leaders(ElectLeadersRequest(
            election_type=1, topic_partitions=[ElectLeadersRequest.TopicPartitions(topic="t", partitions=[1])])))
        assert response.replica_election_results[0].partition_result[0].error_code == ErrorCode.ELECTION_NOT_NEEDED
        assert services.metadata.image is before
        with pytest.raises(KafkaError) as e:
            run_now(controller.process_broker_registration(registration(2)))
        assert e.value.error_code is ErrorCode.NOT_CONTROLLER
    finally:
        shutdown_services(services)
