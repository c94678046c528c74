"""QuorumState and its EpochStates: where a replica stands in the current epoch (Kafka's `QuorumState`).

Each state is one epoch's view; every transition that changes the epoch, the vote or the leader is
written to the `quorum-state` store before it takes effect (a vote is never granted before it is
durable, or a restart could vote twice in one epoch):

- `UnattachedState`: an epoch without a known leader; may hold this epoch's vote. A voter starts an
  election (as prospective) when its randomized election timeout expires; an observer keeps looking
  for the leader.
- `ProspectiveState` (KIP-996): asks the voters whether they would vote for it (a pre-vote, same
  epoch, nothing persisted by them); a majority yes makes it a candidate. It keeps the epoch's vote
  and known leader, so a node that merely lost touch cannot disturb a healthy leader.
- `CandidateState`: epoch + 1, voted for itself, collects votes; a majority makes it leader.
- `LeaderState`: the replica states of voters and observers, the high watermark, check-quorum.
- `FollowerState`: fetches from the known leader; its fetch timeout starts an election (voters).
- `ResignedState`: a leader that resigned (shutdown or check-quorum) until the next election.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field

from kbroker.raft.config import QuorumConfig
from kbroker.raft.quorum_state_store import ElectionState, QuorumStateStore

# Kafka's FollowerState.updateVoterPeriodMs: a few rounds of fetches before a voter checks (and, at
# kraft.version 1, sends UpdateRaftVoter) whether the voter set holds its current endpoints.
UPDATE_VOTER_PERIOD_FACTOR = 3


@dataclass
class UnattachedState:
    epoch: int
    voted_id: int
    election_deadline_ms: int
    name: str = "Unattached"


@dataclass
class ProspectiveState:
    epoch: int
    voted_id: int
    leader_id: int  # the leader this node last followed in `epoch`, if any
    election_deadline_ms: int
    granted: set[int] = field(default_factory=set)
    rejected: set[int] = field(default_factory=set)
    backoff_until_ms: int = -1  # after a lost pre-vote: the next round waits
    name: str = "Prospective"


@dataclass
class CandidateState:
    epoch: int
    election_deadline_ms: int
    granted: set[int] = field(default_factory=set)
    rejected: set[int] = field(default_factory=set)
    backoff_until_ms: int = -1
    name: str = "Candidate"


@dataclass
class ReplicaState:
    """Kafka's LeaderState.ReplicaState: what the leader knows of one replica."""

    replica_id: int
    end_offset: int = -1
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    directory_id: uuid.UUID = uuid.UUID(int=0)  # the replica's metadata log dir id (KIP-853 ReplicaKey)


@dataclass
class LeaderState:
    epoch: int
    epoch_start_offset: int
    granting_voters: set[int]
    voter_states: dict[int, ReplicaState]
    check_quorum_deadline_ms: int
    observer_states: dict[int, ReplicaState] = field(default_factory=dict)
    high_watermark: int = -1  # unknown until an entry of this epoch commits
    fetched_since_check: set[int] = field(default_factory=set)
    begin_epoch_unacked: set[int] = field(default_factory=set)
    name: str = "Leader"


@dataclass
class FollowerState:
    epoch: int
    leader_id: int
    voted_id: int
    fetch_deadline_ms: int
    high_watermark: int = -1
    last_fetch_success_ms: int = -1
    leader_resigned: bool = False  # an EndQuorumEpoch came: grant pre-votes, elect soon
    # KIP-853: when a voter next checks whether its endpoints differ from its entry in the voter set
    # (Kafka's FollowerState.updateVoterPeriodTimer: three fetch timeouts).
    update_voter_deadline_ms: int = -1
    # kraft.version 0 (KIP-853, Kafka's FollowerState.hasUpdatedLeader): this leader has accepted the
    # voter's UpdateRaftVoter (its directory id, listeners and kraft.version range), which it keeps in
    # memory for a later `kafka-features upgrade --feature kraft.version=1`.
    has_updated_leader: bool = False
    # Whether this follower state has sent its kraft.version 0 UpdateRaftVoter yet: the first goes at once;
    # after an error answer it goes again after the retry backoff, but after a send that failed (the
    # leader unreachable) only when `update_voter_deadline_ms` passes (Kafka's updateVoterPeriodTimer) --
    # not every `controller.quorum.retry.backoff.ms`.
    update_voter_sent: bool = False
    name: str = "Follower"


@dataclass
class ResignedState:
    epoch: int
    election_deadline_ms: int
    preferred_successors: list[int]
    end_epoch_unacked: set[int]
    name: str = "Resigned"


EpochState = UnattachedState | ProspectiveState | CandidateState | LeaderState | FollowerState | ResignedState


