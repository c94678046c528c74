"""The classic consumer group: its states, the legal transitions between them, and its members.

Kafka's `ClassicGroup` / `ClassicGroupMember` / `ClassicGroupState`. This module holds data and the
rules that only look at one group (protocol selection, member validation, offset-commit validation);
the rebalance protocol that moves a group between states lives in `kbroker.coord.classic_protocol`.

State machine (every transition not in `VALID_PREVIOUS_STATES` raises `IllegalGroupStateError`)::

    Empty --join--> PreparingRebalance --all joined / join timeout--> CompletingRebalance
      ^                 ^        |                                       |   (leader's SyncGroup)
      |                 |        +--no members left--> Empty             v
      |                 +-------member change / leave / expiry------- Stable
      +--> Dead (from every state: group deleted, offsets expired, partition unloaded)

Pure: no asyncio, no I/O. Must not import kbroker.net or kbroker.api.
"""

from __future__ import annotations

import enum
import struct
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from kbroker.protocol.errors import ErrorCode, KafkaError

CONSUMER_PROTOCOL_TYPE = "consumer"
UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


S = GroupState

# Kafka's ClassicGroupState.validPreviousStates: the only way into each state.
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    S.EMPTY: frozenset({S.PREPARING_REBALANCE}),
    S.PREPARING_REBALANCE: frozenset({S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY}),
    S.COMPLETING_REBALANCE: frozenset({S.PREPARING_REBALANCE}),
    S.STABLE: frozenset({S.COMPLETING_REBALANCE}),
    S.DEAD: frozenset({S.STABLE, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.EMPTY, S.DEAD}),
}


class IllegalGroupStateError(RuntimeError):
    """A transition the state table forbids: a coordinator bug, never a client error."""


