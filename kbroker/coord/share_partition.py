"""One share-partition: the records of a topic partition as a KIP-932 share group consumes them.

Kafka's `SharePartition` (server/share), sans-IO: the caller passes the time and what it read from the
log; nothing here reads a log, starts a timer or imports asyncio.

The share-partition keeps the *in-flight* records, those between the share-partition start offset
(SPSO, `start_offset`) and the end of what was ever acquired (`next_offset`, one past Kafka's SPEO).
Each in-flight record has a state (Kafka's `RecordState`) and a delivery count::

    AVAILABLE --acquire (delivery count + 1, lock for group.share.record.lock.duration.ms)--> ACQUIRED
    ACQUIRED --ACCEPT--> ACKNOWLEDGED
    ACQUIRED --REJECT--> ARCHIVED
    ACQUIRED --RELEASE / lock expiry / member gone--> AVAILABLE, or ARCHIVED once the delivery count
                                                       reached group.share.delivery.count.limit
    ACQUIRED --RENEW (KIP-1222)--> ACQUIRED with a fresh lock

Records past `next_offset` are implicitly AVAILABLE with delivery count 0. The start offset moves
forward over ACKNOWLEDGED and ARCHIVED records, which are then forgotten. New records (past
`next_offset`) are acquired only while the in-flight window, `next_offset - start_offset`, is below
`group.share.partition.max.record.locks` (Kafka's `maxInFlightRecords`); released records inside it
can always be re-acquired.

Acknowledgements name offset ranges with one type for the range or one per offset (Kafka's
`AcknowledgementBatch`): 0 GAP (no record at this offset: archived), 1 ACCEPT, 2 RELEASE, 3 REJECT,
4 RENEW. A range is applied only if every offset in it is ACQUIRED by the acknowledging member, else
the partition answers INVALID_RECORD_STATE and nothing changes (Kafka rolls back the same way);
offsets before the start offset are ignored (already acknowledged or archived, as Kafka does).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from kbroker.protocol.errors import ErrorCode


class RecordState(enum.IntEnum):
    """Kafka's `RecordState` ids (they are what `__share_group_state` stores)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AcknowledgeType(enum.IntEnum):
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


