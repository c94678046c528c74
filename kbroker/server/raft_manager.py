"""`KafkaRaftManager`: the asyncio driver of a controller's `KafkaRaftClient` (Kafka's `KafkaRaftManager`).

The Raft state machine (kbroker/raft) is sans-IO: it takes requests, responses and a clock, and returns
what to send. This module moves those messages:

- outbound requests go to the voters' controller endpoints (`controller.quorum.voters`) over one
  `NodeConnection` per voter (pipelined; a broken connection fails every request in flight, which
  the client hears as `handle_failure` and retries after `controller.quorum.retry.backoff.ms`);
- inbound Vote / BeginQuorumEpoch / EndQuorumEpoch / Fetch / FetchSnapshot / DescribeQuorum from the
  controller listener are handed in with `handle_inbound`, whose future the listener's connection
  awaits (a parked Fetch is answered by a later `poll`);
- one timer runs `poll` at `next_deadline_ms()`, and `poll` also runs after every event.

It is also the seam upwards, in both directions:

- `RaftClientAdapter` is the controller's `RaftClient` Protocol (kbroker/controller/raft_client.py) over
  the Raft client: metadata records are framed with Kafka's MetadataRecordSerde into record values;
- `MetadataRaftListener` is the Raft client's `RaftListener`: each committed batch is decoded once into
  a `MetadataBatch` and handed to every `RaftClientListener` (the QuorumController; control batches as
  empty batches, as that Protocol asks) and, data batches only, to the node's `MetadataLoader`.

A snapshot the Raft client hands up (`handle_load_snapshot`: at start, the latest local snapshot the
log starts at; on a follower, one fetched from the leader with FetchSnapshot) is read in Kafka's format
(`snapshot.read_snapshot`: header, records, footer, every CRC) and replaces the committed state of the
controller (`QuorumController.handle_load_snapshot`) and the node's image
(`MetadataLoader.handle_load_snapshot`); commits continue from its end offset. Writing snapshots is
`KRaftControllerLinks`' SnapshotGenerator.

The voters are the Raft client's current ones (they follow the log's VotersRecord, KIP-853): outbound
requests resolve the destination with `KafkaRaftClient.endpoint_of` each time.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Sequence

from kbroker.client import ClientSecurity, NodeConnection
from kbroker.controller.raft_client import LeaderAndEpoch as ControllerLeaderAndEpoch
from kbroker.controller.raft_client import NotLeaderError as ControllerNotLeaderError
from kbroker.controller.raft_client import RaftClientListener
from kbroker.controller.result import MetadataRecord
from kbroker.metadata.image import MetadataProvenance
from kbroker.metadata.loader import MetadataBatch, MetadataLoader
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages.add_raft_voter import AddRaftVoterResponse
from kbroker.protocol.messages.api_versions import ApiVersionsResponse
from kbroker.protocol.messages.begin_quorum_epoch import BeginQuorumEpochResponse
from kbroker.protocol.messages.describe_quorum import DescribeQuorumResponse
from kbroker.protocol.messages.end_quorum_epoch import EndQuorumEpochResponse
from kbroker.protocol.messages.fetch import FetchResponse
from kbroker.protocol.messages.fetch_snapshot import FetchSnapshotResponse
from kbroker.protocol.messages.remove_raft_voter import RemoveRaftVoterResponse
from kbroker.protocol.messages.update_raft_voter import UpdateRaftVoterResponse
from kbroker.protocol.messages.vote import VoteResponse
from kbroker.protocol.metadata_records.serde import encode_metadata_record
from kbroker.raft import (
    KafkaRaftClient,
    LeaderAndEpoch,
    NotLeaderError,
    OffsetAndEpoch,
    OutboundRequest,
    OutboundResponse,
    QuorumConfig,
    RaftBatch,
    request_for_version,
)
from kbroker.raft.client import KRaftVersionUpgradeError
from kbroker.raft.messages import RaftRequestBody, RaftResponseBody
from kbroker.snapshot import CorruptSnapshotError, read_snapshot

log = logging.getLogger(__name__)

# The Raft APIs a controller listener hands to the Raft client: Fetch (1), Vote (52), BeginQuorumEpoch (53),
# EndQuorumEpoch (54), DescribeQuorum (55), FetchSnapshot (59).
# KIP-853: 80 AddRaftVoter, 81 RemoveRaftVoter (`kafka-metadata-quorum add-controller / remove-controller`,
# answered by the leader once the VotersRecord commits) and 82 UpdateRaftVoter (kbroker/raft/client.py).
RAFT_API_KEYS = (1, 52, 53, 54, 55, 59, 80, 81, 82)
FETCH = 1
RAFT_RESPONSE_TYPES: dict[int, type[RaftResponseBody]] = {
    1: FetchResponse, 52: VoteResponse, 53: BeginQuorumEpochResponse, 54: EndQuorumEpochResponse,
    55: DescribeQuorumResponse, 59: FetchSnapshotResponse, 80: AddRaftVoterResponse, 81: RemoveRaftVoterResponse,
    82: UpdateRaftVoterResponse,
    # Outbound only (AddRaftVoter asks the new voter's kraft.version range, KIP-853); inbound ApiVersions is
    # the API layer's, so 18 is not in RAFT_API_KEYS.
    18: ApiVersionsResponse,
}


class MetadataRaftListener:
    """The Raft client's listener: committed batches decoded once, fanned out to the controller and loader."""

    def __init__(self, loader: MetadataLoader | None) -> None:
        self.loader = loader
        self.listeners: list[RaftClientListener] = []
        self.snapshots_loaded: list[OffsetAndEpoch] = []

    def register(self, listener: RaftClientListener) -> None:
        self.listeners.append(listener)

    def handle_commit(self, batches: list[RaftBatch]) -> None:
        decoded: list[MetadataBatch] = []
        data: list[MetadataBatch] = []
        for b in batches:
            if b.is_control:
                decoded.append(MetadataBatch(b.base_offset, b.epoch, b.append_timestamp_ms, [], len(b.data)))
                continue
            values = [v for v in b.values() if v is not None]
            mb = MetadataBatch.decode(b.base_offset, b.epoch, b.append_timestamp_ms, values, len(b.data))
            decoded.append(mb)
            data.append(mb)
        for listener in self.listeners:
            listener.handle_commit(decoded)
        if self.loader is not None and data:
            self.loader.handle_commit(data)

    def handle_load_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        try:
            contents = read_snapshot(data)
        except CorruptSnapshotError as e:
            # Kafka's controller treats an unreadable snapshot as a fatal fault; the Raft client offers it
            # again on its next poll, so nothing past it is applied.
            log.error("Cannot load metadata snapshot %020d-%010d: %s", snapshot_id.offset, snapshot_id.epoch, e)
            raise
        last = snapshot_id.offset - 1
        timestamp = contents.last_contained_log_timestamp
        for listener in self.listeners:
            listener.handle_load_snapshot(contents.records, last, snapshot_id.epoch, timestamp)
        if self.loader is not None:
            self.loader.handle_load_snapshot(contents.records,
                                             MetadataProvenance(last, snapshot_id.epoch, timestamp, True))
        self.snapshots_loaded.append(snapshot_id)
        log.info("Loaded metadata snapshot %020d-%010d (%d records)", snapshot_id.offset, snapshot_id.epoch,
                 len(contents.records))

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        log.info("Raft leader is now %s in epoch %d", leader.leader_id if leader.leader_id >= 0 else "unknown",
                 leader.epoch)
        change = ControllerLeaderAndEpoch(leader.leader_id if leader.leader_id >= 0 else None, leader.epoch)
        for listener in self.listeners:
            listener.handle_leader_change(change)


