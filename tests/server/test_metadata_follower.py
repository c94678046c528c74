"""`RaftMetadataFollower`, the broker side of a combined node, in process over a one-voter Raft client:
it learns the leader and its controller endpoint from the voters, is caught up once everything below the
high watermark is applied, and its barrier returns only once what the controller appended is applied."""

from __future__ import annotations

import asyncio
import random
import time

from kbroker.metadata.loader import MetadataLoader
from kbroker.raft import KafkaRaftClient, MemoryRaftLog, QuorumConfig
from kbroker.raft.config import Endpoint
from kbroker.raft.quorum_state_store import MemoryQuorumStateStore
from kbroker.server.metadata_follower import RaftMetadataFollower
from kbroker.server.raft_manager import KafkaRaftManager, MetadataRaftListener, RaftClientAdapter
from kbroker.server.settings import QuorumNode
from tests.server.test_raft_manager import _topic_record


def _now() -> int:
    return int(time.time() * 1000)


def test_the_follower_of_a_one_voter_quorum_catches_up_and_reads_its_writes() -> None:
    async def run() -> None:
        voters = {1: Endpoint("127.0.0.1", 19093)}
        config = QuorumConfig(voters=voters, append_linger_ms=1)
        loader = MetadataLoader()
        listener = MetadataRaftListener(loader)
        client = KafkaRaftClient(1, config, MemoryRaftLog(), MemoryQuorumStateStore(None), listener,
                                 random.Random(0), _now(), cluster_id="c")
        manager = KafkaRaftManager(client, config, _now)
        follower = RaftMetadataFollower(1, voters, manager)
        listener.register(follower)
        manager.start()
        follower.start()
        await asyncio.wait_for(follower.caught_up.wait(), 5)
        leader = await follower.wait_for_leader(1)
        assert (leader.leader_id, leader.endpoint) == (1, QuorumNode(1, "127.0.0.1", 19093))
        before = follower.applied_offset

        last = RaftClientAdapter(manager).append(client.epoch, [_topic_record("t")])
        while client.high_watermark() <= last:  # committed: what the controller waits for before it answers
            await asyncio.sleep(0.005)
        await follower.barrier(5)
        assert follower.applied_offset >= last > before
        assert loader.image.topics.get_topic("t") is not None

        # NOT_CONTROLLER from the leader: forgotten, then found again from the Raft client on its next poll.
        follower.forget_leader(1)
        assert follower.leader.endpoint is None
        manager.wakeup()
        assert (await follower.wait_for_leader(2)).leader_id == 1
        await manager.close()

    asyncio.run(run())
