"""Incremental fetch sessions (KIP-227): Kafka's FetchSession, FetchSessionCache and FetchManager.

A fetcher that sends `session_id=0, epoch=0` asks for a full fetch *and* a new session; the broker
answers with a session id (or 0 when its cache is full). Later requests carry that id and the next
epoch and list only the partitions that changed (added/altered) plus `forgotten_topics_data`; the
broker answers with only the partitions whose data or offsets changed since the last response.
`epoch=-1` is a sessionless full fetch (and closes the given session).

Pure state machine: no asyncio, no I/O. The fetch handler asks `FetchManager.new_context(...)`
which partitions to read, reads them, and calls `context.update_and_generate_response(...)`.
"""

from __future__ import annotations

import random
import uuid
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, replace

from kbroker.protocol.errors import ErrorCode

INITIAL_EPOCH = 0
NO_REPLICA_HIGH_WATERMARK = 2**63 - 1
FINAL_EPOCH = -1
INVALID_SESSION_ID = 0
ZERO_UUID = uuid.UUID(int=0)

# The current metadata's name for a topic id, None when the id is unknown.
TopicNameLookup = Callable[[uuid.UUID], str | None]

# Kafka's FetchManager evicts an unprivileged session only if it was idle this long or is smaller
# than the one that wants its slot (KIP-227 eviction rules).
SESSION_EVICTION_MS = 120_000


def next_epoch(epoch: int) -> int:
    """Session epochs wrap from Int.MAX to 1 (0 means 'new session', -1 'final')."""
    return 1 if epoch >= 0x7FFFFFFF else epoch + 1


@dataclass(slots=True)
class FetchPartitionRequest:
    """One partition as a Fetch request (or the session) asks for it.

    `key` is `(topic_name, partition)` for name-based fetches (v<13) and `(topic_id, partition)`
    for topic-id fetches (v13+). `topic` is the resolved name ('' for an unknown topic id).
    """

    key: Hashable
    topic: str
    topic_id: uuid.UUID
    partition: int
    fetch_offset: int
    max_bytes: int
    log_start_offset: int = -1
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    # A follower's own HW (Fetch v18, KIP-1166); the default means "not sent".
    replica_high_watermark: int = 2**63 - 1


@dataclass(slots=True)
class PartitionResult:
    """What the read produced for one partition; `records` is None or a list of parts."""

    error: ErrorCode
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: object = None
    records_size: int = 0
    aborted_transactions: list[tuple[int, int]] | None = None
    preferred_read_replica: int = -1
    # (epoch, end offset) for a follower whose log diverges from the leader's (KIP-595, Fetch v12+).
    diverging_epoch: tuple[int, int] | None = None


class CachedPartition:
    """A session's memory of one partition: what was asked and what was last sent."""

    __slots__ = ("req", "high_watermark", "last_stable_offset", "log_start_offset_sent")

    def __init__(self, req: FetchPartitionRequest) -> None:
        self.req = req
        # -1 sentinels: a newly added partition is always in the next response.
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset_sent = -1

    def must_respond(self, result: PartitionResult) -> bool:
        """Update the cached values from `result`; True if the client must see this partition."""
        must = result.records_size > 0 or result.error != ErrorCode.NONE
        if result.high_watermark != self.high_watermark:
            self.high_watermark = result.high_watermark
            must = True
        if result.last_stable_offset != self.last_stable_offset:
            self.last_stable_offset = result.last_stable_offset
            must = True
        if result.log_start_offset != self.log_start_offset_sent:
            self.log_start_offset_sent = result.log_start_offset
            must = True
        if result.preferred_read_replica != -1 or result.diverging_epoch is not None:
            must = True
        return must


class FetchSession:
    __slots__ = ("id", "privileged", "partitions", "uses_topic_ids", "last_used_ms", "epoch")

    def __init__(self, session_id: int, privileged: bool, uses_topic_ids: bool, now_ms: int) -> None:
        self.id = session_id
        self.privileged = privileged
        self.partitions: OrderedDict[Hashable, CachedPartition] = OrderedDict()
        self.uses_topic_ids = uses_topic_ids
        self.last_used_ms = now_ms
        self.epoch = next_epoch(INITIAL_EPOCH)

    def __len__(self) -> int:
        return len(self.partitions)

    def update(self, fetch_data: Iterable[FetchPartitionRequest], to_forget: Iterable[Hashable]) -> None:
        """Apply an incremental request: added or changed partitions replace their entry."""
        for req in fetch_data:
            cached = self.partitions.get(req.key)
            if cached is None:
                self.partitions[req.key] = CachedPartition(req)
            else:
                cached.req = req
        for key in to_forget:
            self.partitions.pop(key, None)


