"""The client side of incremental fetch sessions (KIP-227) for replica fetchers (Kafka's `FetchSessionHandler`).

Why its own module: a follower fetching hundreds of partitions from one leader should not send (and
have the leader re-check) every partition every 500 ms. With a session the leader remembers the
partitions and their fetch positions; each later request lists only what changed since the previous
one (a new fetch offset, leader epoch, last fetched epoch or log start offset, and added partitions)
plus the partitions to forget, and the leader answers only the partitions with news.

Protocol (Fetch v7+): the first request has session id 0 and epoch 0 (INITIAL: "full fetch, open a
session"); the response's session id (0: the leader has no room, so every request stays full) and
epoch 1 are used next, the epoch growing by one per request (wrapping to 1). A top-level
FETCH_SESSION_ID_NOT_FOUND drops the session; any other error (INVALID_FETCH_SESSION_EPOCH,
FETCH_SESSION_TOPIC_ID_ERROR...) closes it and opens a new one with a full request (same id, epoch
0), as Kafka's handler does.

Sans-IO: the fetcher asks `build(wanted)` for what to send and hands the response's error and session
id to `handle_response`.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass

from kbroker.protocol.errors import ErrorCode

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= 0x7FFFFFFF else epoch + 1


@dataclass(frozen=True, slots=True)
class SessionPartition:
    """What the leader's session holds for one partition (what a changed value must be re-sent for)."""

    fetch_offset: int
    current_leader_epoch: int
    last_fetched_epoch: int
    log_start_offset: int
    high_watermark: int = -1  # sent from Fetch v18 (KIP-1166): a new HW is re-sent, else the leader's
    #                           wake-up rule would see a stale one


@dataclass(frozen=True, slots=True)
class FetchRequestData:
    """One request's session fields and contents."""

    session_id: int
    session_epoch: int
    to_send: tuple[Hashable, ...]  # partitions listed in the request (all of them when full)
    to_forget: tuple[Hashable, ...]  # partitions dropped from the session (incremental only)
    full: bool


class FetchSessionHandler:
    """The session this fetcher holds with one leader."""

    def __init__(self, *, enabled: bool = True) -> None:
        self.enabled = enabled
        self.session_id = INVALID_SESSION_ID
        self.next_epoch = INITIAL_EPOCH
        self._session: dict[Hashable, SessionPartition] = {}
        self._pending: dict[Hashable, SessionPartition] | None = None

    @property
    def partitions(self) -> Mapping[Hashable, SessionPartition]:
        return self._session

    def build(self, wanted: Mapping[Hashable, SessionPartition]) -> FetchRequestData:
        """The request for `wanted` (every partition the fetcher wants to fetch now)."""
        self._pending = dict(wanted)
        if not self.enabled:
            return FetchRequestData(INVALID_SESSION_ID, FINAL_EPOCH, tuple(wanted), (), True)
        if self.next_epoch == INITIAL_EPOCH:
            return FetchRequestData(self.session_id, INITIAL_EPOCH, tuple(wanted), (), True)
        to_send = tuple(k for k, v in wanted.items() if self._session.get(k) != v)
        to_forget = tuple(k for k in self._session if k not in wanted)
        return FetchRequestData(self.session_id, self.next_epoch, to_send, to_forget, False)

    def handle_response(self, error: ErrorCode, response_session_id: int) -> bool:
        """Apply the response's top-level error and session id; False when the response is an error
        (the partitions in it are then not to be trusted: the next request is a full one)."""
        pending, self._pending = self._pending, None
        if not self.enabled:
            return error == ErrorCode.NONE
        if error != ErrorCode.NONE:
            if error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
                self.session_id = INVALID_SESSION_ID
            self.next_epoch = INITIAL_EPOCH  # close it and ask for a new one with a full fetch
            self._session.clear()
            return False
        if pending is not None:
            self._session = pending
        if self.next_epoch == INITIAL_EPOCH:
            if response_session_id == INVALID_SESSION_ID:
                # No session granted: stay full (epoch 0 again asks for one next time).
                self.session_id = INVALID_SESSION_ID
                self._session.clear()
                return True
            self.session_id = response_session_id
            self.next_epoch = next_epoch(INITIAL_EPOCH)
            return True
        self.next_epoch = next_epoch(self.next_epoch)
        return True

    def reset(self) -> None:
        """A new connection: the leader may have lost the session; start over with a full fetch."""
        self.next_epoch = INITIAL_EPOCH
        self._session.clear()
        self._pending = None


__all__ = ["FetchRequestData", "FetchSessionHandler", "SessionPartition"]
