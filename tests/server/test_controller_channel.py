"""ControllerChannel and RemoteController (kbroker/server/): requests reach the active controller, a
NOT_CONTROLLER answer or a lost connection sends them to the next leader the metadata fetcher finds,
and the controller's errors come back as Kafka's error codes. The controller side is a scripted fake
connection here; tests/cluster runs them against Kafka's controller."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from kbroker.client import ConnectionClosedError
from kbroker.metadata.cache import MetadataCache
from kbroker.metadata.loader import MetadataLoader
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages.allocate_producer_ids import AllocateProducerIdsResponse
from kbroker.protocol.messages.alter_partition import AlterPartitionRequest, AlterPartitionResponse
from kbroker.protocol.messages.create_topics import CreateTopicsRequest, CreateTopicsResponse
from kbroker.raft.metadata_log import KafkaMetadataLog
from kbroker.server.controller_channel import ControllerChannel
from kbroker.server.metadata_fetcher import LeaderAndEpoch, MetadataFetcher
from kbroker.server.remote_controller import RemoteController
from kbroker.server.settings import KRaftBrokerSettings, QuorumNode

DIR_ID = uuid.UUID(int=5)


class FakeConnection:
    """Answers each request with the next scripted answer (an exception is raised instead)."""

    def __init__(self, host: str, port: int, script: list[object], sent: list[tuple[int, int, object]]) -> None:
        self.host, self.port = host, port
        self.script = script
        self.sent = sent
        self.connected = False

    async def connect(self) -> None:
        self.connected = True

    async def request(self, api_key: int, body: object, response_type: type[object], **_: object) -> object:
        self.sent.append((self.port, api_key, body))
        answer = self.script.pop(0)
        if isinstance(answer, Exception):
            self.connected = False
            raise answer
        return answer

    async def close(self) -> None:
        self.connected = False


def make(tmp_path: Path, script: list[object]) -> tuple[MetadataFetcher, ControllerChannel,
                                                         list[tuple[int, int, object]]]:
    settings = KRaftBrokerSettings(node_id=3, cluster_id="cid", voters=(QuorumNode(1, "h", 9001),
                                                                         QuorumNode(2, "h", 9002)),
                                   bootstrap_servers=(), controller_listener_name="CONTROLLER", rack=None,
                                   log_dir_ids=(DIR_ID,), metadata_directory_id=DIR_ID)
    fetcher = MetadataFetcher(settings, KafkaMetadataLog(tmp_path), MetadataLoader())
    sent: list[tuple[int, int, object]] = []
    channel = ControllerChannel(fetcher, node_id=3, request_timeout_ms=2000, retry_backoff_ms=1,
                                connection_factory=lambda h, p: FakeConnection(h, p, script, sent))  # type: ignore[arg-type,return-value]
    return fetcher, channel, sent


def test_not_controller_moves_the_request_to_the_next_leader(tmp_path: Path) -> None:
    fetcher, channel, sent = make(tmp_path, [AlterPartitionResponse(error_code=int(ErrorCode.NOT_CONTROLLER)),
                                             AlterPartitionResponse(error_code=0)])

    async def run() -> AlterPartitionResponse:
        fetcher._set_leader(LeaderAndEpoch(1, 5, QuorumNode(1, "h", 9001)))

        async def new_leader() -> None:
            await asyncio.sleep(0.05)  # the fetcher learns of node 2 a moment later
            fetcher._set_leader(LeaderAndEpoch(2, 6, QuorumNode(2, "h", 9002)))

        task = asyncio.get_running_loop().create_task(new_leader())
        resp = await channel.send_alter_partition(AlterPartitionRequest(broker_id=3, broker_epoch=9))
        await task
        return resp

    resp = asyncio.run(run())
    assert resp.error_code == 0
    assert [(port, key) for port, key, _ in sent] == [(9001, 56), (9002, 56)]


def test_a_lost_connection_is_retried_and_time_runs_out(tmp_path: Path) -> None:
    fetcher, channel, sent = make(tmp_path, [ConnectionClosedError("gone"), AlterPartitionResponse(error_code=0)])

    async def run() -> AlterPartitionResponse:
        fetcher._set_leader(LeaderAndEpoch(1, 5, QuorumNode(1, "h", 9001)))
        return await channel.send_alter_partition(AlterPartitionRequest(broker_id=3, broker_epoch=9))

    assert asyncio.run(run()).error_code == 0
    assert len(sent) == 2

    fetcher2, channel2, _ = make(tmp_path / "b", [])

    async def no_leader() -> None:
        await channel2.send_alter_partition(AlterPartitionRequest(broker_id=3, broker_epoch=9))

    with pytest.raises(TimeoutError):
        asyncio.run(no_leader())


def test_remote_controller_maps_the_controllers_errors(tmp_path: Path) -> None:
    result = CreateTopicsResponse.CreatableTopicResult(
        name="t", error_code=int(ErrorCode.INVALID_REPLICATION_FACTOR),
        error_message="Unable to replicate the partition 3 time(s): only 1 broker(s) are registered.")
    fetcher, channel, sent = make(tmp_path, [
        CreateTopicsResponse(topics=[result]),
        AllocateProducerIdsResponse(error_code=0, producer_id_start=1000, producer_id_len=1000),
        AllocateProducerIdsResponse(error_code=int(ErrorCode.STALE_BROKER_EPOCH)),
    ])
    controller = RemoteController(node_id=3, channel=channel, fetcher=fetcher, cache=MetadataCache(3),
                                  broker_epoch=lambda: 21, request_timeout_ms=2000)

    async def run() -> None:
        fetcher._set_leader(LeaderAndEpoch(1, 5, QuorumNode(1, "h", 9001)))
        with pytest.raises(KafkaError) as err:
            await controller.create_topic("t", 1, 3, {"cleanup.policy": "compact"}, assignments=None)
        assert err.value.error_code == ErrorCode.INVALID_REPLICATION_FACTOR
        assert "only 1 broker" in str(err.value)
        block = await controller.allocate_producer_ids(3, -1)
        assert (block.assigned_broker_id, block.first_producer_id, block.size) == (3, 1000, 1000)
        with pytest.raises(KafkaError) as err:
            await controller.allocate_producer_ids(3, -1)
        assert err.value.error_code == ErrorCode.STALE_BROKER_EPOCH

    asyncio.run(run())
    create = sent[0][2]
    assert isinstance(create, CreateTopicsRequest)
    [topic] = create.topics
    assert (topic.name, topic.num_partitions, topic.replication_factor) == ("t", 1, 3)
    assert [(c.name, c.value) for c in topic.configs] == [("cleanup.policy", "compact")]
    # The lifecycle's current broker epoch, not the one the caller had.
    assert sent[1][2].broker_epoch == 21


def test_a_per_topic_not_controller_goes_to_the_next_leader(tmp_path: Path) -> None:
    """Kafka's controller answers NOT_CONTROLLER in the topic's result when it lost the leadership."""
    moved = CreateTopicsResponse.CreatableTopicResult(name="t", error_code=int(ErrorCode.NOT_CONTROLLER))
    ok = CreateTopicsResponse.CreatableTopicResult(name="t", error_code=0, topic_id=uuid.UUID(int=9),
                                                   num_partitions=4, replication_factor=1, configs=[])
    fetcher, channel, sent = make(tmp_path, [CreateTopicsResponse(topics=[moved]), CreateTopicsResponse(topics=[ok])])
    controller = RemoteController(node_id=3, channel=channel, fetcher=fetcher, cache=MetadataCache(3),
                                  broker_epoch=lambda: 21, request_timeout_ms=2000)

    async def run() -> int:
        fetcher._set_leader(LeaderAndEpoch(1, 5, QuorumNode(1, "h", 9001)))

        async def new_leader() -> None:
            await asyncio.sleep(0.05)
            fetcher._set_leader(LeaderAndEpoch(2, 6, QuorumNode(2, "h", 9002)))

        task = asyncio.get_running_loop().create_task(new_leader())
        info = await controller.create_topic("t", 4, 1, validate_only=True)
        await task
        return info.num_partitions

    assert asyncio.run(run()) == 4
    assert [port for port, _, _ in sent] == [9001, 9002]
