"""Share sessions: Kafka's `ShareSessionCache` (KIP-932), sans-IO.

A share consumer keeps one share session per broker, keyed by (group id, member id). The session
remembers which topic partitions the member fetches, so a ShareFetch only names what changed; its
epoch makes requests ordered:

- epoch 0 (`INITIAL_EPOCH`) opens a session (an existing one for the same key is replaced: its
  member's records are released by the caller); acknowledgements are not allowed in it;
- epoch -1 (`FINAL_EPOCH`) closes the session after its acknowledgements (a ShareFetch with -1 fetches
  nothing);
- any other epoch must be the session's next expected epoch (INVALID_SHARE_SESSION_EPOCH), of a session
  that exists (SHARE_SESSION_NOT_FOUND); after each request the expected epoch goes up by one,
  wrapping from Integer.MAX_VALUE to 1.

At most `group.share.max.share.sessions` sessions: a new one beyond it answers
SHARE_SESSION_LIMIT_REACHED.

A session remembers the client connection that opened it (Kafka's `connectionIdToSessionMap`): when
that connection closes, `disconnected` removes the session if it is still there (the client did not
close it with epoch -1) and says whether the group has no session left on this broker, Kafka's
`ShareGroupListener.onMemberLeave` / `onGroupEmpty` via its `ClientConnectionDisconnectListener`: a share
consumer that dies releases its records on every broker it fetched from, not only at the acquisition
locks' expiry.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from kbroker.protocol.errors import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INT_MAX = 2**31 - 1

TopicIdPartition = tuple[uuid.UUID, int]


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= INT_MAX else epoch + 1


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    epoch: int = 1  # the epoch the next request must carry
    partitions: dict[TopicIdPartition, None] = field(default_factory=dict)  # insertion-ordered set


@dataclass(slots=True)
class ShareSessionCache:
    max_sessions: int = 2000
    sessions: dict[tuple[str, str], ShareSession] = field(default_factory=dict)
    # client connection id -> the session it opened last
    connections: dict[str, ShareSession] = field(default_factory=dict)

    def open(self, group_id: str, member_id: str,
             connection_id: str = "") -> tuple[ErrorCode, ShareSession | None, ShareSession | None]:
        """Epoch 0: (error, new session, the session it replaced)."""
        key = (group_id, member_id)
        old = self.sessions.pop(key, None)
        if len(self.sessions) >= self.max_sessions:
            if old is not None:
                self.sessions[key] = old
            return ErrorCode.SHARE_SESSION_LIMIT_REACHED, None, None
        session = self.sessions[key] = ShareSession(group_id, member_id)
        if connection_id:
            self.connections[connection_id] = session
        return ErrorCode.NONE, session, old

    def disconnected(self, connection_id: str) -> tuple[ShareSession | None, str | None]:
        """The client connection closed: (the session it opened, removed if still open; the group id if
        the group has no session left here)."""
        opened = self.connections.pop(connection_id, None)
        if opened is None:
            return None, None
        key = (opened.group_id, opened.member_id)
        # Only that very session: one the member opened since on another connection stays.
        session = self.sessions.pop(key) if self.sessions.get(key) is opened else None
        empty = not any(g == key[0] for g, _m in self.sessions)
        return session, key[0] if empty else None

    def get(self, group_id: str, member_id: str, epoch: int) -> tuple[ErrorCode, ShareSession | None]:
        """A request with epoch != 0 (-1 included): the session it continues, checked."""
        session = self.sessions.get((group_id, member_id))
        if session is None:
            return ErrorCode.SHARE_SESSION_NOT_FOUND, None
        if epoch != FINAL_EPOCH and epoch != session.epoch:
            return ErrorCode.INVALID_SHARE_SESSION_EPOCH, None
        return ErrorCode.NONE, session

    def is_current(self, session: ShareSession) -> bool:
        """The session is still open (not closed, replaced or removed with its member)."""
        return self.sessions.get((session.group_id, session.member_id)) is session

    def advance(self, session: ShareSession) -> None:
        session.epoch = next_epoch(session.epoch)

    def close(self, session: ShareSession) -> None:
        if self.sessions.get((session.group_id, session.member_id)) is session:
            del self.sessions[(session.group_id, session.member_id)]

    def remove_member(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.pop((group_id, member_id), None)
