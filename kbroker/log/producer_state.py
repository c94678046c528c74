"""Idempotent-producer state of one partition and its ``%020d.snapshot`` files.

Owns Kafka's ``ProducerStateManager`` rules for idempotence: per producer id the current epoch and
the metadata of its last five batches (first/last sequence, last offset, timestamp); a batch that
repeats one of them is a duplicate and gets the original offsets; a sequence gap is
OUT_OF_ORDER_SEQUENCE_NUMBER; an older epoch is INVALID_PRODUCER_EPOCH; an unknown producer is
accepted with any sequence (KIP-360). Snapshots use Kafka's format (int16 version 1, uint32
CRC-32C of the rest, int32 count, then 46-byte entries: producer id, epoch, last sequence, last
offset, offset delta, timestamp, coordinator epoch, current txn first offset). Like Kafka, a
snapshot keeps only each producer's last batch; the log after the snapshot is replayed on load.

Transactions (Kafka's ProducerStateManager/ProducerAppendInfo): a transactional data batch of a
producer with no open transaction sets its ``current_txn_first_offset``; a COMMIT/ABORT marker
(``complete_txn``) clears it and returns the ``CompletedTxn``. The first unstable offset (the smallest
open transaction's first offset) bounds the last stable offset; snapshots carry
``current_txn_first_offset`` so a restart rebuilds it.

Sequence rules (Kafka's ``ProducerAppendInfo.checkSequence``): a batch at a new epoch starts at
sequence 0 unless the producer had no epoch yet; a batch at the current epoch follows the last
sequence, and a producer whose batches were all cleared (a transactions-version-2 marker bumps the
epoch and forgets them, as ``maybeUpdateProducerEpoch``) has last sequence NO_SEQUENCE, so only 0
follows it. Only a producer this partition knows no epoch of (KIP-360: its data was deleted by
retention or DeleteRecords) may start anywhere.

Verification states (KIP-890, Kafka's ``VerificationStateEntry``): the first transactional batch of a
transaction on this partition registers its producer's lowest sequence and epoch before the
coordinator is asked (``maybe_start_transaction_verification``). The append then refuses a sequence
above that lowest one, and, for a transactions-version-2 produce (``supports_epoch_bump``), any
sequence but 0 from a producer with no batches here. The entry goes with the first transactional
append (or the marker) of the producer, or after ``producer.id.expiration.ms``.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from kbroker.log.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    KafkaStorageError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from kbroker.protocol.crc import crc32c
from kbroker.protocol.record_format import NO_PRODUCER_EPOCH, NO_SEQUENCE, BatchHeader

__all__ = ["CompletedTxn", "BatchMetadata", "ProducerStateEntry", "ProducerStateManager", "VerificationStateEntry",
           "NUM_BATCHES_TO_RETAIN"]

logger = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
_SNAP_HEAD = struct.Struct(">hIi")  # version, crc, entry count
_SNAP_ENTRY = struct.Struct(">qhiqiqiq")
_SNAPSHOT_RE = re.compile(r"^(\d{20})\.snapshot$")


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == 2147483647)


class BatchMetadata:
    __slots__ = ("last_seq", "last_offset", "offset_delta", "timestamp")

    def __init__(self, last_seq: int, last_offset: int, offset_delta: int, timestamp: int) -> None:
        self.last_seq, self.last_offset, self.offset_delta, self.timestamp = last_seq, last_offset, offset_delta, timestamp

    @property
    def first_seq(self) -> int:
        s = self.last_seq - self.offset_delta
        return s + 2147483648 if s < 0 else s

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta

    def __repr__(self) -> str:
        return f"BatchMetadata(seq={self.first_seq}..{self.last_seq}, last_offset={self.last_offset})"


class ProducerStateEntry:
    __slots__ = ("producer_id", "producer_epoch", "batches", "coordinator_epoch", "current_txn_first_offset",
                 "last_timestamp")

    def __init__(self, producer_id: int, producer_epoch: int = NO_PRODUCER_EPOCH) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.batches: deque[BatchMetadata] = deque(maxlen=NUM_BATCHES_TO_RETAIN)
        self.coordinator_epoch = -1
        self.current_txn_first_offset = -1
        # Kafka's ProducerStateEntry.lastTimestamp: the max timestamp of the producer's last data batch
        # *or* end-transaction marker (appendEndTxnMarker sets it), what DescribeProducers answers, what
        # producer-id expiry and `kafka-transactions find-hanging` age an entry by, and what a snapshot keeps.
        self.last_timestamp = -1

    def copy(self) -> ProducerStateEntry:
        e = ProducerStateEntry(self.producer_id, self.producer_epoch)
        e.batches.extend(self.batches)
        e.coordinator_epoch, e.current_txn_first_offset = self.coordinator_epoch, self.current_txn_first_offset
        e.last_timestamp = self.last_timestamp
        return e

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, h: BatchHeader) -> BatchMetadata | None:
        if h.producer_epoch != self.producer_epoch:
            return None
        first, last = h.base_sequence, h.last_sequence
        for b in self.batches:
            if b.first_seq == first and b.last_seq == last:
                return b
        return None

    def add_batch(self, epoch: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int) -> None:
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch
        self.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp


class VerificationStateEntry:
    """Kafka's VerificationStateEntry: what a produce being verified with the transaction coordinator
    told this partition before its first append to the transaction."""

    __slots__ = ("timestamp", "lowest_sequence", "epoch", "supports_epoch_bump")

    def __init__(self, timestamp: int, sequence: int, epoch: int, supports_epoch_bump: bool) -> None:
        self.timestamp, self.lowest_sequence, self.epoch = timestamp, sequence, epoch
        self.supports_epoch_bump = supports_epoch_bump

    def maybe_update(self, sequence: int, epoch: int, supports_epoch_bump: bool) -> None:
        """A newer epoch restarts the lowest sequence; the same epoch keeps the lowest one seen
        (Kafka's maybeUpdateLowestSequenceAndEpoch)."""
        if epoch > self.epoch:
            self.epoch, self.lowest_sequence = epoch, sequence
        elif epoch == self.epoch and sequence < self.lowest_sequence:
            self.lowest_sequence = sequence
        self.supports_epoch_bump = supports_epoch_bump


class ProducerStateManager:
    """Producer entries of one partition plus the snapshot files in its directory."""

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)
        self.producers: dict[int, ProducerStateEntry] = {}
        self.map_end_offset = 0  # state reflects every batch below this offset
        # Kafka's lastSnapOffset: the offset of the newest snapshot this state was loaded from or written
        # as (the log start offset when there was none). `take_snapshot` writes nothing unless the state
        # moved past it: a log with nothing new since its last snapshot (an empty partition above all)
        # costs no file and no fsync at a roll or at shutdown.
        self.last_snap_offset = 0
        # producer id -> the verification of its transaction's first append here (not persisted).
        self.verification_states: dict[int, VerificationStateEntry] = {}

    # --- KIP-890 verification ------------------------------------------------------------------
    def has_ongoing_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        entry = self.producers.get(producer_id)
        return entry is not None and entry.current_txn_first_offset >= 0 and entry.producer_epoch == producer_epoch

    def maybe_start_transaction_verification(self, producer_id: int, sequence: int, epoch: int,
                                             supports_epoch_bump: bool, now_ms: int) -> None:
        """Before the coordinator verifies a transactional produce: unless the producer's transaction
        is already open here at this epoch, register (or lower) the sequence its append may start at
        (Kafka's UnifiedLog.maybeStartTransactionVerification)."""
        if self.has_ongoing_transaction(producer_id, epoch):
            return
        entry = self.verification_states.get(producer_id)
        if entry is None:
            self.verification_states[producer_id] = VerificationStateEntry(now_ms, sequence, epoch, supports_epoch_bump)
        else:
            entry.maybe_update(sequence, epoch, supports_epoch_bump)

    # --- leader appends -------------------------------------------------------------------------
    def prepare(self, headers: list[BatchHeader]) -> tuple[dict[int, ProducerStateEntry], BatchMetadata | None]:
        """Validate client batches against the state; returns (updated entries, duplicate or None).

        Nothing is changed until ``commit``; a duplicate stops the analysis like Kafka's
        ``analyzeAndValidateProducerState``.
        """
        updated: dict[int, ProducerStateEntry] = {}
        verifications = self.verification_states
        for h in headers:
            pid = h.producer_id
            if pid < 0:
                continue
            before = self.producers.get(pid)
            current = updated.get(pid) or before
            if current is not None:
                dup = current.find_duplicate(h)
                if dup is not None:
                    return updated, dup
            entry = updated.get(pid)
            if entry is None:
                entry = current.copy() if current is not None else ProducerStateEntry(pid)
                updated[pid] = entry
            self._check(entry, before, h, verifications.get(pid) if verifications else None)
            entry.add_batch(h.producer_epoch, h.last_sequence, h.last_offset, h.last_offset_delta, h.max_timestamp)
            if h.is_transactional:
                if entry.current_txn_first_offset < 0:
                    entry.current_txn_first_offset = h.base_offset
                # The transaction has its first offset here now: the verification has served
                # (Kafka's UnifiedLog.updateProducers).
                verifications.pop(pid, None)
            elif entry.current_txn_first_offset >= 0:
                raise InvalidTxnStateError(
                    f"Expected transactional write from producer {pid} at offset {h.base_offset}")
        return updated, None

    def complete_txn(self, h: BatchHeader, is_abort: bool, coordinator_epoch: int = -1,
                     transaction_version: int = 0) -> CompletedTxn:
        """Apply an end-transaction marker batch (Kafka's appendEndTxnMarker). Returns the completed
        transaction (first offset = the marker's own when the producer had no open transaction here).

        The epoch check depends on the marker's transaction version (KIP-1228, WriteTxnMarkers v2): a
        version-2 coordinator bumps the epoch before it writes the marker, so a marker at the epoch the
        partition already has is a late marker of the previous transaction, and it would end the
        producer's next one, which writes at that epoch too: INVALID_PRODUCER_EPOCH, unless no
        transaction is open (a retry of a marker already written, KAFKA-19999). Versions 0-1 (and
        replay, which does not know the version) refuse only an older epoch."""
        pid = h.producer_id
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerStateEntry(pid, h.producer_epoch)
        current = entry.producer_epoch
        if transaction_version >= 2:
            invalid = h.producer_epoch < current or (h.producer_epoch == current
                                                     and entry.current_txn_first_offset >= 0)
        else:
            invalid = h.producer_epoch < current
        if invalid:
            comparison = "<=" if transaction_version >= 2 else "<"
            raise InvalidProducerEpochError(
                f"Epoch of producer {pid} at offset {h.base_offset} is {h.producer_epoch}, which is {comparison} "
                f"the last seen epoch {current} (TV{transaction_version})")
        if coordinator_epoch >= 0 and entry.coordinator_epoch > coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"Invalid coordinator epoch for producerId {pid}: {coordinator_epoch} (zombie), "
                f"{entry.coordinator_epoch} (current)")
        verification = self.verification_states.get(pid)
        # A verification of the next transactions-version-2 transaction (at the epoch this marker
        # bumped to) survives the marker; any other ends with it (Kafka's updateProducers).
        if verification is not None and not (verification.supports_epoch_bump
                                             and verification.epoch == h.producer_epoch):
            del self.verification_states[pid]
        if h.producer_epoch != entry.producer_epoch:
            entry.batches.clear()
            entry.producer_epoch = h.producer_epoch
        first = entry.current_txn_first_offset
        entry.current_txn_first_offset = -1
        if coordinator_epoch >= 0:
            entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp = h.max_timestamp
        self.map_end_offset = max(self.map_end_offset, h.next_offset)
        return CompletedTxn(pid, first if first >= 0 else h.last_offset, h.last_offset, is_abort)

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction (None when none is open)."""
        firsts = [e.current_txn_first_offset for e in self.producers.values() if e.current_txn_first_offset >= 0]
        return min(firsts) if firsts else None

    def ongoing_transactions(self) -> dict[int, int]:
        """producer id -> first offset of its open transaction."""
        return {pid: e.current_txn_first_offset for pid, e in self.producers.items()
                if e.current_txn_first_offset >= 0}

    @staticmethod
    def _check(entry: ProducerStateEntry, before: ProducerStateEntry | None, h: BatchHeader,
               verification: VerificationStateEntry | None) -> None:
        """Kafka's ProducerAppendInfo checks of a client's batch. ``entry``: the producer's state with
        this request's earlier batches; ``before``: its state before the request (None: unknown)."""
        epoch, first_seq = h.producer_epoch, h.base_sequence
        if epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"Epoch of producer {h.producer_id} at offset {h.base_offset} is {epoch}, "
                f"which is smaller than the last seen epoch {entry.producer_epoch}")
        if verification is not None:
            if verification.supports_epoch_bump and first_seq != 0 and (before is None or not before.batches):
                raise OutOfOrderSequenceError(
                    f"Invalid sequence number for producer {h.producer_id} at offset {h.base_offset}: "
                    f"{first_seq} (incoming seq. number). Expected sequence 0 for transactions v2 idempotent "
                    f"producer with no existing state.")
            if first_seq > verification.lowest_sequence:
                raise OutOfOrderSequenceError(
                    f"Out of order sequence number for producer {h.producer_id} at offset {h.base_offset}: "
                    f"{first_seq} (incoming seq. number), {verification.lowest_sequence} (earliest seen sequence)")
        if epoch != entry.producer_epoch:
            if first_seq != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"Invalid sequence number for new epoch of producer {h.producer_id}: {epoch} "
                    f"(request epoch), {first_seq} (seq. number), {entry.producer_epoch} (current producer epoch)")
            return
        # The same epoch. With no batch left (a TV2 marker cleared them) the last sequence is
        # NO_SEQUENCE, so only 0 follows; any sequence only when the producer had no epoch before
        # this request (KIP-360: its data is gone).
        if not _in_sequence(entry.last_seq, first_seq) and before is not None \
                and before.producer_epoch != NO_PRODUCER_EPOCH:
            raise OutOfOrderSequenceError(
                f"Out of order sequence number for producer {h.producer_id} at offset {h.base_offset}: "
                f"{first_seq} (incoming seq. number), {entry.last_seq} (current end sequence number)")

    def commit(self, updated: dict[int, ProducerStateEntry], map_end_offset: int) -> None:
        self.producers.update(updated)
        self.map_end_offset = map_end_offset

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for ``producer.id.expiration.ms`` (by their last batch's timestamp)."""
        expired = [pid for pid, e in self.producers.items()
                   if e.current_txn_first_offset < 0 and now_ms - e.last_timestamp >= expiration_ms]
        for pid in expired:
            del self.producers[pid]
        if self.verification_states:
            stale = [pid for pid, v in self.verification_states.items() if now_ms - v.timestamp >= expiration_ms]
            for pid in stale:
                del self.verification_states[pid]
        return len(expired)

    # --- replay (recovery, followers) ------------------------------------------------------------
    def replay(self, h: BatchHeader, marker: int | None = None) -> CompletedTxn | None:
        """Apply a batch already in the log, without validation (Kafka's non-client origins).
        ``marker``: the control record type of a control batch (0 ABORT, 1 COMMIT)."""
        if h.last_offset < self.map_end_offset:
            return None
        pid = h.producer_id
        done: CompletedTxn | None = None
        if pid >= 0 and not h.is_control:
            entry = self.producers.get(pid)
            if entry is None:
                entry = self.producers[pid] = ProducerStateEntry(pid)
            if h.producer_epoch >= entry.producer_epoch:
                entry.add_batch(h.producer_epoch, h.last_sequence, h.last_offset, h.last_offset_delta, h.max_timestamp)
                if h.is_transactional and entry.current_txn_first_offset < 0:
                    entry.current_txn_first_offset = h.base_offset
        elif pid >= 0 and marker in (0, 1):
            try:
                done = self.complete_txn(h, marker == 0)
            except InvalidProducerEpochError:
                done = None
        self.map_end_offset = h.next_offset
        return done

    # --- snapshots ------------------------------------------------------------------------------
    def snapshot_path(self, offset: int) -> Path:
        return self.dir / f"{offset:020d}{SNAPSHOT_SUFFIX}"

    def snapshot_offsets(self) -> list[int]:
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        return sorted(int(m.group(1)) for n in names if (m := _SNAPSHOT_RE.match(n)))

    def take_snapshot(self, sync: bool = True) -> Path | None:
        """Write the state as of ``map_end_offset`` to ``<map_end_offset>.snapshot`` (Kafka's format), unless
        it is not past the last snapshot (Kafka: "If not a new offset, then it is not worth taking another
        snapshot"); the file written, or None."""
        if self.map_end_offset <= self.last_snap_offset:
            return None
        body = bytearray(_SNAP_HEAD.size + _SNAP_ENTRY.size * len(self.producers))
        pos = _SNAP_HEAD.size
        for pid, e in self.producers.items():
            last = e.batches[-1] if e.batches else None
            _SNAP_ENTRY.pack_into(body, pos, pid, e.producer_epoch, last.last_seq if last else NO_SEQUENCE,
                                  last.last_offset if last else -1, last.offset_delta if last else 0,
                                  e.last_timestamp, e.coordinator_epoch, e.current_txn_first_offset)
            pos += _SNAP_ENTRY.size
        struct.pack_into(">i", body, 6, len(self.producers))
        crc = crc32c(memoryview(body)[6:])
        struct.pack_into(">hI", body, 0, SNAPSHOT_VERSION, crc)
        path = self.snapshot_path(self.map_end_offset)
        tmp = path.with_name(path.name + ".tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(body)
                if sync:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as e:
            raise KafkaStorageError(f"cannot write producer snapshot {path}: {e}") from e
        self.last_snap_offset = self.map_end_offset
        return path

    @staticmethod
    def read_snapshot(path: Path) -> list[ProducerStateEntry]:
        """Parse a snapshot file; ValueError if its version or CRC is wrong."""
        data = Path(path).read_bytes()
        if len(data) < _SNAP_HEAD.size:
            raise ValueError(f"{path}: truncated producer snapshot")
        version, crc, count = _SNAP_HEAD.unpack_from(data, 0)
        if version != SNAPSHOT_VERSION:
            raise ValueError(f"{path}: unsupported producer snapshot version {version}")
        if crc32c(memoryview(data)[6:]) != crc:
            raise ValueError(f"{path}: producer snapshot CRC mismatch")
        if len(data) != _SNAP_HEAD.size + count * _SNAP_ENTRY.size:
            raise ValueError(f"{path}: producer snapshot size does not match its {count} entries")
        out = []
        for i in range(count):
            pid, epoch, last_seq, last_off, delta, ts, coord, txn_first = _SNAP_ENTRY.unpack_from(
                data, _SNAP_HEAD.size + i * _SNAP_ENTRY.size)
            e = ProducerStateEntry(pid, epoch)
            if last_off >= 0:
                e.batches.append(BatchMetadata(last_seq, last_off, delta, ts))
            e.coordinator_epoch, e.current_txn_first_offset = coord, txn_first
            e.last_timestamp = ts
            out.append(e)
        return out

    def load(self, log_start_offset: int, log_end_offset: int) -> None:
        """Reset to the newest valid snapshot at or below ``log_end_offset`` (newer ones are deleted).

        The caller replays the log from ``map_end_offset`` to the end afterwards.
        """
        self.producers.clear()
        self.map_end_offset = self.last_snap_offset = log_start_offset
        for off in reversed(self.snapshot_offsets()):
            path = self.snapshot_path(off)
            if off > log_end_offset:
                self._unlink(path)
                continue
            if off < log_start_offset:
                break
            try:
                entries = self.read_snapshot(path)
            except (OSError, ValueError) as err:
                # Kafka: "Failed to load producer snapshot ..., deleting it": fall back to an older one.
                logger.warning("Deleting the corrupt producer state snapshot %s (%s): its state is rebuilt from "
                               "an older snapshot and the log", path, err)
                self._unlink(path)
                continue
            for e in entries:
                self.producers[e.producer_id] = e
            self.map_end_offset = self.last_snap_offset = off
            return

    def delete_snapshots_above(self, offset: int) -> None:
        remaining = []
        for off in self.snapshot_offsets():
            if off > offset:
                self._unlink(self.snapshot_path(off))
            else:
                remaining.append(off)
        if self.last_snap_offset > offset:  # a truncation: the next snapshot must be written
            self.last_snap_offset = max(remaining, default=0)

    def delete_snapshots_before(self, offset: int) -> None:
        for off in self.snapshot_offsets():
            if off < offset:
                self._unlink(self.snapshot_path(off))

    @staticmethod
    def _unlink(path: Path) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise KafkaStorageError(f"cannot delete {path}: {e}") from e