@dataclass(slots=True)
class JoinResult:
    """What a JoinGroup request is answered with (the api layer encodes it per version)."""

    error: ErrorCode
    member_id: str
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    # (member id, group instance id, protocol metadata): only the leader gets the list.
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass(slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


def group_error(code: ErrorCode, message: str | None = None) -> KafkaError:
    return KafkaError(message, error_code=code)


@dataclass(eq=False)
class ClassicGroupMember:
    """One member of a classic group (Kafka's ClassicGroupMember)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    # Callbacks of the JoinGroup / SyncGroup request this member is waiting in, if any.
    await_join: Callable[[JoinResult], None] | None = None
    await_sync: Callable[[SyncResult], None] | None = None
    is_new: bool = False

    @property
    def is_awaiting_join(self) -> bool:
        return self.await_join is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.await_sync is not None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Same protocols with the same metadata, in the same order (a no-op rejoin)."""
        return self.protocols == protocols

    def has_satisfied_heartbeat(self) -> bool:
        """Kafka: a member blocked in a JoinGroup/SyncGroup is alive, unless it is a new member
        that has not completed a join (it may be expired while waiting)."""
        if self.is_new:
            return False
        return self.is_awaiting_join or self.is_awaiting_sync

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise IllegalGroupStateError(f"member {self.member_id} supports none of {candidates}")


@dataclass(eq=False)
class ClassicGroup:
    """A classic group: members, generation, leader, selected protocol."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int = -1
    previous_state: GroupState | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    members: dict[str, ClassicGroupMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: set[str] = field(default_factory=set)  # MEMBER_ID_REQUIRED issued, not rejoined
    pending_sync_members: set[str] = field(default_factory=set)
    supported_protocols: Counter[str] = field(default_factory=Counter)
    new_member_added: bool = False
    subscribed_topics: set[str] | None = None

    # -- state -------------------------------------------------------------------------------------

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise IllegalGroupStateError(
                f"Group {self.group_id} should be in one of {sorted(map(str, VALID_PREVIOUS_STATES[target]))} "
                f"before moving to {target}, but is {self.state}"
            )
        self.previous_state = self.state
        self.state = target
        self.state_timestamp_ms = now_ms

    def is_in_state(self, *states: GroupState) -> bool:
        return self.state in states

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS_STATES[S.PREPARING_REBALANCE]

    # -- members -----------------------------------------------------------------------------------

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def member(self, member_id: str) -> ClassicGroupMember:
        return self.members[member_id]

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def is_empty(self) -> bool:
        return not self.members

    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.is_awaiting_join)

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join() and not self.pending_members

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def add(self, member: ClassicGroupMember, await_join: Callable[[JoinResult], None] | None = None) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.supported_protocols.update(member.protocol_names())
        member.await_join = await_join

    def remove(self, member_id: str) -> ClassicGroupMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self.supported_protocols.subtract(member.protocol_names())
        self.supported_protocols = +self.supported_protocols
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        self.pending_sync_members.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def update_member(self, member: ClassicGroupMember, protocols: list[tuple[str, bytes]],
                      rebalance_timeout_ms: int, session_timeout_ms: int,
                      await_join: Callable[[JoinResult], None] | None) -> None:
        self.supported_protocols.subtract(member.protocol_names())
        self.supported_protocols = +self.supported_protocols
        self.supported_protocols.update(name for name, _ in protocols)
        member.protocols = protocols
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        member.await_join = await_join

    def replace_static_member(self, instance_id: str, old_member_id: str, new_member_id: str) -> ClassicGroupMember:
        """A static member restarted: it keeps its place under a new member id; the old id is fenced."""
        member = self.members.pop(old_member_id)
        fenced = ErrorCode.FENCED_INSTANCE_ID
        if member.await_join is not None:
            member.await_join(JoinResult(fenced, old_member_id))
            member.await_join = None
        if member.await_sync is not None:
            member.await_sync(SyncResult(fenced))
            member.await_sync = None
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        self.static_members[instance_id] = new_member_id
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
        return member

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick a member that did; False when none did."""
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.is_awaiting_join:
            return True
        for member in self.members.values():
            if member.is_awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    # -- protocols ---------------------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, count in self.supported_protocols.items() if count == n}

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        names = {name for name, _ in protocols}
        if not self.members:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and bool(names & self.candidate_protocols())

    def select_protocol(self) -> str:
        """Every member votes for its most preferred candidate; most votes wins (ties: the
        leader's preference order, then name)."""
        candidates = self.candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        leader = self.members.get(self.leader_id or "")
        order = {name: i for i, name in enumerate(leader.protocol_names())} if leader else {}
        return min(votes, key=lambda p: (-votes[p], order.get(p, len(order)), p))

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self._compute_subscribed_topics()
            self.transition_to(S.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = set()
            self.transition_to(S.EMPTY, now_ms)
        self.pending_sync_members.clear()

    def _compute_subscribed_topics(self) -> set[str] | None:
        """Topics of the consumer protocol subscriptions (None when unknown: other protocol types)."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            parsed = parse_consumer_subscription_topics(member.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics.update(parsed)
        return topics

    def is_subscribed_to_topic(self, topic: str) -> bool:
        if self.subscribed_topics is None:
            return bool(self.members)
        return topic in self.subscribed_topics

    # -- validation shared by the request paths ----------------------------------------------------

    def validate_member(self, member_id: str, instance_id: str | None) -> None:
        """UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID as Kafka's ClassicGroup.validateMember."""
        if instance_id is not None:
            existing = self.static_members.get(instance_id)
            if existing is None:
                raise group_error(ErrorCode.UNKNOWN_MEMBER_ID)
            if existing != member_id:
                raise group_error(ErrorCode.FENCED_INSTANCE_ID)
        elif member_id not in self.members:
            raise group_error(ErrorCode.UNKNOWN_MEMBER_ID)

    def validate_offset_commit(self, member_id: str, instance_id: str | None, generation_id: int) -> None:
        if self.state == S.DEAD:
            raise group_error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if generation_id < 0 and self.state == S.EMPTY:
            # Admin clients and consumers with manual assignment commit with generation -1:
            # allowed while the group has no members.
            return
        if generation_id >= 0 or member_id or instance_id is not None:
            self.validate_member(member_id, instance_id)
            if generation_id != self.generation_id:
                raise group_error(ErrorCode.ILLEGAL_GENERATION)
        elif self.state != S.EMPTY:
            raise group_error(ErrorCode.UNKNOWN_MEMBER_ID)
        if self.state == S.COMPLETING_REBALANCE:
            # The member has the new generation from its JoinGroup response but no assignment yet.
            raise group_error(ErrorCode.REBALANCE_IN_PROGRESS)


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def parse_consumer_subscription_topics(metadata: bytes) -> list[str] | None:
    """Topics of a ConsumerProtocolSubscription (any version: the topics array leads every version)."""
    try:
        (version,) = _I16.unpack_from(metadata, 0)
        if version < 0:
            return None
        (n,) = _I32.unpack_from(metadata, 2)
        pos = 6
        topics = []
        for _ in range(n):
            (length,) = _I16.unpack_from(metadata, pos)
            pos += 2
            topics.append(bytes(metadata[pos : pos + length]).decode())
            pos += length
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
