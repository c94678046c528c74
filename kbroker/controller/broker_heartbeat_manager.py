"""Broker sessions on the active controller: Kafka's `BrokerHeartbeatManager`.

Soft state, never written to the log: when each broker was last heard from, the metadata offset it
reported, and the offset at which it entered controlled shutdown. A new active controller starts it
afresh from the image (every registered broker gets a full session, `ClusterControlManager.activate`).

Decides a broker's next state from a heartbeat (`calculate_next_broker_state`, Kafka's table):

    FENCED               want_shut_down -> SHUTDOWN_NOW; else caught up to its registration -> UNFENCED
    UNFENCED             want_fence -> FENCED (or SHUTDOWN_NOW with want_shut_down);
                         want_shut_down -> CONTROLLED_SHUTDOWN while it leads partitions, else SHUTDOWN_NOW
    CONTROLLED_SHUTDOWN  still leads partitions -> stays; else SHUTDOWN_NOW once the lowest metadata
                         offset of the active brokers has reached its controlled-shutdown offset

and which unfenced broker's session has expired (`find_one_stale_broker`, the least recently heard
first; `broker.session.timeout.ms`, default 9000). Times are milliseconds from an injected clock.

Sans-IO; imports nothing from kbroker but the clock type.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kbroker.clock import Clock

DEFAULT_SESSION_TIMEOUT_MS = 9000  # broker.session.timeout.ms
DEFAULT_HEARTBEAT_INTERVAL_MS = 2000  # broker.heartbeat.interval.ms


class BrokerControlState(enum.Enum):
    """Kafka's `BrokerControlState`."""

    FENCED = (True, False, False)
    UNFENCED = (False, False, False)
    CONTROLLED_SHUTDOWN = (False, True, False)
    SHUTDOWN_NOW = (True, False, True)

    @property
    def fenced(self) -> bool:
        return self.value[0]

    @property
    def in_controlled_shutdown(self) -> bool:
        return self.value[1]

    @property
    def should_shut_down(self) -> bool:
        return self.value[2]


@dataclass(frozen=True, slots=True)
class BrokerControlStates:
    current: BrokerControlState
    next: BrokerControlState


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatReply:
    """Kafka's `BrokerHeartbeatReply`: what the BrokerHeartbeat response carries."""

    is_caught_up: bool
    is_fenced: bool
    in_controlled_shutdown: bool
    should_shut_down: bool


@dataclass(slots=True)
class BrokerHeartbeatState:
    id: int
    last_contact_ms: int = 0
    metadata_offset: int = -1
    controlled_shutdown_offset: int = -1
    fenced: bool = True

    @property
    def shutting_down(self) -> bool:
        return self.controlled_shutdown_offset >= 0


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """The fields of a BrokerHeartbeat the state table reads."""

    current_metadata_offset: int
    want_fence: bool
    want_shut_down: bool


