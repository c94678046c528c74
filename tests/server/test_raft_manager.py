"""The seams of `kbroker/server/raft_manager.py`, in process: committed Raft batches reach the
QuorumController (control batches as empty batches) and the MetadataLoader (data batches only), and
the controller's appends go through the Raft client only in the epoch it leads."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence

import pytest

from kbroker.controller.raft_client import LeaderAndEpoch as ControllerLeaderAndEpoch
from kbroker.controller.raft_client import NotLeaderError
from kbroker.metadata.loader import MetadataBatch, MetadataLoader
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