class FetchSessionCache:
    """At most `max_slots` sessions (`max.incremental.fetch.session.cache.slots`)."""

    def __init__(self, max_slots: int, time_ms: Callable[[], int], rng: random.Random | None = None) -> None:
        self.max_slots = max_slots
        self.time_ms = time_ms
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()  # least recently used first
        self._rng = rng or random.Random()

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def touch(self, session: FetchSession) -> None:
        session.last_used_ms = self.time_ms()
        self._sessions.move_to_end(session.id)

    def remove(self, session_id: int) -> FetchSession | None:
        return self._sessions.pop(session_id, None)

    def maybe_create(self, privileged: bool, uses_topic_ids: bool, size: int) -> FetchSession | None:
        """A new session, if a slot is free or can be taken from an evictable session."""
        if self.max_slots <= 0:
            return None
        if len(self._sessions) >= self.max_slots and not self._try_evict(privileged, size):
            return None
        while True:
            sid = self._rng.randint(1, 0x7FFFFFFF)
            if sid not in self._sessions:
                break
        session = FetchSession(sid, privileged, uses_topic_ids, self.time_ms())
        self._sessions[sid] = session
        return session

    def _try_evict(self, privileged: bool, size: int) -> bool:
        now = self.time_ms()
        # A stale session goes first, whatever its size or privilege. Sessions are kept least
        # recently used first, so only the first one can be stale if any is.
        oldest = next(iter(self._sessions.values()))
        if now - oldest.last_used_ms > SESSION_EVICTION_MS:
            del self._sessions[oldest.id]
            return True
        # Otherwise a follower's session may replace a consumer's; a bigger session a smaller one.
        victim: FetchSession | None = None
        for s in self._sessions.values():
            if s.privileged and not privileged:
                continue
            if (privileged and not s.privileged) or len(s) < size:
                victim = s
                break
        if victim is None:
            return False
        del self._sessions[victim.id]
        return True


class FetchContext(ABC):
    """How one Fetch request relates to sessions; see the subclasses."""

    error: ErrorCode = ErrorCode.NONE

    @abstractmethod
    def partitions_to_read(self) -> list[FetchPartitionRequest]:
        """The partitions this request reads."""

    @abstractmethod
    def update_and_generate_response(
        self, results: dict[Hashable, PartitionResult]
    ) -> tuple[int, list[tuple[FetchPartitionRequest, PartitionResult]]]:
        """(session id for the response, partitions to send in order)."""


class SessionErrorContext(FetchContext):
    """The request referred to a missing session or the wrong epoch: top-level error, no data."""

    def __init__(self, error: ErrorCode) -> None:
        self.error = error

    def partitions_to_read(self) -> list[FetchPartitionRequest]:
        return []

    def update_and_generate_response(
        self, results: dict[Hashable, PartitionResult]
    ) -> tuple[int, list[tuple[FetchPartitionRequest, PartitionResult]]]:
        return INVALID_SESSION_ID, []


class SessionlessFetchContext(FetchContext):
    """A full fetch without a session (v<7, epoch -1, or no slot): every requested partition."""

    def __init__(self, fetch_data: list[FetchPartitionRequest]) -> None:
        self._data = fetch_data

    def partitions_to_read(self) -> list[FetchPartitionRequest]:
        return self._data

    def update_and_generate_response(
        self, results: dict[Hashable, PartitionResult]
    ) -> tuple[int, list[tuple[FetchPartitionRequest, PartitionResult]]]:
        return INVALID_SESSION_ID, [(r, results[r.key]) for r in self._data if r.key in results]


