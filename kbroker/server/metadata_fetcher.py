"""`MetadataFetcher`: a broker follows `__cluster_metadata` as a Raft observer (Kafka's KafkaRaftClient,
observer side) and feeds the committed part to the `MetadataLoader`.

This is the observer half of a Raft client, written over asyncio; it keeps the state a Kafka observer
keeps: the leader id and epoch it knows, the leader's high watermark, its local log. The log is the
Raft package's `KafkaMetadataLog` (same class, directory and bytes as a controller's). The protocol
side is not yet `kbroker.raft.KafkaRaftClient` in observer mode, as a Kafka broker's is; that needs,
in the raft package: fetching from `controller.quorum.bootstrap.servers` (addresses without ids, KIP-853)
and learning the voters and the leader's endpoint from Fetch answers (`current_leader`,
`node_endpoints`) instead of a fixed voter set; and in a driver beside `server/raft_manager.py`: what
this class gives its users on top of Raft (`caught_up` for the start, `barrier` for RemoteController's
read-your-writes, `wait_for_leader` / `forget_leader` for ControllerChannel, `fatal_error` on
INCONSISTENT_CLUSTER_ID, the deletions a snapshot implies for the loader). The client must then be
proven against Apache Kafka 4.3.1 controllers (tests/cluster/test_kraft_mixed.py), not only kbroker voters.

One round: a Fetch for `__cluster_metadata` partition 0 (topic id AAAAAAAAAAAAAAAAAAAAAQ, Kafka's
fixed metadata topic id) to the leader on the controller listener, with `cluster_id`, the broker's id
as `replica_state.replica_id` (an observer: the leader does not count it toward the high watermark),
`fetch_offset` = the local log end, `last_fetched_epoch` = the epoch of the last local batch,
`current_leader_epoch` = the epoch it believes in, `replica_directory_id` = the metadata log dir's
`directory.id` (KIP-853: observers are listed by id and directory), `max_wait_ms` = 500 (Kafka's
observer fetch wait). The answer:

- records: appended as they are (the leader's offsets and epochs); then every batch below the leader's
  high watermark that the loader has not seen is handed to `MetadataLoader.handle_commit` (control
  batches only move the committed offset);
- `diverging_epoch`: the local tail is not on the leader's log (KIP-595): truncate to the epoch's end
  offset and fetch again (committed records never diverge, so the image is not touched);
- `snapshot_id`: the leader no longer has our offset: FetchSnapshot in chunks, install it
  (`<end>-<epoch>.checkpoint`), `MetadataLoader.handle_load_snapshot`, continue from its end;
- FENCED_LEADER_EPOCH / NOT_LEADER_OR_FOLLOWER / UNKNOWN_LEADER_EPOCH: `current_leader` and the
  response's `node_endpoints` name the leader (or `controller.quorum.voters` does); with no leader known
  the fetcher asks the next bootstrap server after `controller.quorum.retry.backoff.ms`;
- no answer within `controller.quorum.fetch.timeout.ms`: the leader is forgotten and looked up again.

The leader of the metadata quorum is the active controller: `leader` is what `ControllerChannel` uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from kbroker.client import ConnectionClosedError, NodeConnection, RequestTimeoutError
from kbroker.metadata.image import MetadataProvenance
from kbroker.metadata.loader import MetadataBatch, MetadataLoader
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.fetch import FetchRequest, FetchResponse
from kbroker.protocol.messages.fetch_snapshot import FetchSnapshotRequest, FetchSnapshotResponse
from kbroker.protocol.metadata_records import RemoveTopicRecord, TopicRecord
from kbroker.protocol.topic import CLUSTER_METADATA_TOPIC_NAME as CLUSTER_METADATA_TOPIC
from kbroker.raft.metadata_log import KafkaMetadataLog
from kbroker.raft.raft_log import OffsetAndEpoch
from kbroker.server.metadata_batches import decode_batch, iter_batches, read_batches
from kbroker.server.settings import KRaftBrokerSettings, QuorumNode

log = logging.getLogger(__name__)

FETCH = 1
FETCH_SNAPSHOT = 59
# Kafka's fixed id of the metadata topic (Uuid.METADATA_TOPIC_ID: 0x0...01).
METADATA_TOPIC_ID = uuid.UUID(int=1)
# KafkaRaftClient: fetch max wait and the fetch/snapshot byte limits.
FETCH_MAX_WAIT_MS = 500
FETCH_MAX_BYTES = 8 * 1024 * 1024
SNAPSHOT_MAX_BYTES = 8 * 1024 * 1024

_LEADER_ERRORS = frozenset({
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.BROKER_NOT_AVAILABLE,
})


@dataclass(frozen=True, slots=True)
class LeaderAndEpoch:
    """The quorum leader as this observer knows it (Kafka's LeaderAndEpoch + the leader's endpoint)."""

    leader_id: int
    epoch: int
    endpoint: QuorumNode | None


def _code(value: int) -> ErrorCode | int:
    try:
        return ErrorCode(value)
    except ValueError:
        return value


class MetadataFetcher:
    """Fetches `__cluster_metadata` from the quorum leader and publishes what is committed."""

    def __init__(self, settings: KRaftBrokerSettings, metadata_log: KafkaMetadataLog, loader: MetadataLoader,
                 *, connection_factory: Callable[[str, int], NodeConnection] | None = None) -> None:
        self.settings = settings
        self.metadata_log = metadata_log
        self.loader = loader
        self._connection_factory = connection_factory or (
            lambda host, port: NodeConnection(host, port, client_id=f"raft-observer-{settings.node_id}",
                                              request_timeout_s=settings.quorum_request_timeout_ms / 1000,
                                              security=settings.controller_security))
        self.leader = LeaderAndEpoch(-1, 0, None)
        self.high_watermark = -1  # the leader's, as last told; -1 before the first answer
        # The next offset to hand to the loader (everything below it has been applied).
        self.next_commit_offset = metadata_log.start_offset()
        self._conn: NodeConnection | None = None
        self._conn_target: QuorumNode | None = None
        self._bootstrap_index = 0
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._fetches_done = 0  # answered fetch rounds (the barrier counts them)
        self._progress = asyncio.Event()
        self.caught_up = asyncio.Event()
        self.leader_changed = asyncio.Event()
        self.fatal_error: str | None = None

    # -- what others read -----------------------------------------------------------------------------

    @property
    def applied_offset(self) -> int:
        """The last committed offset handed to the loader (control batches included), -1 before any."""
        return self.next_commit_offset - 1

    # -- start / stop --------------------------------------------------------------------------------

    def load_local(self) -> None:
        """At start: load the local snapshot the log starts at, if any (a committed image). Records in the
        local log are handed on only once the leader's high watermark says they are committed."""
        snap = self.metadata_log.latest_snapshot_id()
        self.next_commit_offset = self.metadata_log.start_offset()
        # The latest snapshot, then the log after it (with metadata retention the log also keeps batches
        # below it, which are not applied again).
        if snap is not None and snap.offset > 0 and snap.offset >= self.next_commit_offset:
            blob = self.metadata_log.read_snapshot(snap)
            if blob is not None:
                self._load_snapshot_bytes(snap, blob)
                self.next_commit_offset = snap.offset

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="metadata-fetcher")

    async def close(self) -> None:
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._drop_connection()

    async def wait_caught_up(self, timeout_s: float) -> None:
        """Until the loader has applied everything below the leader's high watermark once."""
        await asyncio.wait_for(self.caught_up.wait(), timeout_s)

    async def barrier(self, timeout_s: float, done: Callable[[], bool] | None = None) -> None:
        """Until a fetch sent after this call has been answered and everything below the high watermark it
        reported is applied: any change the controller committed before the call is then in the image
        (the controller answers an admin request only once its records are committed). `done`, checked
        after every round, may end the wait earlier (the change is visibly in the image already)."""
        # A fetch in flight may have been sent before the call: then wait for the one after it.
        target = self._fetches_done + (2 if self._in_flight else 1)

        async def wait() -> None:
            hw: int | None = None
            while not (done is not None and done()):
                if hw is None and self._fetches_done >= target:
                    hw = self.high_watermark  # what the leader had committed when it answered
                if hw is not None and self.next_commit_offset >= hw:
                    return
                self._progress.clear()
                await self._progress.wait()

        await asyncio.wait_for(wait(), timeout_s)

    async def wait_for_leader(self, timeout_s: float) -> LeaderAndEpoch:
        async def wait() -> LeaderAndEpoch:
            while self.leader.endpoint is None:
                self.leader_changed.clear()
                await self.leader_changed.wait()
            return self.leader

        return await asyncio.wait_for(wait(), timeout_s)

    def forget_leader(self, leader_id: int) -> None:
        """A request to `leader_id` said NOT_CONTROLLER: look the leader up again."""
        if self.leader.leader_id == leader_id:
            self._set_leader(LeaderAndEpoch(-1, self.leader.epoch, None))

    # -- the loop ------------------------------------------------------------------------------------

    async def _run(self) -> None:
        backoff = self.settings.quorum_retry_backoff_ms / 1000
        failures = 0
        while not self._closed:
            target = self.leader.endpoint or self._next_bootstrap()
            try:
                conn = await self._connection(target)
                await self._fetch_once(conn)
                failures = 0
            except (ConnectionClosedError, RequestTimeoutError, OSError) as exc:
                log.debug("Metadata fetch from %s failed: %s", target, exc)
                await self._drop_connection()
                if self.leader.endpoint == target:
                    self._set_leader(LeaderAndEpoch(-1, self.leader.epoch, None))
                # Exponential backoff up to a second once every controller has failed in turn, as
                # Kafka's clients back off reconnecting (reconnect.backoff.max.ms).
                failures += 1
                rounds = failures // max(1, len(self.settings.quorum_bootstrap))
                await asyncio.sleep(min(1.0, backoff * (2 ** min(rounds, 10))))
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("Metadata fetch round failed")
                await asyncio.sleep(max(backoff, 0.5))

    def _next_bootstrap(self) -> QuorumNode:
        nodes = self.settings.quorum_bootstrap
        node = nodes[self._bootstrap_index % len(nodes)]
        self._bootstrap_index += 1
        return node

    async def _connection(self, target: QuorumNode) -> NodeConnection:
        if self._conn is not None and self._conn.connected and self._conn_target == target:
            return self._conn
        await self._drop_connection()
        conn = self._connection_factory(target.host, target.port)
        await conn.connect()
        self._conn, self._conn_target = conn, target
        return conn

    async def _drop_connection(self) -> None:
        conn, self._conn, self._conn_target = self._conn, None, None
        if conn is not None:
            await conn.close()

    def build_fetch_request(self, version: int) -> FetchRequest:
        s = self.settings
        # v15 (KIP-903) moved the replica id into replica_state.
        return FetchRequest(
            cluster_id=s.cluster_id,
            replica_id=s.node_id if version < 15 else -1,
            replica_state=FetchRequest.ReplicaState(replica_id=s.node_id if version >= 15 else -1,
                                                    replica_epoch=-1),
            max_wait_ms=FETCH_MAX_WAIT_MS,
            min_bytes=0,
            max_bytes=FETCH_MAX_BYTES,
            topics=[FetchRequest.FetchTopic(
                topic=CLUSTER_METADATA_TOPIC,
                topic_id=METADATA_TOPIC_ID,
                partitions=[FetchRequest.FetchPartition(
                    partition=0,
                    current_leader_epoch=self.leader.epoch,
                    fetch_offset=self.metadata_log.end_offset(),
                    last_fetched_epoch=self.metadata_log.last_fetched_epoch(),
                    log_start_offset=-1,
                    partition_max_bytes=FETCH_MAX_BYTES,
                    replica_directory_id=s.metadata_directory_id,
                )],
            )],
        )

    async def _fetch_once(self, conn: NodeConnection) -> None:
        s = self.settings
        timeout = (FETCH_MAX_WAIT_MS + s.quorum_fetch_timeout_ms) / 1000
        self._in_flight = True
        try:
            version = conn.version_for(FETCH)
            resp = await conn.request(FETCH, self.build_fetch_request(version), FetchResponse, version=version,
                                      timeout_s=timeout)
        finally:
            self._in_flight = False
        target = self._conn_target
        self.handle_fetch_response(resp, target)
        if self._pending_snapshot is not None:
            snap, self._pending_snapshot = self._pending_snapshot, None
            await self._fetch_snapshot(conn, snap)
        self._fetches_done += 1
        self._progress.set()
        if self._backoff_after_round:
            self._backoff_after_round = False
            await asyncio.sleep(s.quorum_retry_backoff_ms / 1000)

    _pending_snapshot: OffsetAndEpoch | None = None
    _backoff_after_round = False
    _in_flight = False

    # -- answers (synchronous: state in, state out) ---------------------------------------------------

    def handle_fetch_response(self, resp: FetchResponse, source: QuorumNode | None) -> None:
        top = _code(resp.error_code)
        endpoints = {e.node_id: QuorumNode(e.node_id, e.host, e.port) for e in (resp.node_endpoints or [])}
        if top != ErrorCode.NONE:
            if top == ErrorCode.INCONSISTENT_CLUSTER_ID:
                self.fatal_error = (f"the controller quorum belongs to another cluster than {self.settings.cluster_id} "
                                    "(INCONSISTENT_CLUSTER_ID): format this broker's log dirs with the "
                                    "cluster's id")
                log.error("Metadata fetch: %s", self.fatal_error)
            else:
                log.info("Metadata fetch from %s: error %s", source, top)
            self._set_leader(LeaderAndEpoch(-1, self.leader.epoch, None))
            self._backoff_after_round = True
            return
        part = None
        for t in resp.responses:
            for p in t.partitions:
                if p.partition_index == 0:
                    part = p
        if part is None:
            self._backoff_after_round = True
            return
        self._maybe_update_leader(part.current_leader.leader_id, part.current_leader.leader_epoch, endpoints)
        code = _code(part.error_code)
        if code in _LEADER_ERRORS:
            if self.leader.endpoint is None or code == ErrorCode.BROKER_NOT_AVAILABLE:
                self._backoff_after_round = True
            return
        if code != ErrorCode.NONE:
            log.warning("Metadata fetch from %s: partition error %s", source, code)
            self._backoff_after_round = True
            return
        if self.leader.endpoint is None and self.leader.leader_id >= 0 and source is not None:
            # Only the leader answers a fetch without error: it is the node we asked (a bootstrap
            # server whose endpoint the answer did not carry in NodeEndpoints).
            self._set_leader(LeaderAndEpoch(self.leader.leader_id, self.leader.epoch,
                                            QuorumNode(self.leader.leader_id, source.host, source.port)))
        if part.diverging_epoch.epoch >= 0:
            end = part.diverging_epoch.end_offset
            if end < self.next_commit_offset:
                log.error("Leader says the metadata log diverges at %d, below the committed offset %d; ignoring",
                          end, self.next_commit_offset)
                self._backoff_after_round = True
                return
            log.info("Truncating the metadata log to %d (diverging epoch %d)", end, part.diverging_epoch.epoch)
            self.metadata_log.truncate_to(end)
            return
        if part.snapshot_id.end_offset >= 0 and part.snapshot_id.epoch >= 0:
            self._pending_snapshot = OffsetAndEpoch(part.snapshot_id.end_offset, part.snapshot_id.epoch)
            return
        records = part.records
        if records is not None and len(records) > 0:
            data = memoryview(bytes(records))
            whole = sum(size for _, size in iter_batches(data))
            if whole:
                self.metadata_log.append(data[:whole])
                self.metadata_log.flush()  # durable before the next fetch reports this offset
        self.high_watermark = int(part.high_watermark)
        self.commit()

    def _maybe_update_leader(self, leader_id: int, epoch: int, endpoints: dict[int, QuorumNode]) -> None:
        if epoch < self.leader.epoch or leader_id < 0 and epoch == self.leader.epoch:
            return
        if leader_id < 0:
            self._set_leader(LeaderAndEpoch(-1, epoch, None))
            return
        endpoint = endpoints.get(leader_id) or self.settings.voter(leader_id)
        if self.leader.leader_id == leader_id and self.leader.epoch == epoch and self.leader.endpoint is not None:
            return
        if endpoint is None and self.leader.leader_id == leader_id:
            endpoint = self.leader.endpoint
        self._set_leader(LeaderAndEpoch(leader_id, epoch, endpoint))

    def _set_leader(self, leader: LeaderAndEpoch) -> None:
        if leader != self.leader:
            if leader.leader_id >= 0:
                log.info("Metadata quorum leader: %d in epoch %d at %s", leader.leader_id, leader.epoch,
                         leader.endpoint)
            self.leader = leader
            self.leader_changed.set()

    def commit(self) -> None:
        """Hand every local batch below the high watermark that the loader has not seen to the loader."""
        end = min(self.high_watermark, self.metadata_log.end_offset())
        if end <= self.next_commit_offset:
            self._check_caught_up()
            return
        batches: list[MetadataBatch] = []
        for b in read_batches(self.metadata_log, self.next_commit_offset, end):
            if b.metadata is not None and b.metadata.records:
                batches.append(b.metadata)
            self.next_commit_offset = b.next_offset
        if batches:
            self.loader.handle_commit(batches)
        self.metadata_log.maybe_clean()  # retention, at most every 60 s (no-op without retention keys)
        self._check_caught_up()

    def _check_caught_up(self) -> None:
        # Caught up: everything the leader has committed is applied (not merely everything fetched so far:
        # a first fetch may stop at max_bytes below the high watermark).
        if self.high_watermark >= 0 and self.next_commit_offset >= self.high_watermark \
                and not self.caught_up.is_set():
            log.info("Caught up with the metadata log at offset %d (high watermark %d)", self.next_commit_offset,
                     self.high_watermark)
            self.caught_up.set()

    # -- snapshots -----------------------------------------------------------------------------------

    async def _fetch_snapshot(self, conn: NodeConnection, snap: OffsetAndEpoch) -> None:
        s = self.settings
        chunks: list[bytes] = []
        position = 0
        while True:
            req = FetchSnapshotRequest(
                cluster_id=s.cluster_id, replica_id=s.node_id, max_bytes=SNAPSHOT_MAX_BYTES,
                topics=[FetchSnapshotRequest.TopicSnapshot(name=CLUSTER_METADATA_TOPIC, partitions=[
                    FetchSnapshotRequest.PartitionSnapshot(
                        partition=0, current_leader_epoch=self.leader.epoch,
                        snapshot_id=FetchSnapshotRequest.SnapshotId(end_offset=snap.offset, epoch=snap.epoch),
                        position=position, replica_directory_id=s.metadata_directory_id)])])
            resp = await conn.request(FETCH_SNAPSHOT, req, FetchSnapshotResponse,
                                      timeout_s=s.quorum_request_timeout_ms / 1000 + 5)
            if resp.error_code != 0 or not resp.topics or not resp.topics[0].partitions:
                log.warning("FetchSnapshot %s failed: %s", snap, _code(resp.error_code))
                self._backoff_after_round = True
                return
            p = resp.topics[0].partitions[0]
            if p.error_code != 0:
                log.warning("FetchSnapshot %s failed: %s", snap, _code(p.error_code))
                self._backoff_after_round = True
                return
            data = bytes(p.unaligned_records or b"")
            if p.position != position:
                self._backoff_after_round = True
                return
            chunks.append(data)
            position += len(data)
            if position >= p.size or not data:
                break
        blob = b"".join(chunks)
        self.metadata_log.install_snapshot(snap, blob)
        self._load_snapshot_bytes(snap, blob)
        self.next_commit_offset = snap.offset

    def _remove_topics_the_snapshot_lacks(self, records: list[object], snap: OffsetAndEpoch) -> None:
        """A snapshot replaces an older, non-empty image (a broker that was away longer than the leader
        kept its log): topics deleted meanwhile are not in it, and a snapshot loads as a whole new image,
        which tells the publishers of no deletion. Kafka's loader marks what a snapshot lacks as deleted
        (MetadataDelta.finishSnapshot); here the deletions are published first, as RemoveTopicRecords
        just after the old image's offset (below the snapshot's end), so the replica manager stops and
        deletes those partitions and the group coordinator drops their offsets."""
        image = self.loader.image
        if image.topics.is_empty():
            return
        kept = {r.topic_id for r in records if isinstance(r, TopicRecord)}
        gone = [t.id for t in image.topics if t.id not in kept]
        if not gone or image.offset + 1 >= snap.offset:
            return
        log.info("Metadata snapshot %d-%d lacks %d topic(s) of the current image: removing them", snap.offset,
                 snap.epoch, len(gone))
        self.loader.handle_commit([MetadataBatch(image.offset + 1, snap.epoch, image.provenance.last_contained_log_time_ms,
                                                 [RemoveTopicRecord(topic_id=t) for t in gone])])

    def _load_snapshot_bytes(self, snap: OffsetAndEpoch, blob: bytes) -> None:
        records: list[object] = []
        last_ts = -1
        for batch, size in iter_batches(memoryview(blob)):
            if batch.is_control:
                continue
            records.extend(decode_batch(batch, size).records)
            last_ts = max(last_ts, batch.max_timestamp)
        self._remove_topics_the_snapshot_lacks(records, snap)
        self.loader.handle_load_snapshot(records, MetadataProvenance(snap.offset - 1, snap.epoch, last_ts, True))
        log.info("Loaded metadata snapshot %d-%d (%d records)", snap.offset, snap.epoch, len(records))
