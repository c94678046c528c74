"""A deterministic simulation of a KRaft quorum: N `KafkaRaftClient`s, a fake clock, a hostile network.

Everything random comes from one `random.Random(seed)`, so a seed number reproduces a run exactly
(`python -m tests.raft.simulation --seed 1234 --voters 5` replays one and prints its trace).

The network drops, delays (so reorders) and duplicates messages and partitions nodes; nodes crash
and restart with their durable state (the quorum-state store, and the log as `MemoryRaftLog.crash`
leaves it: flushed batches and a random prefix of the rest) or shut down gracefully (the leader
resigns with EndQuorumEpoch first). A client appends records on whoever believes it leads. Faults
come in stretches separated by healthy stretches (no faults, every node up).

Checked after every step (`SafetyViolation` on the first failure):

- election safety: at most one leader per epoch, ever;
- leader completeness: a new leader's log holds every entry committed so far (or a snapshot of them);
- committed entries never change: the batches below any node's high watermark equal the ones first
  seen committed at those offsets (so all replicas agree up to their high watermarks), and a node
  never truncates below its high watermark;
- state machine safety: every listener sees exactly the committed batches, in order, each once
  (snapshots included: a snapshot's content is the digest of the committed prefix it replaces);
- the high watermark of a node never decreases (within one incarnation);
- liveness: at the end of each healthy stretch there is a leader and something new was committed;
- membership (KIP-853, `SimConfig.membership_interval_ms`): an operator adds observers to and removes
  voters from the quorum with AddRaftVoter / RemoveRaftVoter sent to whoever leads, under the same
  faults. Every committed VotersRecord differs from the previous one by exactly one voter; every
  leader is elected by a majority of the voter set its own log says (the latest VotersRecord,
  committed or not), and is in that set;
- convergence (catch-up): at the end of each healthy stretch every node, voters and the observer,
  has applied at least everything that was committed when the stretch began, through its log or a
  snapshot fetched from the leader (FetchSnapshot) when it lagged behind the leader's log start; with
  the global digest chain above, that means every node holds the same state at that offset.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import heapq
import random
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from kbroker.protocol.frames import (
    decode_request_frame,
    decode_response_frame,
    encode_request_frame,
    encode_response_frame,
)
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages import API_SPECS, ApiKey
from kbroker.protocol.messages.add_raft_voter import AddRaftVoterRequest
from kbroker.protocol.messages.remove_raft_voter import RemoveRaftVoterRequest
from kbroker.protocol.record_format import ControlRecordType, parse_control_record_type
from kbroker.protocol.records import RecordBatch, batch_size_at
from kbroker.protocol.types import join_parts
from kbroker.raft.client import KafkaRaftClient, PlantedBugs
from kbroker.raft.config import Endpoint, QuorumConfig
from kbroker.raft.messages import (
    LeaderAndEpoch,
    NotLeaderError,
    OutboundRequest,
    OutboundResponse,
    RaftBatch,
    RaftRequestBody,
    RaftResponseBody,
)
from kbroker.raft.metadata_log import KafkaMetadataLog
from kbroker.raft.partition_state import decode_voters
from kbroker.raft.quorum_state import LeaderState
from kbroker.raft.quorum_state_store import MemoryQuorumStateStore
from kbroker.raft.raft_log import MemoryRaftLog, OffsetAndEpoch

GENESIS = hashlib.sha256(b"kraft").digest()


class SafetyViolation(AssertionError):
    pass


def chain(prev: bytes, data: bytes) -> bytes:
    return hashlib.sha256(prev + data).digest()


@dataclass
class Faults:
    drop: float = 0.05
    duplicate: float = 0.02
    max_delay_ms: int = 20
    long_delay: float = 0.02  # a message held for up to 400 ms (reordering)
    crash_rate: float = 0.15  # crashes per simulated second in a fault stretch (whole cluster)
    partition_rate: float = 0.2
    snapshot_every: int = 25  # batches a node applies between its snapshots (0: never)
    # kraft.version 1 only: the chance that a crashed voter comes back on a wiped, re-formatted disk (empty
    # log and quorum-state, a new directory id); at most one voter per run, so a majority stays intact.
    disk_loss: float = 0.0


@dataclass
class SimConfig:
    voters: int = 3
    observers: int = 1
    duration_ms: int = 20_000
    healthy_ms: int = 9_000
    fault_ms: tuple[int, int] = (1_000, 5_000)
    append_interval_ms: int = 60
    max_fetch_bytes: int = 8 * 1024 * 1024  # small values split fetch responses (wider windows for races)
    timeout_scale: int = 1  # 1: Kafka's default timeouts; k: each divided by k
    disk_dir: Path | None = None  # KafkaMetadataLog under this directory instead of the in-memory log
    roundtrip: bool = False  # encode and decode every message with the generated codecs
    faults: Faults = field(default_factory=Faults)
    planted: PlantedBugs = field(default_factory=PlantedBugs)
    kraft_version: int = 0  # 1: voters are ReplicaKeys (directory ids), KIP-853
    membership_interval_ms: int = 0  # > 0 (kraft.version 1): an Add/RemoveRaftVoter to the leader this often


class SimLog(MemoryRaftLog):
    """A MemoryRaftLog that refuses (as a violation) to truncate below its node's high watermark."""

    guard = 0
    installed = 0  # snapshots fetched from the leader and installed (this node, every incarnation)

    def install_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        self.installed += 1
        super().install_snapshot(snapshot_id, data)

    def truncate_to(self, offset: int) -> None:
        if offset < self.guard and offset < self.end_offset():
            raise SafetyViolation(f"truncation to {offset} below the high watermark {self.guard}")
        super().truncate_to(offset)


