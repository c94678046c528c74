"""Followers copy their leaders' logs (Kafka's `ReplicaFetcherManager`, `ReplicaFetcherThread`,
`AbstractFetcherThread`).

Why its own module: it is the follower half of replication, the only part of replica/ that opens
connections. `num.replica.fetchers` `ReplicaFetcher`s per source broker (Kafka's
`AbstractFetcherManager`: a partition goes to fetcher `abs(31 * topic.hashCode() + partition) %
num.replica.fetchers` of its leader, Java's `String.hashCode`, so a kbroker follower splits partitions
exactly as a Kafka follower would); each is an asyncio task fetching its partitions from that leader in
one Fetch request, over its own `kbroker.client.NodeConnection` (and so its own fetch session) to the
leader's endpoint for the inter-broker listener (looked up in the metadata image at each connect, so a
leader that re-registered elsewhere is found). `num.replica.fetchers` is dynamic in Kafka
(`resize`: every partition is reassigned, fetchers are rebuilt).

Lag (Kafka's `FetcherLagMetrics`): after each fetch response a partition's lag is
max(0, leader HW - next fetch offset); `ReplicaFetcherManager.max_lag` is Kafka's
`kafka.server:type=ReplicaFetcherManager,name=MaxLag,clientId=Replica`.

Each partition is *Fetching* or *Truncating* (Kafka's `PartitionFetchState`):
- Fetching: Fetch carries the replica id and broker epoch (`replica_state`, v15+, KIP-903; `replica_id`
  before), the current leader epoch (KIP-320) and the epoch of the last batch the follower has
  (`last_fetched_epoch`, v12+). A leader that finds the follower's log diverging from its own answers
  `diverging_epoch` instead of records; the follower truncates to the point
  `kbroker.replica.truncation.offset_truncation_state` gives (by leader epoch, never to the HW,
  KIP-101/KIP-279) and fetches again.
- Truncating: a log with no leader epoch at all, or a leader older than Fetch v12, asks
  OffsetForLeaderEpoch first (Kafka's `maybeTruncate`); a log without epochs truncates to its HW.

Data is appended as follower (offsets, leader epochs, producer ids as the leader wrote them) and the
follower's HW becomes min(leader HW, LEO). Errors: NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH,
UNKNOWN_TOPIC_* and storage errors back the partition off for `replica.fetch.backoff.ms`;
FENCED_LEADER_EPOCH removes it (the metadata will restart it with the new epoch); OFFSET_OUT_OF_RANGE
asks the leader's log end / start offset (ListOffsets) and truncates to it or restarts from the
leader's log start (Kafka's `handleOutOfRangeError`). A connection failure backs the whole fetcher off.

Fetches go through an incremental fetch session (KIP-227, `fetch_session_handler.py`) from Fetch v7:
after the first full request only partitions whose position changed are listed.

Must not import net/, api/ or server/.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import uuid
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from kbroker.client import (
    PLAINTEXT_SECURITY,
    ClientSecurity,
    ConnectionClosedError,
    NodeConnection,
    RequestTimeoutError,
)
from kbroker.log.errors import KafkaStorageError, OffsetOutOfRangeError
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.fetch import FetchRequest, FetchResponse
from kbroker.protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from kbroker.protocol.messages.offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from kbroker.replica.fetch_session_handler import FetchSessionHandler, SessionPartition
from kbroker.replica.replication_quota import UNLIMITED_REPLICA_QUOTA, ReplicaQuota
from kbroker.replica.truncation import offset_truncation_state

if TYPE_CHECKING:
    from kbroker.replica.partition import Partition

log = logging.getLogger(__name__)

FETCH = 1
LIST_OFFSETS = 2
OFFSET_FOR_LEADER_EPOCH = 23
# Fetch v12 brought diverging_epoch (truncation on fetch, KIP-595).
TRUNCATE_ON_FETCH_VERSION = 12

Key = tuple[str, int]
EndpointLookup = Callable[[int], "tuple[str, int] | None"]


def java_string_hash(s: str) -> int:
    """Java's `String.hashCode` (over UTF-16 code units, 32-bit wrap-around), signed."""
    h = 0
    data = s.encode("utf-16-le", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] | data[i + 1] << 8)) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def fetcher_id(topic: str, partition: int, num_fetchers: int) -> int:
    """Kafka's `AbstractFetcherManager.getFetcherId`: `Utils.abs(31 * topic.hashCode() + partition) %
    numFetchers` in 32-bit arithmetic (`Utils.abs(Integer.MIN_VALUE)` is 0)."""
    if num_fetchers <= 1:
        return 0
    v = (31 * java_string_hash(topic) + partition) & 0xFFFFFFFF
    v = v - (1 << 32) if v & 0x80000000 else v
    v = 0 if v == -(1 << 31) else abs(v)
    return v % num_fetchers


