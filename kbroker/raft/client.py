"""KafkaRaftClient, sans-IO: KRaft's protocol logic between messages in and messages out.

Everything is driven from outside: `handle_request` / `handle_response` / `handle_failure` take the
generated wire classes plus the time, `poll(now_ms)` runs the timers and returns what to send, and
`next_deadline_ms()` says when `poll` must run again. No sockets, no threads, no clock of its own;
randomness (election timeouts, backoffs) comes from the injected `random.Random`. That is what lets
`tests/raft/` run thousands of seeded clusters with a fake clock and a fake network.

The protocol, as Kafka 4.3 runs it (KIP-595, KIP-996, KIP-853):

- Elections: a voter whose timer expires becomes prospective and sends pre-votes (`VoteRequest`
  with `pre_vote`, current epoch); with a majority it becomes candidate (epoch + 1, votes for itself,
  durable), sends votes; with a majority it becomes leader. A vote is granted once per epoch, to a
  candidate whose (last epoch, end offset) is at least the voter's own. A follower that fetched from
  a live leader within the fetch timeout rejects pre-votes, so a partitioned node that comes back
  cannot depose a healthy leader.
- A new leader sends BeginQuorumEpoch to the voters and writes a LeaderChangeMessage control batch
  at its epoch start offset. Its high watermark is the majority's end offset, and moves only past
  that epoch start offset (an entry of its own epoch committed; KAFKA-13319 / Raft §5.4.2).
- Followers (and observers) replicate with Fetch: (fetch offset, last fetched epoch). The leader
  answers `diverging_epoch` if the follower's last epoch ends earlier on the leader's log (the
  follower truncates, `truncate_to_end_offset`), `snapshot_id` if the offset is below the log start
  (the follower fetches the snapshot with FetchSnapshot), otherwise records and the high watermark.
  The fetch offset of a voter is its durable end offset (voters flush before fetching again).
- Check-quorum (Kafka 3.7+): a leader that has not heard fetches from a majority for 1.5 x
  `controller.quorum.fetch.timeout.ms` resigns. A graceful shutdown resigns with EndQuorumEpoch,
  naming the most caught-up voters first so they elect sooner.
- DescribeQuorum is answered by the leader from its replica states.
- Membership (KIP-853): the voter set is the latest VotersRecord in the local log, committed or not
  (`partition_state.py`); the leader adds an observer that caught up (AddRaftVoter) or removes a voter
  (RemoveRaftVoter) one change at a time, answering once the VotersRecord commits; a leader that removed
  itself resigns after the commit. An observer with no known voter looks for the leader through
  `controller.quorum.bootstrap.servers` (ids -2, -3, ...).

Planted bugs (`PlantedBugs`) exist only so the simulation can show it catches them: never set them
outside tests.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import uuid
from dataclasses import dataclass
from typing import Protocol, TypeVar

from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import ApiKey
from kbroker.protocol.messages.add_raft_voter import AddRaftVoterRequest, AddRaftVoterResponse
from kbroker.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kbroker.protocol.messages.begin_quorum_epoch import BeginQuorumEpochRequest, BeginQuorumEpochResponse
from kbroker.protocol.messages.describe_quorum import DescribeQuorumRequest, DescribeQuorumResponse
from kbroker.protocol.messages.end_quorum_epoch import EndQuorumEpochRequest, EndQuorumEpochResponse
from kbroker.protocol.messages.fetch import FetchRequest, FetchResponse
from kbroker.protocol.messages.fetch_snapshot import FetchSnapshotRequest, FetchSnapshotResponse
from kbroker.protocol.messages.leader_change_message import LeaderChangeMessage
from kbroker.protocol.messages.remove_raft_voter import RemoveRaftVoterRequest, RemoveRaftVoterResponse
from kbroker.protocol.messages.update_raft_voter import UpdateRaftVoterRequest, UpdateRaftVoterResponse
from kbroker.protocol.messages.vote import VoteRequest, VoteResponse
from kbroker.protocol.record_format import ControlRecordType, encode_control_key
from kbroker.protocol.records import (
    CorruptRecordError,
    RecordBatch,
    RecordsError,
    SimpleRecord,
    batch_size_at,
    build_batch,
    iter_whole_batches,
)
from kbroker.protocol.topic import CLUSTER_METADATA_TOPIC_NAME
from kbroker.protocol.types import ZERO_UUID
from kbroker.raft.config import Endpoint, QuorumConfig
from kbroker.raft.control_records import (
    LEADER_CHANGE_CURRENT_VERSION,
    build_leader_change_batch,
    encode_leader_change,
)
from kbroker.raft.messages import (
    LeaderAndEpoch,
    NotLeaderError,
    OutboundRequest,
    OutboundResponse,
    RaftBatch,
    RaftListener,
    RaftOutbound,
    RaftRequestBody,
    RaftResponseBody,
)
from kbroker.raft.partition_state import KRaftControlRecordStateMachine, build_voters_batch
from kbroker.raft.quorum_state import (
    UPDATE_VOTER_PERIOD_FACTOR,
    CandidateState,
    EpochState,
    FollowerState,
    LeaderState,
    ProspectiveState,
    QuorumState,
    ReplicaState,
    ResignedState,
    UnattachedState,
)
from kbroker.raft.quorum_state_store import QuorumStateStore
from kbroker.raft.raft_log import OffsetAndEpoch, RaftLog, truncate_to_end_offset, validate_offset_and_epoch
from kbroker.raft.voter_set import ReplicaKey, VoterNode, VoterSet

# Kafka's Topic.CLUSTER_METADATA_TOPIC_ID: Uuid(0, 1).
CLUSTER_METADATA_TOPIC_ID = uuid.UUID(int=1)
CLUSTER_METADATA_PARTITION = 0
NO_DEADLINE = 1 << 62

log = logging.getLogger(__name__)
_E = TypeVar("_E", covariant=True)


class _EndpointFactory(Protocol[_E]):
    """A generated `NodeEndpoint` class (Vote, BeginQuorumEpoch, Fetch, FetchSnapshot responses)."""

    def __call__(self, *, node_id: int, host: str, port: int) -> _E: ...


@dataclass
class PlantedBugs:
    """Deliberate safety bugs the simulation must catch (tests only)."""

    grant_vote_without_log_check: bool = False
    count_old_epoch_entries: bool = False
    count_unvalidated_fetch_offsets: bool = False
    # KIP-853: ignore directory ids (a voter whose disk was wiped votes and counts again as that voter).
    ignore_directory_ids: bool = False


@dataclass
class _InFlight:
    destination: int
    api_key: int
    deadline_ms: int
    state: EpochState


@dataclass
class _ParkedFetch:
    request_id: int
    body: FetchRequest
    deadline_ms: int


@dataclass
class _SnapshotFetch:
    snapshot_id: OffsetAndEpoch
    data: bytearray


# Kafka's LeaderState.isReplicaCaughtUp: an observer that caught up once and fetched within the hour.
CAUGHT_UP_WINDOW_MS = 3600 * 1000


@dataclass
class _VoterChange:
    """The one AddRaftVoter / RemoveRaftVoter in flight (Kafka's AddVoterHandlerState /
    RemoveVoterHandlerState): answered once the high watermark passes its VotersRecord."""

    request_id: int
    api_key: int
    voters_offset: int
    deadline_ms: int
    removed: int = -1  # RemoveRaftVoter: the voter removed (a leader that removed itself resigns)
    # AddRaftVoter: the new voter, until its ApiVersions answer tells its kraft.version range (Kafka's
    # AddVoterHandler sends ApiVersions to it first); None once its VotersRecord is appended.
    awaiting: VoterNode | None = None
    ack_when_committed: bool = True


class KRaftVersionUpgradeError(Exception):
    """An upgrade of kraft.version refused, with Kafka's error (InvalidUpdateVersionException:
    INVALID_UPDATE_VERSION; NotLeaderException: NOT_LEADER_OR_FOLLOWER; IllegalStateException: not an
    ApiException in Kafka, UNKNOWN_SERVER_ERROR) and message."""

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def bootstrap_voter_set(config: QuorumConfig) -> VoterSet:
    """The voter set of the static config (controller.quorum.voters, or the bootstrap checkpoint's)."""
    return VoterSet({i: VoterNode(ReplicaKey(i, config.voter_directory_id(i)), {ep.listener: (ep.host, ep.port)})
                     for i, ep in config.voters.items()})


def _vote_partition(body: VoteRequest) -> VoteRequest.PartitionData | None:
    for t in body.topics:
        for p in t.partitions:
            return p
    return None


class KafkaRaftClient:
    """One replica of `__cluster_metadata-0`: a voter if its id is in the voter set, else an observer."""

    def __init__(self, node_id: int, config: QuorumConfig, log: RaftLog, store: QuorumStateStore,
                 listener: RaftListener, rng: random.Random, now_ms: int, *, cluster_id: str = "",
                 directory_id: uuid.UUID = ZERO_UUID, planted: PlantedBugs | None = None,
                 local_listeners: dict[str, tuple[str, int]] | None = None,
                 local_kraft_versions: tuple[int, int] = (0, 1)) -> None:
        self.node_id = node_id
        self.config = config
        self.log = log
        self.listener = listener
        self.rng = rng
        self.cluster_id = cluster_id
        self.directory_id = directory_id
        # KIP-853: this replica's own controller endpoints (from its `listeners`, not from the log) and the
        # kraft.version range it supports, what it publishes with UpdateRaftVoter (Kafka's localListeners,
        # localSupportedKRaftVersion). None: not known (the voter never asks for an update).
        self.local_listeners = dict(local_listeners) if local_listeners else None
        self.local_kraft_versions = local_kraft_versions
        # UpdateRaftVoter with kraft.version 0: the voters' endpoints as they published them (Kafka's
        # volatile voters, kept in memory for a later kraft.version upgrade).
        self.updated_voter_endpoints: dict[int, dict[str, tuple[str, int]]] = {}
        # The leader's volatile voter set at kraft.version 0 (Kafka's LeaderState kraftVersionUpgradeState,
        # `KRaftVersionUpgrade.Voters`): the static voters, each with range 0-0 and no directory id until
        # its UpdateRaftVoter tells them; the leader's own entry filled in at once. What an upgrade to
        # kraft.version 1 writes as the first VotersRecord. None off the leader or at kraft.version >= 1.
        self.volatile_voters: VoterSet | None = None
        self.planted = planted or PlantedBugs()
        self.quorum = QuorumState(node_id, config, store, rng)
        # KIP-853: the voter set follows the latest VotersRecord in the log (uncommitted included).
        self._base_config = config
        self.partition_state = KRaftControlRecordStateMachine(bootstrap_voter_set(config), config.kraft_version)
        self.known_endpoints: dict[int, Endpoint] = {}  # leaders' endpoints learnt from responses
        self._voter_change: _VoterChange | None = None
        self._now_hint = now_ms
        self._sync_voters(now_ms, initial=True)
        self.quorum.initialize(log.last_fetched_epoch(), now_ms)
        self._outbox: list[RaftOutbound] = []
        self._inflight: dict[int, _InFlight] = {}
        self._inflight_by_dest: dict[tuple[int, int], int] = {}
        self._backoff_until: dict[tuple[int, int], int] = {}
        self._next_correlation = 0
        self._parked: list[_ParkedFetch] = []
        self._snapshot_fetch: _SnapshotFetch | None = None
        self._delivered = 0  # next offset the listener has not seen
        self._notified_leader: LeaderAndEpoch | None = None
        self._observer_target = -1
        self._linger_deadline = NO_DEADLINE  # when the leader flushes what it appended
        self._hw_carry = -1  # the highest high watermark known in this incarnation (committed stays so)
        self._maybe_become_leader_alone(now_ms)

    # --- facts for the layers above ----------------------------------------------------------------
    @property
    def state(self) -> EpochState:
        return self.quorum.state

    @property
    def epoch(self) -> int:
        return self.quorum.epoch

    @property
    def is_leader(self) -> bool:
        return isinstance(self.quorum.state, LeaderState)

    def leader_and_epoch(self) -> LeaderAndEpoch:
        return LeaderAndEpoch(self.quorum.leader_id(), self.quorum.epoch)

    def high_watermark(self) -> int:
        """The high watermark, -1 while unknown (a new leader before its epoch commits, a restart)."""
        s = self.quorum.state
        hw = s.high_watermark if isinstance(s, LeaderState | FollowerState) else -1
        return max(hw, self._hw_carry)

    def endpoint_of(self, node_id: int) -> Endpoint | None:
        """Where to reach `node_id`: a voter's endpoint, a leader's learnt from a response's
        node_endpoints (an observer's leader need not be a voter it knows), or a bootstrap server."""
        return (self.config.voters.get(node_id) or self.known_endpoints.get(node_id)
                or self.config.bootstrap_servers.get(node_id))

    # --- the voter set (KIP-853) ---------------------------------------------------------------------
    def _sync_voters(self, now_ms: int, *, initial: bool = False) -> None:
        """Follow the log's latest VotersRecord (Kafka's partitionState): after every append, truncation
        or snapshot. A change swaps the config the whole client reads its voters from."""
        if not self.partition_state.sync(self.log) and not initial:
            return
        ps = self.partition_state
        voters = ps.last_voter_set()
        listener = self._base_config.default_listener
        if self._base_config.voters:
            listener = next(iter(self._base_config.voters.values())).listener
        endpoints: dict[int, Endpoint] = {}
        for i, node in voters.voters.items():
            host_port = node.endpoints.get(listener) or next(iter(node.endpoints.values()), None)
            if host_port is not None:
                endpoints[i] = Endpoint(host_port[0], host_port[1], listener)
        directory_ids = {i: n.key.directory_id for i, n in voters.voters.items()}
        new = dataclasses.replace(self._base_config, voters=endpoints, voter_directory_ids=directory_ids,
                                  kraft_version_level=ps.kraft_version())
        if new == self.config:
            return
        old_voters = set(self.config.voters)
        self.config = new
        self.quorum.config = new
        if initial:
            return
        log.info("node %d: the voter set is now %s (VotersRecord at offset %d)", self.node_id,
                 sorted(new.voters), ps.last_voter_set_entry().offset)
        s = self.quorum.state
        if isinstance(s, LeaderState):
            for v in set(new.voters) - old_voters:
                st = s.observer_states.pop(v, None) or ReplicaState(v)
                s.voter_states[v] = st
            for v in old_voters - set(new.voters):
                st = s.voter_states.pop(v)
                s.observer_states[v] = st
                s.begin_epoch_unacked.discard(v)
            self._update_leader_hw(s)
        elif isinstance(s, ProspectiveState | CandidateState) and not self.quorum.is_voter:
            self._transition_to_unattached(s.epoch, now_ms, voted_id=self.quorum.voted_id())

    def voters_record_at(self, offset: int) -> tuple[int, VoterSet | None]:
        """kraft.version and the voter set a snapshot ending after `offset` must carry in its header
        (Kafka's snapshot writer does; None with kraft.version 0, whose voters are static)."""
        level = self.partition_state.kraft_version_at(offset)
        return level, (self.partition_state.voter_set_at(offset) if level >= 1 else None)

    # --- the state machine's API --------------------------------------------------------------------
    def append(self, values: list[bytes], now_ms: int) -> int:
        """Append one batch of records as the leader; the offset of its last record.

        Committed once the high watermark passes it (`RaftListener.handle_commit`). Raises
        NotLeaderError when this node is not the leader."""
        s = self.quorum.state
        if not isinstance(s, LeaderState):
            raise NotLeaderError(f"node {self.node_id} is not the leader (epoch {self.epoch})")
        if not values:
            raise ValueError("append needs at least one record")
        base = self.log.end_offset()
        batch = build_batch([SimpleRecord(value=v, timestamp=now_ms) for v in values], base_offset=base,
                            partition_leader_epoch=s.epoch, now_ms=now_ms)
        return self.append_batch(batch, now_ms)

    def append_batch(self, batch: bytes | bytearray, now_ms: int) -> int:
        """Append one record batch built by the caller (any compression; control batches too) as the
        leader: its base offset and partition leader epoch are stamped here (both outside the CRC).
        Returns the offset of its last record; raises NotLeaderError off the leader, and
        CorruptRecordError if `batch` is not one valid v2 batch."""
        s = self.quorum.state
        if not isinstance(s, LeaderState):
            raise NotLeaderError(f"node {self.node_id} is not the leader (epoch {self.epoch})")
        data = bytearray(batch)
        if len(data) < 61 or batch_size_at(data, 0) != len(data):
            raise CorruptRecordError("append_batch takes exactly one record batch")
        view = RecordBatch(memoryview(data))
        if not view.is_valid():
            raise CorruptRecordError("the batch fails its CRC")
        view.set_base_offset(self.log.end_offset())
        view.set_partition_leader_epoch(s.epoch)
        self.log.append(bytes(data))
        self._linger_deadline = min(self._linger_deadline, now_ms + self.config.append_linger_ms)
        if view.is_control:
            self._sync_voters(now_ms)
        return view.last_offset

    def create_snapshot(self, offset: int, data: bytes) -> OffsetAndEpoch:
        """Store a snapshot of the state up to `offset` (at most the high watermark, on a batch end) and
        trim the log behind it. Kafka's `RaftClient.createSnapshot` + `deleteBeforeSnapshot`."""
        hw = self.high_watermark()
        if offset > hw or offset <= self.log.start_offset():
            raise ValueError(f"snapshot offset {offset} must be in ({self.log.start_offset()}, {hw}]")
        chunk = self.log.read(offset - 1, 1)
        if not chunk:
            raise ValueError(f"no batch ends at {offset}")
        b = RecordBatch(memoryview(chunk)[: batch_size_at(chunk, 0)])
        if b.next_offset != offset:
            raise ValueError(f"snapshot offset {offset} is not a batch boundary")
        snapshot_id = OffsetAndEpoch(offset, b.partition_leader_epoch)
        self.log.create_snapshot(snapshot_id, data)
        self.log.delete_before_snapshot(snapshot_id)
        return snapshot_id

    def resign(self, now_ms: int) -> None:
        """Graceful shutdown of a leader: Resigned, EndQuorumEpoch to the voters, best-caught-up first."""
        s = self.quorum.state
        if not isinstance(s, LeaderState):
            return
        others = [v for v in self.quorum.voters if v != self.node_id]
        others.sort(key=lambda v: -s.voter_states[v].end_offset)
        self._resign(others, now_ms)

    # --- the driver's API ---------------------------------------------------------------------------
    def handle_request(self, api_key: int, body: RaftRequestBody, request_id: int, now_ms: int) -> None:
        """An inbound request; its response comes out of `poll` as an OutboundResponse with `request_id`
        (call `poll` after this; a parked Fetch is answered by a later `poll`)."""
        response: RaftResponseBody | None
        if isinstance(body, VoteRequest):
            response = self._handle_vote_request(body, now_ms)
        elif isinstance(body, BeginQuorumEpochRequest):
            response = self._handle_begin_quorum_epoch(body, now_ms)
        elif isinstance(body, EndQuorumEpochRequest):
            response = self._handle_end_quorum_epoch(body, now_ms)
        elif isinstance(body, FetchRequest):
            response = self._handle_fetch_request(body, request_id, now_ms, allow_park=True)
        elif isinstance(body, FetchSnapshotRequest):
            response = self._handle_fetch_snapshot_request(body)
        elif isinstance(body, DescribeQuorumRequest):
            response = self.describe_quorum(now_ms)
        elif isinstance(body, UpdateRaftVoterRequest):
            response = self._handle_update_raft_voter(body, now_ms)
        elif isinstance(body, AddRaftVoterRequest):
            response = self._handle_add_raft_voter(body, request_id, now_ms)
        elif isinstance(body, RemoveRaftVoterRequest):
            response = self._handle_remove_raft_voter(body, request_id, now_ms)
        elif isinstance(body, ApiVersionsRequest):
            # A server answers ApiVersions in its API layer (api/api_versions.py, kraft.version 0-1 among its
            # supported features); this answer, with this replica's kraft.version range alone, is for the
            # sans-IO drivers (tests/raft) that have no API layer.
            lo, hi = self.local_kraft_versions
            response = ApiVersionsResponse(supported_features=[ApiVersionsResponse.SupportedFeatureKey(
                name="kraft.version", min_version=lo, max_version=hi)])
        else:
            return
        if response is not None:
            self._outbox.append(OutboundResponse(request_id, api_key, response))

    def handle_response(self, source: int, api_key: int, correlation_id: int, body: RaftResponseBody,
                        now_ms: int) -> None:
        inflight = self._inflight.get(correlation_id)
        if inflight is None or inflight.destination != source or inflight.api_key != api_key:
            return  # late (already timed out) or not ours
        del self._inflight[correlation_id]
        self._inflight_by_dest.pop((source, api_key), None)
        current = inflight.state is self.quorum.state
        if isinstance(body, VoteResponse):
            self._handle_vote_response(source, body, current, now_ms)
        elif isinstance(body, BeginQuorumEpochResponse):
            self._handle_begin_quorum_epoch_response(source, body, current, now_ms)
        elif isinstance(body, EndQuorumEpochResponse):
            self._handle_end_quorum_epoch_response(source, body, current, now_ms)
        elif isinstance(body, FetchResponse):
            self._handle_fetch_response(source, body, current, now_ms)
        elif isinstance(body, FetchSnapshotResponse):
            self._handle_fetch_snapshot_response(source, body, current, now_ms)
        elif isinstance(body, UpdateRaftVoterResponse):
            self._handle_update_raft_voter_response(source, body, now_ms)
        elif isinstance(body, ApiVersionsResponse):
            self._handle_api_versions_response(source, body, now_ms)

    def handle_failure(self, destination: int, correlation_id: int, now_ms: int) -> None:
        """The request could not be sent or its connection broke: retry after the backoff."""
        inflight = self._inflight.pop(correlation_id, None)
        if inflight is None:
            return
        self._inflight_by_dest.pop((destination, inflight.api_key), None)
        self._backoff_until[(destination, inflight.api_key)] = now_ms + self.config.retry_backoff_ms
        if inflight.api_key == ApiKey.API_VERSIONS:
            self._handle_api_versions_response(destination, ApiVersionsResponse(
                error_code=ErrorCode.NETWORK_EXCEPTION), now_ms)
        if inflight.api_key in (ApiKey.FETCH, ApiKey.FETCH_SNAPSHOT) and not isinstance(
                self.quorum.state, FollowerState):
            self._observer_target = -1

    def poll(self, now_ms: int) -> list[RaftOutbound]:
        """Run the timers and the state's duties; everything to send now."""
        for corr, inflight in list(self._inflight.items()):
            if inflight.deadline_ms <= now_ms:
                self.handle_failure(inflight.destination, corr, now_ms)
        self._sync_voters(now_ms)
        for _ in range(4):  # a transition runs the new state's duties in the same poll
            s = self.quorum.state
            if isinstance(s, LeaderState):
                self._poll_leader(s, now_ms)
            elif isinstance(s, FollowerState):
                self._poll_follower(s, now_ms)
            elif isinstance(s, CandidateState | ProspectiveState):
                self._poll_election(s, now_ms)
            elif isinstance(s, UnattachedState):
                self._poll_unattached(s, now_ms)
            elif isinstance(s, ResignedState):
                self._poll_resigned(s, now_ms)
            if self.quorum.state is s:
                break
        self._maybe_complete_voter_change(now_ms)
        self._deliver(now_ms)
        for key in [k for k, until in self._backoff_until.items() if until <= now_ms]:
            del self._backoff_until[key]
        out, self._outbox = self._outbox, []
        return out

    def next_deadline_ms(self) -> int:
        """When `poll` must run next at the latest (a timer, a parked fetch, a request timeout, a backoff)."""
        s = self.quorum.state
        deadlines = [inflight.deadline_ms for inflight in self._inflight.values()]
        deadlines += [p.deadline_ms for p in self._parked]
        for key in self._wanted_sends():
            if key not in self._inflight_by_dest:
                deadlines.append(self._backoff_until.get(key, 0))
        if self._voter_change is not None:
            deadlines.append(self._voter_change.deadline_ms)
        if isinstance(s, LeaderState):
            deadlines.append(s.check_quorum_deadline_ms)
            if self.log.flushed_end_offset() < self.log.end_offset():
                deadlines.append(self._linger_deadline)  # appended, not yet flushed
        elif isinstance(s, UnattachedState) and not self.quorum.is_voter:
            pass  # an observer has no election timer
        elif isinstance(s, FollowerState):
            deadlines.append(s.fetch_deadline_ms)
            if self.quorum.is_voter and self.local_listeners:
                deadlines.append(s.update_voter_deadline_ms)
        elif isinstance(s, ProspectiveState | CandidateState):
            deadlines.append(s.backoff_until_ms if s.backoff_until_ms >= 0 else s.election_deadline_ms)
        elif isinstance(s, UnattachedState | ResignedState):
            deadlines.append(s.election_deadline_ms)
        if self._outbox:
            deadlines.append(0)
        return min(deadlines) if deadlines else NO_DEADLINE

    # --- sending ------------------------------------------------------------------------------------
    def _wanted_sends(self) -> list[tuple[int, int]]:
        """The (destination, api key) requests the current state wants out (for `next_deadline_ms`)."""
        s = self.quorum.state
        if isinstance(s, ProspectiveState | CandidateState):
            if s.backoff_until_ms >= 0:
                return []
            return [(v, ApiKey.VOTE) for v in self.quorum.voters
                    if v != self.node_id and v not in s.granted and v not in s.rejected]
        if isinstance(s, FollowerState):
            if (s.leader_id, ApiKey.FETCH) in self._inflight_by_dest or (
                    s.leader_id, ApiKey.FETCH_SNAPSHOT) in self._inflight_by_dest:
                return []
            return [(s.leader_id, ApiKey.FETCH_SNAPSHOT if self._snapshot_fetch is not None else ApiKey.FETCH)]
        if isinstance(s, LeaderState):
            return [(v, ApiKey.BEGIN_QUORUM_EPOCH) for v in s.begin_epoch_unacked]
        if isinstance(s, ResignedState):
            return [(v, ApiKey.END_QUORUM_EPOCH) for v in s.end_epoch_unacked]
        if isinstance(s, UnattachedState) and not self.quorum.is_voter and (
                self.quorum.voters or self.config.bootstrap_servers):
            return [(self._observer_target, ApiKey.FETCH)] if self._observer_target != -1 else [(-1, ApiKey.FETCH)]
        return []

    def _can_send(self, destination: int, api_key: int, now_ms: int) -> bool:
        if (destination, api_key) in self._inflight_by_dest:
            return False
        until = self._backoff_until.get((destination, api_key))
        if until is not None:
            if until > now_ms:
                return False
            del self._backoff_until[(destination, api_key)]
        return True

    def _send(self, destination: int, api_key: int, body: RaftRequestBody, now_ms: int) -> None:
        self._next_correlation += 1
        corr = self._next_correlation
        self._inflight[corr] = _InFlight(destination, api_key, now_ms + self.config.request_timeout_ms,
                                         self.quorum.state)
        self._inflight_by_dest[(destination, api_key)] = corr
        self._outbox.append(OutboundRequest(destination, api_key, corr, body))

    # --- transitions with side effects --------------------------------------------------------------
    def _on_state_change(self) -> None:
        self.volatile_voters = None
        change = self._voter_change
        if change is not None:  # Kafka: leaving the leader state fails the pending voter operation
            self._voter_change = None
            self._answer_voter_change(change, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                      "The leader lost leadership before the voter change committed")
        self._snapshot_fetch = None
        self._linger_deadline = NO_DEADLINE
        for p in self._parked:  # parked fetches of a leader that is no longer one: answer them now
            self._outbox.append(OutboundResponse(p.request_id, ApiKey.FETCH, self._fetch_error(
                ErrorCode.NOT_LEADER_OR_FOLLOWER)))
        self._parked = []

    def _carry_hw(self) -> None:
        hw = self.high_watermark()
        if hw > self._hw_carry:
            self._hw_carry = hw

    def _transition_to_follower(self, epoch: int, leader_id: int, now_ms: int) -> None:
        self._carry_hw()
        self._on_state_change()
        self.quorum.to_follower(epoch, leader_id, now_ms)
        s = self.quorum.state
        assert isinstance(s, FollowerState)
        s.high_watermark = min(self._hw_carry, self.log.end_offset()) if self._hw_carry >= 0 else -1
        self._observer_target = -1

    def _transition_to_unattached(self, epoch: int, now_ms: int, voted_id: int = -1) -> None:
        self._carry_hw()
        self._on_state_change()
        self.quorum.to_unattached(epoch, now_ms, voted_id)

    def _maybe_transition_on_epoch(self, epoch: int, leader_id: int, now_ms: int) -> bool:
        """Common handling of a message from another replica (Kafka's maybeHandleCommonResponse):
        a higher epoch, or a leader learnt in ours, moves this node. True if the state changed."""
        s = self.quorum.state
        if epoch > s.epoch:
            if leader_id >= 0 and leader_id != self.node_id:
                self._transition_to_follower(epoch, leader_id, now_ms)
            else:
                self._transition_to_unattached(epoch, now_ms)
            return True
        knows_leader = isinstance(s, ProspectiveState) and s.leader_id >= 0
        if (epoch == s.epoch and leader_id >= 0 and leader_id != self.node_id and not knows_leader
                and isinstance(s, UnattachedState | ProspectiveState | CandidateState)):
            # A leader learnt in this epoch. Not the one a prospective already knew and lost touch with:
            # following it again would stall the election forever (found by the simulation, seed 3).
            self._transition_to_follower(epoch, leader_id, now_ms)
            return True
        return False

    def _maybe_become_leader_alone(self, now_ms: int) -> None:
        """A quorum of one elects itself as soon as its election timer would start (Kafka does too)."""
        if self.quorum.is_voter and len(self.quorum.voters) == 1 and isinstance(
                self.quorum.state, UnattachedState | ResignedState):
            self._carry_hw()
            self._on_state_change()
            self.quorum.to_candidate(now_ms)
            self._become_leader(now_ms)

    def _become_leader(self, now_ms: int) -> None:
        self._carry_hw()
        self._on_state_change()
        start = self.log.end_offset()
        leader = self.quorum.to_leader(start, now_ms)
        own_entry_stale = self.config.kraft_version >= 1 and self.local_voter_needs_update()
        if self.config.kraft_version >= 1 and (not self.partition_state.has_voters_in_log() or own_entry_stale):
            # Kafka's appendStartOfEpochControlRecords: the first leader of a dynamic quorum writes the
            # bootstrap voters into the log (KRaftVersionRecord + VotersRecord after the LeaderChange, one
            # batch), so replicas that never read the bootstrap checkpoint learn them; a leader whose own
            # entry is stale (it restarted on another port) writes the set with its entry updated.
            message = LeaderChangeMessage(
                version=LEADER_CHANGE_CURRENT_VERSION, leader_id=self.node_id,
                voters=[LeaderChangeMessage.Voter(voter_id=v) for v in self.quorum.voters],
                granting_voters=[LeaderChangeMessage.Voter(voter_id=v) for v in sorted(leader.granting_voters)])
            change = SimpleRecord(value=encode_leader_change(message),
                                  key=encode_control_key(ControlRecordType.LEADER_CHANGE), timestamp=now_ms)
            voters = self.partition_state.last_voter_set()
            local = self._local_voter_node()
            if own_entry_stale and local is not None:
                voters = voters.update_voter(local) or voters
            batch = build_voters_batch(voters, base_offset=start, epoch=leader.epoch,
                                       now_ms=now_ms, leader_change=change, kraft_version=self.config.kraft_version)
        else:
            batch = build_leader_change_batch(leader_id=self.node_id, voters=self.quorum.voters,
                                              granting_voters=leader.granting_voters, base_offset=start,
                                              epoch=leader.epoch, now_ms=now_ms)
        self.log.append(bytes(batch))
        self._sync_voters(now_ms)
        self.volatile_voters = self._static_voters_with_local() if self.config.kraft_version == 0 else None
        self._linger_deadline = now_ms  # the LeaderChangeMessage goes out at once
        log.info("node %d is the leader in epoch %d (epoch start offset %d)", self.node_id, leader.epoch, start)

    def _resign(self, preferred: list[int], now_ms: int) -> None:
        self._carry_hw()
        self._on_state_change()
        self.quorum.to_resigned(preferred, now_ms)

    def _lost_election(self, s: ProspectiveState | CandidateState, now_ms: int) -> None:
        """Backoff, then a new pre-vote round (Kafka: a lost election backs off randomly).

        A prospective that lost its pre-vote while it still knew the leader of its epoch follows that
        leader again (Kafka's `prospectiveTransitionAfterElectionLoss`): a majority that rejects a
        pre-vote is hearing from a live leader. Without this, a voter that restarted knowing the
        leader from `quorum-state` and whose first fetch did not succeed within the fetch timeout
        (a slow start) stayed prospective forever, since a leader it already knew in this epoch is
        not followed again on a vote answer (`_maybe_transition_on_epoch`), and the leader sends
        BeginQuorumEpoch only once (found by tests/cluster/test_kbroker_quorum_snapshot.py)."""
        if isinstance(s, ProspectiveState) and s.leader_id >= 0 and s.leader_id != self.node_id:
            self._transition_to_follower(s.epoch, s.leader_id, now_ms)
            return
        s.backoff_until_ms = now_ms + self.quorum.random_backoff_ms()

    # --- polls per state ----------------------------------------------------------------------------
    def _poll_unattached(self, s: UnattachedState, now_ms: int) -> None:
        if self.quorum.is_voter:
            if now_ms >= s.election_deadline_ms:
                self._start_prospective(now_ms)
            return
        # An observer looks for the leader: fetch from a voter, which answers with the leader; with no
        # known voters (formatted with --no-initial-controllers), from controller.quorum.bootstrap.servers.
        targets = self.quorum.voters or sorted(self.config.bootstrap_servers)
        if self._observer_target == -1 and targets:
            self._observer_target = self.rng.choice(targets)
        target = self._observer_target  # -1: none; a bootstrap server's id is -2, -3, ...
        if target != -1 and self._can_send(target, ApiKey.FETCH, now_ms):
            self._send(target, ApiKey.FETCH, self._build_fetch_request(s.epoch, -1), now_ms)

    def _start_prospective(self, now_ms: int) -> None:
        self._carry_hw()
        self._on_state_change()
        self.quorum.to_prospective(now_ms)
        s = self.quorum.state
        assert isinstance(s, ProspectiveState)
        s.granted.add(self.node_id)
        self._maybe_won_pre_vote(s, now_ms)

    def _poll_election(self, s: ProspectiveState | CandidateState, now_ms: int) -> None:
        """A prospective (pre-vote) or candidate node (Kafka's NomineeState): after a lost election's
        backoff a new pre-vote round; past the election deadline the election is lost; meanwhile a Vote
        request (pre-vote for a prospective node) to every voter that has not answered yet."""
        if s.backoff_until_ms >= 0:
            if now_ms >= s.backoff_until_ms:
                self._start_prospective(now_ms)
            return
        if now_ms >= s.election_deadline_ms:
            self._lost_election(s, now_ms)
            return
        pre_vote = isinstance(s, ProspectiveState)
        for v in self.quorum.voters:
            if v != self.node_id and v not in s.granted and v not in s.rejected and self._can_send(
                    v, ApiKey.VOTE, now_ms):
                self._send(v, ApiKey.VOTE, self._build_vote_request(v, s.epoch, pre_vote=pre_vote), now_ms)

    def _maybe_won_pre_vote(self, s: ProspectiveState, now_ms: int) -> None:
        if len(s.granted & set(self.config.voters)) >= self.config.majority():
            self._on_state_change()
            self.quorum.to_candidate(now_ms)
            c = self.quorum.state
            assert isinstance(c, CandidateState)
            self._maybe_won_vote(c, now_ms)

    def _maybe_won_vote(self, s: CandidateState, now_ms: int) -> None:
        if len(s.granted & set(self.config.voters)) >= self.config.majority():
            self._become_leader(now_ms)

    def _poll_resigned(self, s: ResignedState, now_ms: int) -> None:
        if now_ms >= s.election_deadline_ms:
            if not self.quorum.is_voter:  # a removed leader: an observer from now on
                self._transition_to_unattached(s.epoch, now_ms)
            elif len(self.quorum.voters) == 1:
                self._maybe_become_leader_alone(now_ms)
            else:
                self._start_prospective(now_ms)
            return
        for v in sorted(s.end_epoch_unacked):
            if self._can_send(v, ApiKey.END_QUORUM_EPOCH, now_ms):
                self._send(v, ApiKey.END_QUORUM_EPOCH, self._build_end_quorum_epoch(s, v), now_ms)

    def _poll_follower(self, s: FollowerState, now_ms: int) -> None:
        if now_ms >= s.fetch_deadline_ms:
            if self.quorum.is_voter:
                self._start_prospective(now_ms)
            else:
                self._transition_to_unattached(s.epoch, now_ms)
            return
        # One fetch at a time: a Fetch or, while a snapshot comes in, a FetchSnapshot (the same key
        # `_wanted_sends` reports, so `next_deadline_ms` and this agree on the backoff that applies).
        if self.quorum.is_voter and (now_ms >= s.update_voter_deadline_ms or (
                self.config.kraft_version == 0 and not s.has_updated_leader and not s.update_voter_sent)):
            self._maybe_send_update_voter(s, now_ms)
        if (s.leader_id, ApiKey.FETCH) in self._inflight_by_dest or (
                s.leader_id, ApiKey.FETCH_SNAPSHOT) in self._inflight_by_dest:
            return
        api = ApiKey.FETCH_SNAPSHOT if self._snapshot_fetch is not None else ApiKey.FETCH
        if not self._can_send(s.leader_id, api, now_ms):
            return
        if self.quorum.is_voter and self.log.flushed_end_offset() < self.log.end_offset():
            self.log.flush()  # a fetch offset claims durability: batches left from a leadership must be flushed
        if self._snapshot_fetch is not None:
            self._send(s.leader_id, ApiKey.FETCH_SNAPSHOT, self._build_fetch_snapshot(s.epoch), now_ms)
        else:
            self._send(s.leader_id, ApiKey.FETCH, self._build_fetch_request(s.epoch, s.high_watermark), now_ms)

    def _poll_leader(self, s: LeaderState, now_ms: int) -> None:
        # Make appended batches durable (Kafka's linger + flushLeaderLog); the leader's own end offset
        # counts for the high watermark only once flushed.
        if self.log.flushed_end_offset() < self.log.end_offset() and now_ms >= self._linger_deadline:
            self.log.flush()
            self._linger_deadline = NO_DEADLINE
        own = s.voter_states.get(self.node_id) or s.observer_states.setdefault(self.node_id, ReplicaState(self.node_id))
        own.end_offset = self.log.flushed_end_offset()
        own.last_fetch_ms = own.last_caught_up_ms = now_ms
        self._update_leader_hw(s)
        if self.quorum.voters == [self.node_id]:
            s.check_quorum_deadline_ms = now_ms + self.config.check_quorum_timeout_ms
        if not self.quorum.is_voter and s.high_watermark > self.partition_state.last_voter_set_entry().offset:
            # KIP-853: a leader whose removal committed resigns (Kafka's RemoveVoterHandler requestResign).
            log.info("leader %d was removed from the voters (committed at %d): resigning", self.node_id,
                     self.partition_state.last_voter_set_entry().offset)
            self._maybe_complete_voter_change(now_ms)
            others = sorted(self.quorum.voters, key=lambda v: -s.voter_states[v].end_offset)
            self._resign(others, now_ms)
            return
        if now_ms >= s.check_quorum_deadline_ms:
            log.warning("leader %d in epoch %d heard no majority fetch for %d ms: resigning", self.node_id,
                        s.epoch, self.config.check_quorum_timeout_ms)
            self._resign([v for v in self.quorum.voters if v != self.node_id], now_ms)
            return
        for v in sorted(s.begin_epoch_unacked):
            if self._can_send(v, ApiKey.BEGIN_QUORUM_EPOCH, now_ms):
                self._send(v, ApiKey.BEGIN_QUORUM_EPOCH, self._build_begin_quorum_epoch(s, v), now_ms)
        still: list[_ParkedFetch] = []
        parked, self._parked = self._parked, []
        for p in parked:
            if now_ms >= p.deadline_ms or self._fetch_can_complete(s, p.body):
                r = self._handle_fetch_request(p.body, p.request_id, now_ms, allow_park=False)
                if r is not None:
                    self._outbox.append(OutboundResponse(p.request_id, ApiKey.FETCH, r))
            else:
                still.append(p)
        self._parked = still + self._parked

    def _update_leader_hw(self, s: LeaderState) -> None:
        """Kafka's LeaderState.updateHighWatermark: the majority's end offset, once past the epoch start."""
        offsets = sorted((r.end_offset for r in s.voter_states.values()), reverse=True)
        candidate = offsets[self.config.majority() - 1]
        floor = -1 if self.planted.count_old_epoch_entries else s.epoch_start_offset
        if candidate > floor and candidate > s.high_watermark:
            s.high_watermark = candidate

    # --- Vote -----------------------------------------------------------------------------------
    def _build_vote_request(self, destination: int, epoch: int, *, pre_vote: bool) -> VoteRequest:
        return VoteRequest(cluster_id=self.cluster_id, voter_id=destination, topics=[VoteRequest.TopicData(
            topic_name=CLUSTER_METADATA_TOPIC_NAME, partitions=[VoteRequest.PartitionData(
                partition_index=CLUSTER_METADATA_PARTITION, replica_epoch=epoch, replica_id=self.node_id,
                replica_directory_id=self.directory_id,
                voter_directory_id=self.config.voter_directory_id(destination),
                last_offset_epoch=self.log.last_fetched_epoch(), last_offset=self.log.end_offset(),
                pre_vote=pre_vote)])])

    def _vote_response(self, error: ErrorCode, granted: bool, partition_error: ErrorCode = ErrorCode.NONE
                       ) -> VoteResponse:
        return VoteResponse(error_code=error, topics=[VoteResponse.TopicData(
            topic_name=CLUSTER_METADATA_TOPIC_NAME, partitions=[VoteResponse.PartitionData(
                partition_index=CLUSTER_METADATA_PARTITION, error_code=partition_error,
                leader_id=self.quorum.leader_id(), leader_epoch=self.epoch, vote_granted=granted)])],
            node_endpoints=self._leader_endpoints(VoteResponse.NodeEndpoint))

    def _log_is_ok(self, last_epoch: int, last_offset: int) -> bool:
        if self.planted.grant_vote_without_log_check:
            return True
        return (last_epoch, last_offset) >= (self.log.last_fetched_epoch(), self.log.end_offset())

    def _handle_vote_request(self, body: VoteRequest, now_ms: int) -> VoteResponse:
        if body.cluster_id is not None and body.cluster_id != self.cluster_id:
            return self._vote_response(ErrorCode.INCONSISTENT_CLUSTER_ID, False)
        p = _vote_partition(body)
        if p is None:
            return self._vote_response(ErrorCode.INVALID_REQUEST, False)
        candidate, epoch = p.replica_id, p.replica_epoch
        if not self.planted.ignore_directory_ids and self.config.kraft_version >= 1 \
                and p.voter_directory_id != ZERO_UUID and p.voter_directory_id != self.directory_id:
            # KIP-853: the request names the voter it was meant for by ReplicaKey; a replica whose
            # directory differs (a re-formatted disk) is not that voter (Kafka's isValidVoterKey).
            return self._vote_response(ErrorCode.NONE, False, ErrorCode.INVALID_VOTER_KEY)
        if self.config.kraft_version == 0 and (candidate not in self.config.voters or not self.quorum.is_voter):
            return self._vote_response(ErrorCode.NONE, False, ErrorCode.INCONSISTENT_VOTER_SET)
        # KIP-853: a replica's voter set may lag the candidate's (an uncommitted VotersRecord it has not
        # fetched yet), so a kraft.version 1 replica votes for any candidate with a good log, observers
        # included; the candidate counts the votes of its own voter set only. A candidate id that is a
        # voter here must come with that voter's directory.
        if candidate in self.config.voters and not self._voter_key_matches(candidate, p.replica_directory_id):
            return self._vote_response(ErrorCode.NONE, False, ErrorCode.INCONSISTENT_VOTER_SET)
        if epoch < self.epoch:
            return self._vote_response(ErrorCode.NONE, False, ErrorCode.FENCED_LEADER_EPOCH)
        # Kafka: a candidate's log cannot end in its own epoch (a prospective's may: same epoch).
        if p.last_offset_epoch > epoch or (not p.pre_vote and p.last_offset_epoch == epoch):
            return self._vote_response(ErrorCode.INVALID_REQUEST, False)
        if epoch > self.epoch:
            # Kafka moves to the newer epoch on any vote request, a pre-vote's too.
            self._transition_to_unattached(epoch, now_ms)
        log_ok = self._log_is_ok(p.last_offset_epoch, p.last_offset)
        if p.pre_vote:
            return self._vote_response(ErrorCode.NONE, log_ok and self._can_grant_pre_vote(now_ms))
        s = self.quorum.state
        voted = self.quorum.voted_id()
        if isinstance(s, UnattachedState) and voted < 0:
            granted = log_ok
            if granted:
                self.quorum.to_unattached_voted(candidate, now_ms)  # durable before the answer
        elif isinstance(s, ProspectiveState) and voted < 0 and s.leader_id < 0:
            granted = log_ok
            if granted:
                self._on_state_change()
                self.quorum.to_unattached_voted(candidate, now_ms)
        else:
            granted = voted == candidate  # a retried request for the vote already cast
        return self._vote_response(ErrorCode.NONE, granted)

    def _can_grant_pre_vote(self, now_ms: int) -> bool:
        s = self.quorum.state
        if isinstance(s, LeaderState):
            return False
        if isinstance(s, FollowerState):
            # KIP-996: a follower that heard its leader within the fetch timeout keeps it.
            return s.leader_resigned or s.last_fetch_success_ms < 0 or (
                now_ms - s.last_fetch_success_ms >= self.config.fetch_timeout_ms)
        return True

    def _handle_vote_response(self, source: int, body: VoteResponse, current: bool, now_ms: int) -> None:
        if body.error_code != ErrorCode.NONE:
            self._backoff_until[(source, ApiKey.VOTE)] = now_ms + self.config.retry_backoff_ms
            return
        p = next((q for t in body.topics for q in t.partitions), None)
        if p is None:
            return
        if self._maybe_transition_on_epoch(p.leader_epoch, p.leader_id, now_ms):
            return
        s = self.quorum.state
        if not current or not isinstance(s, ProspectiveState | CandidateState):
            return
        if isinstance(s, CandidateState) and p.leader_epoch != s.epoch:
            return
        if p.error_code != ErrorCode.NONE and p.error_code != ErrorCode.FENCED_LEADER_EPOCH:
            self._backoff_until[(source, ApiKey.VOTE)] = now_ms + self.config.retry_backoff_ms
            return
        if p.vote_granted:
            s.granted.add(source)
        else:
            s.rejected.add(source)
        if isinstance(s, ProspectiveState):
            self._maybe_won_pre_vote(s, now_ms)
        else:
            self._maybe_won_vote(s, now_ms)
        s2 = self.quorum.state
        if s2 is s and len(s.rejected & set(self.config.voters)) > len(self.quorum.voters) - self.config.majority():
            self._lost_election(s, now_ms)

    # --- UpdateRaftVoter (KIP-853) --------------------------------------------------------------
    def _local_voter_node(self) -> VoterNode | None:
        """This replica as a voter entry: its ReplicaKey, its own listeners, its kraft.version range."""
        if not self.local_listeners:
            return None
        lo, hi = self.local_kraft_versions
        return VoterNode(ReplicaKey(self.node_id, self.directory_id), dict(self.local_listeners), lo, hi)

    def local_voter_needs_update(self) -> bool:
        """Kafka's `VoterSet.voterNodeNeedsUpdate`: this replica is a voter (same ReplicaKey) whose entry in
        the latest voter set differs from what it is now (a listener moved, a new kraft.version range)."""
        local = self._local_voter_node()
        if local is None:
            return False
        entry = self.partition_state.last_voter_set().voters.get(self.node_id)
        return entry is not None and entry.key == local.key and entry != local

    def _maybe_send_update_voter(self, s: FollowerState, now_ms: int) -> None:
        """Kafka's pollFollowerAsVoter: every three fetch timeouts a voter at kraft.version 1 whose entry in
        the voter set is stale (it restarted with other endpoints) sends UpdateRaftVoter to the leader; the
        leader appends a VotersRecord with the new entry, which every replica then follows."""
        s.update_voter_deadline_ms = now_ms + UPDATE_VOTER_PERIOD_FACTOR * self.config.fetch_timeout_ms
        # Kafka's shouldSendUpdateVoteRequest: at kraft.version 1 when the entry is stale; at kraft.version 0
        # once per leader (it keeps the voter's directory id and range for a kraft.version upgrade).
        if self.config.kraft_version < 1:
            if s.has_updated_leader or self.local_listeners is None:
                return
        elif not self.local_voter_needs_update():
            return
        if not self._can_send(s.leader_id, ApiKey.UPDATE_RAFT_VOTER, now_ms):
            return
        assert self.local_listeners is not None
        lo, hi = self.local_kraft_versions
        if self.config.kraft_version < 1:
            log.info("node %d: sending UpdateRaftVoter (listeners %s, kraft.version %d-%d) to leader %d in epoch %d",
                     self.node_id, self.local_listeners, lo, hi, s.leader_id, s.epoch)
        else:
            log.info("node %d: its voter entry differs from its listeners %s: sending UpdateRaftVoter to leader %d",
                     self.node_id, self.local_listeners, s.leader_id)
        s.update_voter_sent = True
        self._send(s.leader_id, ApiKey.UPDATE_RAFT_VOTER, UpdateRaftVoterRequest(
            cluster_id=self.cluster_id, current_leader_epoch=s.epoch, voter_id=self.node_id,
            voter_directory_id=self.directory_id,
            listeners=[UpdateRaftVoterRequest.Listener(name=name, host=host, port=port)
                       for name, (host, port) in self.local_listeners.items()],
            kraft_version_feature=UpdateRaftVoterRequest.KRaftVersionFeature(
                min_supported_version=lo, max_supported_version=hi)), now_ms)

    def _handle_update_raft_voter_response(self, source: int, body: UpdateRaftVoterResponse, now_ms: int) -> None:
        leader = body.current_leader
        if self._maybe_transition_on_epoch(leader.leader_epoch, leader.leader_id, now_ms):
            return
        if body.error_code != ErrorCode.NONE:
            log.info("node %d: UpdateRaftVoter answered %s by %d", self.node_id, ErrorCode(body.error_code).name,
                     source)
            self._backoff_until[(source, ApiKey.UPDATE_RAFT_VOTER)] = now_ms + self.config.retry_backoff_ms
            s = self.quorum.state
            if isinstance(s, FollowerState) and s.leader_id == source:
                s.update_voter_sent = False  # the leader is there (e.g. not committed in its epoch yet): retry soon
            return
        s = self.quorum.state
        if isinstance(s, FollowerState) and s.leader_id == source:
            s.has_updated_leader = True

    def _handle_update_raft_voter(self, body: UpdateRaftVoterRequest, now_ms: int) -> UpdateRaftVoterResponse:
        """Kafka's handleUpdateVoterRequest + UpdateVoterHandler: a voter publishes its endpoints and
        supported kraft.version range to the leader. Checks, in Kafka's order: cluster id; leader of that
        epoch (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH / NOT_LEADER_OR_FOLLOWER); a voter key and
        listeners that include the default listener and a sane version range (INVALID_REQUEST); no voter
        operation in flight and a high watermark in this epoch (REQUEST_TIMED_OUT).

        kraft.version 0: the leader keeps the endpoints in memory only and answers NONE (Kafka 4.3 keeps
        them for a later kraft.version upgrade). kraft.version 1: the latest VotersRecord must be committed
        (REQUEST_TIMED_OUT), the finalized kraft.version within the voter's range and its default listener
        present (INVALID_REQUEST), the ReplicaKey a voter (VOTER_NOT_FOUND); then a VotersRecord with the
        voter's new entry is appended and the answer is NONE at once (Kafka does not wait for the commit)."""
        s = self.quorum.state

        def answer(error: ErrorCode) -> UpdateRaftVoterResponse:
            leader = self.quorum.leader_id()
            ep = self.config.voters.get(leader)
            return UpdateRaftVoterResponse(error_code=error, current_leader=UpdateRaftVoterResponse.CurrentLeader(
                leader_id=leader, leader_epoch=self.epoch, host=ep.host if ep else "", port=ep.port if ep else -1))

        if body.cluster_id is not None and body.cluster_id != self.cluster_id:
            return answer(ErrorCode.INCONSISTENT_CLUSTER_ID)
        if body.current_leader_epoch < self.epoch:
            return answer(ErrorCode.FENCED_LEADER_EPOCH)
        if body.current_leader_epoch > self.epoch:
            return answer(ErrorCode.UNKNOWN_LEADER_EPOCH)
        if not isinstance(s, LeaderState):
            return answer(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        kraft_version = self.config.kraft_version
        if kraft_version >= 1 and (body.voter_id < 0 or body.voter_directory_id == ZERO_UUID):
            return answer(ErrorCode.INVALID_REQUEST)
        default_listener = self._default_listener()
        given = {listener.name: (listener.host, listener.port) for listener in body.listeners}
        if default_listener not in given:
            return answer(ErrorCode.INVALID_REQUEST)
        feature = body.kraft_version_feature
        lo, hi = feature.min_supported_version, feature.max_supported_version
        if lo < 0 or hi < 0 or hi < lo:
            return answer(ErrorCode.INVALID_REQUEST)
        if self._voter_change is not None or s.high_watermark < 0:
            return answer(ErrorCode.REQUEST_TIMED_OUT)
        if kraft_version < 1:
            if not lo <= kraft_version <= hi:
                return answer(ErrorCode.INVALID_REQUEST)
            if body.voter_id not in self.config.voters:
                return answer(ErrorCode.VOTER_NOT_FOUND)
            self.updated_voter_endpoints[body.voter_id] = given
            if self.volatile_voters is not None:
                # Kafka's compareAndSetVolatileVoters / updateVoterIgnoringDirectoryId: the entry as the
                # voter published it (its directory id, listeners and kraft.version range).
                self.volatile_voters = VoterSet({**self.volatile_voters.voters, body.voter_id: VoterNode(
                    ReplicaKey(body.voter_id, body.voter_directory_id), given, lo, hi)})
            return answer(ErrorCode.NONE)
        last = self.partition_state.last_voter_set_entry()
        if last.offset >= s.high_watermark:
            return answer(ErrorCode.REQUEST_TIMED_OUT)
        if not lo <= kraft_version <= hi:
            return answer(ErrorCode.INVALID_REQUEST)
        key = ReplicaKey(body.voter_id, body.voter_directory_id)
        updated = last.voters.update_voter(VoterNode(key, given, lo, hi))
        if updated is None:
            return answer(ErrorCode.VOTER_NOT_FOUND)
        if updated == last.voters:
            return answer(ErrorCode.NONE)  # nothing changes: no VotersRecord for it
        offset = self._append_voters(updated, now_ms)
        log.info("leader %d updates voter %d to %s: VotersRecord at offset %d", self.node_id, key.id, given, offset)
        return answer(ErrorCode.NONE)

    # --- kraft.version upgrade (KIP-853) ---------------------------------------------------------
    def _static_voters_with_local(self) -> VoterSet:
        """Kafka's LeaderState at kraft.version 0: the static voters (directory id unknown, kraft.version
        range 0-0, as `VoterSet.fromInetSocketAddresses` makes them) with the leader's own entry."""
        voters = {i: VoterNode(ReplicaKey(i, ZERO_UUID), {ep.listener: (ep.host, ep.port)}, 0, 0)
                  for i, ep in self.config.voters.items()}
        own = self.config.voters.get(self.node_id)
        if own is not None:
            lo, hi = self.local_kraft_versions
            voters[self.node_id] = VoterNode(ReplicaKey(self.node_id, self.directory_id),
                                             dict(self.local_listeners or {own.listener: (own.host, own.port)}), lo, hi)
        return VoterSet(voters)

    def kraft_version(self) -> int:
        """The quorum's kraft.version as this replica's log says it (Kafka's `RaftClient.kraftVersion`,
        the latest KRaftVersionRecord, committed or not)."""
        return self.partition_state.kraft_version()

    def upgrade_kraft_version(self, epoch: int, level: int, validate_only: bool, now_ms: int) -> bool:
        """Kafka's `KafkaRaftClient.upgradeKRaftVersion` / `LeaderState.maybeAppendUpgradedKRaftVersion`:
        the leader of `epoch` moves kraft.version up to `level` by appending one control batch with a
        KRaftVersionRecord and a VotersRecord of its volatile voters (the static voters as their
        UpdateRaftVoter described them). False when `level` is already finalized (nothing written) or
        only validating. Raises `KRaftVersionUpgradeError` with Kafka's error and message otherwise."""
        s = self.quorum.state
        if not isinstance(s, LeaderState):
            raise KRaftVersionUpgradeError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                           f"node {self.node_id} is not the leader (epoch {self.epoch})")
        if epoch < s.epoch:
            raise KRaftVersionUpgradeError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"Upgrade kraft version failed because the given epoch {epoch} is stale. Current leader epoch is "
                f"{s.epoch}")
        if epoch > s.epoch:
            raise ValueError(f"Attempt to append from epoch {epoch} which is larger than the current epoch of "
                             f"{s.epoch}")
        current = self.partition_state.kraft_version()
        if level == current:
            return False
        if current > level:
            raise KRaftVersionUpgradeError(
                ErrorCode.INVALID_UPDATE_VERSION,
                f"Invalid upgrade of kraft.version from version {current} to {level} because the new version is "
                "a downgrade")
        voters = self.volatile_voters
        if voters is None:
            raise KRaftVersionUpgradeError(ErrorCode.INVALID_UPDATE_VERSION,
                                           f"Unable to upgrade version for kraft.version to {level} due to changing "
                                           "voters")
        if set(voters.voters) != set(self.partition_state.last_voter_set().voters):
            raise KRaftVersionUpgradeError(
                ErrorCode.UNKNOWN_SERVER_ERROR,
                f"Unable to update kraft.version to {level} due to missing voters {sorted(voters.voters)} compared "
                f"to {sorted(self.partition_state.last_voter_set().voters)}")
        if not all(n.min_kraft_version <= level <= n.max_kraft_version for n in voters.voters.values()):
            log.info("Not all voters support kraft version %d: %s", level, voters)
            raise KRaftVersionUpgradeError(
                ErrorCode.INVALID_UPDATE_VERSION,
                f"Invalid upgrade of kraft.version to {level} because not all of the voters support it")
        if any(n.key.directory_id == ZERO_UUID for n in voters.voters.values()):
            raise KRaftVersionUpgradeError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                           f"Directory id must be known for all of the voters: {voters}")
        if validate_only:
            return False
        batch = build_voters_batch(voters, base_offset=self.log.end_offset(), epoch=s.epoch, now_ms=now_ms,
                                   kraft_version=level)
        offset = self.append_batch(batch, now_ms)
        self.volatile_voters = None
        log.info("leader %d upgrades kraft.version %d -> %d: KRaftVersionRecord and VotersRecord %s at offset %d",
                 self.node_id, current, level, sorted(voters.voters), offset)
        return True

    def _default_listener(self) -> str:
        """The controller listener voters are reached on (Kafka's `channel.listenerName()`)."""
        if self.config.voters:
            return next(iter(self.config.voters.values())).listener
        return self.config.default_listener

    # --- AddRaftVoter / RemoveRaftVoter (KIP-853) -------------------------------------------------
    def _voter_change_precheck(self, cluster_id: str | None, what: str) -> tuple[ErrorCode, str] | None:
        """The checks AddVoterHandler and RemoveVoterHandler share, in Kafka's order."""
        s = self.quorum.state
        if cluster_id is not None and cluster_id != self.cluster_id:
            return ErrorCode.INCONSISTENT_CLUSTER_ID, ErrorCode.INCONSISTENT_CLUSTER_ID.message
        if not isinstance(s, LeaderState):
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_LEADER_OR_FOLLOWER.message
        if self.config.kraft_version < 1:
            return (ErrorCode.UNSUPPORTED_VERSION,
                    f"Cluster doesn't support {what} voter because the kraft.version feature is "
                    f"{self.config.kraft_version}")
        if self._voter_change is not None:
            return (ErrorCode.REQUEST_TIMED_OUT,
                    "Request timed out waiting for leader to handle previous voter operation")
        if s.high_watermark < 0:
            return (ErrorCode.REQUEST_TIMED_OUT,
                    "Request timed out waiting for leader to establish HWM and fence previous voter changes")
        last = self.partition_state.last_voter_set_entry()
        if last.offset >= s.high_watermark:
            return (ErrorCode.REQUEST_TIMED_OUT,
                    f"Request timed out waiting for voters to commit the latest voter change at {last.offset} "
                    f"with high-watermark {s.high_watermark}")
        return None

    def _append_voters(self, voters: VoterSet, now_ms: int) -> int:
        s = self.quorum.state
        assert isinstance(s, LeaderState)
        batch = build_voters_batch(voters, base_offset=self.log.end_offset(), epoch=s.epoch, now_ms=now_ms)
        return self.append_batch(batch, now_ms)

    def _handle_add_raft_voter(self, body: AddRaftVoterRequest, request_id: int, now_ms: int
                               ) -> AddRaftVoterResponse | None:
        """Kafka's AddVoterHandler: the leader adds an observer that is caught up (it fetched within the
        hour and reached the log end once, Kafka's `isReplicaCaughtUp`) by appending a VotersRecord; the
        answer waits for its commit (`ack_when_committed`, v1; false: answered once appended). Kafka
        also asks the new voter's ApiVersions for its kraft.version range; kbroker records [0, 1], the
        range both kbroker and Kafka 4.3 support."""
        def answer(error: ErrorCode, message: str | None = None) -> AddRaftVoterResponse:
            return AddRaftVoterResponse(error_code=int(error), error_message=message)
        failed = self._voter_change_precheck(body.cluster_id, "adding")
        if failed is not None:
            return answer(*failed)
        s = self.quorum.state
        assert isinstance(s, LeaderState)
        key = ReplicaKey(body.voter_id, body.voter_directory_id)
        if body.voter_id < 0 or body.voter_directory_id == ZERO_UUID:
            return answer(ErrorCode.INVALID_REQUEST, f"Add voter request didn't include a valid voter key {key}")
        current = self.partition_state.last_voter_set()
        if body.voter_id in current.voters:
            return answer(ErrorCode.DUPLICATE_VOTER,
                          f"The voter id for {key} is already part of the set of voters {sorted(current.voters)}.")
        endpoints = {e.name: (e.host, e.port) for e in body.listeners}
        listener = next(iter(self.config.voters.values())).listener if self.config.voters else \
            self.config.default_listener
        if listener not in endpoints:
            return answer(ErrorCode.INVALID_REQUEST,
                          f"The endpoints for the new voter {key} don't include the default listener {listener}")
        observer = s.observer_states.get(body.voter_id)
        if observer is None or observer.directory_id != body.voter_directory_id or observer.last_caught_up_ms <= 0 \
                or observer.last_fetch_ms <= now_ms - CAUGHT_UP_WINDOW_MS:
            return answer(ErrorCode.REQUEST_TIMED_OUT,
                          f"Request timed out waiting for the new voter {key} to catch up: it must fetch from the "
                          "leader as an observer first")
        # Kafka's AddVoterHandler: ask the new voter's ApiVersions for its kraft.version range first, on the
        # default listener's endpoint it gave; the VotersRecord is appended once the answer comes.
        host, port = endpoints[listener]
        self.known_endpoints[body.voter_id] = Endpoint(host, port, listener)
        self._inflight_by_dest.pop((body.voter_id, ApiKey.API_VERSIONS), None)
        self._backoff_until.pop((body.voter_id, ApiKey.API_VERSIONS), None)
        self._send(body.voter_id, ApiKey.API_VERSIONS, ApiVersionsRequest(
            client_software_name="kbroker", client_software_version="0"), now_ms)
        self._voter_change = _VoterChange(request_id, ApiKey.ADD_RAFT_VOTER, -1,
                                          now_ms + max(body.timeout_ms, self.config.request_timeout_ms),
                                          awaiting=VoterNode(key, endpoints),
                                          ack_when_committed=body.ack_when_committed)
        return None

    def _handle_api_versions_response(self, source: int, body: ApiVersionsResponse, now_ms: int) -> None:
        """Kafka's `AddVoterHandler.handleApiVersionsResponse`: the new voter must support the finalized
        kraft.version (its supported range, min 0-max 0 when it lists none: INVALID_REQUEST) and still be
        caught up (REQUEST_TIMED_OUT); then the VotersRecord with its entry and that range is appended."""
        change = self._voter_change
        if change is None or change.awaiting is None or change.awaiting.key.id != source:
            return
        key = change.awaiting.key
        s = self.quorum.state
        if not isinstance(s, LeaderState):
            return
        if body.error_code != ErrorCode.NONE:
            self._voter_change = None
            self._answer_voter_change(change, ErrorCode.REQUEST_TIMED_OUT,
                                      "Aborted add voter operation for since API_VERSIONS returned an error "
                                      f"{ErrorCode(body.error_code).name}")
            return
        level = self.partition_state.kraft_version()
        feature = next((f for f in body.supported_features if f.name == "kraft.version"), None)
        lo, hi = (feature.min_version, feature.max_version) if feature is not None else (0, 0)
        if feature is None or not lo <= level <= hi:
            log.info("Aborting add voter operation for %s since kraft.version range %s-%s doesn't support "
                     "reconfiguration", key, lo, hi)
            self._voter_change = None
            self._answer_voter_change(change, ErrorCode.INVALID_REQUEST,
                                      f"Aborted add voter operation for {key} since the "
                                      f"kraft.version range (min: {lo}, max: {hi}) doesn't support the finalized "
                                      f"version {level}")
            return
        observer = s.observer_states.get(key.id)
        if observer is None or observer.directory_id != key.directory_id or observer.last_caught_up_ms <= 0 \
                or observer.last_fetch_ms <= now_ms - CAUGHT_UP_WINDOW_MS:
            self._voter_change = None
            self._answer_voter_change(change, ErrorCode.REQUEST_TIMED_OUT,
                                      f"Aborted add voter operation for {key} since it is "
                                      "lagging behind")
            return
        added = self.partition_state.last_voter_set().add_voter(VoterNode(key, change.awaiting.endpoints, lo, hi))
        if added is None:
            self._voter_change = None
            self._answer_voter_change(change, ErrorCode.DUPLICATE_VOTER,
                                      f"The voter id for {key} is already part of the set of voters.")
            return
        offset = self._append_voters(added, now_ms)
        log.info("leader %d adds voter %d (directory %s, kraft.version %d-%d): VotersRecord at offset %d",
                 self.node_id, key.id, key.directory_id, lo, hi, offset)
        change.awaiting = None
        change.voters_offset = offset
        if not change.ack_when_committed:
            self._voter_change = None
            self._answer_voter_change(change, ErrorCode.NONE, None)

    def _handle_remove_raft_voter(self, body: RemoveRaftVoterRequest, request_id: int, now_ms: int
                                  ) -> RemoveRaftVoterResponse | None:
        """Kafka's RemoveVoterHandler: the leader appends a VotersRecord without the voter and answers
        once it commits; a leader that removed itself resigns after that commit."""
        def answer(error: ErrorCode, message: str | None = None) -> RemoveRaftVoterResponse:
            return RemoveRaftVoterResponse(error_code=int(error), error_message=message)
        failed = self._voter_change_precheck(body.cluster_id, "removing")
        if failed is not None:
            return answer(*failed)
        key = ReplicaKey(body.voter_id, body.voter_directory_id)
        current = self.partition_state.last_voter_set()
        removed = current.remove_voter(key)
        if removed is None:
            return answer(ErrorCode.VOTER_NOT_FOUND,
                          f"Cannot remove voter {key} from the set of voters {sorted(current.voters)}")
        offset = self._append_voters(removed, now_ms)
        log.info("leader %d removes voter %d: VotersRecord at offset %d", self.node_id, key.id, offset)
        self._voter_change = _VoterChange(request_id, ApiKey.REMOVE_RAFT_VOTER, offset,
                                          now_ms + self.config.request_timeout_ms, removed=key.id)
        return None

    def _answer_voter_change(self, change: _VoterChange, error: ErrorCode, message: str | None) -> None:
        body: AddRaftVoterResponse | RemoveRaftVoterResponse
        if change.api_key == ApiKey.ADD_RAFT_VOTER:
            body = AddRaftVoterResponse(error_code=int(error), error_message=message)
        else:
            body = RemoveRaftVoterResponse(error_code=int(error), error_message=message)
        self._outbox.append(OutboundResponse(change.request_id, change.api_key, body))

    def _maybe_complete_voter_change(self, now_ms: int) -> None:
        change = self._voter_change
        if change is None:
            return
        if change.awaiting is None and self.high_watermark() > change.voters_offset:
            self._voter_change = None
            self._answer_voter_change(change, ErrorCode.NONE, None)
        elif now_ms >= change.deadline_ms:
            self._voter_change = None
            self._answer_voter_change(change, ErrorCode.REQUEST_TIMED_OUT,
                                      "Request timed out waiting for the voter change to commit")

    # --- BeginQuorumEpoch / EndQuorumEpoch --------------------------------------------------------
    def _leader_endpoints(self, make: _EndpointFactory[_E]) -> list[_E]:
        """The `node_endpoints` of a response: the known leader's controller endpoint (KIP-853)."""
        leader = self.quorum.leader_id()
        ep = self.config.voters.get(leader)
        if ep is None:
            return []
        return [make(node_id=leader, host=ep.host, port=ep.port)]

    def _build_begin_quorum_epoch(self, s: LeaderState, destination: int) -> BeginQuorumEpochRequest:
        ep = self.config.voters.get(self.node_id)
        return BeginQuorumEpochRequest(cluster_id=self.cluster_id, voter_id=destination, topics=[
            BeginQuorumEpochRequest.TopicData(topic_name=CLUSTER_METADATA_TOPIC_NAME, partitions=[
                BeginQuorumEpochRequest.PartitionData(partition_index=CLUSTER_METADATA_PARTITION,
                                                      voter_directory_id=self.config.voter_directory_id(destination),
                                                      leader_id=self.node_id,
                                                      leader_epoch=s.epoch)])],
            leader_endpoints=[] if ep is None else [BeginQuorumEpochRequest.LeaderEndpoint(
                name=ep.listener, host=ep.host, port=ep.port)])

    def _handle_begin_quorum_epoch(self, body: BeginQuorumEpochRequest, now_ms: int) -> BeginQuorumEpochResponse:
        def answer(error: ErrorCode, partition_error: ErrorCode = ErrorCode.NONE) -> BeginQuorumEpochResponse:
            return BeginQuorumEpochResponse(error_code=error, topics=[BeginQuorumEpochResponse.TopicData(
                topic_name=CLUSTER_METADATA_TOPIC_NAME, partitions=[BeginQuorumEpochResponse.PartitionData(
                    partition_index=CLUSTER_METADATA_PARTITION, error_code=partition_error,
                    leader_id=self.quorum.leader_id(), leader_epoch=self.epoch)])],
                node_endpoints=self._leader_endpoints(BeginQuorumEpochResponse.NodeEndpoint))
        if body.cluster_id is not None and body.cluster_id != self.cluster_id:
            return answer(ErrorCode.INCONSISTENT_CLUSTER_ID)
        p = next((q for t in body.topics for q in t.partitions), None)
        if p is None:
            return answer(ErrorCode.INVALID_REQUEST)
        if p.leader_id not in self.config.voters and self.config.kraft_version == 0:
            return answer(ErrorCode.NONE, ErrorCode.INCONSISTENT_VOTER_SET)
        if body.leader_endpoints:
            e = body.leader_endpoints[0]
            self.known_endpoints[p.leader_id] = Endpoint(e.host, e.port, e.name)
        if p.leader_epoch < self.epoch:
            return answer(ErrorCode.NONE, ErrorCode.FENCED_LEADER_EPOCH)
        s = self.quorum.state
        if p.leader_epoch == self.epoch and isinstance(s, LeaderState | ResignedState) and p.leader_id != self.node_id:
            log.error("node %d leads epoch %d but %d claims it too", self.node_id, s.epoch, p.leader_id)
            return answer(ErrorCode.NONE, ErrorCode.INVALID_REQUEST)
        if not (isinstance(s, FollowerState) and s.epoch == p.leader_epoch and s.leader_id == p.leader_id):
            if p.leader_id != self.node_id:
                self._transition_to_follower(p.leader_epoch, p.leader_id, now_ms)
        return answer(ErrorCode.NONE)

    def _handle_begin_quorum_epoch_response(self, source: int, body: BeginQuorumEpochResponse, current: bool,
                                            now_ms: int) -> None:
        p = next((q for t in body.topics for q in t.partitions), None)
        if body.error_code != ErrorCode.NONE or p is None:
            self._backoff_until[(source, ApiKey.BEGIN_QUORUM_EPOCH)] = now_ms + self.config.retry_backoff_ms
            return
        if self._maybe_transition_on_epoch(p.leader_epoch, p.leader_id, now_ms):
            return
        s = self.quorum.state
        if isinstance(s, LeaderState) and p.error_code == ErrorCode.NONE and p.leader_epoch == s.epoch:
            s.begin_epoch_unacked.discard(source)
        elif isinstance(s, LeaderState):
            self._backoff_until[(source, ApiKey.BEGIN_QUORUM_EPOCH)] = now_ms + self.config.retry_backoff_ms

    def _build_end_quorum_epoch(self, s: ResignedState, destination: int) -> EndQuorumEpochRequest:
        ep = self.config.voters.get(self.node_id)
        return EndQuorumEpochRequest(cluster_id=self.cluster_id, topics=[EndQuorumEpochRequest.TopicData(
            topic_name=CLUSTER_METADATA_TOPIC_NAME, partitions=[EndQuorumEpochRequest.PartitionData(
                partition_index=CLUSTER_METADATA_PARTITION, leader_id=self.node_id, leader_epoch=s.epoch,
                preferred_candidates=[EndQuorumEpochRequest.ReplicaInfo(candidate_id=c)
                                      for c in s.preferred_successors])])],
            leader_endpoints=[] if ep is None else [EndQuorumEpochRequest.LeaderEndpoint(
                name=ep.listener, host=ep.host, port=ep.port)])

    def _handle_end_quorum_epoch(self, body: EndQuorumEpochRequest, now_ms: int) -> EndQuorumEpochResponse:
        def answer(error: ErrorCode, partition_error: ErrorCode = ErrorCode.NONE) -> EndQuorumEpochResponse:
            return EndQuorumEpochResponse(error_code=error, topics=[EndQuorumEpochResponse.TopicData(
                topic_name=CLUSTER_METADATA_TOPIC_NAME, partitions=[EndQuorumEpochResponse.PartitionData(
                    partition_index=CLUSTER_METADATA_PARTITION, error_code=partition_error,
                    leader_id=self.quorum.leader_id(), leader_epoch=self.epoch)])])
        if body.cluster_id is not None and body.cluster_id != self.cluster_id:
            return answer(ErrorCode.INCONSISTENT_CLUSTER_ID)
        p = next((q for t in body.topics for q in t.partitions), None)
        if p is None:
            return answer(ErrorCode.INVALID_REQUEST)
        if p.leader_epoch < self.epoch:
            return answer(ErrorCode.NONE, ErrorCode.FENCED_LEADER_EPOCH)
        successors = [c.candidate_id for c in p.preferred_candidates] or list(p.preferred_successors)
        if p.leader_epoch > self.epoch:
            self._transition_to_unattached(p.leader_epoch, now_ms)
        s = self.quorum.state
        if isinstance(s, FollowerState) and s.leader_id == p.leader_id:
            # Kafka: the first preferred successor elects at once, the others back off by position.
            position = successors.index(self.node_id) if self.node_id in successors else len(successors)
            backoff = 0 if position == 0 else min(self.config.election_backoff_max_ms,
                                                  self.config.retry_backoff_ms * (1 << min(position, 10)))
            s.leader_resigned = True
            s.fetch_deadline_ms = min(s.fetch_deadline_ms, now_ms + backoff + self.rng.randint(0, max(backoff, 1)))
        return answer(ErrorCode.NONE)

    def _handle_end_quorum_epoch_response(self, source: int, body: EndQuorumEpochResponse, current: bool,
                                          now_ms: int) -> None:
        s = self.quorum.state
        if isinstance(s, ResignedState) and body.error_code == ErrorCode.NONE:
            s.end_epoch_unacked.discard(source)
        elif isinstance(s, ResignedState):
            self._backoff_until[(source, ApiKey.END_QUORUM_EPOCH)] = now_ms + self.config.retry_backoff_ms

    # --- Fetch ------------------------------------------------------------------------------------
    def _build_fetch_request(self, epoch: int, high_watermark: int) -> FetchRequest:
        return FetchRequest(
            cluster_id=self.cluster_id, replica_id=-1,
            replica_state=FetchRequest.ReplicaState(replica_id=self.node_id, replica_epoch=-1),
            max_wait_ms=self.config.fetch_max_wait_ms, min_bytes=0, max_bytes=self.config.max_fetch_bytes,
            topics=[FetchRequest.FetchTopic(
                topic=CLUSTER_METADATA_TOPIC_NAME, topic_id=CLUSTER_METADATA_TOPIC_ID, partitions=[
                    FetchRequest.FetchPartition(
                        partition=CLUSTER_METADATA_PARTITION, current_leader_epoch=epoch,
                        fetch_offset=self.log.end_offset(), last_fetched_epoch=self.log.last_fetched_epoch(),
                        partition_max_bytes=self.config.max_fetch_bytes, replica_directory_id=self.directory_id,
                        high_watermark=high_watermark if high_watermark >= 0 else (1 << 63) - 1)])])

    def _fetch_error(self, error: ErrorCode, top_level: ErrorCode = ErrorCode.NONE) -> FetchResponse:
        return FetchResponse(error_code=top_level, responses=[FetchResponse.FetchableTopicResponse(
            topic=CLUSTER_METADATA_TOPIC_NAME, topic_id=CLUSTER_METADATA_TOPIC_ID, partitions=[
                FetchResponse.PartitionData(
                    partition_index=CLUSTER_METADATA_PARTITION, error_code=error, high_watermark=-1,
                    current_leader=FetchResponse.LeaderIdAndEpoch(leader_id=self.quorum.leader_id(),
                                                                  leader_epoch=self.epoch))])],
            node_endpoints=self._leader_endpoints(FetchResponse.NodeEndpoint))

    def _fetch_can_complete(self, s: LeaderState, body: FetchRequest) -> bool:
        p = body.topics[0].partitions[0]
        if self.log.end_offset() > p.fetch_offset:
            return True
        return s.high_watermark >= 0 and p.high_watermark != (1 << 63) - 1 and s.high_watermark > p.high_watermark

    def _handle_fetch_request(self, body: FetchRequest, request_id: int, now_ms: int, *,
                              allow_park: bool) -> FetchResponse | None:
        if body.cluster_id is not None and body.cluster_id != self.cluster_id:
            return self._fetch_error(ErrorCode.NONE, ErrorCode.INCONSISTENT_CLUSTER_ID)
        if len(body.topics) != 1 or len(body.topics[0].partitions) != 1:
            return self._fetch_error(ErrorCode.NONE, ErrorCode.INVALID_REQUEST)
        p = body.topics[0].partitions[0]
        replica_id = body.replica_state.replica_id if body.replica_state.replica_id >= 0 else body.replica_id
        if p.fetch_offset < 0 or p.last_fetched_epoch < 0 and p.fetch_offset > 0:
            return self._fetch_error(ErrorCode.INVALID_REQUEST)
        s = self.quorum.state
        if p.current_leader_epoch < self.epoch:
            return self._fetch_error(ErrorCode.FENCED_LEADER_EPOCH)
        if p.current_leader_epoch > self.epoch:
            return self._fetch_error(ErrorCode.UNKNOWN_LEADER_EPOCH)
        if not isinstance(s, LeaderState):
            return self._fetch_error(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if self.planted.count_unvalidated_fetch_offsets:
            self._record_fetch(s, replica_id, p.fetch_offset, now_ms, p.replica_directory_id)
        valid = validate_offset_and_epoch(self.log, p.fetch_offset, p.last_fetched_epoch)
        partition = FetchResponse.PartitionData(
            partition_index=CLUSTER_METADATA_PARTITION, error_code=ErrorCode.NONE, high_watermark=s.high_watermark,
            log_start_offset=self.log.start_offset(),
            current_leader=FetchResponse.LeaderIdAndEpoch(leader_id=self.node_id, leader_epoch=s.epoch))
        if valid.kind == "diverging":
            partition.diverging_epoch = FetchResponse.EpochEndOffset(epoch=valid.offset_and_epoch.epoch,
                                                                     end_offset=valid.offset_and_epoch.offset)
        elif valid.kind == "snapshot":
            partition.snapshot_id = FetchResponse.SnapshotId(end_offset=valid.offset_and_epoch.offset,
                                                             epoch=valid.offset_and_epoch.epoch)
        else:
            self._record_fetch(s, replica_id, p.fetch_offset, now_ms, p.replica_directory_id)
            if allow_park and body.max_wait_ms > 0 and not self._fetch_can_complete(s, body):
                self._parked.append(_ParkedFetch(request_id, body, now_ms + body.max_wait_ms))
                return None
            data = self.log.read(p.fetch_offset, max(p.partition_max_bytes, 1))
            partition.records = data if data else None
            partition.high_watermark = s.high_watermark
        return FetchResponse(responses=[FetchResponse.FetchableTopicResponse(
            topic=CLUSTER_METADATA_TOPIC_NAME, topic_id=CLUSTER_METADATA_TOPIC_ID, partitions=[partition])])

    def _record_fetch(self, s: LeaderState, replica_id: int, fetch_offset: int, now_ms: int,
                      directory_id: uuid.UUID = ZERO_UUID) -> None:
        """A valid fetch at `fetch_offset`: the replica holds (durably, for a voter) everything below it.
        With kraft.version 1 a fetch counts as the voter's only from the voter's ReplicaKey: the same id
        on another directory (a wiped, re-formatted disk) is an observer (Kafka's isVoter(ReplicaKey))."""
        is_voter = replica_id in s.voter_states and self._voter_key_matches(replica_id, directory_id)
        if is_voter:
            r = s.voter_states[replica_id]
            s.fetched_since_check.add(replica_id)
            counted = (s.fetched_since_check | ({self.node_id} if self.quorum.is_voter else set())) & set(
                self.config.voters)
            if len(counted) >= self.config.majority():
                s.check_quorum_deadline_ms = now_ms + self.config.check_quorum_timeout_ms
                s.fetched_since_check = set()
        elif replica_id >= 0:
            r = s.observer_states.setdefault(replica_id, ReplicaState(replica_id))
        else:
            return
        if fetch_offset > r.end_offset or not is_voter:
            r.end_offset = fetch_offset
        if not is_voter:
            r.directory_id = directory_id
        r.last_fetch_ms = now_ms
        if fetch_offset >= self.log.end_offset():
            r.last_caught_up_ms = now_ms
        if is_voter:
            self._update_leader_hw(s)

    def _voter_key_matches(self, voter_id: int, directory_id: uuid.UUID) -> bool:
        """kraft.version 1: a request from `voter_id` on `directory_id` is that voter's (a zero directory
        id is "not given" and matches, as in Kafka)."""
        if self.planted.ignore_directory_ids or self.config.kraft_version == 0 or directory_id == ZERO_UUID:
            return True
        return directory_id == self.config.voter_directory_id(voter_id)

    def _learn_endpoints(self, endpoints: list[FetchResponse.NodeEndpoint]) -> None:
        for e in endpoints:
            if e.node_id >= 0 and e.host and e.port > 0:
                self.known_endpoints[e.node_id] = Endpoint(e.host, e.port, self.config.default_listener if not
                                                           self.config.voters else
                                                           next(iter(self.config.voters.values())).listener)

    def _handle_fetch_response(self, source: int, body: FetchResponse, current: bool, now_ms: int) -> None:
        self._learn_endpoints(body.node_endpoints)
        s = self.quorum.state
        p = next((q for t in body.responses for q in t.partitions), None)
        if body.error_code != ErrorCode.NONE or p is None:
            self._backoff_until[(source, ApiKey.FETCH)] = now_ms + self.config.retry_backoff_ms
            return
        leader = p.current_leader
        if self._maybe_transition_on_epoch(leader.leader_epoch, leader.leader_id, now_ms):
            return
        if p.error_code != ErrorCode.NONE:
            self._backoff_until[(source, ApiKey.FETCH)] = now_ms + self.config.retry_backoff_ms
            if isinstance(s, UnattachedState):
                self._observer_target = -1  # ask another voter
            return
        if not current or not isinstance(s, FollowerState) or s.leader_id != source:
            return
        s.fetch_deadline_ms = now_ms + self.config.fetch_timeout_ms
        s.last_fetch_success_ms = now_ms
        if p.diverging_epoch.epoch >= 0 or p.diverging_epoch.end_offset >= 0:
            cut = truncate_to_end_offset(self.log, OffsetAndEpoch(p.diverging_epoch.end_offset,
                                                                  p.diverging_epoch.epoch))
            log.info("node %d truncated to %d (diverging epoch %d ends at %d on the leader)", self.node_id, cut,
                     p.diverging_epoch.epoch, p.diverging_epoch.end_offset)
            self._sync_voters(now_ms)  # a truncated VotersRecord no longer counts
            return
        if p.snapshot_id.end_offset >= 0 or p.snapshot_id.epoch >= 0:
            self._snapshot_fetch = _SnapshotFetch(OffsetAndEpoch(p.snapshot_id.end_offset, p.snapshot_id.epoch),
                                                  bytearray())
            return
        if p.records is not None and len(p.records) > 0:
            self._now_hint = now_ms
            self._append_as_follower(bytes(p.records))
        self._update_follower_hw(s, p.high_watermark)

    def _append_as_follower(self, data: bytes) -> None:
        """Append the batches that continue the log (a duplicate response's are already there)."""
        end = self.log.end_offset()
        try:
            # A partial batch at the end of a size-limited response is left out.
            for b in iter_whole_batches(data):
                if b.base_offset >= end:
                    if b.base_offset != end or not b.is_valid():
                        break
                    self.log.append(bytes(b.buf))
                    end = b.next_offset
        except (RecordsError, ValueError) as e:  # a corrupt response: keep what was valid, fetch again
            log.warning("node %d: bad records in a fetch response at offset %d: %s", self.node_id, end, e)
        if self.quorum.is_voter:
            self.log.flush()  # the next fetch offset tells the leader this is durable
        self._sync_voters(self._now_hint)

    def _update_follower_hw(self, s: FollowerState, leader_hw: int) -> None:
        if leader_hw < 0:
            return
        hw = min(leader_hw, self.log.end_offset())
        if hw > s.high_watermark:
            s.high_watermark = hw

    # --- FetchSnapshot ----------------------------------------------------------------------------
    def _build_fetch_snapshot(self, epoch: int) -> FetchSnapshotRequest:
        f = self._snapshot_fetch
        assert f is not None
        return FetchSnapshotRequest(cluster_id=self.cluster_id, replica_id=self.node_id,
                                    max_bytes=self.config.max_fetch_snapshot_bytes, topics=[
            FetchSnapshotRequest.TopicSnapshot(name=CLUSTER_METADATA_TOPIC_NAME, partitions=[
                FetchSnapshotRequest.PartitionSnapshot(
                    partition=CLUSTER_METADATA_PARTITION, current_leader_epoch=epoch,
                    snapshot_id=FetchSnapshotRequest.SnapshotId(end_offset=f.snapshot_id.offset,
                                                                epoch=f.snapshot_id.epoch),
                    position=len(f.data), replica_directory_id=self.directory_id)])])

    def _handle_fetch_snapshot_request(self, body: FetchSnapshotRequest) -> FetchSnapshotResponse:
        def answer(error: ErrorCode, top: ErrorCode = ErrorCode.NONE, **fields: object) -> FetchSnapshotResponse:
            part = FetchSnapshotResponse.PartitionSnapshot(
                index=CLUSTER_METADATA_PARTITION, error_code=error,
                current_leader=FetchSnapshotResponse.LeaderIdAndEpoch(leader_id=self.quorum.leader_id(),
                                                                      leader_epoch=self.epoch))
            for k, v in fields.items():
                setattr(part, k, v)
            return FetchSnapshotResponse(error_code=top, topics=[FetchSnapshotResponse.TopicSnapshot(
                name=CLUSTER_METADATA_TOPIC_NAME, partitions=[part])],
                node_endpoints=self._leader_endpoints(FetchSnapshotResponse.NodeEndpoint))
        if body.cluster_id is not None and body.cluster_id != self.cluster_id:
            return answer(ErrorCode.NONE, ErrorCode.INCONSISTENT_CLUSTER_ID)
        p = next((q for t in body.topics for q in t.partitions), None)
        if p is None:
            return answer(ErrorCode.NONE, ErrorCode.INVALID_REQUEST)
        if p.current_leader_epoch < self.epoch:
            return answer(ErrorCode.FENCED_LEADER_EPOCH)
        if p.current_leader_epoch > self.epoch:
            return answer(ErrorCode.UNKNOWN_LEADER_EPOCH)
        if not isinstance(self.quorum.state, LeaderState):
            return answer(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        snapshot_id = OffsetAndEpoch(p.snapshot_id.end_offset, p.snapshot_id.epoch)
        found = self.log.read_snapshot_slice(snapshot_id, max(p.position, 0),
                                             max(min(body.max_bytes, self.config.max_fetch_snapshot_bytes), 1))
        if found is None:
            return answer(ErrorCode.SNAPSHOT_NOT_FOUND)
        size, chunk = found
        if p.position < 0 or p.position > size:
            return answer(ErrorCode.POSITION_OUT_OF_RANGE)
        return answer(ErrorCode.NONE, snapshot_id=FetchSnapshotResponse.SnapshotId(
            end_offset=snapshot_id.offset, epoch=snapshot_id.epoch), size=size, position=p.position,
            unaligned_records=chunk)

    def _handle_fetch_snapshot_response(self, source: int, body: FetchSnapshotResponse, current: bool,
                                        now_ms: int) -> None:
        p = next((q for t in body.topics for q in t.partitions), None)
        if body.error_code != ErrorCode.NONE or p is None:
            self._backoff_until[(source, ApiKey.FETCH_SNAPSHOT)] = now_ms + self.config.retry_backoff_ms
            return
        if self._maybe_transition_on_epoch(p.current_leader.leader_epoch, p.current_leader.leader_id, now_ms):
            return
        s = self.quorum.state
        f = self._snapshot_fetch
        if not current or not isinstance(s, FollowerState) or f is None:
            return
        if p.error_code == ErrorCode.SNAPSHOT_NOT_FOUND:
            self._snapshot_fetch = None  # the leader moved on: fetch again, it will name its new snapshot
            return
        if p.error_code != ErrorCode.NONE:
            self._backoff_until[(source, ApiKey.FETCH_SNAPSHOT)] = now_ms + self.config.retry_backoff_ms
            return
        if (p.snapshot_id.end_offset, p.snapshot_id.epoch) != f.snapshot_id or p.position != len(f.data):
            return
        s.fetch_deadline_ms = now_ms + self.config.fetch_timeout_ms
        s.last_fetch_success_ms = now_ms
        if p.unaligned_records is not None:
            f.data += bytes(p.unaligned_records)
        if len(f.data) >= p.size:
            self.log.install_snapshot(f.snapshot_id, bytes(f.data))
            self.partition_state.reset_to_snapshot(self.log)
            self._sync_voters(now_ms, initial=True)
            self._snapshot_fetch = None
            log.info("node %d installed snapshot %020d-%010d (%d bytes) fetched from leader %d", self.node_id,
                     f.snapshot_id.offset, f.snapshot_id.epoch, len(f.data), source)
            if f.snapshot_id.offset > s.high_watermark:
                s.high_watermark = f.snapshot_id.offset  # a leader's snapshot holds committed entries only

    # --- DescribeQuorum ---------------------------------------------------------------------------
    def describe_quorum(self, now_ms: int) -> DescribeQuorumResponse:
        """Kafka's DescribeQuorum answer: the leader's replica states (others: NOT_LEADER_OR_FOLLOWER)."""
        s = self.quorum.state
        partition = DescribeQuorumResponse.PartitionData(partition_index=CLUSTER_METADATA_PARTITION,
                                                         leader_id=self.quorum.leader_id(), leader_epoch=self.epoch)
        if not isinstance(s, LeaderState):
            partition.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
            partition.error_message = ErrorCode.NOT_LEADER_OR_FOLLOWER.message
        else:
            def rs(r: ReplicaState) -> DescribeQuorumResponse.ReplicaState:
                return DescribeQuorumResponse.ReplicaState(
                    replica_id=r.replica_id, replica_directory_id=self.config.voter_directory_id(r.replica_id)
                    if r.replica_id in self.config.voters else r.directory_id, log_end_offset=r.end_offset, last_fetch_timestamp=r.last_fetch_ms,
                    last_caught_up_timestamp=r.last_caught_up_ms)
            partition.high_watermark = s.high_watermark
            partition.current_voters = [rs(s.voter_states[v]) for v in sorted(s.voter_states)]
            partition.observers = [rs(s.observer_states[o]) for o in sorted(s.observer_states)]
            partition.error_message = None
        nodes = [DescribeQuorumResponse.Node(node_id=v, listeners=[DescribeQuorumResponse.Listener(
            name=ep.listener, host=ep.host, port=ep.port)]) for v, ep in sorted(self.config.voters.items())]
        return DescribeQuorumResponse(error_code=ErrorCode.NONE, error_message=None, topics=[
            DescribeQuorumResponse.TopicData(topic_name=CLUSTER_METADATA_TOPIC_NAME, partitions=[partition])],
            nodes=nodes)

    # --- the listener -----------------------------------------------------------------------------
    def _deliver(self, now_ms: int) -> None:
        leader = self.leader_and_epoch()
        # A new leader tells its listener only once every batch committed before its epoch has been
        # handed over (Kafka's KafkaRaftClient fires handleLeaderChange for the local leader once the
        # listener's next offset reaches the epoch start offset): the QuorumController activates on a
        # complete committed image (a restarted single voter leads at once, before any replay).
        s = self.quorum.state
        if leader != self._notified_leader and not isinstance(s, LeaderState):
            self._notified_leader = leader
            self.listener.handle_leader_change(leader)
        start = self.log.start_offset()
        snap = self.log.latest_snapshot_id()
        # Kafka's updateListenersProgress: the latest snapshot goes first to a listener that starts from
        # nothing (with metadata retention the log keeps batches below it) or that is behind the log start.
        if self._delivered < start or (self._delivered == 0 and snap is not None and snap.offset > 0):
            if snap is None:
                return
            data = self.log.read_snapshot(snap)
            if data is None:
                return
            self.listener.handle_load_snapshot(snap, data)
            self._delivered = snap.offset
        hw = self.high_watermark()
        batches: list[RaftBatch] = []
        while self._delivered < hw:
            progressed = False
            for view in iter_whole_batches(self.log.read(self._delivered, self.config.max_fetch_bytes)):
                b = RaftBatch.of(bytes(view.buf))
                if b.last_offset >= hw:
                    break
                if b.last_offset >= self._delivered:
                    batches.append(b)
                    self._delivered = b.last_offset + 1
                    progressed = True
            if not progressed:
                break
        if batches:
            self.listener.handle_commit(batches)
        if leader != self._notified_leader and isinstance(s, LeaderState) and self._delivered >= s.epoch_start_offset:
            self._notified_leader = leader
            self.listener.handle_leader_change(leader)