class QuorumState:
    """The current EpochState, its persistence, and the randomized timers of the transitions."""

    def __init__(self, local_id: int, config: QuorumConfig, store: QuorumStateStore, rng: random.Random) -> None:
        self.local_id = local_id
        self.config = config
        self.store = store
        self.rng = rng
        self.state: EpochState = UnattachedState(0, -1, 0)

    # --- facts -----------------------------------------------------------------------------------
    @property
    def is_voter(self) -> bool:
        return self.local_id in self.config.voters

    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def voters(self) -> list[int]:
        return sorted(self.config.voters)

    def leader_id(self) -> int:
        s = self.state
        if isinstance(s, LeaderState):
            return self.local_id
        if isinstance(s, FollowerState):
            return s.leader_id
        return -1

    def voted_id(self) -> int:
        s = self.state
        if isinstance(s, UnattachedState | ProspectiveState | FollowerState):
            return s.voted_id
        if isinstance(s, CandidateState | LeaderState | ResignedState):
            return self.local_id
        return -1

    def election(self) -> ElectionState:
        e = self._election()
        if e.voted_id >= 0 and self.config.kraft_version >= 1:
            # kraft.version 1: the vote names the candidate's ReplicaKey (quorum-state v1 votedDirectoryId).
            return ElectionState(e.epoch, e.leader_id, e.voted_id, self.config.voter_directory_id(e.voted_id))
        return e

    def _election(self) -> ElectionState:
        s = self.state
        if isinstance(s, LeaderState | ResignedState):
            return ElectionState(s.epoch, self.local_id, self.local_id)
        if isinstance(s, CandidateState):
            return ElectionState(s.epoch, -1, self.local_id)
        if isinstance(s, FollowerState):
            return ElectionState(s.epoch, s.leader_id, s.voted_id)
        if isinstance(s, ProspectiveState):
            return ElectionState(s.epoch, s.leader_id, s.voted_id)
        return ElectionState(s.epoch, -1, s.voted_id)

    # --- timers ----------------------------------------------------------------------------------
    def random_election_timeout_ms(self) -> int:
        """Kafka's randomElectionTimeoutMs: [timeout, 2 * timeout)."""
        t = self.config.election_timeout_ms
        return t + self.rng.randrange(max(t, 1))

    def random_backoff_ms(self) -> int:
        return self.rng.randint(0, max(self.config.election_backoff_max_ms, 1))

    # --- transitions (each persists before it takes effect) ---------------------------------------
    def _set(self, state: EpochState) -> None:
        before = self.election()
        self.state = state
        after = self.election()
        if after != before:
            self.store.write(after)

    def initialize(self, log_end_epoch: int, now_ms: int) -> None:
        """Kafka's QuorumState.initialize: resume from the stored election (or a log in a later epoch)."""
        stored = self.store.read() or ElectionState(0)
        self.state = UnattachedState(stored.epoch, stored.voted_id, now_ms + self.random_election_timeout_ms())
        if log_end_epoch > stored.epoch:
            # The log is ahead of the stored state (Kafka: the state file was lost): start from the log.
            self._set(UnattachedState(log_end_epoch, -1, now_ms + self.random_election_timeout_ms()))
        elif stored.leader_id == self.local_id and self.is_voter:
            # Was the leader: resign, let the election timer run (Kafka's ResignedState on start).
            self.state = ResignedState(stored.epoch, now_ms + self.random_election_timeout_ms(), [], set())
        elif stored.has_leader and stored.leader_id in self.config.voters:
            self.state = FollowerState(stored.epoch, stored.leader_id, stored.voted_id,
                                       now_ms + self.config.fetch_timeout_ms)

    def to_unattached(self, epoch: int, now_ms: int, voted_id: int = -1) -> None:
        self._set(UnattachedState(epoch, voted_id, now_ms + self.random_election_timeout_ms()))

    def to_unattached_voted(self, candidate_id: int, now_ms: int) -> None:
        self._set(UnattachedState(self.epoch, candidate_id, now_ms + self.random_election_timeout_ms()))

    def to_follower(self, epoch: int, leader_id: int, now_ms: int) -> None:
        voted = self.voted_id() if epoch == self.epoch else -1
        self._set(FollowerState(epoch, leader_id, voted, now_ms + self.config.fetch_timeout_ms,
                                update_voter_deadline_ms=now_ms + UPDATE_VOTER_PERIOD_FACTOR * self.config.fetch_timeout_ms))

    def to_prospective(self, now_ms: int) -> None:
        s = self.state
        leader = s.leader_id if isinstance(s, FollowerState) else (s.leader_id if isinstance(s, ProspectiveState) else -1)
        if isinstance(s, LeaderState | ResignedState):
            leader = self.local_id
        self._set(ProspectiveState(self.epoch, self.voted_id(), leader, now_ms + self.random_election_timeout_ms()))

    def to_candidate(self, now_ms: int) -> None:
        self._set(CandidateState(self.epoch + 1, now_ms + self.random_election_timeout_ms(), {self.local_id}))

    def to_leader(self, epoch_start_offset: int, now_ms: int) -> LeaderState:
        s = self.state
        assert isinstance(s, CandidateState)
        states = {v: ReplicaState(v) for v in self.config.voters}
        leader = LeaderState(s.epoch, epoch_start_offset, set(s.granted), states,
                             now_ms + self.config.check_quorum_timeout_ms,
                             begin_epoch_unacked={v for v in self.config.voters if v != self.local_id})
        self._set(leader)
        return leader

    def to_resigned(self, preferred_successors: list[int], now_ms: int) -> None:
        self._set(ResignedState(self.epoch, now_ms + self.random_election_timeout_ms(), preferred_successors,
                                set(preferred_successors)))