def _key(k: Hashable) -> Key:
    assert isinstance(k, tuple)
    return (str(k[0]), int(k[1]))


class FetchState(enum.Enum):
    TRUNCATING = "truncating"
    FETCHING = "fetching"


@dataclass(slots=True)
class PartitionFetchState:
    """Kafka's `PartitionFetchState`."""

    topic_id: uuid.UUID
    fetch_offset: int
    current_leader_epoch: int
    state: FetchState
    last_fetched_epoch: int = -1
    delayed_until: float = 0.0  # loop time before which the partition is not fetched


@dataclass(frozen=True, slots=True)
class InitialFetchState:
    """What `add_fetcher_for_partitions` starts a partition with (Kafka's `InitialFetchState`)."""

    topic_id: uuid.UUID
    leader_id: int
    leader_epoch: int
    fetch_offset: int


@dataclass(frozen=True, slots=True)
class ReplicaFetcherConfig:
    """replica.fetch.* (Kafka's names and defaults)."""

    fetch_wait_max_ms: int = 500
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 1048576
    fetch_response_max_bytes: int = 10485760
    fetch_backoff_ms: int = 1000
    socket_timeout_ms: int = 30000
    # The inter-broker listener's security (inter.broker.listener.name, sasl.mechanism.inter.broker.protocol).
    security: ClientSecurity = PLAINTEXT_SECURITY


class FetcherHost(Protocol):
    """What a fetcher needs from the replica manager."""

    node_id: int

    def follower_partition(self, topic: str, partition: int) -> Partition | None: ...

    def broker_epoch(self) -> int: ...

    def on_follower_high_watermark_moved(self, key: tuple[str, int]) -> None: ...

    def on_replication_bytes_in(self, size: int) -> None: ...


def initial_fetch_offset(partition: Partition) -> int:
    """Kafka's `ReplicaManager.initialFetchOffset`: the LEO when the log has leader epochs (the
    leader finds any divergence), else the HW."""
    log_ = partition.log
    return log_.log_end_offset if log_.leader_epoch_cache.latest_epoch >= 0 else log_.high_watermark


