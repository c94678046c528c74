"""How a broker follows the cluster metadata: the `MetadataFollower` seam, and `RaftMetadataFollower`, the
broker side of a combined node (`process.roles=broker,controller`).

Why a seam: the broker's links to the cluster (`KRaftBrokerLinks`: `ControllerChannel`, `RemoteController`,
`BrokerLifecycleManager`) need the same few facts whichever way the metadata arrives: the leader of the
quorum (the active controller) and its controller endpoint, the offset the image has applied, whether the
first catch-up is done, and a barrier (read-your-writes after a forwarded change). A `process.roles=broker`
node gets them from its `MetadataFetcher` (a Raft observer of its own, over the network). A combined node
must not fetch the log it already replicates: as in Kafka's `KafkaRaftServer`, whose `BrokerServer` is
one more listener of the node's own `KafkaRaftClient`, its broker side reads the committed batches the
local Raft client hands up (`MetadataRaftListener` fans them out to the controller, this follower and
the node's one `MetadataLoader`). Registration, heartbeats, AlterPartition and forwarded admin requests
still go through the controller channel to the active controller's controller listener, which may be
this node's own (over loopback, as Kafka's `NodeToControllerChannelManager` does) or another voter's.

`RaftMetadataFollower`:
- `applied_offset`: the last offset the Raft client handed to the listeners (control batches included);
- `leader`: the Raft leader and its endpoint: where the node's Raft client reaches it (the voter set in force,
  which follows the log's VotersRecords under KIP-853, so a voter added, removed or moved is found), else
  the voters the node started with;
- `caught_up`: set once a leader is known and everything below the high watermark is applied (Kafka's
  broker waits for the same before it registers: `BrokerServer`'s "catching up with the metadata log");
- `barrier`: on the leader, the image already holds what the controller answered (the controller answers
  after `handle_commit`, and the loader replays the same batches in that call); on a follower, until a
  Raft Fetch sent after the call has been answered and the high watermark it reported is applied.

It must not import asyncio-free layers' internals beyond the raft package's public client.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from kbroker.controller.raft_client import LeaderAndEpoch as ControllerLeaderAndEpoch
from kbroker.metadata.loader import MetadataBatch
from kbroker.raft.config import Endpoint as VoterEndpoint
from kbroker.raft.quorum_state import FollowerState, LeaderState
from kbroker.server.metadata_fetcher import LeaderAndEpoch
from kbroker.server.raft_manager import KafkaRaftManager
from kbroker.server.settings import QuorumNode


class MetadataFollower(Protocol):
    """What the broker's cluster links read of the metadata they follow (MetadataFetcher, RaftMetadataFollower)."""

    leader: LeaderAndEpoch
    caught_up: asyncio.Event
    fatal_error: str | None

    @property
    def applied_offset(self) -> int: ...

    def load_local(self) -> None: ...

    def start(self) -> None: ...

    async def close(self) -> None: ...

    async def barrier(self, timeout_s: float, done: Callable[[], bool] | None = None) -> None: ...

    async def wait_for_leader(self, timeout_s: float) -> LeaderAndEpoch: ...

    def forget_leader(self, leader_id: int) -> None: ...


