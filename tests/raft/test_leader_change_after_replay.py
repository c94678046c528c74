"""A leader tells its listener of its own leadership only after handing over every batch committed before
its epoch (Kafka's KafkaRaftClient fires `handleLeaderChange` for the local leader once the listener's
next offset reaches the epoch start offset).

Found by tests/cluster/test_combined_mode.py: a restarted one-voter quorum leads at once (before any
poll), and the client told its listener (the QuorumController) before replaying the log, so the
controller activated on an empty image: it wrote the bootstrap records again and, knowing no partitions,
elected no leaders when the broker registered after its controlled shutdown.
"""

from __future__ import annotations

import random

from kbroker.raft.client import KafkaRaftClient
from kbroker.raft.messages import LeaderAndEpoch, RaftBatch
from kbroker.raft.quorum_state_store import ElectionState, MemoryQuorumStateStore
from tests.raft.harness import quorum_config
from tests.raft.test_client import log_with


class OrderListener:
    """Records the order of the callbacks: ("commit", last offset) and ("leader", leader id, epoch)."""

    def __init__(self) -> None:
        self.events: list[tuple[object, ...]] = []

    def handle_commit(self, batches: list[RaftBatch]) -> None:
        self.events.append(("commit", batches[-1].last_offset))

    def handle_load_snapshot(self, snapshot_id: object, data: bytes) -> None:
        self.events.append(("snapshot",))

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.events.append(("leader", leader.leader_id, leader.epoch))


def test_a_restarted_single_voter_replays_its_log_before_it_says_it_leads() -> None:
    log = log_with([1, 1, 1])  # three batches committed in epoch 1 by an earlier incarnation
    listener = OrderListener()
    client = KafkaRaftClient(1, quorum_config(1), log, MemoryQuorumStateStore(ElectionState(1, leader_id=1,
                                                                                        voted_id=1)),
                             listener, random.Random(0), 0, cluster_id="test")
    assert client.is_leader and client.epoch == 2  # leads at once, before any poll
    now = 0
    while ("leader", 1, 2) not in listener.events and now < 5000:
        client.poll(now)
        now = max(now + 1, client.next_deadline_ms())
    assert ("leader", 1, 2) in listener.events
    leader_at = listener.events.index(("leader", 1, 2))
    replayed = [e for e in listener.events[:leader_at] if e[0] == "commit"]
    assert replayed and replayed[-1][1] >= 2, listener.events  # offsets 0-2 handed over first


def test_a_follower_hears_of_the_leader_at_once() -> None:
    """Followers (and observers) learn the leader before catching up, as in Kafka."""
    listener = OrderListener()
    client = KafkaRaftClient(1, quorum_config(3), log_with([1, 1]),
                             MemoryQuorumStateStore(ElectionState(2, leader_id=2, voted_id=-1)),
                             listener, random.Random(0), 0, cluster_id="test")
    client.poll(0)
    assert listener.events[0] == ("leader", 2, 2)