class ReplicaFetcher:
    """Fetches the partitions this broker follows from one leader."""

    def __init__(self, source_broker_id: int, host: FetcherHost, endpoint_lookup: EndpointLookup,
                 config: ReplicaFetcherConfig, *, client_id: str = "", fetcher_id: int = 0) -> None:
        self.source_broker_id = source_broker_id
        self.fetcher_id = fetcher_id
        self.host = host
        self.endpoint_lookup = endpoint_lookup
        self.config = config
        # Kafka's names: the network client id `broker-<id>-fetcher-<n>`, the thread (and the
        # FetcherLagMetrics clientId tag) `ReplicaFetcherThread-<n>-<source broker>`.
        self.client_id = client_id or f"broker-{host.node_id}-fetcher-{fetcher_id}"
        self.name = f"ReplicaFetcherThread-{fetcher_id}-{source_broker_id}"
        self.partitions: dict[Key, PartitionFetchState] = {}
        # FetcherLagMetrics: partition -> max(0, leader HW - next fetch offset) after its last response.
        self.lag: dict[Key, int] = {}
        self._conn: NodeConnection | None = None
        self._wake = asyncio.Event()
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._truncate_on_fetch: bool | None = None  # known once connected: the leader's Fetch >= v12
        self._session = FetchSessionHandler()
        self._topic_ids: dict[str, uuid.UUID] = {}
        self.fetches = 0  # completed Fetch round trips (tests and metrics)
        # Kafka's FetcherStats (`kafka.server:type=FetcherStats,name=RequestsPerSec|BytesPerSec`, tagged
        # clientId = this fetcher's thread name, brokerHost / brokerPort = the leader's endpoint): Fetch
        # requests answered, and bytes of the leader's records appended.
        self.fetch_requests = 0
        self.bytes_fetched = 0
        self.broker_host = ""
        self.broker_port = -1
        # KIP-73: follower.replication.throttled.* (the manager hands its quota to each fetcher).
        self.quota: ReplicaQuota = UNLIMITED_REPLICA_QUOTA

    @property
    def session_id(self) -> int:
        """The leader's fetch session id for this fetcher (0: none)."""
        return self._session.session_id

    # -- partitions ------------------------------------------------------------------------------

    def add_partitions(self, states: dict[Key, PartitionFetchState]) -> None:
        if self._truncate_on_fetch is False:
            for state in states.values():
                state.state = FetchState.TRUNCATING
        self.partitions.update(states)
        self._wake.set()
        if self._task is None and not self._closed:  # a closed fetcher never starts again
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self.client_id)

    def remove_partitions(self, keys: list[Key]) -> None:
        for key in keys:
            self.partitions.pop(key, None)
            self.lag.pop(key, None)  # Kafka's fetcherLagStats.unregister

    def pause(self) -> None:
        """Stop fetching until `resume` (tests use it as a stopped follower: SIGSTOP in-process)."""
        self._resumed.clear()

    def resume(self) -> None:
        self._resumed.set()

    def close_now(self) -> None:
        """Stop without waiting (the broker's synchronous shutdown): cancel the task, drop the connection."""
        self._closed = True
        self._resumed.set()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(RuntimeError):
                asyncio.get_running_loop().create_task(conn.close())

    async def shutdown(self) -> None:
        self._closed = True
        self._wake.set()
        self._resumed.set()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._close_connection()

    async def _close_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    # -- the loop --------------------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        backoff = self.config.fetch_backoff_ms / 1000
        while not self._closed:
            await self._resumed.wait()
            if self._closed:
                return
            now = loop.time()
            ready = {k: s for k, s in self.partitions.items() if s.delayed_until <= now}
            if not ready:
                self._wake.clear()
                delays = [s.delayed_until - now for s in self.partitions.values()]
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), min(delays) if delays else None)
                continue
            try:
                conn = await self._connection()
                await self._maybe_truncate(conn, ready)
                await self._fetch(conn)
            except asyncio.CancelledError:
                raise
            except (ConnectionClosedError, RequestTimeoutError, OSError, ValueError) as exc:
                log.info("Fetcher %s to broker %d: %s; retrying in %.1fs", self.client_id, self.source_broker_id,
                         exc, backoff)
                await self._close_connection()
                await asyncio.sleep(backoff)
            except Exception:
                log.exception("Fetcher %s to broker %d failed; retrying", self.client_id, self.source_broker_id)
                await self._close_connection()
                await asyncio.sleep(backoff)

    async def _connection(self) -> NodeConnection:
        if self._conn is not None and self._conn.connected:
            return self._conn
        await self._close_connection()
        endpoint = self.endpoint_lookup(self.source_broker_id)
        if endpoint is None:
            raise ConnectionClosedError(f"broker {self.source_broker_id} has no endpoint in the metadata")
        timeout = self.config.socket_timeout_ms / 1000
        self.broker_host, self.broker_port = endpoint[0], endpoint[1]
        conn = NodeConnection(endpoint[0], endpoint[1], client_id=self.client_id,
                              request_timeout_s=timeout + self.config.fetch_wait_max_ms / 1000,
                              security=self.config.security)
        await conn.connect()
        self._conn = conn
        self._session.reset()  # a new connection may meet a leader that lost the session
        self._truncate_on_fetch = conn.version_for(FETCH) >= TRUNCATE_ON_FETCH_VERSION
        if not self._truncate_on_fetch:
            for s in self.partitions.values():  # no diverging_epoch: ask OffsetForLeaderEpoch first
                s.state = FetchState.TRUNCATING
        return conn

    def _delay(self, key: Key, state: PartitionFetchState) -> None:
        state.delayed_until = asyncio.get_running_loop().time() + self.config.fetch_backoff_ms / 1000

    # -- truncation by OffsetForLeaderEpoch (Kafka's maybeTruncate) --------------------------------

    async def _maybe_truncate(self, conn: NodeConnection, ready: dict[Key, PartitionFetchState]) -> None:
        truncating = {k: s for k, s in ready.items() if s.state == FetchState.TRUNCATING}
        if not truncating:
            return
        with_epochs: dict[Key, tuple[PartitionFetchState, int]] = {}
        for key, state in truncating.items():
            part = self.host.follower_partition(*key)
            if part is None:
                self.partitions.pop(key, None)
                continue
            latest = part.log.leader_epoch_cache.latest_epoch
            if latest < 0:
                # No epochs (an empty log or message format < v2): the HW is what is known safe.
                part.truncate_to(part.high_watermark)
                state.fetch_offset = part.log_end_offset
                state.state = FetchState.FETCHING
            else:
                with_epochs[key] = (state, latest)
        if not with_epochs:
            return
        topics: dict[str, list[OffsetForLeaderEpochRequest.OffsetForLeaderPartition]] = {}
        for (topic, index), (state, epoch) in with_epochs.items():
            topics.setdefault(topic, []).append(OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
                partition=index, current_leader_epoch=state.current_leader_epoch, leader_epoch=epoch))
        request = OffsetForLeaderEpochRequest(
            replica_id=self.host.node_id,
            topics=[OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=t, partitions=ps) for t, ps in topics.items()])
        response = await conn.request(OFFSET_FOR_LEADER_EPOCH, request, OffsetForLeaderEpochResponse)
        for t in response.topics:
            for p in t.partitions:
                key = (t.topic, p.partition)
                entry = with_epochs.get(key)
                if entry is None or self.partitions.get(key) is not entry[0]:
                    continue
                state = entry[0]
                if p.error_code != ErrorCode.NONE:
                    self._on_partition_error(key, state, ErrorCode(p.error_code))
                    continue
                self._truncate(key, state, p.leader_epoch, p.end_offset, from_fetch=False)

    def _truncate(self, key: Key, state: PartitionFetchState, leader_epoch: int, leader_end_offset: int, *,
                  from_fetch: bool) -> None:
        part = self.host.follower_partition(*key)
        if part is None:
            self.partitions.pop(key, None)
            return
        plog = part.log
        cache = plog.leader_epoch_cache

        def lookup(epoch: int) -> tuple[int, int] | None:
            found = cache.end_offset_for(epoch, plog.log_end_offset)
            return None if found[0] < 0 else found

        ts = offset_truncation_state(leader_epoch, leader_end_offset, lookup, plog.log_end_offset, plog.high_watermark)
        if ts.offset < plog.log_end_offset:
            log.info("Truncating %s-%d from %d to %d: the leader (broker %d) ends epoch %d at %d",
                     key[0], key[1], plog.log_end_offset, ts.offset, self.source_broker_id, leader_epoch,
                     leader_end_offset)
            part.truncate_to(ts.offset)
        state.fetch_offset = plog.log_end_offset
        state.last_fetched_epoch = cache.latest_epoch
        # With truncation on fetch, a further divergence comes back in the next fetch response.
        if ts.truncation_completed or from_fetch:
            state.state = FetchState.FETCHING

    # -- fetch -----------------------------------------------------------------------------------

    def _build_fetch(self, version: int) -> tuple[FetchRequest, dict[Key, tuple[PartitionFetchState, int]]] | None:
        """The next Fetch: every partition ready to fetch, through the session (KIP-227: an incremental
        request lists only the partitions whose position changed, and the ones to forget)."""
        now = asyncio.get_running_loop().time()
        wanted: dict[Hashable, SessionPartition] = {}
        sent: dict[Key, tuple[PartitionFetchState, int]] = {}
        quota = self.quota
        for key, state in self.partitions.items():
            if state.state != FetchState.FETCHING or state.delayed_until > now:
                continue
            if self._should_follower_throttle(quota, key):
                continue
            part = self.host.follower_partition(*key)
            if part is None:
                continue
            wanted[key] = SessionPartition(state.fetch_offset, state.current_leader_epoch, state.last_fetched_epoch,
                                           part.log_start_offset, part.high_watermark if version >= 18 else -1)
            self._topic_ids[key[0]] = state.topic_id
            sent[key] = (state, state.fetch_offset)
        if not sent:
            return None
        self._session.enabled = version >= 7
        data = self._session.build(wanted)
        by_topic: dict[str, list[FetchRequest.FetchPartition]] = {}
        for k in data.to_send:
            key = _key(k)
            sp = wanted[key]
            # Each field only in the versions that have it (the codec refuses others): current leader
            # epoch v9+, log start offset v5+, last fetched epoch v12+, the follower's HW v18+ (KIP-1166).
            fp = FetchRequest.FetchPartition(partition=key[1], fetch_offset=sp.fetch_offset,
                                             partition_max_bytes=self.config.fetch_max_bytes)
            if version >= 5:
                fp.log_start_offset = sp.log_start_offset
            if version >= 9:
                fp.current_leader_epoch = sp.current_leader_epoch
            if version >= 12:
                fp.last_fetched_epoch = sp.last_fetched_epoch
            if version >= 18:
                fp.high_watermark = sp.high_watermark
            by_topic.setdefault(key[0], []).append(fp)
        forgotten: dict[str, list[int]] = {}
        for k in data.to_forget:
            key = _key(k)
            forgotten.setdefault(key[0], []).append(key[1])
        node = self.host.node_id
        request = FetchRequest(max_wait_ms=self.config.fetch_wait_max_ms, min_bytes=self.config.fetch_min_bytes,
                               max_bytes=self.config.fetch_response_max_bytes, isolation_level=0,
                               session_id=data.session_id if version >= 7 else 0,
                               session_epoch=data.session_epoch if version >= 7 else -1,
                               topics=[self._fetch_topic(version, t, ps)
                                       for t, ps in by_topic.items()])
        if forgotten:
            request.forgotten_topics_data = [self._forgotten_topic(version, t, ps)
                                             for t, ps in forgotten.items()]
        if version >= 15:  # KIP-903: the replica id moves into ReplicaState, with the broker epoch
            request.replica_state = FetchRequest.ReplicaState(replica_id=node, replica_epoch=self.host.broker_epoch())
        else:
            request.replica_id = node
        return request, sent

    def _should_follower_throttle(self, quota: ReplicaQuota, key: Key) -> bool:
        """Kafka's `shouldFollowerThrottle`: a throttled partition that has not caught up with the
        leader's high watermark (no lag seen yet counts as not caught up) is left out of the Fetch
        while the follower's replication rate is over `follower.replication.throttled.rate`."""
        in_sync = self.lag.get(key, 1) <= 0
        return not in_sync and quota.is_throttled(*key) and quota.is_quota_exceeded()

    def _fetch_topic(self, version: int, topic: str, partitions: list[FetchRequest.FetchPartition]
                     ) -> FetchRequest.FetchTopic:
        """A request topic entry named by id (v13+, KIP-516) or by name."""
        if version >= 13:
            return FetchRequest.FetchTopic(topic_id=self._topic_ids[topic], partitions=partitions)
        return FetchRequest.FetchTopic(topic=topic, partitions=partitions)

    def _forgotten_topic(self, version: int, topic: str, partitions: list[int]) -> FetchRequest.ForgottenTopic:
        if version >= 13:
            return FetchRequest.ForgottenTopic(topic_id=self._topic_ids[topic], partitions=partitions)
        return FetchRequest.ForgottenTopic(topic=topic, partitions=partitions)

    async def _fetch(self, conn: NodeConnection) -> None:
        version = conn.version_for(FETCH)
        built = self._build_fetch(version)
        if built is None:
            # Only truncating or delayed partitions: wait a little for them.
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.config.fetch_backoff_ms / 1000)
            return
        request, sent = built
        response = await conn.request(FETCH, request, FetchResponse, version=version)
        self.fetches += 1
        self.fetch_requests += 1
        error = ErrorCode(response.error_code)
        if not self._session.handle_response(error, response.session_id):
            log.info("Fetch from broker %d answered %s", self.source_broker_id, error.name)
            if error not in (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH):
                await asyncio.sleep(self.config.fetch_backoff_ms / 1000)
            return
        names = {tid: topic for topic, tid in self._topic_ids.items()}
        out_of_range: list[tuple[Key, PartitionFetchState]] = []
        for t in response.responses:
            topic = names.get(t.topic_id, "") if version >= 13 else t.topic
            for p in t.partitions:
                key = (topic, p.partition_index)
                entry = sent.get(key)
                if entry is None:
                    continue
                state, offset = entry
                if self.partitions.get(key) is not state or state.fetch_offset != offset:
                    continue  # removed, re-added or truncated while the fetch was in flight
                error = ErrorCode(p.error_code)
                if error == ErrorCode.OFFSET_OUT_OF_RANGE:
                    out_of_range.append((key, state))
                elif error != ErrorCode.NONE:
                    self._on_partition_error(key, state, error)
                else:
                    self._process_partition_data(key, state, p)
        for key, state in out_of_range:
            await self._handle_out_of_range(conn, key, state)

    def _process_partition_data(self, key: Key, state: PartitionFetchState, p: FetchResponse.PartitionData) -> None:
        if self._closed:
            # Closed while the response was on its way (the broker is stopping and its logs may be
            # closed already): appending now would fail the log directory over a shutdown.
            return
        part = self.host.follower_partition(*key)
        if part is None:
            self.partitions.pop(key, None)
            return
        div = p.diverging_epoch
        if div is not None and (div.epoch >= 0 or div.end_offset >= 0):
            self._truncate(key, state, div.epoch, div.end_offset, from_fetch=True)
            return
        records = p.records
        hw_before = part.high_watermark
        try:
            if records is not None and len(records) > 0:
                part.append_records_to_follower(memoryview(records), p.high_watermark, p.log_start_offset)
                self.host.on_replication_bytes_in(len(records))
                self.bytes_fetched += len(records)
                if self.quota.is_throttled(*key):
                    self.quota.record(len(records))
            else:
                part.update_follower_high_watermark(p.high_watermark, p.log_start_offset)
        except OffsetOutOfRangeError as exc:
            log.error("Offset mismatch appending to follower %s-%d: %s", key[0], key[1], exc)
            self._delay(key, state)
            return
        except (KafkaStorageError, OSError) as exc:
            log.error("Storage error appending to follower %s-%d: %s", key[0], key[1], exc)
            self.partitions.pop(key, None)
            return
        state.fetch_offset = part.log_end_offset
        state.last_fetched_epoch = part.log.leader_epoch_cache.latest_epoch
        self.lag[key] = max(0, p.high_watermark - state.fetch_offset)
        if part.high_watermark != hw_before:
            self.host.on_follower_high_watermark_moved(key)

    def _on_partition_error(self, key: Key, state: PartitionFetchState, error: ErrorCode) -> None:
        if error == ErrorCode.FENCED_LEADER_EPOCH:
            # Our leader epoch is older than the leader's: the metadata will restart us (Kafka's
            # onPartitionFenced removes the partition from the fetcher).
            log.info("%s-%d: fenced at leader epoch %d by broker %d", key[0], key[1], state.current_leader_epoch,
                     self.source_broker_id)
            self.partitions.pop(key, None)
            return
        log.debug("%s-%d: fetch error %s from broker %d; backing off", key[0], key[1], error.name,
                  self.source_broker_id)
        self._delay(key, state)

    async def _handle_out_of_range(self, conn: NodeConnection, key: Key, state: PartitionFetchState) -> None:
        """Kafka's `fetchOffsetAndTruncate`: if the leader's log ends before our fetch offset (an
        unclean election), truncate to its end; if it starts after it (retention), start over at its
        log start offset."""
        part = self.host.follower_partition(*key)
        if part is None:
            self.partitions.pop(key, None)
            return
        latest = await self._leader_offset(conn, key, state, -1)
        if latest is None:
            self._delay(key, state)
            return
        if latest < part.log_end_offset:
            log.warning("Truncating %s-%d to the leader's log end offset %d (ours was %d)", key[0], key[1], latest,
                        part.log_end_offset)
            part.truncate_to(latest)
        else:
            earliest = await self._leader_offset(conn, key, state, -2)
            if earliest is None:
                self._delay(key, state)
                return
            if earliest > part.log_end_offset or state.fetch_offset < earliest:
                part.log.truncate_fully_and_start_at(earliest)
        state.fetch_offset = part.log_end_offset
        state.last_fetched_epoch = part.log.leader_epoch_cache.latest_epoch

    async def _leader_offset(self, conn: NodeConnection, key: Key, state: PartitionFetchState,
                             timestamp: int) -> int | None:
        request = ListOffsetsRequest(replica_id=self.host.node_id, isolation_level=0, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name=key[0], partitions=[ListOffsetsRequest.ListOffsetsPartition(
                partition_index=key[1], current_leader_epoch=state.current_leader_epoch, timestamp=timestamp)])])
        response = await conn.request(LIST_OFFSETS, request, ListOffsetsResponse)
        for t in response.topics:
            for p in t.partitions:
                if p.partition_index == key[1] and p.error_code == ErrorCode.NONE:
                    return int(p.offset)
        return None


