"""The transaction coordinator's state machine for one `__transaction_state` partition (Kafka's
TransactionStateManager + TransactionCoordinator logic, per shard).

One `TransactionMetadata` per transactional id, rebuilt from `TransactionLogKey`/`TransactionLogValue`
records (record type 0 of the transaction coordinator; the value at version 0 while `transaction.version`
is below 2, at version 1 from 2 with the tagged PreviousProducerId, NextProducerId and
ClientTransactionVersion, as Kafka picks it; a tombstone removes the id). Every state change is a record appended
through the runtime before the in-memory state follows it (an append that fails changes nothing).

States and their on-disk ids are Kafka's (`TransactionState`): Empty 0, Ongoing 1, PrepareCommit 2,
PrepareAbort 3, CompleteCommit 4, CompleteAbort 5, Dead 6, PrepareEpochFence 7.

Operations (each runs as one write operation of the runtime):
- `init_producer_id`: a new id gets a producer id and epoch 0; a known one gets its epoch bumped
  (a new producer id when the epoch is exhausted), which fences the older incarnation: its next
  request fails with PRODUCER_FENCED. An Ongoing transaction of the old incarnation is aborted first
  with the bumped epoch (Kafka's PrepareEpochFence; the service holds the answer until the abort
  completes, so the caller gets its epoch in one round trip instead of CONCURRENT_TRANSACTIONS + retry).
- `add_partitions`: Ongoing with the partitions added (the transaction starts on the first one).
- `end_transaction`: PrepareCommit/PrepareAbort, then the markers are handed to the `MarkerSender`
  (the service sends them, once PrepareX is committed, to the partition leaders: Kafka's
  TransactionMarkerChannelManager); when every leader acknowledged, `complete_transaction` writes
  CompleteCommit/CompleteAbort.
- `abort_timed_out`: Ongoing transactions older than their timeout are aborted with a bumped epoch
  (Kafka's abortTimedOutTransactions: the producer is fenced).

Transactions version 2 (KIP-890 part 2; a client uses it when `transaction.version` 2 is finalized):
- `end_transaction_v2` (EndTxn v5): PrepareX at epoch + 1, the markers written with it, the client
  answered the bumped epoch; Kafka's retry table (a retry carries the epoch one below the current one);
  an abort of a transaction that added nothing (Empty, CompleteX at the current epoch) is a bump with no
  markers; when the bump reaches Short.MaxValue, the completion rotates to the next producer id (chosen
  at PrepareX, `next_producer_id`) at epoch 0.
- `add_partitions` with `client_transaction_version` 2: the implicit add of a Produce v12 / TxnOffsetCommit
  v5, which opens the next transaction at the epoch EndTxn returned; a late produce of the ended
  transaction carries the old epoch and is PRODUCER_FENCED (the hanging transaction of KIP-890).
- the coordinator's own aborts (InitProducerId of a new incarnation, timeouts) bump twice under the
  finalized version 2: the fence, then the abort's bump the markers carry.

Sans-IO: no asyncio; must not import kbroker.net or kbroker.api.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from kbroker.protocol.coordinator_records import Coordinator
from kbroker.protocol.coordinator_records.serde import (
    CoordinatorRecordParseError,
    decode_coordinator_key,
    decode_coordinator_value,
    encode_coordinator_key,
    encode_coordinator_value,
)
from kbroker.protocol.coordinator_records.transaction_log import TransactionLogKey, TransactionLogValue
from kbroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
Record = tuple[bytes, bytes | None]
MAX_EPOCH = 32767
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


class TransactionState(enum.IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        return {0: "Empty", 1: "Ongoing", 2: "PrepareCommit", 3: "PrepareAbort", 4: "CompleteCommit",
                5: "CompleteAbort", 6: "Dead", 7: "PrepareEpochFence"}[int(self)]


@dataclass(slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState = TransactionState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp_ms: int = -1
    txn_last_update_timestamp_ms: int = -1
    previous_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    # Transactions version 2 (KIP-890 part 2): the producer id the completion rotates to when the
    # epoch bump of EndTxn exhausts the epochs, and the transaction version the client used.
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0

    def copy(self) -> TransactionMetadata:
        return TransactionMetadata(self.transactional_id, self.producer_id, self.producer_epoch, self.txn_timeout_ms,
                                   self.state, set(self.partitions), self.txn_start_timestamp_ms,
                                   self.txn_last_update_timestamp_ms, self.previous_producer_id,
                                   self.last_producer_epoch, self.next_producer_id, self.client_transaction_version)

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        """Kafka's TransactionMetadata.isEpochExhausted: no client may use Short.MaxValue, so the
        coordinator can always fence with one more bump."""
        return self.producer_epoch >= MAX_EPOCH - 1


def encode_key(transactional_id: str) -> bytes:
    return encode_coordinator_key(TransactionLogKey(transactional_id=transactional_id))


def encode_value(m: TransactionMetadata, version: int = 0) -> bytes:
    """The TransactionLogValue of `m`: version 0 while `transaction.version` < 2, version 1 (with the
    tagged PreviousProducerId, NextProducerId and ClientTransactionVersion) from 2, as Kafka's
    TransactionVersion.transactionLogValueVersion picks it."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(m.partitions):
        by_topic.setdefault(topic, []).append(partition)
    value = TransactionLogValue(
        producer_id=m.producer_id, producer_epoch=m.producer_epoch, transaction_timeout_ms=m.txn_timeout_ms,
        transaction_status=int(m.state),
        transaction_partitions=[TransactionLogValue.PartitionsSchema(topic=t, partition_ids=ps)
                                for t, ps in by_topic.items()],
        transaction_last_update_timestamp_ms=m.txn_last_update_timestamp_ms,
        transaction_start_timestamp_ms=m.txn_start_timestamp_ms)
    if version >= 1:
        value.previous_producer_id = m.previous_producer_id
        value.next_producer_id = m.next_producer_id
        value.client_transaction_version = m.client_transaction_version
    return encode_coordinator_value(value, version)