class KafkaRaftManager:
    """Runs one `KafkaRaftClient` on the event loop: sockets to the voters, inbound requests, the timer."""

    def __init__(self, client: KafkaRaftClient, config: QuorumConfig, time_ms: Callable[[], int],
                 *, on_poll: Callable[[], None] = lambda: None, security: ClientSecurity | None = None) -> None:
        self.client = client
        self.security = security  # the controller listener's (sasl.mechanism.controller.protocol)
        self.config = config
        self.time_ms = time_ms
        self.on_poll = on_poll
        self._connections: dict[int, NodeConnection] = {}
        self._connecting: dict[int, asyncio.Task[NodeConnection]] = {}
        self._inbound: dict[int, asyncio.Future[RaftResponseBody]] = {}
        self._request_ids = itertools.count(1)
        self._tasks: set[asyncio.Task[None]] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._poll_scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._poll_listeners: list[Callable[[], None]] = []
        # Raft Fetch requests sent to the leader, and the sequence number of the latest one answered: a
        # combined node's broker side waits on them for read-your-writes (RaftMetadataFollower.barrier).
        self.fetches_sent = 0
        self.fetches_answered = 0

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.poll()

    def add_poll_listener(self, listener: Callable[[], None]) -> None:
        """Called after every poll (after `on_poll`), e.g. a combined node's broker side."""
        self._poll_listeners.append(listener)

    # -- inbound ----------------------------------------------------------------------------------------

    def handle_inbound(self, api_key: int, body: RaftRequestBody) -> asyncio.Future[RaftResponseBody]:
        """A Raft request from the controller listener; its response (now, or when a parked Fetch is answered)."""
        loop = asyncio.get_running_loop()
        request_id = next(self._request_ids)
        fut: asyncio.Future[RaftResponseBody] = loop.create_future()
        self._inbound[request_id] = fut
        self.client.handle_request(api_key, body, request_id, self.time_ms())
        self.poll()
        return fut

    # -- the poll loop ------------------------------------------------------------------------------------

    def wakeup(self) -> None:
        """Run `poll` soon (after an append from the controller, for example)."""
        if self._poll_scheduled or self._closed or self._loop is None:
            return
        self._poll_scheduled = True
        self._loop.call_soon(self.poll)

    def poll(self) -> None:
        self._poll_scheduled = False
        if self._closed:
            return
        now = self.time_ms()
        try:
            out = self.client.poll(now)
        except Exception:
            log.exception("Raft client poll failed")
            out = []
        for item in out:
            if isinstance(item, OutboundResponse):
                fut = self._inbound.pop(item.request_id, None)
                if fut is not None and not fut.done():
                    fut.set_result(item.body)
            elif isinstance(item, OutboundRequest):
                task = asyncio.get_running_loop().create_task(self._send(item))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        self.on_poll()
        for listener in self._poll_listeners:
            try:
                listener()
            except Exception:
                log.exception("Raft poll listener failed")
        self._arm_timer()

    def _arm_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        loop = self._loop or asyncio.get_running_loop()
        delay_ms = max(0, min(self.client.next_deadline_ms() - self.time_ms(), 1000))
        self._timer = loop.call_later(delay_ms / 1000, self.poll)

    # -- outbound ---------------------------------------------------------------------------------------

    async def _connection(self, node_id: int) -> NodeConnection:
        # The voter set changes with the log (KIP-853) and an observer's leader may be known only from a
        # response's node_endpoints, or be a bootstrap server (negative id): the Raft client knows where.
        endpoint = self.client.endpoint_of(node_id)
        if endpoint is None:
            raise ConnectionError(f"no endpoint for voter {node_id}")
        conn = self._connections.get(node_id)
        if conn is not None and conn.connected and (conn.host, conn.port) == (endpoint.host, endpoint.port):
            return conn
        pending = self._connecting.get(node_id)
        if pending is None:
            timeout_s = self.config.request_timeout_ms / 1000
            new = NodeConnection(endpoint.host, endpoint.port, client_id=f"raft-client-{self.client.node_id}",
                                 connect_timeout_s=timeout_s, request_timeout_s=timeout_s, security=self.security)

            async def connect() -> NodeConnection:
                try:
                    await new.connect()
                    self._connections[node_id] = new
                    return new
                finally:
                    self._connecting.pop(node_id, None)

            pending = asyncio.get_running_loop().create_task(connect())
            self._connecting[node_id] = pending
        return await asyncio.shield(pending)

    async def _send(self, item: OutboundRequest) -> None:
        fetch_seq = 0
        if item.api_key == FETCH:
            self.fetches_sent += 1
            fetch_seq = self.fetches_sent
        try:
            conn = await self._connection(item.destination)
            body = request_for_version(item.body, conn.version_for(item.api_key))
            resp = await conn.request(item.api_key, body, RAFT_RESPONSE_TYPES[item.api_key])
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.debug("Raft request %d to %d failed: %s", item.api_key, item.destination, exc)
            conn_now = self._connections.pop(item.destination, None)
            if conn_now is not None:
                await conn_now.close()
            if not self._closed:
                self.client.handle_failure(item.destination, item.correlation_id, self.time_ms())
                self.wakeup()
            return
        if not self._closed:
            self.client.handle_response(item.destination, item.api_key, item.correlation_id, resp, self.time_ms())
            if fetch_seq:
                self.fetches_answered = max(self.fetches_answered, fetch_seq)
            self.poll()

    async def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        for task in list(self._tasks) + list(self._connecting.values()):
            task.cancel()
        # Taken out of the map before the first await: a request task cancelled just as its peer closed
        # the connection does not see the cancellation (Python 3.11's `asyncio.wait_for` returns the
        # inner future's ConnectionClosedError instead, bpo-42130/gh-86296), so it runs `_send`'s failure
        # path, which pops its connection from this map while the loop below awaits.
        connections = list(self._connections.values())
        self._connections.clear()
        for conn in connections:
            await conn.close()
        for fut in self._inbound.values():
            fut.cancel()
        self._inbound.clear()