class RaftMetadataFollower:
    """The broker side of a combined node: a listener of the node's own Raft client (no network fetch)."""

    def __init__(self, node_id: int, voters: Mapping[int, VoterEndpoint], manager: KafkaRaftManager) -> None:
        self.node_id = node_id
        self.voters = dict(voters)
        self.manager = manager
        self.leader = LeaderAndEpoch(-1, 0, None)
        self.next_commit_offset = 0
        self.caught_up = asyncio.Event()
        self.leader_changed = asyncio.Event()
        self.fatal_error: str | None = None
        self._progress = asyncio.Event()
        manager.add_poll_listener(self._on_poll)

    # -- MetadataFollower --------------------------------------------------------------------------------

    @property
    def applied_offset(self) -> int:
        return self.next_commit_offset - 1

    def load_local(self) -> None:
        """Nothing: the controller side's Raft client loads the local snapshot and replays the log."""

    def start(self) -> None:
        self._check_caught_up()

    async def close(self) -> None:
        self._progress.set()

    async def barrier(self, timeout_s: float, done: Callable[[], bool] | None = None) -> None:
        client = self.manager.client
        # A Fetch in flight may have been sent before the call: count only those sent from now on.
        sent = self.manager.fetches_sent

        async def wait() -> None:
            while not (done is not None and done()):
                if client.is_leader:
                    hw = client.high_watermark()
                    if hw >= 0 and self.next_commit_offset >= hw:
                        return
                elif self.manager.fetches_answered > sent:
                    hw = client.high_watermark()
                    if self.next_commit_offset >= hw:
                        return
                self._progress.clear()
                await self._progress.wait()

        await asyncio.wait_for(wait(), timeout_s)

    async def wait_for_leader(self, timeout_s: float) -> LeaderAndEpoch:
        async def wait() -> LeaderAndEpoch:
            while self.leader.endpoint is None:
                self.leader_changed.clear()
                await self.leader_changed.wait()
            return self.leader

        return await asyncio.wait_for(wait(), timeout_s)

    def quorum_reachable(self) -> bool:
        """Whether this node is in touch with a quorum now: it leads (a leader without a majority resigns
        at check-quorum), or it follows a leader that answered a Fetch within
        `controller.quorum.fetch.timeout.ms` (KIP-996's test for keeping a leader). An unattached,
        prospective or candidate node, or a follower of a leader it cannot reach, is not."""
        client = self.manager.client
        s = client.quorum.state
        if isinstance(s, LeaderState):
            return True
        if isinstance(s, FollowerState):
            return s.last_fetch_success_ms >= 0 and (
                self.manager.time_ms() - s.last_fetch_success_ms < client.config.fetch_timeout_ms)
        return False

    def forget_leader(self, leader_id: int) -> None:
        """A request to `leader_id` said NOT_CONTROLLER. The Raft client learns the new leader itself; until
        it does, the channel waits (a stale leader with the same epoch would be sent to again)."""
        if self.leader.leader_id == leader_id:
            self._set_leader(LeaderAndEpoch(-1, self.leader.epoch, None))

    # -- RaftClientListener (registered on the node's MetadataRaftListener) -------------------------------

    def handle_commit(self, batches: Sequence[MetadataBatch]) -> None:
        if batches:
            self.next_commit_offset = max(self.next_commit_offset, batches[-1].last_offset + 1)
        self._check_caught_up()

    def handle_load_snapshot(self, records: Sequence[object], last_contained_offset: int, epoch: int,
                             last_contained_log_time_ms: int = -1) -> None:
        self.next_commit_offset = max(self.next_commit_offset, last_contained_offset + 1)
        self._check_caught_up()

    def handle_leader_change(self, leader: ControllerLeaderAndEpoch) -> None:
        leader_id = leader.leader_id if leader.leader_id is not None else -1
        e = self._endpoint(leader_id)
        self._set_leader(LeaderAndEpoch(leader_id, leader.epoch,
                                        QuorumNode(leader_id, e.host, e.port) if e is not None else None))

    # -- internals ---------------------------------------------------------------------------------------

    def _endpoint(self, leader_id: int) -> VoterEndpoint | None:
        if leader_id < 0:
            return None
        return self.manager.client.endpoint_of(leader_id) or self.voters.get(leader_id)

    def _set_leader(self, leader: LeaderAndEpoch) -> None:
        self.leader = leader
        self.leader_changed.set()
        self._progress.set()

    def _on_poll(self) -> None:
        client = self.manager.client
        known = client.leader_and_epoch()
        if known.leader_id >= 0 and (known.leader_id, known.epoch) != (self.leader.leader_id, self.leader.epoch) \
                and self.leader.endpoint is None:
            # A leader learnt between listener callbacks (a forgotten one found again).
            e = self._endpoint(known.leader_id)
            if e is not None:
                self._set_leader(LeaderAndEpoch(known.leader_id, known.epoch,
                                                QuorumNode(known.leader_id, e.host, e.port)))
        self._check_caught_up()
        self._progress.set()

    def _check_caught_up(self) -> None:
        if self.caught_up.is_set():
            return
        client = self.manager.client
        hw = client.high_watermark()
        if self.leader.endpoint is not None and hw >= 0 and self.next_commit_offset >= hw:
            self.caught_up.set()