def record_of(m: TransactionMetadata, version: int = 0) -> Record:
    return encode_key(m.transactional_id), encode_value(m, version)


# (the prepared transaction, commit?): send its markers; the service calls `complete_transaction`
# once every partition leader acknowledged.
MarkerSender = Callable[["TransactionMetadata", bool], None]


@dataclass(slots=True)
class InitResult:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(slots=True)
class EndTxnResult:
    """EndTxn's answer under transactions version 2: the producer id and epoch the client goes on with
    (the bumped epoch, or the next producer id at epoch 0 when the bump exhausted the epochs)."""

    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


# TransactionVersion feature levels (Kafka's TransactionVersion): TV_2 bumps the epoch on every
# transaction end (KIP-890 part 2).
TV_2 = 2


class TransactionStateShard:
    """The transactional ids of one `__transaction_state` partition."""

    def __init__(self, partition: int, append: Callable[[list[Record]], ErrorCode], send_markers: MarkerSender,
                 time_ms: Callable[[], int], coordinator_epoch: int = 0,
                 transaction_version: Callable[[], int] = lambda: 0) -> None:
        self.partition = partition
        self._append = append
        self._send_markers = send_markers
        self.time_ms = time_ms
        self.coordinator_epoch = coordinator_epoch
        # The finalized `transaction.version` (the server's, for the coordinator's own aborts and the
        # TransactionLogValue version).
        self.transaction_version = transaction_version
        self.txns: dict[str, TransactionMetadata] = {}

    # -- the runtime's shard protocol --------------------------------------------------------------

    def replay(self, offset: int, key: bytes | memoryview | None, value: bytes | memoryview | None) -> None:
        if key is None:
            return
        try:
            record_type, decoded = decode_coordinator_key(Coordinator.TRANSACTION, bytes(key))
        except CoordinatorRecordParseError:
            return
        if not isinstance(decoded, TransactionLogKey):
            return
        tid = decoded.transactional_id
        if value is None:
            self.txns.pop(tid, None)
            return
        try:
            v, _version = decode_coordinator_value(Coordinator.TRANSACTION, record_type, bytes(value))
        except CoordinatorRecordParseError:
            log.warning("Skipping an unreadable transaction log value of %s at offset %d", tid, offset)
            return
        if not isinstance(v, TransactionLogValue):
            return
        parts = {(p.topic, pid) for p in (v.transaction_partitions or []) for pid in p.partition_ids}
        self.txns[tid] = TransactionMetadata(
            tid, v.producer_id, v.producer_epoch, v.transaction_timeout_ms, TransactionState(v.transaction_status),
            parts, v.transaction_start_timestamp_ms, v.transaction_last_update_timestamp_ms,
            previous_producer_id=v.previous_producer_id, next_producer_id=v.next_producer_id,
            client_transaction_version=v.client_transaction_version)

    def on_loaded(self) -> None:
        """Finish what a previous incarnation left half-done: transactions in PrepareCommit /
        PrepareAbort get their markers and complete (Kafka's loading hands them to the marker channel)."""
        for m in list(self.txns.values()):
            if m.state in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT):
                self._complete(m, m.state == TransactionState.PREPARE_COMMIT)
            elif m.state == TransactionState.PREPARE_EPOCH_FENCE:
                self._complete(m, False)

    def on_unloaded(self) -> None:
        return None

    def replay_transactional(self, producer_id: int, offset: int, key: bytes | memoryview | None,
                             value: bytes | memoryview | None) -> None:
        self.replay(offset, key, value)  # __transaction_state holds no transactional batches

    def replay_end_txn(self, producer_id: int, commit: bool) -> None:
        return None

    # -- writing -----------------------------------------------------------------------------------

    def _put(self, m: TransactionMetadata) -> ErrorCode:
        m.txn_last_update_timestamp_ms = self.time_ms()
        error = self._append([record_of(m, 1 if self.transaction_version() >= TV_2 else 0)])
        if error == ErrorCode.NONE:
            self.txns[m.transactional_id] = m
        return error

    def _complete(self, m: TransactionMetadata, commit: bool) -> ErrorCode:
        """Hand the markers of the prepared transaction `m` to the sender; it completes later."""
        self._send_markers(m.copy(), commit)
        return ErrorCode.NONE

    def complete_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             commit: bool) -> ErrorCode:
        """Every marker is acknowledged: CompleteCommit/CompleteAbort (Kafka's
        TransactionMarkerChannelManager.tryAppendToLog). Nothing when the transaction moved on meanwhile
        (another incarnation of the coordinator completed it)."""
        m = self.txns.get(transactional_id)
        prepared = TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT
        if m is None or m.producer_id != producer_id or m.producer_epoch != producer_epoch or m.state not in (
                prepared, TransactionState.PREPARE_EPOCH_FENCE):
            return ErrorCode.NONE
        done = m.copy()
        done.state = TransactionState.COMPLETE_COMMIT if commit else TransactionState.COMPLETE_ABORT
        done.partitions = set()
        if m.client_transaction_version >= TV_2 and m.next_producer_id != NO_PRODUCER_ID:
            # Kafka's prepareComplete: the EndTxn bump exhausted the epochs; the producer goes on with
            # the next producer id at epoch 0 (last_producer_epoch stays the last one the client saw).
            done.previous_producer_id = m.producer_id
            done.producer_id = m.next_producer_id
            done.producer_epoch = 0
        done.next_producer_id = NO_PRODUCER_ID
        return self._put(done)

    # -- InitProducerId ----------------------------------------------------------------------------

    def init_producer_id(self, transactional_id: str, txn_timeout_ms: int, expected_producer_id: int,
                         expected_epoch: int, new_producer_id: Callable[[], int]) -> InitResult:
        m = self.txns.get(transactional_id)
        if m is None or m.state == TransactionState.DEAD:
            fresh = TransactionMetadata(transactional_id, new_producer_id(), 0, txn_timeout_ms)
            error = self._put(fresh)
            return InitResult(error) if error != ErrorCode.NONE else InitResult(ErrorCode.NONE, fresh.producer_id, 0)
        if m.state in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT,
                       TransactionState.PREPARE_EPOCH_FENCE):
            return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        if expected_producer_id >= 0:
            # KIP-360: a producer re-initialising with its id/epoch must be the current incarnation;
            # a retry of a bump it already got (its previous epoch, recorded only by such a bump)
            # gets the current epoch again; anything else is a zombie.
            expected = (expected_producer_id, expected_epoch)
            if m.last_producer_epoch >= 0 and expected == (m.producer_id, m.last_producer_epoch):
                return InitResult(ErrorCode.NONE, m.producer_id, m.producer_epoch)
            if expected != (m.producer_id, m.producer_epoch):
                return InitResult(ErrorCode.PRODUCER_FENCED)
        if m.state == TransactionState.ONGOING:
            # Fence the old incarnation and abort its transaction with the bumped epoch, which the
            # new incarnation then uses (Kafka's client retries and gets one more bump).
            fenced = self._fence(m, new_producer_id)
            fenced.last_producer_epoch = NO_PRODUCER_EPOCH
            fenced.txn_timeout_ms = txn_timeout_ms
            error = self._put(fenced)
            if error == ErrorCode.NONE:
                error = self._complete(fenced, False)
            if error != ErrorCode.NONE:
                return InitResult(error)
            done = self.txns[transactional_id]
            return InitResult(ErrorCode.NONE, done.producer_id, done.producer_epoch)
        updated = self._bump(m, new_producer_id)
        if expected_producer_id < 0 and updated.producer_id == m.producer_id:
            updated.last_producer_epoch = NO_PRODUCER_EPOCH  # a new incarnation, not a retry
        updated.state = TransactionState.EMPTY
        updated.partitions = set()
        updated.txn_timeout_ms = txn_timeout_ms
        updated.txn_start_timestamp_ms = -1
        error = self._put(updated)
        if error != ErrorCode.NONE:
            return InitResult(error)
        return InitResult(ErrorCode.NONE, updated.producer_id, updated.producer_epoch)

    def _fence(self, m: TransactionMetadata, new_producer_id: Callable[[], int] | None = None) -> TransactionMetadata:
        """The PrepareAbort with which the coordinator aborts an Ongoing transaction itself (an
        InitProducerId of a new incarnation, a timeout): the epoch bumped (Kafka's
        prepareFenceProducerEpoch), and under transactions version 2 bumped once more for the markers, as
        every TV2 transaction end does (Kafka's endTransaction with the server's transaction version)."""
        fenced = self._bump(m, new_producer_id) if m.producer_epoch + 1 < MAX_EPOCH or new_producer_id else m.copy()
        fenced.state = TransactionState.PREPARE_ABORT
        if self.transaction_version() >= TV_2:
            fenced.last_producer_epoch = fenced.producer_epoch
            fenced.producer_epoch = min(fenced.producer_epoch + 1, MAX_EPOCH)
            fenced.client_transaction_version = TV_2
        return fenced

    @staticmethod
    def _bump(m: TransactionMetadata, new_producer_id: Callable[[], int] | None = None) -> TransactionMetadata:
        """The next epoch; a new producer id (epoch 0) once the epoch is exhausted."""
        out = m.copy()
        out.last_producer_epoch = m.producer_epoch
        if m.producer_epoch + 1 >= MAX_EPOCH and new_producer_id is not None:
            out.previous_producer_id = m.producer_id
            out.producer_id = new_producer_id()
            out.producer_epoch = 0
            out.last_producer_epoch = NO_PRODUCER_EPOCH
        else:
            out.producer_epoch = m.producer_epoch + 1
        return out

    # -- AddPartitionsToTxn / AddOffsetsToTxn ------------------------------------------------------

    def _check_producer(self, transactional_id: str, producer_id: int, epoch: int
                        ) -> tuple[ErrorCode, TransactionMetadata | None]:
        m = self.txns.get(transactional_id)
        if m is None or m.state == TransactionState.DEAD:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, None
        if m.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, None
        if m.producer_epoch != epoch:
            return ErrorCode.PRODUCER_FENCED, None
        return ErrorCode.NONE, m

    def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                       partitions: set[TopicPartition], verify_only: bool = False,
                       client_transaction_version: int = 0) -> ErrorCode:
        """AddPartitionsToTxn (Kafka's handleAddPartitionsToTransaction / prepareAddPartitions). Under
        transactions version 2 the partition leader (Produce v12) or the group coordinator
        (TxnOffsetCommit v5) adds the partition implicitly with `client_transaction_version` 2; the first
        one after EndTxn starts the next transaction at the epoch EndTxn returned."""
        error, m = self._check_producer(transactional_id, producer_id, epoch)
        if m is None:
            return error
        if m.state in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT,
                       TransactionState.PREPARE_EPOCH_FENCE):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if m.state == TransactionState.ONGOING and partitions <= m.partitions:
            return ErrorCode.NONE
        if verify_only:
            return ErrorCode.INVALID_TXN_STATE
        updated = m.copy()
        if m.state != TransactionState.ONGOING:
            updated.txn_start_timestamp_ms = self.time_ms()
            updated.partitions = set()
        updated.state = TransactionState.ONGOING
        updated.partitions |= partitions
        updated.client_transaction_version = client_transaction_version
        return self._put(updated)

    # -- EndTxn ------------------------------------------------------------------------------------

    def end_transaction(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> ErrorCode:
        error, m = self._check_producer(transactional_id, producer_id, epoch)
        if m is None:
            return error
        state = m.state
        if state == TransactionState.ONGOING:
            prepared = m.copy()
            prepared.state = TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT
            error = self._put(prepared)
            if error != ErrorCode.NONE:
                return error
            return self._complete(prepared, commit)
        if state == TransactionState.COMPLETE_COMMIT:
            return ErrorCode.NONE if commit else ErrorCode.INVALID_TXN_STATE
        if state == TransactionState.COMPLETE_ABORT:
            return ErrorCode.INVALID_TXN_STATE if commit else ErrorCode.NONE
        if state in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT,
                     TransactionState.PREPARE_EPOCH_FENCE):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if state == TransactionState.EMPTY and not commit:
            # librdkafka / the Java client abort an empty transaction without calling EndTxn; an
            # abort of an Empty id is harmless.
            return ErrorCode.NONE
        return ErrorCode.INVALID_TXN_STATE

    def end_transaction_v2(self, transactional_id: str, producer_id: int, epoch: int, commit: bool,
                           new_producer_id: Callable[[], int]) -> EndTxnResult:
        """EndTxn v5+ (transactions version 2, Kafka's TransactionCoordinator.endTransaction): every
        transaction end bumps the epoch (PrepareX carries epoch + 1, the markers are written with it and
        the client goes on with it); a retry is recognised by the epoch one below the current one. When
        the bump reaches the last epoch the completion rotates to `new_producer_id()` at epoch 0.

        Kafka's table (PF = PRODUCER_FENCED, ITS = INVALID_TXN_STATE, EB = epoch bump, Retry = epoch one
        below the current one, Current = the current epoch):
            Empty          abort: Retry PF,   Current EB   commit: Retry PF,   Current ITS
            CompleteAbort  abort: Retry NONE, Current EB   commit: Retry ITS,  Current ITS
            CompleteCommit abort: Retry ITS,  Current EB   commit: Retry NONE, Current ITS
        """
        m = self.txns.get(transactional_id)
        if m is None or m.state == TransactionState.DEAD:
            return EndTxnResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        # A retry of an EndTxn whose bump rotated the producer id (the client still has the old id at
        # the last epoch), or of one whose bump is already stored.
        retry_on_overflow = (m.previous_producer_id == producer_id and epoch == MAX_EPOCH - 1
                             and m.producer_epoch == 0)
        retry_on_bump = m.producer_epoch == epoch + 1
        state = m.state
        if state in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT):
            valid_epoch = retry_on_bump
        elif state in (TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT):
            valid_epoch = retry_on_bump or retry_on_overflow or epoch == m.producer_epoch
        else:
            valid_epoch = epoch == m.producer_epoch
        if m.producer_id != producer_id and not retry_on_overflow:
            return EndTxnResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if not valid_epoch:
            return EndTxnResult(ErrorCode.PRODUCER_FENCED)
        is_retry = retry_on_bump or retry_on_overflow
        current = EndTxnResult(ErrorCode.NONE, m.producer_id, m.producer_epoch)
        if state == TransactionState.ONGOING:
            return self._prepare_v2(m, commit, new_producer_id, no_partition_added=False)
        if state == TransactionState.COMPLETE_COMMIT:
            if commit:
                return current if is_retry else EndTxnResult(ErrorCode.INVALID_TXN_STATE)
            if is_retry:
                return EndTxnResult(ErrorCode.INVALID_TXN_STATE)
            return self._prepare_v2(m, False, new_producer_id, no_partition_added=True)
        if state == TransactionState.COMPLETE_ABORT:
            if not commit:
                return current if is_retry else self._prepare_v2(m, False, new_producer_id, no_partition_added=True)
            return EndTxnResult(ErrorCode.INVALID_TXN_STATE)
        if state == TransactionState.EMPTY:
            if not commit:
                return self._prepare_v2(m, False, new_producer_id, no_partition_added=True)
            return EndTxnResult(ErrorCode.INVALID_TXN_STATE)
        if state == TransactionState.PREPARE_COMMIT:
            return EndTxnResult(ErrorCode.CONCURRENT_TRANSACTIONS if commit else ErrorCode.INVALID_TXN_STATE)
        if state == TransactionState.PREPARE_ABORT:
            return EndTxnResult(ErrorCode.INVALID_TXN_STATE if commit else ErrorCode.CONCURRENT_TRANSACTIONS)
        return EndTxnResult(ErrorCode.CONCURRENT_TRANSACTIONS)  # PrepareEpochFence: completing

    def _prepare_v2(self, m: TransactionMetadata, commit: bool, new_producer_id: Callable[[], int],
                    no_partition_added: bool) -> EndTxnResult:
        """Kafka's prepareAbortOrCommit with an epoch bump: PrepareCommit / PrepareAbort at epoch + 1 (the
        markers' epoch), the next producer id chosen when that exhausts the epochs."""
        prepared = m.copy()
        prepared.state = TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT
        prepared.next_producer_id = new_producer_id() if m.is_producer_epoch_exhausted else NO_PRODUCER_ID
        if m.producer_epoch < MAX_EPOCH:
            prepared.producer_epoch = m.producer_epoch + 1
        # (an abort at Short.MaxValue goes through without the bump, so the id can recover)
        prepared.last_producer_epoch = m.producer_epoch
        prepared.client_transaction_version = TV_2
        now = self.time_ms()
        if no_partition_added:
            # TV2 may abort a transaction that added nothing (the client cannot know whether a produce
            # added a partition); its start time is the abort's.
            prepared.txn_start_timestamp_ms = now
        error = self._put(prepared)
        if error != ErrorCode.NONE:
            return EndTxnResult(error)
        self._complete(prepared, commit)
        if prepared.next_producer_id != NO_PRODUCER_ID:
            return EndTxnResult(ErrorCode.NONE, prepared.next_producer_id, 0)
        return EndTxnResult(ErrorCode.NONE, prepared.producer_id, prepared.producer_epoch)

    # -- the coordinator's own aborts --------------------------------------------------------------

    def abort_timed_out(self, now_ms: int) -> list[str]:
        """Abort (with a bumped epoch, fencing the producer) every Ongoing transaction past its timeout."""
        aborted = []
        for m in list(self.txns.values()):
            if m.state != TransactionState.ONGOING or m.txn_start_timestamp_ms < 0:
                continue
            if now_ms < m.txn_start_timestamp_ms + m.txn_timeout_ms:
                continue
            fenced = self._fence(m)
            if self._put(fenced) == ErrorCode.NONE and self._complete(fenced, False) == ErrorCode.NONE:
                aborted.append(m.transactional_id)
        return aborted

    def expire_transactional_ids(self, now_ms: int, expiration_ms: int) -> list[str]:
        """Kafka's removeExpiredTransactionalIds: ids with no open transaction whose last update is
        `transactional.id.expiration.ms` old are removed (a tombstone in `__transaction_state`)."""
        idle = (TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)
        expired = [m.transactional_id for m in self.txns.values()
                   if m.state in idle and m.txn_last_update_timestamp_ms + expiration_ms <= now_ms]
        if not expired or self._append([(encode_key(tid), None) for tid in expired]) != ErrorCode.NONE:
            return []
        for tid in expired:
            del self.txns[tid]
        return expired

    def describe(self, transactional_id: str) -> TransactionMetadata | None:
        return self.txns.get(transactional_id)
