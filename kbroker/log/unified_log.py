"""One partition's log: an ordered list of segments plus its offsets, epoch cache and producer state.

Owns Kafka's ``UnifiedLog``/``LocalLog`` behaviour for local storage: leader and follower appends
(validation, offset assignment, rolling, indexes, leader epochs, idempotence), reads by offset that
return ``FileRegion``s (never copies; a read never spans segments, like Kafka), reads by timestamp,
the log start offset and the high watermark, truncation, flushing and the recovery point.
DeleteRecords and time/size retention (``.deleted`` renaming, ``file.delete.delay.ms``) live in
``kbroker.log.retention``, loading and crash recovery in ``kbroker.log.recovery``, compaction in
``kbroker.log.cleaner``.
"""

from __future__ import annotations

import bisect
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from kbroker.clock import wall_clock_ms
from kbroker.log.config import LogConfig
from kbroker.log.errors import KafkaStorageError, LogOfflineError, OffsetOutOfRangeError
from kbroker.log.leader_epoch import LEADER_EPOCH_CHECKPOINT, LeaderEpochFileCache
from kbroker.log.producer_state import CompletedTxn, ProducerStateManager
from kbroker.log.results import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    FetchDataInfo,
    LogAppendInfo,
)
from kbroker.log.retention import LogRetention
from kbroker.log.segment import LogSegment
from kbroker.log.transaction_index import AbortedTransactions, AbortedTxn
from kbroker.log.validator import (
    CheckedBatch,
    assign_offsets,
    check_and_assign_plain,
    check_produced,
    split_batches,
    validate_and_assign_offsets,
)
from kbroker.metrics.meters import LOG_FLUSH_STATS
from kbroker.protocol.record_format import ControlRecordType, parse_control_record_type
from kbroker.protocol.records import BatchHeader, RecordBatch, build_control_batch
from kbroker.protocol.regions import FileRegion

__all__ = ["FetchDataInfo", "LogAppendInfo", "UnifiedLog", "EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP",
           "MAX_TIMESTAMP", "EARLIEST_LOCAL_TIMESTAMP", "LATEST_TIERED_TIMESTAMP"]

logger = logging.getLogger(__name__)


def marker_type(batch: memoryview | bytes) -> int | None:
    """The control record type of a control batch (0 ABORT, 1 COMMIT), None when unreadable."""
    try:
        for record in RecordBatch(memoryview(batch)).iter_records():
            key = record.key
            return int(parse_control_record_type(None if key is None else bytes(key)))
    except Exception:  # noqa: BLE001 - a malformed control batch is not a marker
        return None
    return None