class BrokerHeartbeatManager:
    def __init__(self, clock: Clock, session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS) -> None:
        self.clock = clock
        self.session_timeout_ms = session_timeout_ms
        self.brokers: dict[int, BrokerHeartbeatState] = {}

    # -- sessions ------------------------------------------------------------------------------------

    def register(self, broker_id: int, fenced: bool) -> None:
        """A (re-)registered broker: a fresh session (Kafka keeps the metadata offset only when the
        fencing state changes)."""
        state = self.brokers.get(broker_id)
        offset = -1
        if state is None:
            state = self.brokers[broker_id] = BrokerHeartbeatState(broker_id)
        elif state.fenced != fenced:
            offset = state.metadata_offset
        self.touch(broker_id, fenced, offset)

    def touch(self, broker_id: int, fenced: bool, metadata_offset: int) -> None:
        state = self.brokers[broker_id]
        state.last_contact_ms = self.clock()
        state.metadata_offset = metadata_offset
        state.fenced = fenced
        if fenced:
            state.controlled_shutdown_offset = -1

    def expire_session(self, broker_id: int) -> None:
        """End a broker's session now (its last contact one session ago): it is stale, and another
        incarnation may register in its place."""
        state = self.brokers.get(broker_id)
        if state is not None:
            state.last_contact_ms = self.clock() - self.session_timeout_ms - 1

    def fence(self, broker_id: int) -> None:
        state = self.brokers.get(broker_id)
        if state is not None:
            state.fenced = True
            state.controlled_shutdown_offset = -1

    def remove(self, broker_id: int) -> None:
        self.brokers.pop(broker_id, None)

    def has_valid_session(self, broker_id: int) -> bool:
        state = self.brokers.get(broker_id)
        if state is None or state.fenced:
            return False
        return state.last_contact_ms + self.session_timeout_ms >= self.clock()

    def find_one_stale_broker(self) -> int | None:
        """The unfenced broker heard from least recently, if its session has expired."""
        unfenced = [s for s in self.brokers.values() if not s.fenced]
        if not unfenced:
            return None
        oldest = min(unfenced, key=lambda s: (s.last_contact_ms, s.id))
        return None if self.has_valid_session(oldest.id) else oldest.id

    def next_check_time_ms(self) -> int | None:
        """When the next session can expire (None: no unfenced broker)."""
        unfenced = [s.last_contact_ms for s in self.brokers.values() if not s.fenced]
        return None if not unfenced else min(unfenced) + self.session_timeout_ms

    # -- controlled shutdown ---------------------------------------------------------------------------

    def lowest_active_offset(self) -> int:
        """The lowest metadata offset reported by an unfenced broker not shutting down."""
        active = [s.metadata_offset for s in self.brokers.values() if not s.fenced and not s.shutting_down]
        return min(active) if active else 2**63 - 1

    def maybe_update_controlled_shutdown_offset(self, broker_id: int, offset: int) -> None:
        state = self.brokers[broker_id]
        if state.fenced:
            raise RuntimeError("Fenced brokers cannot enter controlled shutdown.")
        if state.controlled_shutdown_offset < 0:
            state.controlled_shutdown_offset = offset

    def controlled_shutdown_offset(self, broker_id: int) -> int | None:
        state = self.brokers.get(broker_id)
        return None if state is None or state.controlled_shutdown_offset < 0 else state.controlled_shutdown_offset

    # -- the state table ------------------------------------------------------------------------------

    def current_broker_state(self, broker_id: int) -> BrokerControlState:
        state = self.brokers[broker_id]
        if state.shutting_down:
            return BrokerControlState.CONTROLLED_SHUTDOWN
        return BrokerControlState.FENCED if state.fenced else BrokerControlState.UNFENCED

    def calculate_next_broker_state(
        self, broker_id: int, request: HeartbeatRequest, register_broker_record_offset: int, has_leaderships: bool
    ) -> BrokerControlStates:
        current = self.current_broker_state(broker_id)
        S = BrokerControlState
        if current is S.FENCED:
            if request.want_shut_down:
                return BrokerControlStates(current, S.SHUTDOWN_NOW)
            if not request.want_fence and request.current_metadata_offset >= register_broker_record_offset:
                return BrokerControlStates(current, S.UNFENCED)
            return BrokerControlStates(current, S.FENCED)
        if current is S.UNFENCED:
            if request.want_fence:
                return BrokerControlStates(current, S.SHUTDOWN_NOW if request.want_shut_down else S.FENCED)
            if request.want_shut_down:
                return BrokerControlStates(current, S.CONTROLLED_SHUTDOWN if has_leaderships else S.SHUTDOWN_NOW)
            return BrokerControlStates(current, S.UNFENCED)
        # CONTROLLED_SHUTDOWN
        if has_leaderships:
            return BrokerControlStates(current, S.CONTROLLED_SHUTDOWN)
        offset = self.brokers[broker_id].controlled_shutdown_offset
        if offset <= self.lowest_active_offset():
            return BrokerControlStates(current, S.SHUTDOWN_NOW)
        return BrokerControlStates(current, S.CONTROLLED_SHUTDOWN)
