"""The seams of `kbroker/server/raft_manager.py`, in process: committed Raft batches reach the
QuorumController (control batches as empty batches) and the MetadataLoader (data batches only), and
the controller's appends go through the Raft client only in the epoch it leads."""

from __future__ import annotations

import asyncio
import random
import struct
from collections.abc import Sequence

import pytest

from kbroker.controller.raft_client import LeaderAndEpoch as ControllerLeaderAndEpoch
from kbroker.controller.raft_client import NotLeaderError
from kbroker.metadata.loader import MetadataBatch, MetadataLoader
from kbroker.protocol.frames import decode_request_frame, encode_response_frame
from kbroker.protocol.messages.api_versions import ApiVersionsResponse
from kbroker.protocol.metadata_records.serde import encode_metadata_record
from kbroker.protocol.records import SimpleRecord, build_batch
from kbroker.raft import KafkaRaftClient, LeaderAndEpoch, MemoryRaftLog, QuorumConfig, RaftBatch
from kbroker.raft.config import Endpoint
from kbroker.raft.control_records import build_leader_change_batch
from kbroker.raft.quorum_state_store import MemoryQuorumStateStore
from kbroker.server.raft_manager import KafkaRaftManager, MetadataRaftListener, RaftClientAdapter


class Recorder:
    def __init__(self) -> None:
        self.batches: list[MetadataBatch] = []
        self.leaders: list[ControllerLeaderAndEpoch] = []

    def handle_commit(self, batches: Sequence[MetadataBatch]) -> None:
        self.batches.extend(batches)

    def handle_leader_change(self, leader: ControllerLeaderAndEpoch) -> None:
        self.leaders.append(leader)


def _topic_record(name: str) -> object:
    import uuid

    from kbroker.protocol.metadata_records.topic_record import TopicRecord

    return TopicRecord(name=name, topic_id=uuid.uuid4())


def test_listener_fans_out_commits_and_leader_changes() -> None:
    loader = MetadataLoader()
    listener = MetadataRaftListener(loader)
    controller = Recorder()
    listener.register(controller)
    control = build_leader_change_batch(leader_id=1, voters=[1], granting_voters=[1], base_offset=0,
                                        epoch=1, now_ms=1000)
    data = build_batch([SimpleRecord(value=encode_metadata_record(_topic_record("a")), timestamp=1000)],
                       base_offset=1, partition_leader_epoch=1, now_ms=1000)
    listener.handle_commit([RaftBatch.of(bytes(control)), RaftBatch.of(bytes(data))])
    assert [(b.base_offset, len(b.records)) for b in controller.batches] == [(0, 0), (1, 1)]
    assert "a" in loader.image.topics.topics_by_name
    assert loader.image.provenance.last_contained_offset == 1
    listener.handle_leader_change(LeaderAndEpoch(-1, 2))
    listener.handle_leader_change(LeaderAndEpoch(3, 2))
    assert controller.leaders == [ControllerLeaderAndEpoch(None, 2), ControllerLeaderAndEpoch(3, 2)]


def test_adapter_appends_only_in_the_led_epoch() -> None:
    async def run() -> None:
        listener = MetadataRaftListener(None)
        controller = Recorder()
        listener.register(controller)
        config = QuorumConfig(voters={1: Endpoint("127.0.0.1", 1)})
        now = [1000]
        client = KafkaRaftClient(1, config, MemoryRaftLog(), MemoryQuorumStateStore(), listener,
                                 random.Random(1), now[0])
        manager = KafkaRaftManager(client, config, lambda: now[0])
        manager.start()
        adapter = RaftClientAdapter(manager)
        for _ in range(50):  # a single voter elects itself and commits its LeaderChange batch
            now[0] += 50
            manager.poll()
            await asyncio.sleep(0)
            if client.is_leader:
                break
        assert client.is_leader
        epoch = client.epoch
        with pytest.raises(NotLeaderError):
            adapter.append(epoch + 1, [_topic_record("x")])
        last = adapter.append(epoch, [_topic_record("x"), _topic_record("y")])
        assert adapter.log_end_offset() == last + 1
        for _ in range(20):
            now[0] += 50
            manager.poll()
            await asyncio.sleep(0)
        assert controller.batches and controller.batches[-1].last_offset == last
        assert [len(b.records) for b in controller.batches][-1] == 2
        adapter.resign(epoch)
        assert not client.is_leader
        await manager.close()

    asyncio.run(run())


def test_close_while_a_request_fails_with_its_connection() -> None:
    """A combined node stopping with its peers: a voter closes the connection a Vote is waiting on, and
    the manager closes before the request task has seen it. Python 3.11's `asyncio.wait_for` then hands
    the task the connection's error instead of its cancellation, so `_send`'s failure path pops the
    connection while `close()` is closing the connections. `close()` used to iterate the live map and
    die with "dictionary changed size during iteration" (node exit code 1, CI of stop 27)."""

    async def run() -> None:
        peer: list[asyncio.StreamWriter] = []

        async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            """Voter 2: answers ApiVersions, holds the Vote request unanswered."""
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                header, _ = decode_request_frame(await reader.readexactly(size))
                if header.api_key != 18:
                    peer.append(writer)
                    return
                answer = ApiVersionsResponse(error_code=0, throttle_time_ms=0, api_keys=[
                    ApiVersionsResponse.ApiVersion(api_key=k, min_version=0, max_version=v)
                    for k, v in ((18, 4), (52, 2), (53, 1), (54, 1), (55, 1), (1, 17))])
                for part in encode_response_frame(18, header.api_version, header.correlation_id, answer):
                    writer.write(bytes(part))

        server = await asyncio.start_server(hold, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        config = QuorumConfig(voters={1: Endpoint("127.0.0.1", 1), 2: Endpoint("127.0.0.1", port)},
                              election_timeout_ms=10, request_timeout_ms=30_000)
        now = [1000]
        client = KafkaRaftClient(1, config, MemoryRaftLog(), MemoryQuorumStateStore(),
                                 MetadataRaftListener(None), random.Random(1), now[0])
        manager = KafkaRaftManager(client, config, lambda: now[0])
        manager.start()
        for _ in range(200):  # the election timeout passes: a Vote request to voter 2
            now[0] += 50
            manager.poll()
            await asyncio.sleep(0.005)
            if peer:
                break
        assert peer, "no request reached voter 2"
        conn = manager._connections[2]
        peer[0].close()  # voter 2 stops
        while not conn._closed:  # the read loop has failed the in-flight request's future...
            await asyncio.sleep(0)
        assert manager._tasks, "the request task has already finished"  # ...and the task has not resumed
        await manager.close()  # raised RuntimeError
        assert manager._connections == {}
        await asyncio.gather(*manager._tasks, return_exceptions=True)
        server.close()
        await server.wait_closed()

    asyncio.run(run())