class UnifiedLog(LogRetention):
    def __init__(self, directory: Path, config: LogConfig, *, topic: str | None = None, partition: int | None = None,
                 log_start_offset: int = 0, recovery_point: int = 0, high_watermark: int = 0,
                 had_clean_shutdown: bool = True, time_ms: Callable[[], int] | None = None) -> None:
        self.dir = Path(directory)
        if topic is None or partition is None:
            name, _, num = self.dir.name.rpartition("-")
            topic, partition = name, int(num)
        self.topic, self.partition = topic, partition
        self._topic_partition = f"{topic}-{partition}"  # for error messages, built once
        self.config = config
        self._time = time_ms or wall_clock_ms
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.log_start_offset = log_start_offset
        self.log_end_offset = 0
        self.recovery_point = recovery_point
        self.high_watermark = 0
        self._offline = False
        # Called once when the log goes offline (LogManager: the whole log directory goes offline,
        # Kafka's LogDirFailureChannel). May run on a worker thread (a background flush).
        self.on_offline: Callable[[UnifiedLog], None] | None = None
        # A "-future" log: the copy AlterReplicaLogDirs builds in another directory (KIP-113).
        self.is_future = False
        self._append_failing = False  # a storage error was logged and no append has succeeded since
        self._offline_logged = False
        # Runs a callable off the event loop (set by LogManager; None = synchronous fsyncs).
        self.background_executor: Callable[[Callable[[], None]], object] | None = None
        self.last_flush_ms = self._time()
        self._pending_deletes: list[tuple[int, list[Path], LogSegment | None]] = []
        created = not self.dir.is_dir()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.leader_epoch_cache = LeaderEpochFileCache(self.dir / LEADER_EPOCH_CHECKPOINT)
        self.producer_state = ProducerStateManager(self.dir)
        self.aborted_txns = AbortedTransactions(self.dir)
        from kbroker.log.recovery import (  # noqa: PLC0415 - builds on this module
            load_segments,
            new_log_segments,
            rebuild_producer_state,
        )

        if created:  # a new partition's directory: nothing in it to load
            loaded = new_log_segments(self.dir, config, log_start_offset=log_start_offset,
                                      recovery_point=recovery_point, had_clean_shutdown=had_clean_shutdown,
                                      time_ms=self._time)
        else:
            loaded = load_segments(self.dir, config, log_start_offset=log_start_offset, recovery_point=recovery_point,
                                   had_clean_shutdown=had_clean_shutdown, leader_epoch_cache=self.leader_epoch_cache,
                                   producer_state=self.producer_state, time_ms=self._time,
                                   topic_partition=f"{topic}-{partition}")
        for seg in loaded.segments:
            self._add_segment(seg)
        self.log_start_offset = loaded.log_start_offset
        self.log_end_offset = loaded.log_end_offset
        self.recovery_point = loaded.recovery_point
        rebuild_producer_state(self)
        self.high_watermark = min(max(high_watermark, self.log_start_offset), self.log_end_offset)

    # --- properties ----------------------------------------------------------------------------
    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def offline(self) -> bool:
        return self._offline

    @offline.setter
    def offline(self, value: bool) -> None:
        was = self._offline
        self._offline = value
        if value and not was and self.on_offline is not None:
            self.on_offline(self)

    @property
    def parent_dir(self) -> Path:
        """The ``log.dirs`` entry this partition lives in."""
        return self.dir.parent

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: the first offset of the oldest open transaction, capped at the high watermark.
        A transaction whose first batches DeleteRecords or retention removed counts from the log start
        (Kafka's maybeIncrementFirstUnstableOffset), so the LSO never falls below the log start offset."""
        first = self.producer_state.first_unstable_offset()
        if first is None:
            return self.high_watermark
        return min(max(first, self.log_start_offset), self.high_watermark)

    def collect_aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions overlapping [fetch_offset, upper_bound)."""
        return [(e.producer_id, e.first_offset) for e in self.aborted_txns.collect(fetch_offset, upper_bound)]

    def on_completed_txn(self, done: CompletedTxn | None, segment_base: int) -> None:
        """Index an aborted transaction (its marker is in the segment at ``segment_base``)."""
        if done is None or not done.is_aborted:
            return
        first = self.producer_state.first_unstable_offset()
        lso = done.last_offset + 1 if first is None else first
        self.aborted_txns.append(segment_base, AbortedTxn(done.producer_id, done.first_offset, done.last_offset, lso))

    def append_txn_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                          leader_epoch: int, *, now_ms: int | None = None, transaction_version: int = 0) -> LogAppendInfo:
        """Append a COMMIT/ABORT control batch as the leader (Kafka's appendAsLeader with the
        coordinator origin, from WriteTxnMarkers): closes the producer's open transaction here."""
        self._check_online()
        now = self._time() if now_ms is None else now_ms
        batch = build_control_batch(ControlRecordType.COMMIT if commit else ControlRecordType.ABORT,
                                    producer_id=producer_id, producer_epoch=producer_epoch, timestamp=now,
                                    coordinator_epoch=coordinator_epoch)
        vr = validate_and_assign_offsets(memoryview(batch), self.log_end_offset, leader_epoch, self.config, now,
                                         from_client=False, topic_partition=self._topic_partition)
        h = vr.headers[0]
        saved = self.producer_state.producers.get(producer_id)
        saved = saved.copy() if saved is not None else None
        done = self.producer_state.complete_txn(h, not commit, coordinator_epoch, transaction_version)
        try:
            self._write(vr.data, vr.headers, vr.batch_infos(), vr.max_timestamp, now)
        except KafkaStorageError:
            if saved is not None:
                self.producer_state.producers[producer_id] = saved
            raise
        self.log_end_offset = vr.next_offset
        self.producer_state.map_end_offset = vr.next_offset
        if leader_epoch >= 0 and leader_epoch > self.leader_epoch_cache.latest_epoch:
            self.leader_epoch_cache.assign(leader_epoch, vr.first_offset)
        self.on_completed_txn(done, self.active_segment.base_offset)
        self._maybe_flush_on_append()
        return LogAppendInfo(first_offset=vr.first_offset, last_offset=vr.last_offset, max_timestamp=vr.max_timestamp,
                             offset_of_max_timestamp=vr.offset_of_max_timestamp,
                             log_start_offset=self.log_start_offset, num_messages=1,
                             valid_bytes=vr.valid_bytes, leader_epoch=leader_epoch)

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def num_segments(self) -> int:
        return len(self.segments)

    @property
    def unflushed_messages(self) -> int:
        return self.log_end_offset - self.recovery_point

    def _check_online(self) -> None:
        if self.offline:
            raise LogOfflineError(f"log {self.dir} is offline after an unrecoverable storage error")

    def _add_segment(self, seg: LogSegment) -> None:
        i = bisect.bisect_left(self._bases, seg.base_offset)
        if i < len(self._bases) and self._bases[i] == seg.base_offset:
            self.segments[i] = seg
        else:
            self._bases.insert(i, seg.base_offset)
            self.segments.insert(i, seg)

    def _new_segment(self, base_offset: int) -> LogSegment:
        c = self.config
        return LogSegment(self.dir, base_offset, index_interval_bytes=c.index_interval_bytes,
                          max_index_size=c.segment_index_bytes, created_ms=self._time(),
                          roll_jitter_ms=LogSegment.roll_jitter(c.segment_jitter_ms, c.segment_ms), active=True)

    def update_config(self, config: LogConfig) -> None:
        """Apply new topic configs live (retention, segment size, max.message.bytes, index interval...)."""
        self.config = config
        for seg in self.segments:
            seg.index_interval_bytes = config.index_interval_bytes
        self.active_segment.offset_index.max_index_size = config.segment_index_bytes - config.segment_index_bytes % 8
        self.active_segment.time_index.max_index_size = config.segment_index_bytes - config.segment_index_bytes % 12

    # --- append --------------------------------------------------------------------------------
    def append_as_leader(self, records: memoryview, leader_epoch: int, *, now_ms: int | None = None,
                         checked: list[CheckedBatch] | None = None) -> LogAppendInfo:
        """Validate produced batches, assign offsets in place and append them (see module docstring).

        This runs once per partition of a Produce request (thousands of times for one request that
        names thousands of partitions), so the checks every append makes are spelled out here
        rather than in small helpers (``_check_online``, ``_maybe_flush_on_append``)."""
        if self._offline:
            raise LogOfflineError(f"log {self.dir} is offline after an unrecoverable storage error")
        now = self._time() if now_ms is None else now_ms
        if not isinstance(records, memoryview):
            records = memoryview(records)
        if records.readonly:  # offsets are patched in place; the Produce path passes a bytearray view
            records = memoryview(bytearray(records))
        config = self.config
        first_offset = self.log_end_offset
        # A client's plain batches: both validator phases in one compiled call (None: anything else).
        plain = None if checked is not None else check_and_assign_plain(
            records, config, now, first_offset, leader_epoch, config.segment_bytes)
        data: memoryview | bytearray
        if plain is not None:
            headers, infos, next_offset, max_timestamp, offset_of_max, num_messages, valid_bytes = plain
            data = records[:valid_bytes]
        else:
            if checked is None:
                checked = check_produced(records, config, now, self._topic_partition)
            vr = assign_offsets(records, checked, first_offset, leader_epoch, config.segment_bytes)
            headers, infos, data = vr.headers, vr.batch_infos(), vr.data
            next_offset, max_timestamp, offset_of_max = vr.next_offset, vr.max_timestamp, vr.offset_of_max_timestamp
            num_messages, valid_bytes = vr.num_messages, vr.valid_bytes
        if not headers:
            return LogAppendInfo(log_start_offset=self.log_start_offset)
        updated, dup = self.producer_state.prepare(headers)
        if dup is not None:
            return LogAppendInfo(first_offset=dup.first_offset, last_offset=dup.last_offset, max_timestamp=dup.timestamp,
                                 offset_of_max_timestamp=dup.last_offset, log_start_offset=self.log_start_offset,
                                 duplicate=True)
        self._write(data, headers, infos, max_timestamp, now)
        # The bytes are in the file: advance the in-memory state before anything else can fail.
        self.log_end_offset = next_offset
        self.producer_state.commit(updated, next_offset)
        if leader_epoch >= 0 and leader_epoch > self.leader_epoch_cache.latest_epoch:
            self.leader_epoch_cache.assign(leader_epoch, first_offset)
        if next_offset - self.recovery_point >= config.flush_messages:  # flush.messages
            self.flush()
        # The append time the batch carries (a worker may have stamped it a moment before `now`).
        lat = max_timestamp if config.log_append_time else -1
        return LogAppendInfo(first_offset=first_offset, last_offset=next_offset - 1, max_timestamp=max_timestamp,
                             offset_of_max_timestamp=offset_of_max, log_append_time=lat,
                             log_start_offset=self.log_start_offset, num_messages=num_messages,
                             valid_bytes=valid_bytes, leader_epoch=leader_epoch)

    def append_as_follower(self, records: memoryview) -> LogAppendInfo:
        """Append batches whose offsets are already assigned (replication, tests): CRC-checked,
        offsets must start at or after the log end offset and increase."""
        self._check_online()
        if not isinstance(records, memoryview):
            records = memoryview(records)
        headers: list[BatchHeader] = []
        expected = self.log_end_offset
        total = 0
        for pos, size in split_batches(records):
            batch = RecordBatch(records[pos:pos + size])
            batch.ensure_valid()
            h = batch.header()
            if h.base_offset < expected:
                raise OffsetOutOfRangeError(f"batch base offset {h.base_offset} is below the expected {expected}")
            expected = h.next_offset
            headers.append(h)
            total += size
        if not headers:
            return LogAppendInfo(log_start_offset=self.log_start_offset)
        max_ts, off_max = -1, -1
        for h in headers:
            if h.max_timestamp > max_ts:
                max_ts, off_max = h.max_timestamp, h.last_offset
        infos = [(h.last_offset, h.max_timestamp, h.size) for h in headers]
        self._write(records[:total], headers, infos, max_ts, self._time())
        self.log_end_offset = headers[-1].next_offset
        pos = 0
        for h in headers:
            marker = marker_type(records[pos:pos + h.size]) if h.is_control else None
            pos += h.size
            self.on_completed_txn(self.producer_state.replay(h, marker), self.active_segment.base_offset)
        for h in headers:
            if h.partition_leader_epoch > self.leader_epoch_cache.latest_epoch:
                self.leader_epoch_cache.assign(h.partition_leader_epoch, h.base_offset)
        self._maybe_flush_on_append()
        return LogAppendInfo(first_offset=headers[0].base_offset, last_offset=headers[-1].last_offset,
                             max_timestamp=max_ts, offset_of_max_timestamp=off_max,
                             log_start_offset=self.log_start_offset,
                             num_messages=sum(h.records_count for h in headers), valid_bytes=total)

    def _write(self, data: memoryview | bytearray, headers: list[BatchHeader], infos: list[tuple[int, int, int]],
               max_timestamp: int, now: int) -> None:
        try:
            # Kafka's maybeRoll: the active segment, or a new one at the first offset.
            seg = self.segments[-1]
            c = self.config
            if seg.should_roll(segment_bytes=c.segment_bytes, segment_ms=c.segment_ms, messages_size=len(data),
                               max_timestamp=max_timestamp, max_offset=infos[-1][0], now_ms=now):
                seg = self.roll(headers[0].base_offset)
            seg.append(data, infos)
        except KafkaStorageError as e:
            # segment.append truncated the file back; if the file no longer matches, recovery must run.
            try:
                if os.fstat(self.active_segment.fd).st_size != self.active_segment.size:
                    self.offline = True
            except OSError:
                self.offline = True
            self._log_storage_error(e)
            raise
        if self._append_failing:
            self._append_failing = False
            logger.info("Appends to %s-%d in dir %s succeed again", self.topic, self.partition, self.parent_dir)

    def _log_storage_error(self, e: KafkaStorageError) -> None:
        """Kafka's "Error while appending records to <tp> in dir <dir>": once per failing spell (a full
        disk under load would otherwise log every produce), and once more if the log goes offline."""
        if self.offline and not self._offline_logged:
            self._offline_logged = True
            logger.error("Error while appending records to %s-%d in dir %s: %s. The log is offline until the "
                         "broker restarts and recovers it", self.topic, self.partition, self.parent_dir, e)
        elif not self._append_failing:
            logger.error("Error while appending records to %s-%d in dir %s: %s. Producers get "
                         "KAFKA_STORAGE_ERROR until the write succeeds again", self.topic, self.partition,
                         self.parent_dir, e)
        self._append_failing = True

    def _maybe_flush_on_append(self) -> None:
        if self.unflushed_messages >= self.config.flush_messages:
            self.flush()

    # --- roll / flush ---------------------------------------------------------------------------
    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at the log end offset; the old one is trimmed, snapshotted, fsynced."""
        self._check_online()
        new_base = max(expected_next_offset or 0, self.log_end_offset)
        old = self.active_segment
        if old.base_offset == new_base:
            if old.size == 0:
                return old  # already an empty segment at that offset
        try:
            old.on_become_inactive()
            seg = self._new_segment(new_base)
        except OSError as e:
            raise KafkaStorageError(f"cannot roll {self.dir} at {new_base}: {e}") from e
        self._add_segment(seg)
        # Kafka snapshots producer state at every roll so recovery replays at most one segment.
        self.producer_state.map_end_offset = max(self.producer_state.map_end_offset, self.log_end_offset)
        self.producer_state.take_snapshot()
        self.flush(new_base, background=True)
        return seg

    def _segments_to_flush(self, offset: int) -> list[LogSegment]:
        out = []
        for i, seg in enumerate(self.segments):
            seg_end = self._bases[i + 1] if i + 1 < len(self._bases) else self.log_end_offset + 1
            if seg_end > self.recovery_point and seg.base_offset < offset:
                out.append(seg)
        return out

    def flush(self, offset: int | None = None, *, background: bool = False) -> None:
        """fsync every segment holding offsets below ``offset`` (default: the log end offset).

        With ``background`` and a ``background_executor`` set, the fsyncs run on the executor (a
        worker thread: os.fsync releases the GIL) and the recovery point moves when they are done,
        so a roll never stalls the event loop on a large fsync; Kafka schedules that flush too.
        """
        self._check_online()
        offset = self.log_end_offset if offset is None else offset
        if offset <= self.recovery_point:
            return
        segs = self._segments_to_flush(offset)
        self.leader_epoch_cache.sync_if_needed()  # a new leader's entry, written without an fsync
        if background and self.background_executor is not None:
            def job() -> None:
                started = time.monotonic()
                try:
                    for seg in segs:
                        if not seg.deleted and not seg.file.closed:
                            seg.flush()
                except KafkaStorageError:
                    self.offline = True  # durability unknown: like Kafka, take the log offline
                    raise
                LOG_FLUSH_STATS.observe(time.monotonic() - started)
                # Only forward, and never past a truncation that happened while the fsync ran.
                if self.recovery_point < offset <= self.log_end_offset:
                    self.recovery_point = offset

            self.background_executor(job)
        else:
            started = time.monotonic()
            for seg in segs:
                seg.flush()
            LOG_FLUSH_STATS.observe(time.monotonic() - started)  # Kafka's LogFlushStats.logFlushTimer
            self.recovery_point = offset
        self.last_flush_ms = self._time()

    # --- reads ---------------------------------------------------------------------------------
    def read(self, start_offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_message: bool = True) -> FetchDataInfo:
        """File region for a fetch at ``start_offset``, bounded by ``max_bytes`` and ``max_offset`` (exclusive)."""
        self._check_online()
        leo = self.log_end_offset
        if start_offset > leo or start_offset < self.log_start_offset:
            raise OffsetOutOfRangeError(
                f"Received request for offset {start_offset} for partition {self.topic}-{self.partition}, "
                f"but we only have log segments in the range {self.log_start_offset} to {leo}.")
        bound = leo if max_offset is None else min(max_offset, leo)
        if start_offset >= bound:
            return FetchDataInfo(start_offset)
        i = max(0, bisect.bisect_right(self._bases, start_offset) - 1)
        while i < len(self.segments):
            seg = self.segments[i]
            max_position = None
            if bound < leo:
                if i + 1 < len(self._bases) and bound >= self._bases[i + 1]:
                    max_position = None
                else:
                    found = seg.translate_offset(bound)
                    max_position = found[0] if found is not None else None
            res = seg.read(start_offset, max_bytes, max_position, min_one_message)
            if res is not None:
                pos, size = res
                if size <= 0:
                    return FetchDataInfo(start_offset, None, segment_base_offset=seg.base_offset)
                incomplete = not min_one_message and size < (seg.translate_offset(start_offset) or (0, 0))[1]
                return FetchDataInfo(start_offset, FileRegion(seg.file, pos, size), incomplete, seg.base_offset)
            i += 1
        return FetchDataInfo(start_offset)

    def fetch_offset_by_timestamp(self, target: int) -> tuple[int, int, int] | None:
        """(offset, timestamp, leader epoch) for ListOffsets; -1 latest, -2 earliest, -3 max timestamp,
        -4 earliest local. The caller bounds "latest" by the high watermark/LSO as Kafka's Partition does."""
        self._check_online()
        cache = self.leader_epoch_cache
        if target in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            epoch = cache.epoch_for_offset(self.log_start_offset)
            return self.log_start_offset, -1, -1 if epoch is None else epoch
        if target == LATEST_TIMESTAMP:
            return self.log_end_offset, -1, cache.latest_epoch
        if target == LATEST_TIERED_TIMESTAMP:
            return -1, -1, -1  # no tiered storage
        if target == MAX_TIMESTAMP:
            best: LogSegment | None = None
            for seg in self.segments:
                if seg.size and (best is None or seg.max_timestamp_so_far > best.max_timestamp_so_far):
                    best = seg
            if best is None or best.max_timestamp_so_far < 0:
                return -1, -1, -1
            ts, off = best.max_timestamp_so_far, best.offset_of_max_timestamp_so_far
            found = best.translate_offset(off)
            if found is not None:  # KIP-734 answers the record's offset, not the batch's (KAFKA-16310)
                batch = best.read_batch(found[0], found[1])
                for rec in batch:
                    if rec.timestamp == ts:
                        return rec.offset, ts, batch.partition_leader_epoch
            epoch_of = cache.epoch_for_offset(off)
            return off, ts, -1 if epoch_of is None else epoch_of
        if target < 0:
            return None
        for seg in self.segments:
            if seg.size and seg.max_timestamp_so_far >= target:
                found_ts = seg.find_offset_by_timestamp(target, self.log_start_offset)
                if found_ts is not None:
                    return found_ts
        return None

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.leader_epoch_cache.end_offset_for(epoch, self.log_end_offset)

    def update_high_watermark(self, offset: int) -> None:
        self.high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)

    # --- truncation ----------------------------------------------------------------------------
    def truncate_to(self, offset: int) -> None:
        """Remove everything at or after ``offset`` (whole batches); the log end offset becomes ``offset``."""
        self._check_online()
        if offset < 0:
            raise ValueError(f"cannot truncate to a negative offset {offset}")
        if offset >= self.log_end_offset:
            return
        if offset < self.log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return
        doomed = [s for s in self.segments if s.base_offset > offset]
        if len(doomed) == len(self.segments):
            self.truncate_fully_and_start_at(offset)
            return
        now = self._time()
        for seg in doomed:
            i = self.segments.index(seg)
            del self.segments[i]
            del self._bases[i]
            self._pending_deletes.append((now, seg.rename_to_deleted(), seg))
        self.delete_pending_files(now)
        active = self.active_segment
        active.truncate_to(offset, now)
        active.make_active(self.config.segment_index_bytes)
        self._after_truncation(offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self._check_online()
        now = self._time()
        for seg in self.segments:
            self._pending_deletes.append((now, seg.rename_to_deleted(), seg))
        self.aborted_txns.clear()
        self.segments.clear()
        self._bases.clear()
        self.delete_pending_files(now)
        self._add_segment(self._new_segment(offset))
        self.log_start_offset = offset
        self.leader_epoch_cache.clear()
        self.producer_state.delete_snapshots_above(-1)
        self._after_truncation(offset)

    def _after_truncation(self, offset: int) -> None:
        self.log_end_offset = offset
        self.high_watermark = min(self.high_watermark, offset)
        self.recovery_point = min(self.recovery_point, offset)
        self.leader_epoch_cache.truncate_from_end(offset)
        from kbroker.log.recovery import rebuild_producer_state  # noqa: PLC0415

        self.producer_state.delete_snapshots_above(offset)
        self.aborted_txns.truncate_to(offset)
        rebuild_producer_state(self)

    # --- lifecycle -----------------------------------------------------------------------------
    def close(self) -> None:
        """Flush, snapshot producer state at the log end offset, trim indexes and close files."""
        if not self.offline:
            self.flush()
            self.producer_state.map_end_offset = self.log_end_offset
            self.producer_state.take_snapshot()
        self.delete_pending_files(0, force=True)
        for seg in self.segments:
            try:
                seg.close()
            except OSError:
                pass

    def rename_dir(self, new_dir: Path) -> None:
        """Rename the partition directory (Kafka's ``UnifiedLog.renameDir``: a future log swapped in, a
        log renamed for deletion) and point every open file's path at the new place."""
        new_dir = Path(new_dir)
        os.replace(self.dir, new_dir)
        self.dir = new_dir
        for seg in self.segments:
            seg.dir = new_dir
            seg.log_path = new_dir / seg.log_path.name
            seg.offset_index.path = new_dir / seg.offset_index.path.name
            seg.time_index.path = new_dir / seg.time_index.path.name
        self.producer_state.dir = new_dir
        self.aborted_txns.rename_dir(new_dir)
        if self.leader_epoch_cache.path is not None:
            self.leader_epoch_cache.path = new_dir / self.leader_epoch_cache.path.name
        self._pending_deletes = [(t, [new_dir / f.name for f in files], seg)
                                 for t, files, seg in self._pending_deletes]

    def delete(self) -> None:
        """Remove the partition directory and everything in it (the log must not be used afterwards)."""
        import shutil  # noqa: PLC0415

        self.delete_pending_files(0, force=True)
        for seg in self.segments:
            seg.offset_index.close_handler()
            seg.time_index.close_handler()
        self.segments.clear()
        self._bases.clear()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __repr__(self) -> str:
        return (f"UnifiedLog({self.topic}-{self.partition}, start={self.log_start_offset}, "
                f"end={self.log_end_offset}, hw={self.high_watermark}, segments={len(self.segments)})")