@dataclass(slots=True)
class InFlightRecord:
    state: RecordState = RecordState.AVAILABLE
    delivery_count: int = 0
    member_id: str | None = None
    lock_deadline_ms: int = 0


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    """Kafka's `AcquiredRecords`: offsets first..last (inclusive), all with one delivery count."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class AcknowledgementBatch:
    first_offset: int
    last_offset: int
    acknowledge_types: tuple[int, ...]


@dataclass(slots=True)
class SharePartitionConfig:
    record_lock_duration_ms: int = 30000
    delivery_count_limit: int = 5
    max_in_flight_records: int = 2000
    renew_acknowledge_enable: bool = True


@dataclass(slots=True)
class SharePartition:
    """The in-flight records of one (share group, topic partition)."""

    start_offset: int
    config: SharePartitionConfig = field(default_factory=SharePartitionConfig)
    next_offset: int = -1
    records: dict[int, InFlightRecord] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.next_offset < self.start_offset:
            self.next_offset = self.start_offset

    # -- reading ---------------------------------------------------------------------------------------

    @property
    def end_offset(self) -> int:
        """Kafka's share-partition end offset (SPEO): the last in-flight offset (start - 1 when none)."""
        return self.next_offset - 1

    def in_flight(self) -> int:
        return self.next_offset - self.start_offset

    def next_fetch_offset(self) -> int:
        """Where the next log read starts: the first AVAILABLE in-flight record, else `next_offset`."""
        for offset in range(self.start_offset, self.next_offset):
            rec = self.records.get(offset)
            if rec is None or rec.state == RecordState.AVAILABLE:
                return offset
        return self.next_offset

    def state_of(self, offset: int) -> RecordState:
        if offset < self.start_offset:
            return RecordState.ARCHIVED
        rec = self.records.get(offset)
        return RecordState.AVAILABLE if rec is None else rec.state

    def delivery_count_of(self, offset: int) -> int:
        rec = self.records.get(offset)
        return 0 if rec is None else rec.delivery_count

    def can_acquire(self) -> bool:
        return self.next_fetch_offset() < self.next_offset or self.in_flight() < self.config.max_in_flight_records

    # -- acquiring -------------------------------------------------------------------------------------

    def acquire(self, member_id: str, first_offset: int, last_offset: int, max_records: int, now_ms: int,
                batch_ends: tuple[int, ...] = ()) -> list[AcquiredRange]:
        """Acquire for `member_id` the AVAILABLE records among offsets first..last (what a log read
        returned), at most `max_records` of them (0: no limit), new records only inside the in-flight
        window. `batch_ends`: the last offsets of the log batches read; when given, the acquisition of
        new records stops at a batch end (Kafka's batch_optimized acquire mode), so `max_records` may be
        passed by the rest of a batch. Returns the acquired ranges, grouped by delivery count."""
        acquired: list[tuple[int, int]] = []  # (offset, delivery count)
        deadline = now_ms + self.config.record_lock_duration_ms
        limit = max_records if max_records > 0 else None
        offset = max(first_offset, self.start_offset)
        while offset <= last_offset:
            if limit is not None and len(acquired) >= limit:
                if not batch_ends or offset - 1 in batch_ends or offset < self.next_offset:
                    break
            if offset >= self.next_offset:
                if self.in_flight() >= self.config.max_in_flight_records:
                    break
                self.next_offset = offset + 1
            rec = self.records.get(offset)
            if rec is None:
                rec = self.records[offset] = InFlightRecord()
            if rec.state == RecordState.AVAILABLE:
                rec.state = RecordState.ACQUIRED
                rec.delivery_count += 1
                rec.member_id = member_id
                rec.lock_deadline_ms = deadline
                acquired.append((offset, rec.delivery_count))
            offset += 1
        return _ranges(acquired)

    # -- acknowledging ---------------------------------------------------------------------------------

    def acknowledge(self, member_id: str, batches: list[AcknowledgementBatch], now_ms: int) -> ErrorCode:
        """Apply a member's acknowledgements atomically (all batches or none)."""
        plan: list[tuple[int, AcknowledgeType]] = []
        for batch in batches:
            if batch.first_offset > batch.last_offset or not batch.acknowledge_types:
                return ErrorCode.INVALID_REQUEST
            count = batch.last_offset - batch.first_offset + 1
            if len(batch.acknowledge_types) not in (1, count):
                return ErrorCode.INVALID_REQUEST
            for i in range(count):
                raw = batch.acknowledge_types[0 if len(batch.acknowledge_types) == 1 else i]
                try:
                    ack = AcknowledgeType(raw)
                except ValueError:
                    return ErrorCode.INVALID_REQUEST
                if ack == AcknowledgeType.RENEW and not self.config.renew_acknowledge_enable:
                    return ErrorCode.INVALID_REQUEST
                offset = batch.first_offset + i
                if offset < self.start_offset:
                    continue  # already acknowledged or archived and forgotten: Kafka ignores it
                rec = self.records.get(offset)
                if rec is None or rec.state != RecordState.ACQUIRED or rec.member_id != member_id:
                    return ErrorCode.INVALID_RECORD_STATE
                plan.append((offset, ack))
        for offset, ack in plan:
            rec = self.records[offset]
            if ack == AcknowledgeType.ACCEPT:
                self._set(rec, RecordState.ACKNOWLEDGED)
            elif ack in (AcknowledgeType.REJECT, AcknowledgeType.GAP):
                self._set(rec, RecordState.ARCHIVED)
            elif ack == AcknowledgeType.RELEASE:
                self._release(rec)
            else:
                rec.lock_deadline_ms = now_ms + self.config.record_lock_duration_ms
        self._advance_start()
        return ErrorCode.NONE

    # -- locks and members -----------------------------------------------------------------------------

    def expire_locks(self, now_ms: int) -> int:
        """Release every ACQUIRED record whose lock expired; returns how many."""
        expired = 0
        for rec in self.records.values():
            if rec.state == RecordState.ACQUIRED and rec.lock_deadline_ms <= now_ms:
                self._release(rec)
                expired += 1
        if expired:
            self._advance_start()
        return expired

    def next_lock_deadline(self) -> int | None:
        deadlines = [r.lock_deadline_ms for r in self.records.values() if r.state == RecordState.ACQUIRED]
        return min(deadlines) if deadlines else None

    def release_member(self, member_id: str) -> int:
        """The member's share session closed or it left the group: its records are released (Kafka's
        releaseAcquiredRecords); returns how many."""
        released = 0
        for rec in self.records.values():
            if rec.state == RecordState.ACQUIRED and rec.member_id == member_id:
                self._release(rec)
                released += 1
        if released:
            self._advance_start()
        return released

    def _release(self, rec: InFlightRecord) -> None:
        limit_reached = rec.delivery_count >= self.config.delivery_count_limit
        self._set(rec, RecordState.ARCHIVED if limit_reached else RecordState.AVAILABLE)

    @staticmethod
    def _set(rec: InFlightRecord, state: RecordState) -> None:
        rec.state = state
        rec.member_id = None
        rec.lock_deadline_ms = 0

    def _advance_start(self) -> None:
        while self.start_offset < self.next_offset:
            rec = self.records.get(self.start_offset)
            if rec is None or rec.state not in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
                break
            del self.records[self.start_offset]
            self.start_offset += 1

    # -- durable state (the share coordinator's ShareSnapshot) -----------------------------------------

    def state_batches(self) -> list[tuple[int, int, int, int]]:
        """The in-flight records as (first, last, state, delivery count) runs, ACQUIRED written as
        AVAILABLE (a lock does not survive a restart; the delivery count does)."""
        runs: list[tuple[int, int, int, int]] = []
        for offset in range(self.start_offset, self.next_offset):
            rec = self.records.get(offset)
            state = RecordState.AVAILABLE if rec is None or rec.state == RecordState.ACQUIRED else rec.state
            count = 0 if rec is None else rec.delivery_count
            if runs and runs[-1][1] == offset - 1 and runs[-1][2:] == (int(state), count):
                runs[-1] = (runs[-1][0], offset, int(state), count)
            else:
                runs.append((offset, offset, int(state), count))
        return runs

    @classmethod
    def from_state(cls, start_offset: int, batches: list[tuple[int, int, int, int]],
                   config: SharePartitionConfig) -> SharePartition:
        """A share-partition recovered from its durable state (Kafka's SharePartition.initialize)."""
        sp = cls(start_offset, config)
        for first, last, state, count in batches:
            for offset in range(max(first, start_offset), last + 1):
                try:
                    rs = RecordState(state)
                except ValueError:
                    rs = RecordState.AVAILABLE
                if rs == RecordState.ACQUIRED:
                    rs = RecordState.AVAILABLE
                sp.records[offset] = InFlightRecord(rs, count)
                sp.next_offset = max(sp.next_offset, offset + 1)
        sp._advance_start()
        return sp

    def move_start_to(self, offset: int) -> None:
        """The log start moved past the share-partition start (retention, DeleteRecords): records
        before it are gone and forgotten (Kafka's updateCacheAndOffsets on OFFSET_OUT_OF_RANGE)."""
        if offset <= self.start_offset:
            return
        for o in range(self.start_offset, min(offset, self.next_offset)):
            self.records.pop(o, None)
        self.start_offset = offset
        self.next_offset = max(self.next_offset, offset)


def _ranges(acquired: list[tuple[int, int]]) -> list[AcquiredRange]:
    out: list[AcquiredRange] = []
    for offset, count in acquired:
        last = out[-1] if out else None
        if last is not None and last.last_offset == offset - 1 and last.delivery_count == count:
            out[-1] = AcquiredRange(last.first_offset, offset, count)
        else:
            out.append(AcquiredRange(offset, offset, count))
    return out
