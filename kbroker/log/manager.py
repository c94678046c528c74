"""All partitions under ``log.dirs``: startup, creation, deletion, checkpoints, retention, flushing.

Owns Kafka's ``LogManager`` duties: ``meta.properties`` (format on first start, check cluster.id and
node.id afterwards), the clean-shutdown marker (``.kafka_cleanshutdown``: present -> logs load
without rescanning; absent -> segments after the recovery point are recovered), the per-directory
offset checkpoint files (``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
``replication-offset-checkpoint``), ``partition.metadata`` (topic id), placing new partitions in the
directory with the fewest, retention and flush passes driven by the broker's scheduler, and a clean
shutdown (flush, producer snapshots, checkpoints, marker). Synchronous; never imports asyncio.

Several log directories (JBOD, ``log.dirs=a,b``): each has its own ``meta.properties`` (one
cluster.id, its own directory.id), checkpoints and clean-shutdown marker. A new partition goes to
the live directory holding the fewest logs, future logs included (Kafka's ``LogManager.nextLogDirs``;
ties go to the first in ``log.dirs`` order, where Kafka's order among ties is a hash map's).

A failed directory (Kafka's ``LogDirFailureChannel``): an I/O error that leaves a log offline, an
unreadable directory at start-up, or a checkpoint that cannot be written (other than a full disk,
which stays a per-append KAFKA_STORAGE_ERROR, see docs/storage.md) takes the whole directory
offline: every log in it goes offline, no new log is placed there, and the listener (the replica
manager) is told once. ``mark_dir_offline`` is thread-safe: background flushes and checkpoint writes
fail on worker threads. Start-up fails only when every directory is unusable (Kafka's "none of the
specified log dirs ... can be created").

AlterReplicaLogDirs (KIP-113): ``create_future_log`` opens ``<topic>-<p>.<id>-future`` in the target
directory, the replica manager copies into it, and ``replace_current_with_future`` swaps it in (the old
directory is renamed ``-delete`` and removed). A ``-future`` directory found at start-up is a move
the previous run did not finish: the current log is intact, so the copy is deleted and logged.

The metadata log (``__cluster_metadata-0`` in ``metadata.log.dir``) is never one of these logs: it is
skipped when loading, never placed, moved, counted or checkpointed here.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from kbroker.clock import wall_clock_ms
from kbroker.log.checkpoints import (
    CheckpointError,
    atomic_write,
    fsync_dir,
    random_kafka_uuid,
    read_offset_checkpoint,
    read_partition_metadata,
    read_properties,
    uuid_from_base64,
    uuid_to_base64,
    write_offset_checkpoint,
    write_partition_metadata,
    write_properties,
)
from kbroker.log.config import LogConfig
from kbroker.log.errors import KafkaStorageError
from kbroker.log.unified_log import UnifiedLog
from kbroker.protocol.topic import CLUSTER_METADATA_TOPIC_NAME

if TYPE_CHECKING:
    from kbroker.log.cleaner_manager import LogCleaner

__all__ = ["LogManager", "InconsistentMetaPropertiesError", "CLEAN_SHUTDOWN_FILE", "META_PROPERTIES",
           "RECOVERY_POINT_CHECKPOINT", "LOG_START_OFFSET_CHECKPOINT", "REPLICATION_OFFSET_CHECKPOINT",
           "PARTITION_METADATA"]

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
META_PROPERTIES = "meta.properties"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
PARTITION_METADATA = "partition.metadata"
_SPECIAL_DIR_SUFFIXES = ("-delete", "-future", "-stray")

logger = logging.getLogger(__name__)


def _is_disk_full(exc: BaseException) -> bool:
    """A full disk (ENOSPC/EDQUOT) anywhere in the cause chain: recoverable, not a failed directory."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        seen = seen.__cause__
    return False


class LogDirNotFoundError(KafkaStorageError):
    """A path that is not one of ``log.dirs`` (Kafka's LogDirNotFoundException, LOG_DIR_NOT_FOUND)."""


class InconsistentMetaPropertiesError(Exception):
    """A log directory belongs to another cluster or node (Kafka refuses to start)."""


def _parse_partition_dir(name: str) -> tuple[str, int] | None:
    topic, sep, num = name.rpartition("-")
    if not sep or not topic or not num.isdigit() or name.startswith("."):
        return None
    return topic, int(num)