# Kafka's BrokerIdAndFetcherId: which fetcher of which source broker.
FetcherKey = tuple[int, int]


class ReplicaFetcherManager:
    """The fetchers of this broker, `num_fetchers` per source broker (Kafka's `ReplicaFetcherManager`)."""

    def __init__(self, host: FetcherHost, endpoint_lookup: EndpointLookup, config: ReplicaFetcherConfig,
                 num_fetchers: int = 1) -> None:
        self.host = host
        self.endpoint_lookup = endpoint_lookup
        self.config = config
        self.num_fetchers = max(1, num_fetchers)
        self.fetchers: dict[FetcherKey, ReplicaFetcher] = {}
        self._owner: dict[Key, FetcherKey] = {}
        # KIP-73: follower.replication.throttled.* (the wiring hands in the broker's quota).
        self.quota: ReplicaQuota = UNLIMITED_REPLICA_QUOTA
        self._paused = False
        self._closed = False

    def add_fetcher_for_partitions(self, initial: dict[Key, InitialFetchState]) -> None:
        """Start fetching each partition from its leader, on fetcher `fetcher_id(topic, partition)` of
        that leader (Kafka's addFetcherForPartitions)."""
        if self._closed:
            return
        by_fetcher: dict[FetcherKey, dict[Key, PartitionFetchState]] = {}
        for key, init in initial.items():
            self.remove_fetcher_for_partitions([key])
            part = self.host.follower_partition(*key)
            latest = -1 if part is None else part.log.leader_epoch_cache.latest_epoch
            state = FetchState.FETCHING if latest >= 0 and init.fetch_offset >= 0 else FetchState.TRUNCATING
            owner = (init.leader_id, fetcher_id(key[0], key[1], self.num_fetchers))
            by_fetcher.setdefault(owner, {})[key] = PartitionFetchState(
                init.topic_id, init.fetch_offset, init.leader_epoch, state, latest)
            self._owner[key] = owner
        for owner, states in by_fetcher.items():
            fetcher = self.fetchers.get(owner)
            if fetcher is None:
                fetcher = self.fetchers[owner] = ReplicaFetcher(owner[0], self.host, self.endpoint_lookup,
                                                                self.config, fetcher_id=owner[1])
                fetcher.quota = self.quota
                if self._paused:
                    fetcher.pause()
            fetcher.add_partitions(states)

    def remove_fetcher_for_partitions(self, keys: list[Key]) -> None:
        for key in keys:
            owner = self._owner.pop(key, None)
            if owner is not None and (fetcher := self.fetchers.get(owner)) is not None:
                fetcher.remove_partitions([key])

    def fetch_state(self, topic: str, partition: int) -> PartitionFetchState | None:
        owner = self._owner.get((topic, partition))
        fetcher = None if owner is None else self.fetchers.get(owner)
        return None if fetcher is None else fetcher.partitions.get((topic, partition))

    def fetcher_for(self, topic: str, partition: int) -> ReplicaFetcher | None:
        owner = self._owner.get((topic, partition))
        return None if owner is None else self.fetchers.get(owner)

    @property
    def max_lag(self) -> int:
        """Kafka's `MaxLag` (clientId=Replica): the largest lag of any partition of any fetcher."""
        return max((lag for f in self.fetchers.values() for lag in f.lag.values()), default=0)

    async def resize(self, num_fetchers: int) -> None:
        """Kafka's `resizeThreadPool` (num.replica.fetchers changed dynamically): stop every fetcher
        and give each partition, at its current position, to its fetcher under the new count."""
        num_fetchers = max(1, num_fetchers)
        if num_fetchers == self.num_fetchers or self._closed:
            self.num_fetchers = num_fetchers
            return
        moving: dict[Key, tuple[int, PartitionFetchState]] = {}
        for (leader, _n), fetcher in self.fetchers.items():
            for key, state in fetcher.partitions.items():
                moving[key] = (leader, state)
        fetchers = list(self.fetchers.values())
        self.fetchers.clear()
        self._owner.clear()
        self.num_fetchers = num_fetchers
        for f in fetchers:
            await f.shutdown()
        by_fetcher: dict[FetcherKey, dict[Key, PartitionFetchState]] = {}
        for key, (leader, state) in moving.items():
            owner = (leader, fetcher_id(key[0], key[1], num_fetchers))
            by_fetcher.setdefault(owner, {})[key] = state
            self._owner[key] = owner
        for owner, states in by_fetcher.items():
            fetcher = self.fetchers[owner] = ReplicaFetcher(owner[0], self.host, self.endpoint_lookup, self.config,
                                                            fetcher_id=owner[1])
            fetcher.quota = self.quota
            if self._paused:
                fetcher.pause()
            fetcher.add_partitions(states)

    def pause(self) -> None:
        self._paused = True
        for f in self.fetchers.values():
            f.pause()

    def resume(self) -> None:
        self._paused = False
        for f in self.fetchers.values():
            f.resume()

    async def shutdown_idle_fetchers(self) -> None:
        for owner, fetcher in list(self.fetchers.items()):
            if not fetcher.partitions and self.fetchers.get(owner) is fetcher:
                del self.fetchers[owner]
                await fetcher.shutdown()

    def close_now(self) -> None:
        self._closed = True
        for f in self.fetchers.values():
            f.close_now()
        self.fetchers.clear()
        self._owner.clear()

    async def shutdown(self) -> None:
        self._closed = True
        fetchers = list(self.fetchers.values())
        self.fetchers.clear()
        self._owner.clear()
        for f in fetchers:
            await f.shutdown()


__all__ = ["FetchState", "FetcherKey", "InitialFetchState", "PartitionFetchState", "ReplicaFetcher",
           "ReplicaFetcherConfig", "ReplicaFetcherManager", "fetcher_id", "initial_fetch_offset", "java_string_hash"]