class DiskSimLog(KafkaMetadataLog):
    """The on-disk log under the same guard (a simulated crash is a process crash: the OS keeps the files)."""

    guard = 0
    installed = 0

    def install_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        self.installed += 1
        super().install_snapshot(snapshot_id, data)

    def truncate_to(self, offset: int) -> None:
        if offset < self.guard and offset < self.end_offset():
            raise SafetyViolation(f"truncation to {offset} below the high watermark {self.guard}")
        super().truncate_to(offset)


class StateMachine:
    """The listener: a digest chain over the committed batches it applied."""

    def __init__(self, sim: Simulation, node_id: int) -> None:
        self.sim = sim
        self.node_id = node_id
        self.next_offset = 0
        self.digest = GENESIS
        self.applied_since_snapshot = 0
        self.pending: list[tuple[int, bytes]] = []  # (end offset, digest) to verify against the global chain
        self.leader = LeaderAndEpoch(-1, 0)

    def handle_commit(self, batches: list[RaftBatch]) -> None:
        for b in batches:
            if b.base_offset != self.next_offset:
                raise SafetyViolation(f"node {self.node_id}: listener got batch at {b.base_offset}, "
                                      f"expected {self.next_offset}")
            self.digest = chain(self.digest, b.data)
            self.next_offset = b.last_offset + 1
            self.pending.append((self.next_offset, self.digest))
            self.applied_since_snapshot += 1

    def handle_load_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        offset_text, _, digest_hex = data.decode().partition(":")
        if int(offset_text) != snapshot_id.offset:
            raise SafetyViolation(f"node {self.node_id}: snapshot {snapshot_id} holds offset {offset_text}")
        self.next_offset = snapshot_id.offset
        self.digest = bytes.fromhex(digest_hex)
        self.pending.append((self.next_offset, self.digest))

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.leader = leader


class SimNode:
    def __init__(self, sim: Simulation, node_id: int) -> None:
        self.sim = sim
        self.node_id = node_id
        self.store = MemoryQuorumStateStore()
        self.log: SimLog | DiskSimLog = (
            SimLog() if sim.cfg.disk_dir is None else DiskSimLog(sim.cfg.disk_dir / f"node{node_id}"))
        self.alive = False
        self.incarnation = 0
        self.client: KafkaRaftClient | None = None
        self.sm = StateMachine(sim, node_id)
        self.checked_upto = 0
        self.last_hw = -1
        self.shutting_down_at = -1
        self.deadline = 0  # the client's next_deadline_ms after the last time it was driven
        self.directory_id = sim.directory_ids[node_id]
        self.wiped = False

    def start(self, now_ms: int) -> None:
        self.alive = True
        self.incarnation += 1
        self.sm = StateMachine(self.sim, self.node_id)
        self.checked_upto = self.log.start_offset()
        self.log.guard = 0
        self.last_hw = -1
        self.shutting_down_at = -1
        self.client = KafkaRaftClient(self.node_id, self.sim.quorum_config, self.log, self.store, self.sm,
                                      self.sim.rng, now_ms, cluster_id="sim-cluster", planted=self.sim.cfg.planted,
                                      directory_id=self.directory_id)
        self.deadline = now_ms

    def wipe_disk(self) -> None:
        """The node's disk is replaced and re-formatted: nothing durable survives, a new directory id."""
        self.log = SimLog()
        self.store = MemoryQuorumStateStore()
        self.directory_id = uuid.UUID(int=(self.node_id << 64) | 0xD15C)
        self.wiped = True

    def crash(self) -> None:
        self.alive = False
        self.client = None
        if isinstance(self.log, DiskSimLog):
            installed = self.log.installed
            self.log.close()
            self.log = DiskSimLog(self.log.directory.parent)
            self.log.installed = installed
            return
        survivor = self.log.crash(self.sim.rng)
        log = SimLog()
        log.batches, log._bases, log._start = survivor.batches, survivor._bases, survivor._start
        log._flushed, log.snapshots = survivor._flushed, survivor.snapshots
        log.installed = self.log.installed
        self.log = log


