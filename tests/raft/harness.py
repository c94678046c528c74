"""A small fault-free driver for the Raft unit tests: clients, a fake clock, a perfect network.

`LocalCluster` delivers every outbound request and response after `latency_ms`, polls each client
at its deadline, and lets a test cut nodes off (`down`) or restart them with whatever log and store
it hands in. The simulation (simulation.py) is the hostile version of the same loop.
"""

from __future__ import annotations

import heapq
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from kbroker.raft.client import KafkaRaftClient
from kbroker.raft.config import Endpoint, QuorumConfig
from kbroker.raft.messages import (
    LeaderAndEpoch,
    OutboundRequest,
    OutboundResponse,
    RaftBatch,
    RaftOutbound,
    RaftRequestBody,
    RaftResponseBody,
)
from kbroker.raft.quorum_state_store import MemoryQuorumStateStore, QuorumStateStore
from kbroker.raft.raft_log import MemoryRaftLog, OffsetAndEpoch, RaftLog


class RecordingListener:
    def __init__(self) -> None:
        self.committed: list[RaftBatch] = []
        self.snapshots: list[tuple[OffsetAndEpoch, bytes]] = []
        self.leaders: list[LeaderAndEpoch] = []

    def handle_commit(self, batches: list[RaftBatch]) -> None:
        self.committed.extend(batches)

    def handle_load_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        self.snapshots.append((snapshot_id, data))

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.leaders.append(leader)

    def values(self) -> list[bytes]:
        return [v for b in self.committed if not b.is_control for v in b.values() if v is not None]


def quorum_config(voters: int = 3, **kwargs: int) -> QuorumConfig:
    return QuorumConfig(voters={v: Endpoint(f"node{v}", 9093) for v in range(1, voters + 1)}, **kwargs)


@dataclass(order=True)
class _Msg:
    at: int
    seq: int
    src: int = field(compare=False)
    dst: int = field(compare=False)
    item: RaftOutbound = field(compare=False)


class LocalCluster:
    def __init__(self, voters: int = 3, observers: tuple[int, ...] = (), seed: int = 1, latency_ms: int = 1,
                 config: QuorumConfig | None = None,
                 make_log: Callable[[int], RaftLog] | None = None,
                 make_store: Callable[[int], QuorumStateStore] | None = None,
                 directory_ids: dict[int, uuid.UUID] | None = None, aliases: dict[int, int] | None = None,
                 configs: dict[int, QuorumConfig] | None = None) -> None:
        self.config = config or quorum_config(voters)
        self.rng = random.Random(seed)
        self.now = 0
        self.latency_ms = latency_ms
        self.make_log = make_log or (lambda n: MemoryRaftLog())
        self.make_store = make_store or (lambda n: MemoryQuorumStateStore())
        self.logs: dict[int, RaftLog] = {}
        self.stores: dict[int, QuorumStateStore] = {}
        self.listeners: dict[int, RecordingListener] = {}
        self.clients: dict[int, KafkaRaftClient] = {}
        self.down: set[int] = set()
        self.queue: list[_Msg] = []
        self.seq = 0
        # request id -> (requester, correlation id, the id it addressed: a bootstrap server's alias)
        self.pending: dict[int, tuple[int, int, int]] = {}
        self.next_request_id = 0
        self.directory_ids = directory_ids or {}  # KIP-853: each node's metadata log dir id
        self.aliases = aliases or {}  # a bootstrap server's negative id -> the node behind it
        self.configs = configs or {}  # a node's own QuorumConfig (default: the shared one)
        self.admin_responses: dict[int, RaftResponseBody] = {}  # request id -> an operator request's answer
        self.admin_pending: set[int] = set()
        for n in [*self.config.voters, *observers]:
            self.start(n)

    def start(self, node: int, log: RaftLog | None = None, store: QuorumStateStore | None = None) -> KafkaRaftClient:
        self.logs[node] = log if log is not None else self.logs.get(node) or self.make_log(node)
        self.stores[node] = store if store is not None else self.stores.get(node) or self.make_store(node)
        self.listeners[node] = RecordingListener()
        self.clients[node] = KafkaRaftClient(node, self.configs.get(node, self.config), self.logs[node],
                                             self.stores[node], self.listeners[node], self.rng, self.now,
                                             cluster_id="test",
                                             directory_id=self.directory_ids.get(node, uuid.UUID(int=0)))
        self.down.discard(node)
        return self.clients[node]

    def drive(self, node: int) -> None:
        if node in self.down:
            return
        self.enqueue(node, self.clients[node].poll(self.now))

    def enqueue(self, node: int, items: list[RaftOutbound]) -> None:
        for item in items:
            self.seq += 1
            if isinstance(item, OutboundRequest):
                dst = self.aliases.get(item.destination, item.destination)
                heapq.heappush(self.queue, _Msg(self.now + self.latency_ms, self.seq, node, dst, item))
            elif item.request_id in self.admin_pending:
                self.admin_pending.discard(item.request_id)
                self.admin_responses[item.request_id] = item.body
            else:
                requester, _, _ = self.pending[item.request_id]
                heapq.heappush(self.queue, _Msg(self.now + self.latency_ms, self.seq, node, requester, item))

    def step(self) -> None:
        times = [self.clients[n].next_deadline_ms() for n in self.clients if n not in self.down]
        if self.queue:
            times.append(self.queue[0].at)
        self.now = max(self.now, min(times))
        while self.queue and self.queue[0].at <= self.now:
            m = heapq.heappop(self.queue)
            if m.dst in self.down or m.src in self.down or m.dst not in self.clients:
                continue
            client = self.clients[m.dst]
            if isinstance(m.item, OutboundRequest):
                self.next_request_id += 1
                self.pending[self.next_request_id] = (m.src, m.item.correlation_id, m.item.destination)
                client.handle_request(m.item.api_key, m.item.body, self.next_request_id, self.now)
            elif isinstance(m.item, OutboundResponse):
                _, corr, addressed = self.pending.pop(m.item.request_id)
                client.handle_response(addressed, m.item.api_key, corr, m.item.body, self.now)
            self.drive(m.dst)
        for n in list(self.clients):
            if n not in self.down and self.clients[n].next_deadline_ms() <= self.now:
                self.drive(n)

    def admin(self, node: int, api_key: int, body: RaftRequestBody) -> int:
        """An operator's request (AddRaftVoter, RemoveRaftVoter, ...) handed to `node`; its answer lands
        in `admin_responses[returned id]`."""
        self.next_request_id += 1
        rid = self.next_request_id
        self.admin_pending.add(rid)
        self.clients[node].handle_request(api_key, body, rid, self.now)
        self.drive(node)
        return rid

    def run_until(self, predicate: Callable[[], bool], max_ms: int = 30_000) -> None:
        end = self.now + max_ms
        while not predicate():
            if self.now > end:
                raise AssertionError(f"condition not reached within {max_ms} ms")
            self.step()

    def run_for(self, ms: int) -> None:
        end = self.now + ms
        while self.now < end:
            self.step()
        self.now = end

    def leader(self) -> int:
        leaders = [n for n, c in self.clients.items() if n not in self.down and c.is_leader]
        return leaders[0] if len(leaders) == 1 else -1

    def elect(self) -> int:
        self.run_until(lambda: self.leader() >= 0)
        return self.leader()