class RaftClientAdapter:
    """The controller's `RaftClient` Protocol over a `KafkaRaftClient` driven by a `KafkaRaftManager`."""

    def __init__(self, manager: KafkaRaftManager) -> None:
        self.manager = manager

    def append(self, epoch: int, records: Sequence[MetadataRecord]) -> int:
        client = self.manager.client
        if not client.is_leader or client.epoch != epoch:
            raise ControllerNotLeaderError(f"node {client.node_id} does not lead epoch {epoch}")
        try:
            last = client.append([encode_metadata_record(r) for r in records], self.manager.time_ms())
        except NotLeaderError as e:
            raise ControllerNotLeaderError(str(e)) from e
        self.manager.wakeup()
        return last

    def log_end_offset(self) -> int:
        return self.manager.client.log.end_offset()

    # Kafka's KRaftVersionAccessor (the controller's FeatureControlManager reads and upgrades kraft.version).
    def kraft_version(self) -> int:
        return self.manager.client.kraft_version()

    def upgrade_kraft_version(self, epoch: int, level: int, validate_only: bool) -> bool:
        """`KafkaRaftClient.upgrade_kraft_version`, its refusals as the KafkaError Kafka answers."""
        try:
            upgraded = self.manager.client.upgrade_kraft_version(epoch, level, validate_only, self.manager.time_ms())
        except KRaftVersionUpgradeError as e:
            raise KafkaError(e.message, error_code=e.error) from e
        except ValueError as e:  # Kafka's IllegalArgumentException: invalidUpdateVersion
            raise KafkaError(f"Invalid update version {level} for feature kraft.version. {e}",
                             error_code=ErrorCode.INVALID_UPDATE_VERSION) from e
        if upgraded:
            self.manager.wakeup()
        return upgraded

    def resign(self, epoch: int) -> None:
        client = self.manager.client
        if client.is_leader and client.epoch == epoch:
            client.resign(self.manager.time_ms())
            self.manager.wakeup()
