"""`KRaftBrokerLinks`: a broker's links to a KRaft cluster, started and stopped in Kafka's order.

Owns the pieces a `process.roles=broker` node has instead of the single node's `LocalController`: the
local `__cluster_metadata-0` (`raft.KafkaMetadataLog`, the log class a controller's Raft client keeps
too), the `MetadataFetcher` (Raft observer), the
`ControllerChannel`, the `RemoteController` the API handlers call, and the `BrokerLifecycleManager`.

Start (driven by `kbroker.broker.Broker`): `load_local()` (a local snapshot, if any) -> `catch_up()`
(fetch until the image holds everything the leader has committed) -> the broker binds its listeners ->
`register(listeners)` (BrokerRegistration, heartbeats, wait until the controller unfences it) -> serve.
Stop: `controlled_shutdown()` while still serving (the controller moves leadership away), then the
broker closes its listeners, then `close()`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from kbroker.metadata.cache import MetadataCache
from kbroker.metadata.image import MetadataImage
from kbroker.metadata.image_writer import image_records
from kbroker.metadata.loader import MetadataLoader
from kbroker.metadata.snapshot_generator import SnapshotGenerator
from kbroker.raft.metadata_log import KafkaMetadataLog
from kbroker.raft.partition_state import KRaftControlRecordStateMachine
from kbroker.raft.raft_log import OffsetAndEpoch
from kbroker.raft.voter_set import VoterSet
from kbroker.server.broker_lifecycle import (
    BrokerLifecycle,
    BrokerLifecycleManager,
    BrokerState,
    RegistrationInfo,
    listeners_for_registration,
)
from kbroker.server.controller_channel import ControllerChannel
from kbroker.server.metadata_fetcher import MetadataFetcher
from kbroker.server.metadata_follower import MetadataFollower, RaftMetadataFollower
from kbroker.server.remote_controller import RemoteController
from kbroker.server.settings import KRaftBrokerSettings
from kbroker.snapshot import OffsetAndEpoch as SnapshotId
from kbroker.snapshot import build_snapshot

log = logging.getLogger(__name__)


class KRaftStartupError(Exception):
    """The broker could not join the cluster (no quorum leader, a refused registration, ...)."""


class KRaftBrokerLinks:
    def __init__(self, settings: KRaftBrokerSettings, *, metadata_log_dir: Path, loader: MetadataLoader,
                 cache: MetadataCache, time_ms: Callable[[], int],
                 offline_log_dirs: Callable[[], Sequence[uuid.UUID]] = lambda: (),
                 follower: MetadataFollower | None = None, incarnation_id: uuid.UUID | None = None) -> None:
        """`follower`: on a combined node, the broker side of the node's own Raft client
        (`RaftMetadataFollower`); without it, a `MetadataFetcher` over this node's own copy of the log.
        `incarnation_id`: this process's (a combined node's controller side knows it too); else a new one."""
        self.settings = settings
        self.time_ms = time_ms
        self.offline_log_dirs = offline_log_dirs
        self.cache = cache
        self.metadata_log: KafkaMetadataLog | None = None
        # kraft.version as this broker's copy of the metadata log says it (the latest KRaftVersionRecord,
        # read incrementally): what its ApiVersions finalizes (Kafka's KRaftMetadataCache.features).
        self._control_records = KRaftControlRecordStateMachine(VoterSet({}), 0)
        self.fetcher: MetadataFollower
        if follower is None:
            self.metadata_log = KafkaMetadataLog(metadata_log_dir, time_ms, settings.metadata_retention)
            self.fetcher = MetadataFetcher(settings, self.metadata_log, loader)
            if settings.metadata_retention is not None:
                # Kafka's BrokerServer: a SnapshotGenerator on the broker's loader, so its own log is trimmed
                # behind its own snapshots by metadata.max.retention.bytes/ms.
                loader.install_publishers([SnapshotGenerator(
                    self._emit_snapshot, max_bytes_since_last_snapshot=settings.max_bytes_between_snapshots,
                    max_time_since_last_snapshot_ms=settings.max_snapshot_interval_ms, time_ms=time_ms,
                    fault_handler=lambda msg, e: log.error("%s: %s", msg, e, exc_info=e))])
        else:
            self.fetcher = follower
        self._combined = follower if isinstance(follower, RaftMetadataFollower) else None
        self.channel = ControllerChannel(self.fetcher, node_id=settings.node_id,
                                         request_timeout_ms=settings.controller_socket_timeout_ms,
                                         security=settings.controller_security)
        self.incarnation_id = incarnation_id if incarnation_id is not None else uuid.uuid4()
        self.lifecycle: BrokerLifecycleManager | None = None
        self.controller = RemoteController(node_id=settings.node_id, channel=self.channel, fetcher=self.fetcher,
                                           cache=cache, broker_epoch=self.broker_epoch,
                                           request_timeout_ms=settings.controller_socket_timeout_ms)

    def kraft_version(self) -> int:
        """The quorum's kraft.version as this broker's metadata log says it (0 on a combined node's broker
        side, whose controller side answers instead)."""
        if self.metadata_log is None:
            return 0
        self._control_records.sync(self.metadata_log)
        return self._control_records.kraft_version()

    def _emit_snapshot(self, image: MetadataImage, reason: str) -> None:
        """A snapshot of the broker's committed image into its own metadata log (then retention)."""
        metadata_log = self.metadata_log
        assert metadata_log is not None
        p = image.provenance
        end = p.last_contained_offset + 1
        latest = metadata_log.latest_snapshot_id()
        if end <= metadata_log.start_offset() or end > metadata_log.end_offset() or (
                latest is not None and end <= latest.offset):
            return
        data = build_snapshot(image_records(image), SnapshotId(end, p.last_contained_epoch),
                              last_contained_log_timestamp=max(p.last_contained_log_time_ms, 0),
                              now_ms=self.time_ms())
        snapshot_id = OffsetAndEpoch(end, p.last_contained_epoch)
        metadata_log.create_snapshot(snapshot_id, data)
        metadata_log.delete_before_snapshot(snapshot_id)
        log.info("Wrote KRaft snapshot %020d-%010d.checkpoint (%d bytes) because %s; the metadata log now starts "
                 "at %d", end, p.last_contained_epoch, len(data), reason, metadata_log.start_offset())

    def broker_epoch(self) -> int:
        return -1 if self.lifecycle is None else self.lifecycle.broker_epoch

    def load_local(self) -> None:
        self.fetcher.load_local()

    async def catch_up(self) -> None:
        """Fetch the metadata log until the image holds what the quorum has committed."""
        self.fetcher.start()
        timeout = self.settings.initial_registration_timeout_ms / 1000
        deadline = asyncio.get_running_loop().time() + timeout
        while not self.fetcher.caught_up.is_set():
            if self.fetcher.fatal_error is not None:
                raise KRaftStartupError(self.fetcher.fatal_error)
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                raise KRaftStartupError(
                    f"no metadata from the controller quorum ({', '.join(map(str, self.settings.quorum_bootstrap))}) "
                    f"within initial.broker.registration.timeout.ms={self.settings.initial_registration_timeout_ms}")
            try:
                await asyncio.wait_for(self.fetcher.caught_up.wait(), min(left, 0.5))
            except TimeoutError:
                continue

    async def register(self, listeners: Sequence[tuple[str, str, int, str]]) -> int:
        """Register with the advertised listeners (name, host, port, security protocol) and wait until the
        controller unfences this broker; the broker epoch."""
        s = self.settings
        info = RegistrationInfo(node_id=s.node_id, cluster_id=s.cluster_id, incarnation_id=self.incarnation_id,
                                listeners=listeners_for_registration(listeners), log_dirs=s.log_dir_ids, rack=s.rack,
                                previous_broker_epoch=s.previous_broker_epoch)
        lifecycle = BrokerLifecycle(info, heartbeat_interval_ms=s.heartbeat_interval_ms,
                                    retry_backoff_ms=max(s.quorum_retry_backoff_ms, 100))
        self.lifecycle = BrokerLifecycleManager(lifecycle, self.channel, lambda: self.fetcher.applied_offset,
                                                self.time_ms, self.offline_log_dirs)
        self.lifecycle.start()
        # Registration happens after the initial catch-up here, so the broker is ready to be unfenced at
        # once (Kafka's BrokerServer calls setReadyToUnfence after its catch-up and publishers).
        self.lifecycle.set_ready_to_unfence()
        try:
            await self.lifecycle.wait_unfenced(s.initial_registration_timeout_ms / 1000)
        except TimeoutError:
            err = lifecycle.last_error
            raise KRaftStartupError(
                f"the controller did not unfence broker {s.node_id} within "
                f"initial.broker.registration.timeout.ms={s.initial_registration_timeout_ms}"
                + (f" (last error: {err.name if hasattr(err, 'name') else err})" if err is not None else "")
            ) from None
        await self._wait_until_image_shows_unfenced(lifecycle.broker_epoch, s.initial_registration_timeout_ms / 1000)
        return lifecycle.broker_epoch

    async def _wait_until_image_shows_unfenced(self, broker_epoch: int, timeout_s: float) -> None:
        """The heartbeat answers "unfenced" once the controller committed the UnfenceBrokerRecord; this
        broker's own image holds that record one metadata fetch later. Until then its Metadata answers
        list no live broker (librdkafka's admin client then waits "for controller" for a long time), so
        start-up also waits, bounded, for its own image to show it registered with this epoch and
        unfenced before the broker announces it has started."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            reg = self.cache.image.cluster.broker(self.settings.node_id)
            if reg is not None and reg.epoch == broker_epoch and not reg.fenced:
                return
            if loop.time() >= deadline:
                log.warning("Broker %d: unfenced by the controller, but its metadata image does not show it "
                            "yet; starting anyway", self.settings.node_id)
                return
            await asyncio.sleep(0.02)

    async def controlled_shutdown(self, timeout_s: float) -> None:
        lc = self.lifecycle
        if lc is None or not self.settings.controlled_shutdown_enable:
            return
        if lc.state in (BrokerState.RUNNING, BrokerState.RECOVERY):
            log.info("Controlled shutdown: asking the controller to move leadership away from broker %d",
                     self.settings.node_id)
            if self._combined is None:
                await lc.controlled_shutdown(timeout_s)
                return
            # A combined node: the controlled shutdown is best effort (Kafka's BrokerServer gives it up at
            # its deadline). When every voter of `serve --nodes N` stops, the last ones lose their quorum
            # and no controller can ever commit their shutdown: give up once this node's Raft client
            # has been out of touch with a quorum for `controller.quorum.fetch.timeout.ms` (no Fetch
            # answered by a leader; a leader without a majority resigns at check-quorum), not
            # after the whole `kbroker.shutdown.timeout.ms`. A normal election is done well within it.
            waiting = asyncio.ensure_future(lc.controlled_shutdown(timeout_s))
            lost = asyncio.ensure_future(self._quorum_lost(self._combined, self.settings.quorum_fetch_timeout_ms / 1000))
            try:
                await asyncio.wait({waiting, lost}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for t in (waiting, lost):
                    t.cancel()
            if lost.done() and not lost.cancelled() and not waiting.done():
                log.warning("Controlled shutdown of broker %d given up: out of touch with a quorum for %d ms "
                            "(the other voters are gone)", self.settings.node_id,
                            self.settings.quorum_fetch_timeout_ms)

    @staticmethod
    async def _quorum_lost(follower: RaftMetadataFollower, for_s: float) -> None:
        """Returns once this node has been out of touch with a quorum for `for_s` seconds in a row
        (`RaftMetadataFollower.quorum_reachable`; a lone voter may see its old leader again between
        failed elections, so "no leader known" alone is not the test)."""
        loop = asyncio.get_running_loop()
        since: float | None = None
        while True:
            if not follower.quorum_reachable():
                since = loop.time() if since is None else since
                if loop.time() - since >= for_s:
                    return
            else:
                since = None
            await asyncio.sleep(0.1)

    async def close(self) -> None:
        if self.lifecycle is not None:
            await self.lifecycle.close()
        await self.fetcher.close()
        await self.channel.close()
        if self.metadata_log is not None:
            self.metadata_log.close()