@dataclass(order=True)
class Envelope:
    at: int
    seq: int
    src: int = field(compare=False)
    dst: int = field(compare=False)
    message: OutboundRequest | OutboundResponse = field(compare=False)
    origin_incarnation: int = field(compare=False)
    connection_failed: bool = field(compare=False, default=False)  # tell `dst` its request to `src` failed


class Simulation:
    def __init__(self, seed: int, cfg: SimConfig | None = None, trace: bool = False) -> None:
        self.seed = seed
        self.cfg = cfg or SimConfig()
        self.rng = random.Random(seed)
        self.trace = trace
        voter_ids = list(range(1, self.cfg.voters + 1))
        voters = {v: Endpoint(f"node{v}", 9093) for v in voter_ids}
        if self.cfg.timeout_scale == 1:
            self.quorum_config = QuorumConfig(voters=voters, max_fetch_bytes=self.cfg.max_fetch_bytes)
        else:  # Kafka's timeouts divided: more elections per simulated second, same protocol
            k = self.cfg.timeout_scale
            self.quorum_config = QuorumConfig(
                voters=voters, max_fetch_bytes=self.cfg.max_fetch_bytes, election_timeout_ms=1000 // k,
                fetch_timeout_ms=2000 // k, election_backoff_max_ms=1000 // k, request_timeout_ms=2000 // k,
                fetch_max_wait_ms=500 // k)
        node_ids = voter_ids + [100 + i for i in range(self.cfg.observers)]
        if self.cfg.kraft_version >= 1:
            self.quorum_config = dataclasses.replace(self.quorum_config, voter_directory_ids={
                v: uuid.UUID(int=(v << 64) | 1) for v in voter_ids})
        # Every node's metadata log dir id (an observer's too: it may be added as a voter).
        self.directory_ids = {n: uuid.UUID(int=(n << 64) | 1) if self.cfg.kraft_version >= 1 else uuid.UUID(int=0)
                              for n in node_ids}
        self.nodes = {n: SimNode(self, n) for n in node_ids}
        self.now = 0
        self.steps = 0
        self.seq = 0
        self.queue: list[Envelope] = []
        self.pending_requests: dict[int, tuple[int, int, int, int]] = {}  # request id -> (src, corr, api, incarnation)
        self.next_request_id = 0
        self.partition: set[int] = set()
        self.leaders: dict[int, int] = {}
        self.committed: dict[int, bytes] = {}  # base offset -> batch bytes, the first seen committed
        self.committed_end = 0
        self.chain_at: dict[int, bytes] = {0: GENESIS}
        self.next_append_ms = 0
        self.appends = 0
        self.value_seq = 0
        self.in_fault_stretch = False
        self.stretch_end = 0
        self.healthy_commit_mark = 0
        self.next_crash_check = 0
        self.elections = 0
        self.messages = 0
        self._response_corr: dict[int, int] = {}  # request id -> the sender's correlation id
        self.steps_at_now = 0
        self.touched: set[SimNode] = set()  # nodes driven in this step: the ones to check
        self.next_membership_ms = self.cfg.membership_interval_ms or (1 << 62)
        self.admin_requests: dict[int, str] = {}  # request id -> "add 101" / "remove 2"
        self.admin_results: dict[str, int] = {}  # "add:NONE" -> count
        self.committed_voter_sets: list[frozenset[int]] = [frozenset(voter_ids)]
        for node in self.nodes.values():
            node.start(0)

    # --- logging ---------------------------------------------------------------------------------
    def log(self, text: str) -> None:
        if self.trace:
            print(f"[{self.now:>7}] {text}")

    # --- the network -----------------------------------------------------------------------------
    def connected(self, a: int, b: int) -> bool:
        return (a in self.partition) == (b in self.partition)

    def send(self, src: int, dst: int, message: OutboundRequest | OutboundResponse) -> None:
        f = self.cfg.faults
        faulty = self.in_fault_stretch
        unreachable = not self.nodes[dst].alive or not self.connected(src, dst)
        if isinstance(message, OutboundRequest) and unreachable and self.rng.random() < 0.5:
            # The driver sees the connection fail (refused, reset) rather than a silent loss.
            self.seq += 1
            heapq.heappush(self.queue, Envelope(self.now + 1, self.seq, dst, src, message,
                                                self.nodes[src].incarnation, connection_failed=True))
            return
        if faulty and self.rng.random() < f.drop:
            return
        copies = 2 if faulty and self.rng.random() < f.duplicate else 1
        for _ in range(copies):
            delay = self.rng.randint(1, f.max_delay_ms if faulty else 5)
            if faulty and self.rng.random() < f.long_delay:
                delay += self.rng.randint(0, 400)
            self.seq += 1
            heapq.heappush(self.queue, Envelope(self.now + delay, self.seq, src, dst, message,
                                                self.nodes[src].incarnation))

    def roundtrip_request(self, body: RaftRequestBody, api_key: int) -> RaftRequestBody:
        version = API_SPECS[api_key].max_version
        frame = encode_request_frame(RequestHeader(api_key=api_key, api_version=version, correlation_id=7,
                                                   client_id="raft"), body)
        _, decoded = decode_request_frame(memoryview(frame)[4:])
        return decoded  # type: ignore[no-any-return]

    def roundtrip_response(self, body: RaftResponseBody, api_key: int) -> RaftResponseBody:
        version = API_SPECS[api_key].max_version
        parts = encode_response_frame(api_key, version, 7, body)
        data = join_parts(parts)
        _, decoded = decode_response_frame(api_key, version, memoryview(data)[4:])
        return decoded  # type: ignore[no-any-return]

    def deliver(self, env: Envelope) -> None:
        dst = self.nodes[env.dst]
        if env.connection_failed:
            if dst.alive and dst.client is not None and env.origin_incarnation == dst.incarnation:
                assert isinstance(env.message, OutboundRequest)
                dst.client.handle_failure(env.src, env.message.correlation_id, self.now)
                self.flush_node(dst)
            return
        if not dst.alive or dst.client is None or not self.connected(env.src, env.dst):
            return
        self.messages += 1
        msg = env.message
        if isinstance(msg, OutboundRequest):
            self.next_request_id += 1
            rid = self.next_request_id
            self.pending_requests[rid] = (env.src, msg.correlation_id, msg.api_key, env.origin_incarnation)
            body = self.roundtrip_request(msg.body, msg.api_key) if self.cfg.roundtrip else msg.body
            self.log(f"{env.src}->{env.dst} {type(body).__name__}")
            dst.client.handle_request(msg.api_key, body, rid, self.now)
        else:
            if env.origin_incarnation != dst.incarnation:
                return  # an answer to a request a previous incarnation sent
            rbody = self.roundtrip_response(msg.body, msg.api_key) if self.cfg.roundtrip else msg.body
            self.log(f"{env.src}->{env.dst} {type(rbody).__name__}")
            dst.client.handle_response(env.src, msg.api_key, self.pending_correlation(msg), rbody, self.now)
        self.flush_node(dst)

    def pending_correlation(self, msg: OutboundResponse) -> int:
        return self._response_corr[msg.request_id]

    def flush_node(self, node: SimNode) -> None:
        if node.client is None:
            return
        self.touched.add(node)
        outbound = node.client.poll(self.now)
        node.deadline = node.client.next_deadline_ms()
        for out in outbound:
            if isinstance(out, OutboundRequest):
                self.send(node.node_id, out.destination, out)
            else:
                what = self.admin_requests.pop(out.request_id, None)
                if what is not None:
                    error = getattr(out.body, "error_code", -1)
                    key = f"{what.split()[0]}:{error}"
                    self.admin_results[key] = self.admin_results.get(key, 0) + 1
                    self.log(f"{what} -> error {error}")
                    continue
                pending = self.pending_requests.pop(out.request_id, None)
                if pending is None:
                    continue
                src, corr, _api, incarnation = pending
                self._response_corr[out.request_id] = corr
                self.send_response(node.node_id, src, out, incarnation)

    def send_response(self, src: int, dst: int, message: OutboundResponse, incarnation: int) -> None:
        f = self.cfg.faults
        faulty = self.in_fault_stretch
        if faulty and self.rng.random() < f.drop:
            return
        copies = 2 if faulty and self.rng.random() < f.duplicate else 1
        for _ in range(copies):
            delay = self.rng.randint(1, f.max_delay_ms if faulty else 5)
            if faulty and self.rng.random() < f.long_delay:
                delay += self.rng.randint(0, 400)
            self.seq += 1
            heapq.heappush(self.queue, Envelope(self.now + delay, self.seq, src, dst, message, incarnation))

    # --- faults and the client -------------------------------------------------------------------
    def begin_stretch(self) -> None:
        if self.in_fault_stretch:
            # Heal: everyone up, no partition, then a healthy stretch.
            self.in_fault_stretch = False
            self.partition = set()
            for node in self.nodes.values():
                if not node.alive:
                    node.start(self.now)
                    self.log(f"node {node.node_id} restarts (heal)")
            self.stretch_end = self.now + self.cfg.healthy_ms
            self.healthy_commit_mark = self.committed_end
        else:
            if self.stretch_end > 0:
                self.check_liveness()
            self.in_fault_stretch = True
            self.stretch_end = self.now + self.rng.randint(*self.cfg.fault_ms)

    def check_liveness(self) -> None:
        leaders = [n for n in self.nodes.values() if n.alive and n.client is not None and n.client.is_leader]
        if not leaders:
            raise SafetyViolation(f"liveness: no leader after a {self.cfg.healthy_ms} ms healthy stretch")
        if self.committed_end <= self.healthy_commit_mark:
            raise SafetyViolation(f"liveness: nothing committed in a {self.cfg.healthy_ms} ms healthy stretch "
                                  f"(committed end {self.committed_end})")
        for node in self.nodes.values():
            if node.sm.next_offset < self.healthy_commit_mark:
                raise SafetyViolation(f"convergence: node {node.node_id} applied up to {node.sm.next_offset} after "
                                      f"a {self.cfg.healthy_ms} ms healthy stretch, below the {self.healthy_commit_mark} "
                                      "committed when it began")

    def maybe_fault(self) -> None:
        f = self.cfg.faults
        if not self.in_fault_stretch or self.now < self.next_crash_check:
            return
        self.next_crash_check = self.now + 100
        if self.rng.random() < f.crash_rate / 10:
            leaders = self.current_leaders()
            if leaders and self.rng.random() < 0.5:
                node = self.rng.choice(leaders)  # leaders fail more often: more elections to get wrong
            else:
                node = self.rng.choice(list(self.nodes.values()))
            if node.alive:
                if self.rng.random() < 0.3 and node.client is not None and node.client.is_leader:
                    node.client.resign(self.now)  # graceful: EndQuorumEpoch, then down a moment later
                    self.flush_node(node)
                    node.shutting_down_at = self.now + self.rng.randint(1, 50)
                    self.log(f"node {node.node_id} resigns (graceful shutdown)")
                else:
                    self.log(f"node {node.node_id} crashes")
                    node.crash()
                    if (f.disk_loss and node.node_id in self.quorum_config.voters
                            and not any(n.wiped for n in self.nodes.values()) and self.rng.random() < f.disk_loss):
                        node.wipe_disk()
                        self.log(f"node {node.node_id} loses its disk (new directory {node.directory_id})")
            else:
                self.log(f"node {node.node_id} restarts")
                node.start(self.now)
        if self.rng.random() < f.partition_rate / 10:
            if self.partition:
                self.partition = set()
                self.log("partition heals")
            else:
                ids = list(self.nodes)
                self.partition = set(self.rng.sample(ids, self.rng.randint(1, len(ids) - 1)))
                leaders = self.current_leaders()
                if leaders and self.rng.random() < 0.5:  # cut the leader off with a minority
                    leader = leaders[0].node_id
                    others = [v for v in self.quorum_config.voters if v != leader]
                    minority = self.rng.sample(others, self.rng.randint(0, self.cfg.voters // 2 - 1))
                    self.partition = {leader, *minority}
                self.log(f"partition {sorted(self.partition)} | rest")

    @property
    def snapshots_installed(self) -> int:
        return sum(n.log.installed for n in self.nodes.values())

    def current_leaders(self) -> list[SimNode]:
        return [n for n in self.nodes.values() if n.alive and n.client is not None and n.client.is_leader]

    def maybe_append(self) -> None:
        if self.now < self.next_append_ms:
            return
        self.next_append_ms = self.now + self.rng.randint(1, 2 * self.cfg.append_interval_ms)
        leaders = [n for n in self.nodes.values() if n.alive and n.client is not None and n.client.is_leader]
        if not leaders:
            return
        node = self.rng.choice(leaders)
        assert node.client is not None
        values = []
        for _ in range(self.rng.randint(1, 3)):
            self.value_seq += 1
            values.append(f"v{self.value_seq}".encode())
        try:
            node.client.append(values, self.now)
            self.appends += 1
        except NotLeaderError:
            pass
        self.flush_node(node)

    def maybe_snapshot(self, node: SimNode) -> None:
        every = self.cfg.faults.snapshot_every
        client = node.client
        if not every or client is None or node.sm.applied_since_snapshot < every:
            return
        offset = node.sm.next_offset
        if offset <= node.log.start_offset() or offset > node.checked_upto:
            return
        node.sm.applied_since_snapshot = 0
        data = f"{offset}:{node.sm.digest.hex()}".encode()
        client.create_snapshot(offset, data)

    # --- the checks ------------------------------------------------------------------------------
    def record_committed(self, base: int, data: bytes) -> None:
        known = self.committed.get(base)
        if known is None:
            self.committed[base] = data
            self.check_committed_voters(data)
            while self.committed_end in self.committed:
                batch = self.committed[self.committed_end]
                end = RecordBatch(memoryview(batch)).next_offset
                self.chain_at[end] = chain(self.chain_at[self.committed_end], batch)
                self.committed_end = end
        elif known != data:
            raise SafetyViolation(f"committed batch at offset {base} changed")

    def check_committed_voters(self, data: bytes) -> None:
        """Membership: a committed VotersRecord changes the previous committed set by exactly one voter
        (the first leader's copy of the bootstrap set: by none)."""
        batch = RecordBatch(memoryview(data))
        if not batch.is_control:
            return
        for record in batch.iter_records():
            if parse_control_record_type(record.key) != ControlRecordType.KRAFT_VOTERS or record.value is None:
                continue
            new = frozenset(v.voter_id for v in decode_voters(bytes(record.value)).voters)
            old = self.committed_voter_sets[-1]
            if len(old ^ new) > 1:
                raise SafetyViolation(f"committed voter set {sorted(old)} -> {sorted(new)}: more than one change")
            self.committed_voter_sets.append(new)

    def check_election_majority(self, node: SimNode, s: LeaderState) -> None:
        client = node.client
        assert client is not None
        voters = set(client.config.voters)
        if node.node_id not in voters:
            raise SafetyViolation(f"leader {node.node_id} of epoch {s.epoch} is not in its voter set {sorted(voters)}")
        if len(s.granting_voters & voters) < len(voters) // 2 + 1:
            raise SafetyViolation(f"leader {node.node_id} of epoch {s.epoch} was granted by {sorted(s.granting_voters)}"
                                  f", no majority of {sorted(voters)}")

    def maybe_membership(self) -> None:
        """The operator: every `membership_interval_ms`, AddRaftVoter of a node that is not a voter, or
        RemoveRaftVoter of a voter, sent to a node that believes it leads (answers are counted)."""
        if self.now < self.next_membership_ms:
            return
        self.next_membership_ms = self.now + self.rng.randint(1, 2 * self.cfg.membership_interval_ms)
        if not self.in_fault_stretch and self.stretch_end - self.now < self.cfg.healthy_ms // 2:
            return  # late in a healthy stretch: its liveness check must see the quorum settled (a removed
            # leader's successor needs up to a fetch timeout)
        leaders = self.current_leaders()
        if not leaders:
            return
        node = self.rng.choice(leaders)
        assert node.client is not None
        voters = set(node.client.config.voters)
        others = [n for n in self.nodes if n not in voters]
        self.next_request_id += 1
        rid = self.next_request_id
        if others and (len(voters) <= 2 or self.rng.random() < 0.5):
            target = self.rng.choice(others)
            host = f"node{target}"
            body: AddRaftVoterRequest | RemoveRaftVoterRequest = AddRaftVoterRequest(
                cluster_id="sim-cluster", timeout_ms=2000, voter_id=target,
                voter_directory_id=self.nodes[target].directory_id,
                listeners=[AddRaftVoterRequest.Listener(name="CONTROLLER", host=host, port=9093)])
            api, what = ApiKey.ADD_RAFT_VOTER, f"add {target}"
        else:
            target = self.rng.choice(sorted(voters))
            body = RemoveRaftVoterRequest(cluster_id="sim-cluster", voter_id=target,
                                          voter_directory_id=self.nodes[target].directory_id)
            api, what = ApiKey.REMOVE_RAFT_VOTER, f"remove {target}"
        self.admin_requests[rid] = what
        self.log(f"operator -> {node.node_id}: {what}")
        node.client.handle_request(api, body, rid, self.now)
        self.flush_node(node)

    def check(self) -> None:
        touched, self.touched = self.touched, set()
        for node in sorted(touched, key=lambda n: n.node_id):
            client = node.client
            if not node.alive or client is None:
                continue
            s = client.state
            if isinstance(s, LeaderState):
                leader = self.leaders.get(s.epoch)
                if leader is None:
                    self.leaders[s.epoch] = node.node_id
                    self.elections += 1
                    self.log(f"node {node.node_id} leads epoch {s.epoch}")
                    self.check_leader_completeness(node)
                    if self.cfg.membership_interval_ms:
                        self.check_election_majority(node, s)
                elif leader != node.node_id:
                    raise SafetyViolation(f"two leaders in epoch {s.epoch}: {leader} and {node.node_id}")
            hw = client.high_watermark()
            if hw < node.last_hw:
                raise SafetyViolation(f"node {node.node_id}: high watermark went back {node.last_hw} -> {hw}")
            node.last_hw = hw
            self.check_committed_prefix(node, hw)
            self.check_state_machine(node)

    def check_committed_prefix(self, node: SimNode, hw: int) -> None:
        log = node.log
        if node.checked_upto < log.start_offset():
            node.checked_upto = log.start_offset()  # a snapshot replaced the prefix (checked on its own)
        limit = min(hw, log.end_offset())
        if node.checked_upto >= limit:
            return
        data = log.read(node.checked_upto, 1 << 30)
        buf = memoryview(data)
        pos = 0
        while pos < len(buf):
            size = batch_size_at(buf, pos)
            batch = RecordBatch(buf[pos:pos + size])
            if batch.next_offset > limit:
                break
            self.record_committed(batch.base_offset, bytes(buf[pos:pos + size]))
            node.checked_upto = batch.next_offset
            pos += size
        log.guard = node.checked_upto

    def check_leader_completeness(self, node: SimNode) -> None:
        log = node.log
        if log.end_offset() < self.committed_end:
            raise SafetyViolation(f"new leader {node.node_id} (epoch {node.client.epoch if node.client else -1}) "
                                  f"has end offset {log.end_offset()} below the committed end "
                                  f"{self.committed_end}")
        start = log.start_offset()
        if start > 0:
            snap = log.latest_snapshot_id()
            if snap is None or start not in self.chain_at and start <= self.committed_end:
                raise SafetyViolation(f"leader {node.node_id}: log starts at {start} without a committed snapshot")
        for base, data in self.committed.items():
            if base < start:
                continue
            got = log.read(base, 1)
            if not got or got[: len(data)] != data:
                raise SafetyViolation(f"new leader {node.node_id} lacks committed batch at offset {base}")

    def check_state_machine(self, node: SimNode) -> None:
        sm = node.sm
        keep: list[tuple[int, bytes]] = []
        for end, digest in sm.pending:
            want = self.chain_at.get(end)
            if want is None:
                if end <= self.committed_end:
                    raise SafetyViolation(f"node {node.node_id}: applied up to {end}, not a committed batch end")
                keep.append((end, digest))
            elif want != digest:
                raise SafetyViolation(f"node {node.node_id}: state machine diverged at offset {end}")
        sm.pending = keep

    # --- the loop --------------------------------------------------------------------------------
    def next_time(self) -> int:
        t = self.stretch_end
        if self.queue:
            t = min(t, self.queue[0].at)
        for node in self.nodes.values():
            if node.alive:
                t = min(t, node.deadline)
                if node.shutting_down_at >= 0:
                    t = min(t, node.shutting_down_at)
        t = min(t, self.next_append_ms, self.next_membership_ms)
        if self.in_fault_stretch:
            t = min(t, self.next_crash_check)
        return max(t, self.now)

    def step(self) -> None:
        self.steps += 1
        now = self.next_time()
        if now == self.now:
            self.steps_at_now += 1
            if self.steps_at_now > 2000:
                raise SafetyViolation(f"no progress: a client asks to be polled again and again at {now} ms "
                                      "(a deadline in the past that poll does not clear: a busy loop)")
        else:
            self.steps_at_now = 0
        self.now = now
        if self.now >= self.stretch_end:
            self.begin_stretch()
        while self.queue and self.queue[0].at <= self.now:
            env = heapq.heappop(self.queue)
            self.deliver(env)
        for node in self.nodes.values():
            if node.shutting_down_at >= 0 and self.now >= node.shutting_down_at:
                self.log(f"node {node.node_id} stops")
                node.crash()
                node.shutting_down_at = -1
                if not self.in_fault_stretch and (any(n.wiped for n in self.nodes.values())
                                                  or self.cfg.membership_interval_ms):
                    # A wiped voter leaves no spare voter: a node whose graceful stop lands in a healthy
                    # stretch comes straight back (the healthy stretch's liveness check needs it); so does one
                    # in a membership run, whose voter set may be down to two voters.
                    node.start(self.now)
                    self.log(f"node {node.node_id} restarts (healthy stretch)")
            if node.alive and node.deadline <= self.now:
                self.flush_node(node)
        self.maybe_fault()
        self.maybe_append()
        self.maybe_membership()
        touched = sorted(self.touched, key=lambda n: n.node_id)
        self.check()  # first: a node's committed batches are recorded before a snapshot trims them
        for node in touched:
            if node.alive and node.client is not None:
                self.maybe_snapshot(node)

    def close(self) -> None:
        """Close on-disk logs (the in-memory ones need nothing)."""
        for node in self.nodes.values():
            if isinstance(node.log, DiskSimLog):
                node.log.close()

    def run(self, duration_ms: int | None = None, max_steps: int | None = None) -> Simulation:
        end = self.cfg.duration_ms if duration_ms is None else duration_ms
        while self.now < end and (max_steps is None or self.steps < max_steps):
            self.step()
        return self


def config_for_seed(seed: int, voters: int, *, observers: int = 1, roundtrip: bool = False,
                    planted: PlantedBugs | None = None, kraft_version: int = 0, disk_loss: float = 0.0,
                    membership: bool = False) -> SimConfig:
    """The suite's configuration of one seed: the fault mix is drawn from the seed too."""
    rng = random.Random(seed * 7919 + voters)
    scale = rng.choice((1, 5, 5, 5))  # mostly Kafka's timeouts / 5: more elections per step
    k = 2 if scale > 1 else 5  # simulated seconds per (Kafka-default) second of stretch
    return SimConfig(
        voters=voters, observers=observers, timeout_scale=scale,
        duration_ms=1200 * k, healthy_ms=1200 * k // 2 if scale > 1 else 6000,
        fault_ms=(400 * k, 1200 * k) if scale > 1 else (2000, 6000),
        append_interval_ms=20 if scale > 1 else 60,
        max_fetch_bytes=rng.choice((300, 1000, 8 * 1024 * 1024)),
        roundtrip=roundtrip,
        faults=Faults(drop=rng.choice((0.0, 0.05, 0.1, 0.2)), duplicate=rng.choice((0.0, 0.05)),
                      max_delay_ms=rng.choice((5, 20, 50)), long_delay=rng.choice((0.0, 0.02)),
                      crash_rate=rng.choice((0.5, 1.0, 2.0)) * scale, partition_rate=rng.choice((0.5, 1.0, 2.0)) * scale,
                      snapshot_every=0 if membership else rng.choice((0, 10, 25)), disk_loss=disk_loss),
        planted=planted or PlantedBugs(), kraft_version=1 if membership else kraft_version,
        membership_interval_ms=(300 if scale > 1 else 1000) if membership else 0)


def run_seed(seed: int, voters: int, disk_dir: Path | None = None, **kwargs: object) -> Simulation:
    """Run one seed of the suite (raises SafetyViolation with the seed in its message)."""
    cfg = config_for_seed(seed, voters, **kwargs)  # type: ignore[arg-type]
    cfg.disk_dir = disk_dir
    sim = Simulation(seed, cfg)
    try:
        return sim.run()
    except SafetyViolation as e:
        raise SafetyViolation(f"seed {seed} ({voters} voters) at {sim.now} ms, step {sim.steps}: {e}") from e


def main() -> None:
    parser = argparse.ArgumentParser(description="Run one seed of the KRaft simulation")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--voters", type=int, default=3)
    parser.add_argument("--observers", type=int, default=1)
    parser.add_argument("--duration-ms", type=int, default=0, help="0: the suite's duration for the seed")
    parser.add_argument("--roundtrip", action="store_true")
    parser.add_argument("--trace", action="store_true")
    args = parser.parse_args()
    cfg = config_for_seed(args.seed, args.voters, observers=args.observers, roundtrip=args.roundtrip)
    if args.duration_ms:
        cfg.duration_ms = args.duration_ms
    t0 = time.perf_counter()
    sim = Simulation(args.seed, cfg, trace=args.trace)
    sim.run()
    print(f"seed {args.seed}: {sim.steps} steps, {sim.messages} messages, {sim.elections} elections, "
          f"committed end {sim.committed_end}, {time.perf_counter() - t0:.2f}s")


if __name__ == "__main__":
    main()
