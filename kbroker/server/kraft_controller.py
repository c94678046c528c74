"""`KRaftControllerLinks`: what a `process.roles=controller` node runs (Kafka's `ControllerServer`, in small).

Owns, for one voter of a kbroker controller quorum: the on-disk `__cluster_metadata-0`
(`raft.KafkaMetadataLog`) and its `quorum-state`, the `KafkaRaftClient`, its asyncio driver
(`KafkaRaftManager`), and the `QuorumController` on top (through `RaftClientAdapter`), plus the
timer that runs the controller's scheduled work (`QuorumController.poll` at `next_deadline_ms`:
fencing brokers whose session expired, preferred-leader balancing).

Snapshots (Kafka's `SnapshotGenerator` on the controller's `MetadataLoader`): every voter, the active
one and the standbys alike, writes a snapshot of its own committed image once
`metadata.log.max.record.bytes.between.snapshots` bytes of committed batches were replayed since the
last one, or `metadata.log.max.snapshot.interval.ms` after it (checked when a commit arrives). The
snapshot id is (the image's last offset + 1, the epoch of that batch), the bytes are Kafka's
(`snapshot.build_snapshot`: header control batch, the image as metadata records, footer), and
`KafkaRaftClient.create_snapshot` stores it as `<offset>-<epoch>.checkpoint` and moves the log start
The Raft log keeps its segments and older snapshots until `metadata.max.retention.bytes` /
`metadata.max.retention.ms` (`KafkaMetadataLog.maybe_clean`, as Kafka's): then its start offset moves up
to a newer snapshot, which is what makes a lagging follower or a new observer fetch that snapshot.

Start: `start()` (needs the running loop); stop: `close()` (a leader resigns first, so the others
elect at once instead of waiting for the fetch timeout). The controller listener's dispatcher
(`controller_apis.ControllerApis`) hands Raft requests to `manager.handle_inbound`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kbroker.client import PLAINTEXT_SECURITY, ClientSecurity
from kbroker.cluster.configs import ConfigHelper
from kbroker.controller.quorum_controller import QuorumController, QuorumControllerConfig
from kbroker.metadata.image import MetadataImage
from kbroker.metadata.image_writer import image_records
from kbroker.metadata.loader import MetadataLoader
from kbroker.metadata.snapshot_generator import SnapshotGenerator
from kbroker.raft import FileQuorumStateStore, KafkaMetadataLog, KafkaRaftClient, OffsetAndEpoch, QuorumConfig
from kbroker.raft.config import Endpoint
from kbroker.raft.metadata_log import CLUSTER_METADATA_DIR, MetadataLogRetention
from kbroker.server.controller_registration import ControllerInfo, ControllerRegistrationManager
from kbroker.server.raft_manager import KafkaRaftManager, MetadataRaftListener, RaftClientAdapter
from kbroker.snapshot import OffsetAndEpoch as SnapshotId
from kbroker.snapshot import build_snapshot

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class KRaftControllerSettings:
    node_id: int
    cluster_id: str
    quorum: QuorumConfig
    controller: QuorumControllerConfig
    metadata_log_dir: Path
    directory_id: uuid.UUID
    # metadata.log.max.record.bytes.between.snapshots / metadata.log.max.snapshot.interval.ms
    max_bytes_between_snapshots: int = 20 * 1024 * 1024
    max_snapshot_interval_ms: int = 3600000
    # How to reach the other voters' controller listener (protocol, ssl.*, sasl.mechanism.controller.protocol).
    controller_security: ClientSecurity = PLAINTEXT_SECURITY
    # This node's controller endpoint (its voter entry, or, for an observer added later, its listener).
    local_endpoint: Endpoint | None = None
    # metadata.max.retention.bytes/ms, metadata.log.segment.bytes/ms (Kafka's defaults when not given).
    metadata_retention: MetadataLogRetention = MetadataLogRetention()


def _listeners_of(endpoint: Endpoint | None) -> dict[str, tuple[str, int]] | None:
    return None if endpoint is None else {endpoint.listener: (endpoint.host, endpoint.port)}


class KRaftControllerLinks:
    def __init__(self, settings: KRaftControllerSettings, *, loader: MetadataLoader, config_helper: ConfigHelper,
                 time_ms: Callable[[], int]) -> None:
        if settings.node_id not in settings.quorum.voters and not settings.quorum.bootstrap_servers:
            raise ValueError(f"node.id {settings.node_id} is not in controller.quorum.voters "
                             f"({', '.join(map(str, sorted(settings.quorum.voters)))}): a process.roles=controller "
                             "node must be a voter")
        self.settings = settings
        self.time_ms = time_ms
        self.metadata_log = KafkaMetadataLog(settings.metadata_log_dir, time_ms, settings.metadata_retention)
        # kraft.version 1 (a --standalone / --initial-controllers quorum): quorum-state v1, and this
        # voter's directory id in its Fetch and Vote requests (its ReplicaKey).
        kraft_version = settings.quorum.kraft_version
        store = FileQuorumStateStore(settings.metadata_log_dir / CLUSTER_METADATA_DIR, version=kraft_version,
                                     voters=sorted(settings.quorum.voters))
        if settings.node_id not in settings.quorum.voters:
            log.info("Controller %d is not a voter: it runs as an observer of the quorum (bootstrap servers %s) "
                     "until it is added (kafka-metadata-quorum add-controller)", settings.node_id,
                     ",".join(f"{e.host}:{e.port}" for e in settings.quorum.bootstrap_servers.values()))
        self.listener = MetadataRaftListener(loader)
        self.client = KafkaRaftClient(settings.node_id, settings.quorum, self.metadata_log, store, self.listener,
                                      random.Random(), time_ms(), cluster_id=settings.cluster_id,
                                      # kraft.version 0 too: UpdateRaftVoter tells the leader this voter's
                                      # directory id for a later kraft.version upgrade (KIP-853).
                                      directory_id=settings.directory_id,
                                      local_listeners=_listeners_of(settings.local_endpoint))
        self.manager = KafkaRaftManager(self.client, settings.quorum, time_ms, on_poll=self._poll_controller,
                                       security=settings.controller_security)
        adapter = RaftClientAdapter(self.manager)
        self.controller = QuorumController(settings.controller, adapter, config_helper, kraft=adapter,
                                           clock=time_ms)
        self.listener.register(self.controller)
        self._controller_timer: asyncio.TimerHandle | None = None
        self.snapshots_written: list[OffsetAndEpoch] = []
        self.snapshot_generator = SnapshotGenerator(
            self._emit_snapshot, max_bytes_since_last_snapshot=settings.max_bytes_between_snapshots,
            max_time_since_last_snapshot_ms=settings.max_snapshot_interval_ms, time_ms=time_ms,
            fault_handler=lambda msg, e: log.error("%s: %s", msg, e, exc_info=e))
        loader.install_publishers([self.snapshot_generator])
        # Its own listener first: a voter restarted on a new port is still in the voter set at its old one
        # until its UpdateRaftVoter commits (KIP-853).
        own = settings.local_endpoint or settings.quorum.voters.get(settings.node_id)
        if own is None:
            raise ValueError(f"controller {settings.node_id} has no controller listener endpoint")
        self.registration = ControllerRegistrationManager(
            ControllerInfo(settings.node_id, uuid.uuid4(), ((own.listener, own.host, own.port),)),
            image=lambda: self.controller.committed_image, leader=self._leader_endpoint,
            security=settings.controller_security)

    def kraft_version(self) -> int:
        """The quorum's kraft.version (the Raft client's latest KRaftVersionRecord)."""
        return self.client.kraft_version()

    def _leader_endpoint(self) -> Endpoint | None:
        leader = self.client.leader_and_epoch().leader_id
        return self.client.endpoint_of(leader) if leader >= 0 else None

    def _emit_snapshot(self, image: MetadataImage, reason: str) -> None:
        """Write a snapshot of `image` (the committed image after a commit) through the Raft client."""
        p = image.provenance
        end = p.last_contained_offset + 1
        latest = self.metadata_log.latest_snapshot_id()
        if end <= self.metadata_log.start_offset() or (latest is not None and end <= latest.offset):
            log.debug("Not writing a snapshot ending at %d: the log already starts there", end)
            return
        # KIP-853: the header carries kraft.version and the voter set in force at the snapshot's end, so a
        # log trimmed behind it (or a replica that fetches it) keeps the voters of dynamic changes.
        level, voters = self.client.voters_record_at(end - 1)
        data = build_snapshot(image_records(image), SnapshotId(end, p.last_contained_epoch),
                              last_contained_log_timestamp=max(p.last_contained_log_time_ms, 0),
                              now_ms=self.time_ms(), kraft_version=level,
                              voters=voters.to_record() if voters is not None else None)
        snapshot_id = self.client.create_snapshot(end, data)
        if snapshot_id.epoch != p.last_contained_epoch:
            log.error("Snapshot %s: the image says epoch %d", snapshot_id, p.last_contained_epoch)
        self.snapshots_written.append(snapshot_id)
        log.info("Wrote KRaft snapshot %020d-%010d.checkpoint (%d bytes) because %s; the metadata log now starts "
                 "at %d", snapshot_id.offset, snapshot_id.epoch, len(data), reason, self.metadata_log.start_offset())

    def start(self) -> None:
        self.manager.start()
        self.registration.start()

    def _poll_controller(self) -> None:
        """After every Raft poll: run the controller's scheduled work when due and re-arm its timer; the
        metadata log's retention runs at most every 60 s (Kafka's cleaner, `KafkaMetadataLog.maybeClean`)."""
        now = self.time_ms()
        self.metadata_log.maybe_clean()
        deadline = self.controller.next_deadline_ms()
        if deadline is not None and deadline <= now:
            try:
                self.controller.poll()
            except Exception:
                log.exception("Controller poll failed")
            deadline = self.controller.next_deadline_ms()
        if self._controller_timer is not None:
            self._controller_timer.cancel()
            self._controller_timer = None
        if deadline is not None:
            loop = asyncio.get_running_loop()
            self._controller_timer = loop.call_later(max(0, deadline - now) / 1000, self.manager.wakeup)

    async def close(self) -> None:
        await self.registration.close()
        if self._controller_timer is not None:
            self._controller_timer.cancel()
        if self.client.is_leader:
            # Graceful: EndQuorumEpoch to the voters, so a new leader is elected at once.
            self.client.resign(self.time_ms())
            self.manager.poll()
            await asyncio.sleep(0.05)
        await self.manager.close()
        self.controller.close()
        self.metadata_log.close()