class LogManager:
    def __init__(self, log_dirs: list[Path], default_config: LogConfig, *, node_id: int,
                 cluster_id: str | None = None, time_ms: Callable[[], int] | None = None,
                 config_for_topic: Callable[[str], LogConfig | None] | None = None,
                 background_executor: Callable[[Callable[[], None]], object] | None = None,
                 producer_id_expiration_ms: int = 86400000, recovery_threads_per_data_dir: int = 2) -> None:
        if not log_dirs:
            raise ValueError("log.dirs is empty")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.default_config = default_config
        self.node_id = node_id
        self.cluster_id = cluster_id
        self._time = time_ms or wall_clock_ms
        self._config_for_topic = config_for_topic
        # e.g. ``lambda fn: loop.run_in_executor(None, fn)``: segment-roll fsyncs run there.
        self.background_executor = background_executor
        self.producer_id_expiration_ms = producer_id_expiration_ms  # broker config producer.id.expiration.ms
        # num.recovery.threads.per.data.dir: the threads per directory that close the logs at shutdown.
        self.recovery_threads_per_data_dir = max(1, recovery_threads_per_data_dir)
        self._logs: dict[tuple[str, int], UnifiedLog] = {}
        # partition.metadata files renamed into place and not fsynced yet (_record_partition_metadata).
        self._metadata_flush_lock = threading.Lock()
        self._unflushed_metadata: list[Path] = []
        self._metadata_flush_scheduled = False
        # Checkpoint writes may run on the background executor: a lock serialises them, and the
        # sequence numbers keep an older snapshot from overwriting a newer one written meanwhile.
        self._checkpoint_lock = threading.Lock()
        self._checkpoint_seq = 0
        self._checkpoint_written = 0
        self._log_dir_of: dict[tuple[str, int], Path] = {}
        self.directory_ids: dict[Path, uuid.UUID] = {}
        self.had_clean_shutdown: dict[Path, bool] = {}
        # KIP-966: the broker epoch each directory's clean-shutdown marker recorded (None: no marker, or
        # one without a readable epoch), read before the marker is removed at start-up.
        self.clean_shutdown_broker_epochs: dict[Path, int | None] = {}
        self.started = False
        self.cleaner: LogCleaner | None = None  # told when a partition is deleted
        # Kafka's LogDirFailureChannel: directories taken offline, each reported once to the listener.
        self._offline_dirs: set[Path] = set()
        self._failure_lock = threading.Lock()
        self.log_dir_failure_listener: Callable[[Path], None] | None = None
        # AlterReplicaLogDirs: the future log of a partition being moved, and where it goes.
        self._future_logs: dict[tuple[str, int], UnifiedLog] = {}
        # A target directory given before the partition's log exists (Kafka's preferredLogDirs).
        self.preferred_log_dirs: dict[tuple[str, int], Path] = {}

    # --- startup -------------------------------------------------------------------------------
    def _check_or_format(self, d: Path) -> None:
        path = d / META_PROPERTIES
        props = read_properties(path)
        if props is None:
            if self.cluster_id is None:
                self.cluster_id = uuid_to_base64(random_kafka_uuid())
            dir_id = random_kafka_uuid()
            write_properties(path, {"version": "1", "cluster.id": self.cluster_id,
                                    "node.id": str(self.node_id), "directory.id": uuid_to_base64(dir_id)})
            logger.info("Formatted log directory %s: cluster.id %s, node.id %d", d, self.cluster_id, self.node_id)
            self.directory_ids[d] = dir_id
            return
        # Kafka refuses to start on a meta.properties it cannot understand (KafkaRaftServer's
        # "node ID not found"): rewriting it would silently re-home the directory.
        stored_node = props.get("node.id", props.get("broker.id"))
        if stored_node is None:
            raise InconsistentMetaPropertiesError(
                f"Error: node ID not found in {d}: {path} has no node.id (is it a meta.properties file?). "
                "Restore it, or move the directory away to format a new one.")
        try:
            stored_node_id = int(stored_node)
        except ValueError:
            raise InconsistentMetaPropertiesError(
                f"Error: invalid node.id {stored_node!r} in {path}") from None
        if stored_node_id != self.node_id:
            raise InconsistentMetaPropertiesError(
                f"Stored node id {stored_node} doesn't match previous node id {self.node_id} in {path}. "
                "If you moved your data, make sure your configured node id matches.")
        stored_cluster = props.get("cluster.id")
        if stored_cluster is not None:
            if self.cluster_id is not None and stored_cluster != self.cluster_id:
                raise InconsistentMetaPropertiesError(
                    f"Invalid cluster.id in: {path}. Expected {self.cluster_id}, but read {stored_cluster}")
            self.cluster_id = stored_cluster
        if "directory.id" in props:
            try:
                self.directory_ids[d] = uuid_from_base64(props["directory.id"])
            except ValueError:
                raise InconsistentMetaPropertiesError(
                    f"Error: invalid directory.id {props['directory.id']!r} in {path}") from None
        else:  # older layouts: add a directory id, as Kafka does when it rewrites meta.properties
            dir_id = random_kafka_uuid()
            props = dict(props, **{"directory.id": uuid_to_base64(dir_id), "version": "1",
                                   "node.id": str(self.node_id)})
            props.pop("broker.id", None)
            if self.cluster_id is not None:
                props["cluster.id"] = self.cluster_id
            logger.info("Rewriting %s in the current format: adding directory.id %s", path, uuid_to_base64(dir_id))
            write_properties(path, props)
            self.directory_ids[d] = dir_id

    def startup(self) -> None:
        """Format or check each directory, then load every partition (recovering after a crash).

        A directory that cannot be created, read or loaded starts offline when another one works
        (Kafka's createAndValidateLogDirs / loadLogs); a meta.properties of another cluster or node
        stops the start, as in Kafka."""
        errors: list[str] = []
        for d in self.log_dirs:
            try:
                try:
                    d.mkdir(parents=True, exist_ok=True)
                except OSError as e:
                    raise KafkaStorageError(f"cannot create log directory {d}: {e}") from e
                self._check_or_format(d)
            except (OSError, KafkaStorageError) as e:
                if len(self.log_dirs) == 1:
                    raise
                errors.append(f"{d}: {e}")
                self._mark_offline_at_startup(d, e)
        for d in self.log_dirs:
            if d in self._offline_dirs:
                continue
            try:
                self._load_dir(d)
            except (OSError, KafkaStorageError) as e:
                if len(self.log_dirs) == 1:
                    raise
                errors.append(f"{d}: {e}")
                self._mark_offline_at_startup(d, e)
        if not self.live_log_dirs:
            raise KafkaStorageError("None of the specified log dirs can be used: " + "; ".join(errors))
        self.started = True

    def _mark_offline_at_startup(self, d: Path, e: BaseException) -> None:
        logger.error("Error while loading log dir %s (%s): it is offline; the other log dirs are served", d, e)
        with self._failure_lock:
            self._offline_dirs.add(d)
        for tp in [tp for tp, ld in self._log_dir_of.items() if ld == d]:
            self._logs.pop(tp, None)  # its partitions are hosted offline (KAFKA_STORAGE_ERROR)

    def _read_checkpoint(self, path: Path) -> dict[tuple[str, int], int]:
        try:
            return read_offset_checkpoint(path)
        except CheckpointError as e:
            # Kafka: "Error occurred while reading recovery-point-offset-checkpoint file of directory
            # ..., resetting the recovery checkpoint to 0". Treated like a missing file (full recovery).
            logger.warning("Error occurred while reading %s (%s): resetting its offsets to 0", path, e)
            return {}

    def _load_dir(self, d: Path) -> None:
        marker = d / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        self.had_clean_shutdown[d] = clean
        self.clean_shutdown_broker_epochs[d] = _read_clean_shutdown_epoch(marker) if clean else None
        recovery = self._read_checkpoint(d / RECOVERY_POINT_CHECKPOINT)
        starts = self._read_checkpoint(d / LOG_START_OFFSET_CHECKPOINT)
        hws = self._read_checkpoint(d / REPLICATION_OFFSET_CHECKPOINT)
        configs: dict[str, LogConfig] = {}
        for entry in sorted(os.listdir(d)):
            path = d / entry
            if not path.is_dir():
                continue
            if entry.endswith("-delete"):
                shutil.rmtree(path, ignore_errors=True)  # a deletion interrupted by the shutdown
                continue
            if entry.endswith("-future"):
                # A replica move (AlterReplicaLogDirs) the previous run did not finish. Kafka resumes
                # it; here the copy goes and the current log, which is whole, stays where it is.
                logger.warning("Deleting %s: a replica move to %s that was not finished before the "
                               "broker stopped; the current log is kept, alter the log dir again to move it",
                               path, d)
                shutil.rmtree(path, ignore_errors=True)
                continue
            if entry.endswith(_SPECIAL_DIR_SUFFIXES):
                continue
            tp = _parse_partition_dir(entry)
            if tp is None or tp[0] == CLUSTER_METADATA_TOPIC_NAME:
                # The metadata log is the controller's (kbroker.controller.metadata_log), never a
                # partition of this manager: no retention, checkpoints or cleaning for it (as in Kafka).
                continue
            topic, partition = tp
            config = configs.get(topic)
            if config is None:  # once per topic: resolving it walks every broker and topic config
                config = configs[topic] = self._config(topic)
            log = UnifiedLog(path, config, topic=topic, partition=partition,
                             log_start_offset=starts.get(tp, 0), recovery_point=recovery.get(tp, 0),
                             high_watermark=hws.get(tp, 0), had_clean_shutdown=clean, time_ms=self._time)
            self._adopt(log)
            self._logs[tp] = log
            self._log_dir_of[tp] = d
        if clean:
            # The marker only vouches for the previous run; a crash from now on must trigger recovery.
            marker.unlink()
        try:
            self._checkpoint_dirs([d], background=False, raise_disk_full=True)
        except KafkaStorageError as e:
            # A full disk: serve what is there (reads, and deletions that free space) rather than
            # refuse to start; the periodic checkpoint writes them again.
            logger.error("Cannot write the offset checkpoints of %s at startup (%s): the broker starts anyway; "
                         "appends fail with KAFKA_STORAGE_ERROR until the disk has room", d, e)

    def _config(self, topic: str) -> LogConfig:
        if self._config_for_topic is not None:
            cfg = self._config_for_topic(topic)
            if cfg is not None:
                return cfg
        return self.default_config

    def _adopt(self, log: UnifiedLog) -> None:
        log.background_executor = self.background_executor
        log.on_offline = self._on_log_offline

    # --- failed directories (Kafka's LogDirFailureChannel) -------------------------------------
    def _on_log_offline(self, log: UnifiedLog) -> None:
        self.mark_dir_offline(log.parent_dir, f"log {log.topic}-{log.partition} went offline")

    def mark_dir_offline(self, d: Path, reason: str) -> bool:
        """Take the log directory ``d`` offline (idempotent, any thread); True the first time.

        Every log in it (current and future) goes offline; the listener is told after that."""
        d = self._configured_dir(d) or Path(d)
        with self._failure_lock:
            if d in self._offline_dirs or d not in self.log_dirs:
                return False
            self._offline_dirs.add(d)
        logger.error("Error while handling log dir %s: %s. The dir is offline: its partitions answer "
                     "KAFKA_STORAGE_ERROR until the broker restarts with the dir repaired or removed from log.dirs",
                     d, reason)
        for log in list(self._logs.values()) + list(self._future_logs.values()):
            if log.parent_dir == d and not log.offline:
                log.on_offline = None  # this directory is already being reported
                log.offline = True
        if self.log_dir_failure_listener is not None:
            self.log_dir_failure_listener(d)
        return True

    @property
    def offline_dirs(self) -> list[Path]:
        """Log directories taken offline after a storage error (Kafka's offlineLogDirs)."""
        with self._failure_lock:
            return sorted(self._offline_dirs)

    @property
    def live_log_dirs(self) -> list[Path]:
        """``log.dirs`` in configured order, without the offline ones (Kafka's liveLogDirs)."""
        with self._failure_lock:
            return [d for d in self.log_dirs if d not in self._offline_dirs]

    def _configured_dir(self, path: Path | str) -> Path | None:
        """The ``log.dirs`` entry a path names (absolute, or after resolving links), else None."""
        p = Path(path)
        candidates = {Path(os.path.abspath(p))}
        try:
            candidates.add(p.resolve())
        except OSError:
            pass
        for d in self.log_dirs:
            if d in candidates or Path(os.path.abspath(d)) in candidates:
                return d
            try:
                if d.resolve() in candidates:
                    return d
            except OSError:
                continue
        return None

    def log_dir_for_path(self, path: str) -> Path:
        """The configured directory an AlterReplicaLogDirs path names: LogDirNotFoundError if none,
        KafkaStorageError if it is offline (Kafka's ``isLogDirOnline``)."""
        d = self._configured_dir(path) if path and os.path.isabs(path) else None
        if d is None:
            raise LogDirNotFoundError(f"Failed to find log dir {path}.")
        if d not in self.live_log_dirs:
            raise KafkaStorageError(f"Log directory {path} is offline")
        return d

    # --- partitions ----------------------------------------------------------------------------
    def get_log(self, topic: str, partition: int) -> UnifiedLog | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> list[UnifiedLog]:
        return list(self._logs.values())

    def future_log(self, topic: str, partition: int) -> UnifiedLog | None:
        return self._future_logs.get((topic, partition))

    def future_logs(self) -> list[UnifiedLog]:
        return list(self._future_logs.values())

    def log_dir_of(self, topic: str, partition: int) -> Path | None:
        return self._log_dir_of.get((topic, partition))

    def topic_id_of(self, topic: str, partition: int) -> uuid.UUID | None:
        log = self._logs.get((topic, partition))
        if log is None:
            return None
        try:
            return read_partition_metadata(log.dir / PARTITION_METADATA)
        except CheckpointError:
            return None

    def get_or_create_log(self, topic: str, partition: int, config: LogConfig | None = None,
                          topic_id: uuid.UUID | None = None) -> UnifiedLog:
        tp = (topic, partition)
        log = self._logs.get(tp)
        if log is not None and self._log_dir_of.get(tp) in self.offline_dirs:
            raise KafkaStorageError(f"The log of {topic}-{partition} is in the offline log directory "
                                    f"{self._log_dir_of[tp]}")
        if log is not None and topic_id is not None:
            stored = self.topic_id_of(topic, partition)
            if stored is not None and stored != topic_id:
                # A stray log of a deleted topic that was recreated while we were down (KRaft's stray
                # logs): its data belongs to the old topic id, so it goes.
                self.delete_log(topic, partition)
                log = None
        if log is not None:
            if config is not None and config != log.config:
                log.update_config(config)
            if topic_id is not None and not (log.dir / PARTITION_METADATA).exists():
                self._record_partition_metadata(log.dir, topic_id)
            return log
        if self._log_dir_of.get(tp) in self._offline_dirs:
            # Kafka refuses to create a log while a directory that may hold it is offline: a second
            # copy would be served as if the first had never existed.
            raise KafkaStorageError(f"Can not create log for {topic}-{partition} because log directory "
                                    f"{self._log_dir_of[tp]} is offline")
        preferred = self.preferred_log_dirs.pop(tp, None)
        d = preferred if preferred in self.live_log_dirs else self.next_log_dir()
        try:
            log = UnifiedLog(d / f"{topic}-{partition}", config or self._config(topic), topic=topic,
                             partition=partition, time_ms=self._time)
        except OSError as e:
            raise KafkaStorageError(f"cannot create log {topic}-{partition} in {d}: {e}") from e
        if topic_id is not None:
            self._record_partition_metadata(log.dir, topic_id)
        self._adopt(log)
        self._logs[tp] = log
        self._log_dir_of[tp] = d
        return log

    def _record_partition_metadata(self, log_dir: Path, topic_id: uuid.UUID) -> None:
        """Write ``partition.metadata`` now, fsync it later in a batch (Kafka's
        ``PartitionMetadataFile.record`` then ``maybeFlush``).

        Hosting a new partition used to pay two fsyncs (the file and its directory) on the event
        loop, 10-20 ms each: a thousand new partitions took seconds and starved the broker's
        heartbeats (issue 12). With a ``background_executor`` the file is renamed into place
        unsynced and one background job fsyncs every file recorded since the last job; the page
        cache already serves it to `topic_id_of`. Without an executor (tools, tests) it is
        written and fsynced at once, as before. `shutdown` flushes what is left."""
        path = log_dir / PARTITION_METADATA
        if self.background_executor is None:
            write_partition_metadata(path, topic_id)
            return
        write_partition_metadata(path, topic_id, sync=False)
        with self._metadata_flush_lock:
            self._unflushed_metadata.append(path)
            schedule = not self._metadata_flush_scheduled
            self._metadata_flush_scheduled = True
        if schedule:
            self.background_executor(self.flush_partition_metadata)

    def flush_partition_metadata(self) -> None:
        """fsync every ``partition.metadata`` written unsynced since the last call, then each of
        their directories and the log dirs holding those (new partition directories), once each.
        Runs on a worker thread (os.fsync releases the GIL); a log deleted meanwhile is skipped.

        A failed fsync takes the file's log directory offline, as Kafka's ``maybeFlush`` hands its
        IOException to ``LogDirFailureChannel.maybeAddOfflineLogDir`` ("Error while writing partition
        metadata file"): the page cache may have lost the topic id the broker already serves."""
        with self._metadata_flush_lock:
            paths, self._unflushed_metadata = self._unflushed_metadata, []
            self._metadata_flush_scheduled = False
        if not paths:
            return
        dirs: dict[Path, None] = {}
        for path in paths:
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue  # deleted meanwhile (a topic deleted right after its creation)
            try:
                os.fsync(fd)
            except OSError as e:
                self.mark_dir_offline(path.parent.parent, f"Error while writing partition metadata file {path}: {e}")
                continue
            finally:
                os.close(fd)
            dirs[path.parent] = None
        for d in list(dirs):
            dirs[d.parent] = None
        for d in dirs:
            fsync_dir(d)

    def next_log_dir(self) -> Path:
        """Where a new log goes: the live directory with the fewest logs, future logs counted
        (Kafka's ``LogManager.nextLogDirs``); ties go to the first in ``log.dirs``."""
        live = self.live_log_dirs
        if not live:
            raise KafkaStorageError("No log directory is online: cannot create a log")
        if len(live) == 1:
            return live[0]  # Kafka too skips the count (a scan of every log per new partition)
        counts = {d: 0 for d in live}
        for tp, d in self._log_dir_of.items():
            if d in counts and tp in self._logs:
                counts[d] += 1
        for log in self._future_logs.values():
            if log.parent_dir in counts:
                counts[log.parent_dir] += 1
        return min(live, key=lambda d: counts[d])

    # --- replica moves between directories (AlterReplicaLogDirs, KIP-113) ---------------------
    def create_future_log(self, topic: str, partition: int, destination: Path) -> UnifiedLog | None:
        """Open the future log of ``topic-partition`` in ``destination`` (a live ``log.dirs`` entry).

        None when the partition already lives there (nothing to move); an existing future log in
        the same destination is returned as is, one elsewhere is dropped first (Kafka's
        ``futureReplicaDirChanged``). The future log starts at the current log start offset and
        carries the partition's topic id; the caller copies the records into it."""
        tp = (topic, partition)
        current = self._logs.get(tp)
        if current is None:
            raise KeyError(tp)
        if self._offline_dirs:
            # Kafka's LogManager: no future log while a directory is offline (it might hold one).
            raise KafkaStorageError(f"Can not create a future log for {topic}-{partition} because log "
                                    f"directories {', '.join(map(str, self.offline_dirs))} are offline")
        existing = self._future_logs.get(tp)
        if existing is not None:
            if existing.parent_dir == destination:
                return existing
            self.abort_future_log(topic, partition)
        if self._log_dir_of[tp] == destination:
            return None
        name = f"{topic}-{partition}.{uuid.uuid4().hex}-future"
        try:
            future = UnifiedLog(destination / name, current.config, topic=topic, partition=partition,
                                time_ms=self._time)
            if current.log_start_offset > 0:
                future.truncate_fully_and_start_at(current.log_start_offset)
            topic_id = self.topic_id_of(topic, partition)
            if topic_id is not None:
                write_partition_metadata(future.dir / PARTITION_METADATA, topic_id)
        except OSError as e:
            raise KafkaStorageError(f"cannot create the future log of {topic}-{partition} in {destination}: {e}") from e
        future.is_future = True
        self._adopt(future)
        self._future_logs[tp] = future
        logger.info("Created the future log of %s-%d in %s (moving from %s)", topic, partition, destination,
                    self._log_dir_of[tp])
        return future

    def abort_future_log(self, topic: str, partition: int) -> None:
        """Drop the future log of a move that stops (a new destination, the partition deleted)."""
        future = self._future_logs.pop((topic, partition), None)
        if future is None:
            return
        future.on_offline = None
        future.close()
        future.delete()
        logger.info("Removed the future log of %s-%d in %s", topic, partition, future.parent_dir)

    def forget_future_log(self, topic: str, partition: int) -> None:
        """Drop a future log whose directory failed (nothing can be removed there)."""
        self._future_logs.pop((topic, partition), None)

    def replace_current_with_future(self, topic: str, partition: int) -> UnifiedLog:
        """Swap the caught-up future log in (Kafka's ``replaceCurrentWithFutureLog``).

        The caller guarantees nothing was appended since the future log reached the current log
        end offset. The future directory is renamed ``<topic>-<p>`` in its directory, the old log
        renamed ``-delete`` and removed, and both directories' checkpoints rewritten."""
        tp = (topic, partition)
        future = self._future_logs[tp]
        current = self._logs[tp]
        old_dir = self._log_dir_of[tp]
        new_dir = future.parent_dir
        future.high_watermark = current.high_watermark
        future.flush()
        current.on_offline = None  # the old copy's errors from here on are not its directory's
        try:
            current.rename_dir(old_dir / f"{topic}-{partition}.{uuid.uuid4().hex}-delete")
            future.rename_dir(new_dir / f"{topic}-{partition}")
        except OSError as e:
            raise KafkaStorageError(f"cannot swap in the future log of {topic}-{partition}: {e}") from e
        del self._future_logs[tp]
        future.is_future = False
        self._logs[tp] = future
        self._log_dir_of[tp] = new_dir
        current.close()
        current.delete()
        if self.cleaner is not None:
            self.cleaner.forget(topic, partition, old_dir)
        self._checkpoint_dirs([new_dir, old_dir], background=False)
        logger.info("The log dir of %s-%d is now %s (moved from %s)", topic, partition, new_dir, old_dir)
        return future

    def delete_log(self, topic: str, partition: int) -> None:
        """Forget the partition and remove its directory (renamed ``<tp>.<id>-delete`` first, like Kafka).

        Files are unlinked at once; FileRegions already handed out keep their open file readable."""
        tp = (topic, partition)
        self.abort_future_log(topic, partition)
        log = self._logs.pop(tp, None)
        d = self._log_dir_of.pop(tp, None)
        if log is None or d is None:
            return
        if d in self._offline_dirs:
            return  # nothing can be done in a failed directory; its next start finds a stray
        target = d / f"{topic}-{partition}.{uuid.uuid4().hex}-delete"
        try:
            os.replace(log.dir, target)
        except OSError as e:
            raise KafkaStorageError(f"cannot rename {log.dir} for deletion: {e}") from e
        log.dir = target
        log.delete()
        if self.cleaner is not None:
            self.cleaner.forget(topic, partition, d)
        self._checkpoint_dir(d)

    # --- periodic work -------------------------------------------------------------------------
    def checkpoint(self, *, background: bool = False) -> None:
        """Write the three offset checkpoints of every log dir.

        The offsets are read now, on the caller's thread; with ``background`` and a
        ``background_executor`` the file writes and their fsyncs run there, so the periodic
        checkpoint never stalls the event loop.
        """
        self._checkpoint_dirs(self.log_dirs, background=background)

    def _checkpoint_dir(self, d: Path) -> None:
        self._checkpoint_dirs([d], background=False)

    def _checkpoint_dirs(self, dirs: list[Path], *, background: bool, raise_disk_full: bool = False) -> set[Path]:
        """Write the checkpoints of the live ones of ``dirs``. A write that fails for another reason
        than a full disk takes that directory offline (Kafka: a checkpoint IOException is a log dir
        failure); a full disk raises KafkaStorageError to the caller when ``raise_disk_full``, and is
        logged otherwise (the next pass writes them again)."""
        offline = set(self.offline_dirs)
        failed: set[Path] = set()
        snapshot = [(d, self._offsets_of_dir(d)) for d in dirs if d not in offline]
        with self._checkpoint_lock:
            self._checkpoint_seq += 1
            seq = self._checkpoint_seq

        def write() -> None:
            with self._checkpoint_lock:
                if seq < self._checkpoint_written:
                    return  # a newer snapshot is already on disk
                disk_full: KafkaStorageError | None = None
                for d, offsets in snapshot:
                    try:
                        for name, values in offsets.items():
                            write_offset_checkpoint(d / name, values)
                    except KafkaStorageError as e:
                        failed.add(d)
                        if not _is_disk_full(e):
                            self.mark_dir_offline(d, f"cannot write its checkpoints: {e}")
                        elif raise_disk_full:
                            disk_full = e
                        else:
                            logger.error("Cannot write the offset checkpoints of %s: %s", d, e)
                self._checkpoint_written = seq
                if disk_full is not None:
                    raise disk_full

        if background and self.background_executor is not None:
            self.background_executor(write)
        else:
            write()
        return failed

    def _offsets_of_dir(self, d: Path) -> dict[str, dict[tuple[str, int], int]]:
        logs = {tp: log for tp, log in self._logs.items() if self._log_dir_of.get(tp) == d}
        return {
            RECOVERY_POINT_CHECKPOINT: {tp: lg.recovery_point for tp, lg in logs.items()},
            LOG_START_OFFSET_CHECKPOINT: {tp: lg.log_start_offset for tp, lg in logs.items() if lg.log_start_offset > 0},
            REPLICATION_OFFSET_CHECKPOINT: {tp: lg.high_watermark for tp, lg in logs.items()},
        }

    def cleanup_logs(self, now_ms: int | None = None) -> int:
        """One retention pass (log.retention.check.interval.ms); returns the number of segments deleted."""
        now = self._time() if now_ms is None else now_ms
        total = 0
        for log in list(self._logs.values()):
            if log.offline:
                continue
            total += log.delete_old_segments(now)
            log.delete_pending_files(now)
            log.producer_state.remove_expired(now, self.producer_id_expiration_ms)
        return total

    def flush_dirty_logs(self, now_ms: int | None = None) -> None:
        """fsync logs whose flush.ms has elapsed since their last flush."""
        now = self._time() if now_ms is None else now_ms
        for log in self._logs.values():
            if not log.offline and log.unflushed_messages > 0 and now - log.last_flush_ms >= log.config.flush_ms:
                log.flush()

    def read_broker_epoch_from_clean_shutdown_files(self) -> int:
        """Kafka's `LogManager.readBrokerEpochFromCleanShutdownFiles` (KIP-966): the broker epoch the
        previous run shut down with, sent as BrokerRegistration's `previous_broker_epoch` so the controller
        knows the shutdown was clean (and keeps this broker in the ELRs). -1 when any directory is offline,
        has no marker, or the markers disagree."""
        epoch = -1
        for d in self.log_dirs:
            if d in self._offline_dirs:
                return -1
            e = self.clean_shutdown_broker_epochs.get(d)
            if e is None or e < 0 or (epoch != -1 and e != epoch):
                return -1
            epoch = e
        return epoch

    def shutdown(self, broker_epoch: int = -1) -> None:
        """Close every log (flush + producer snapshot), write checkpoints and the clean-shutdown marker
        (Kafka's `CleanShutdownFileHandler`: `{"version":0,"brokerEpoch":N}`, the broker's epoch, KIP-966).

        As Kafka's `LogManager.shutdown`, the logs close on `num.recovery.threads.per.data.dir` threads per
        directory: closing is fsyncs (a log's unflushed tail, its producer snapshot, its leader epoch
        checkpoint), which release the GIL and which the file system commits together, so thousands of
        partitions close in a fraction of the time one thread takes (issue 13). The checkpoints and the
        marker are written once per directory after every log of it closed."""
        failed_dirs: set[Path] = set(self.offline_dirs)
        self.flush_partition_metadata()
        for tp in list(self._future_logs):
            self.abort_future_log(*tp)
        lock = threading.Lock()

        def close(tp: tuple[str, int], log: UnifiedLog) -> None:
            try:
                if log.offline:
                    with lock:
                        failed_dirs.add(self._log_dir_of[tp])
                log.close()
            except KafkaStorageError:
                with lock:
                    failed_dirs.add(self._log_dir_of[tp])

        logs = list(self._logs.items())
        workers = min(len(logs), self.recovery_threads_per_data_dir * len(self.log_dirs))
        if workers <= 1:
            for tp, log in logs:
                close(tp, log)
        else:
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="log-closing") as pool:
                for f in [pool.submit(close, tp, log) for tp, log in logs]:
                    f.result()
        failed_dirs |= self._checkpoint_dirs([d for d in self.log_dirs if d not in failed_dirs], background=False)
        for d in self.log_dirs:
            if d not in failed_dirs and d not in self._offline_dirs:
                atomic_write(d / CLEAN_SHUTDOWN_FILE, json.dumps({"version": 0, "brokerEpoch": broker_epoch}))
        self._logs.clear()
        self.started = False


def _read_clean_shutdown_epoch(marker: Path) -> int | None:
    """The `brokerEpoch` of a clean-shutdown marker; None for an old (empty) or unreadable one."""
    try:
        value = json.loads(marker.read_text(encoding="utf-8") or "{}").get("brokerEpoch")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) else None
