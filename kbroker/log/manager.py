"""All partitions under ``log.dirs``: startup, creation, deletion, checkpoints, retention, flushing.

Owns Kafka's ``LogManager`` duties: ``meta.properties`` (format on first start, check cluster.id and
node.id afterwards), the clean-shutdown marker (``.kafka_cleanshutdown``: present -> logs load
without rescanning; absent -> segments after the recovery point are recovered), the per-directory
offset checkpoint files (``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
``replication-offset-checkpoint``), ``partition.metadata`` (topic id), placing new partitions in the
directory with the fewest, retention and flush passes driven by the broker's scheduler, and a clean
shutdown (flush, producer snapshots, checkpoints, marker). Synchronous; never imports asyncio.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from kbroker.clock import wall_clock_ms
from kbroker.log.checkpoints import (
    CheckpointError,
    atomic_write,
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
                 producer_id_expiration_ms: int = 86400000) -> None:
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
        self._logs: dict[tuple[str, int], UnifiedLog] = {}
        # Checkpoint writes may run on the background executor: a lock serialises them, and the
        # sequence numbers keep an older snapshot from overwriting a newer one written meanwhile.
        self._checkpoint_lock = threading.Lock()
        self._checkpoint_seq = 0
        self._checkpoint_written = 0
        self._log_dir_of: dict[tuple[str, int], Path] = {}
        self.directory_ids: dict[Path, uuid.UUID] = {}
        self.had_clean_shutdown: dict[Path, bool] = {}
        self.started = False
        self.cleaner: LogCleaner | None = None  # told when a partition is deleted

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
        """Format or check each directory, then load every partition (recovering after a crash)."""
        for d in self.log_dirs:
            try:
                d.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise KafkaStorageError(f"cannot create log directory {d}: {e}") from e
            self._check_or_format(d)
        for d in self.log_dirs:
            self._load_dir(d)
        self.started = True

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
            log.background_executor = self.background_executor
            self._logs[tp] = log
            self._log_dir_of[tp] = d
        if clean:
            # The marker only vouches for the previous run; a crash from now on must trigger recovery.
            marker.unlink()
        try:
            self._checkpoint_dir(d)
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

    # --- partitions ----------------------------------------------------------------------------
    def get_log(self, topic: str, partition: int) -> UnifiedLog | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> list[UnifiedLog]:
        return list(self._logs.values())

    @property
    def offline_dirs(self) -> list[Path]:
        """Log directories holding a log that went offline after a storage error it could not undo."""
        return sorted({d for tp, d in self._log_dir_of.items() if self._logs[tp].offline})

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
                write_partition_metadata(log.dir / PARTITION_METADATA, topic_id)
            return log
        d = min(self.log_dirs, key=lambda x: sum(1 for v in self._log_dir_of.values() if v == x))
        try:
            log = UnifiedLog(d / f"{topic}-{partition}", config or self._config(topic), topic=topic,
                             partition=partition, time_ms=self._time)
        except OSError as e:
            raise KafkaStorageError(f"cannot create log {topic}-{partition} in {d}: {e}") from e
        if topic_id is not None:
            write_partition_metadata(log.dir / PARTITION_METADATA, topic_id)
        log.background_executor = self.background_executor
        self._logs[tp] = log
        self._log_dir_of[tp] = d
        return log

    def delete_log(self, topic: str, partition: int) -> None:
        """Forget the partition and remove its directory (renamed ``<tp>.<id>-delete`` first, like Kafka).

        Files are unlinked at once; FileRegions already handed out keep their open file readable."""
        tp = (topic, partition)
        log = self._logs.pop(tp, None)
        d = self._log_dir_of.pop(tp, None)
        if log is None or d is None:
            return
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

    def _checkpoint_dirs(self, dirs: list[Path], *, background: bool) -> None:
        snapshot = [(d, self._offsets_of_dir(d)) for d in dirs]
        with self._checkpoint_lock:
            self._checkpoint_seq += 1
            seq = self._checkpoint_seq

        def write() -> None:
            with self._checkpoint_lock:
                if seq < self._checkpoint_written:
                    return  # a newer snapshot is already on disk
                for d, offsets in snapshot:
                    for name, values in offsets.items():
                        write_offset_checkpoint(d / name, values)
                self._checkpoint_written = seq

        if background and self.background_executor is not None:
            self.background_executor(write)
        else:
            write()

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

    def shutdown(self) -> None:
        """Close every log (flush + producer snapshot), write checkpoints and the clean-shutdown marker."""
        failed_dirs: set[Path] = set()
        for tp, log in list(self._logs.items()):
            try:
                if log.offline:
                    failed_dirs.add(self._log_dir_of[tp])
                log.close()
            except KafkaStorageError:
                failed_dirs.add(self._log_dir_of[tp])
        for d in self.log_dirs:
            self._checkpoint_dir(d)
            if d not in failed_dirs:
                atomic_write(d / CLEAN_SHUTDOWN_FILE, json.dumps({"version": 0, "brokerEpoch": -1}))
        self._logs.clear()
        self.started = False