class FullFetchContext(FetchContext):
    """A full fetch that opens a new session (if the cache grants one) when the response is built."""

    def __init__(
        self,
        cache: FetchSessionCache,
        fetch_data: list[FetchPartitionRequest],
        privileged: bool,
        uses_topic_ids: bool,
    ) -> None:
        self._cache = cache
        self._data = fetch_data
        self._privileged = privileged
        self._uses_topic_ids = uses_topic_ids

    def partitions_to_read(self) -> list[FetchPartitionRequest]:
        return self._data

    def update_and_generate_response(
        self, results: dict[Hashable, PartitionResult]
    ) -> tuple[int, list[tuple[FetchPartitionRequest, PartitionResult]]]:
        out = [(r, results[r.key]) for r in self._data if r.key in results]
        session = self._cache.maybe_create(self._privileged, self._uses_topic_ids, len(self._data))
        if session is None:
            return INVALID_SESSION_ID, out
        for req, result in out:
            cached = CachedPartition(req)
            cached.must_respond(result)
            session.partitions[req.key] = cached
        # Partitions that returned nothing (no result) are still part of the session.
        for req in self._data:
            if req.key not in session.partitions:
                session.partitions[req.key] = CachedPartition(req)
        return session.id, out


class IncrementalFetchContext(FetchContext):
    """An incremental fetch on an existing session: read every session partition, send the changed.

    A partition that entered the session by a topic id this broker did not know yet (its metadata
    lagged the fetcher's: a topic just created) is cached with no name. Its name is looked up again at
    every request (Kafka's `CachedPartition.maybeResolveUnknownName`, called from
    `IncrementalFetchContext.foreachPartition`): a follower whose fetch position does not move has no
    reason to send the partition again, so without it the partition answered UNKNOWN_TOPIC_ID for the
    session's whole life and the follower never replicated it (nor rejoined the ISR)."""

    def __init__(self, cache: FetchSessionCache, session: FetchSession,
                 topic_name: TopicNameLookup | None = None) -> None:
        self._cache = cache
        self._session = session
        self._topic_name = topic_name

    def partitions_to_read(self) -> list[FetchPartitionRequest]:
        lookup = self._topic_name
        if lookup is not None and self._session.uses_topic_ids:
            for cached in self._session.partitions.values():
                if not cached.req.topic:
                    name = lookup(cached.req.topic_id)
                    if name:
                        cached.req = replace(cached.req, topic=name)
        return [c.req for c in self._session.partitions.values()]

    def update_and_generate_response(
        self, results: dict[Hashable, PartitionResult]
    ) -> tuple[int, list[tuple[FetchPartitionRequest, PartitionResult]]]:
        session = self._session
        out: list[tuple[FetchPartitionRequest, PartitionResult]] = []
        sent_with_data: list[Hashable] = []
        for key, cached in list(session.partitions.items()):
            result = results.get(key)
            if result is None:
                continue
            if cached.must_respond(result):
                out.append((cached.req, result))
                if result.records_size > 0:
                    sent_with_data.append(key)
        # Partitions that returned data move to the end of the session so that, under a response
        # byte limit, the others are read first next time (Kafka's fairness rotation).
        for key in sent_with_data:
            session.partitions.move_to_end(key)
        return session.id, out


class FetchManager:
    """Builds a `FetchContext` for each Fetch request from the session cache (Kafka's FetchManager)."""

    def __init__(self, cache: FetchSessionCache) -> None:
        self.cache = cache

    def new_context(
        self,
        version: int,
        session_id: int,
        epoch: int,
        fetch_data: list[FetchPartitionRequest],
        to_forget: list[Hashable],
        is_follower: bool = False,
        topic_name: TopicNameLookup | None = None,
    ) -> FetchContext:
        """`topic_name`: the current metadata's name of a topic id (None if unknown), to resolve
        session partitions cached under an id that was unknown when they were added."""
        uses_topic_ids = version >= 13
        if version < 7:
            return SessionlessFetchContext(fetch_data)
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            # A full request closes the session it names (the client gave up on it).
            if session_id != INVALID_SESSION_ID:
                self.cache.remove(session_id)
            if epoch == FINAL_EPOCH:
                return SessionlessFetchContext(fetch_data)
            return FullFetchContext(self.cache, fetch_data, is_follower, uses_topic_ids)
        session = self.cache.get(session_id)
        if session is None:
            return SessionErrorContext(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return SessionErrorContext(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_topic_ids:
            # The client switched between name- and id-based fetches inside one session.
            return SessionErrorContext(ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
        session.update(fetch_data, to_forget)
        session.epoch = next_epoch(session.epoch)
        self.cache.touch(session)
        return IncrementalFetchContext(self.cache, session, topic_name)
