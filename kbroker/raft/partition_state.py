"""`KRaftControlRecordStateMachine`: the voter set and kraft.version a replica's log says (KIP-853).

Kafka's replicas do not wait for a `VotersRecord` to commit before they use it: the voter set in force
is the one of the *latest* VotersRecord in the local log, committed or not (Kafka's `partitionState`,
a `VoterSetHistory` keyed by offset). That is what makes one-at-a-time membership changes safe
(Raft's single-server change, Ongaro's thesis §4.1): the old and new majorities of a one-voter change
always overlap, and a leader only starts a change once the previous one committed.

So this keeps, from the log (and the snapshot it starts at):

- `history`: (offset, VoterSet) of every VotersRecord at or above the log start offset, in log order;
  the snapshot's own voters count at offset `snapshot end - 1`;
- the bootstrap voter set (`controller.quorum.voters`, or the bootstrap checkpoint's VotersRecord),
  in force at offset -1 until the log holds one;
- kraft.version likewise (`KRaftVersionRecord`).

A truncation (a follower's diverging log) drops the entries at or above the new end offset, which
reverts the voter set to the previous one; an installed snapshot resets the history to its header.
`sync(log)` brings the history up to the log's current end; `voter_set_at(offset)` is what a snapshot
ending there must carry.
"""

from __future__ import annotations

from dataclasses import dataclass

from kbroker.protocol.messages import kraft_version_record as _kvr
from kbroker.protocol.messages import voters_record as _vr
from kbroker.protocol.messages.kraft_version_record import KRaftVersionRecord
from kbroker.protocol.messages.voters_record import VotersRecord
from kbroker.protocol.record_format import ControlRecordType, parse_control_record_type
from kbroker.protocol.records import RecordBatch, RecordsError, SimpleRecord, iter_whole_batches
from kbroker.raft.control_records import as_control_batch
from kbroker.raft.raft_log import RaftLog
from kbroker.raft.voter_set import VoterSet
from kbroker.snapshot.records_snapshot import read_snapshot

# Kafka's ControlRecordUtils.KRAFT_VERSION_CURRENT_VERSION / KRAFT_VOTERS_CURRENT_VERSION.
KRAFT_VERSION_RECORD_VERSION = 0
VOTERS_RECORD_VERSION = 0
_SCAN_BYTES = 1 << 20


def encode_voters(record: VotersRecord) -> bytes:
    out = bytearray()
    _vr.ENCODERS[VOTERS_RECORD_VERSION](record, out, None)
    return bytes(out)


def decode_voters(value: bytes) -> VotersRecord:
    msg, _ = _vr.DECODERS[VOTERS_RECORD_VERSION](memoryview(value), 0)
    if not isinstance(msg, VotersRecord):
        raise ValueError("not a VotersRecord")
    return msg


def encode_kraft_version(level: int) -> bytes:
    out = bytearray()
    _kvr.ENCODERS[KRAFT_VERSION_RECORD_VERSION](KRaftVersionRecord(version=0, kraft_version=level), out, None)
    return bytes(out)


def decode_kraft_version(value: bytes) -> int:
    msg, _ = _kvr.DECODERS[KRAFT_VERSION_RECORD_VERSION](memoryview(value), 0)
    if not isinstance(msg, KRaftVersionRecord):
        raise ValueError("not a KRaftVersionRecord")
    return int(msg.kraft_version)


def build_voters_batch(voters: VoterSet, *, base_offset: int, epoch: int, now_ms: int,
                       leader_change: SimpleRecord | None = None, kraft_version: int | None = None) -> bytearray:
    """A control batch with (optionally a LeaderChangeMessage and a KRaftVersionRecord, then) a
    VotersRecord: Kafka's `appendStartOfEpochControlRecords` / `appendVotersRecord`."""
    from kbroker.protocol.record_format import encode_control_key
    from kbroker.protocol.records import build_batch

    records: list[SimpleRecord] = [] if leader_change is None else [leader_change]
    if kraft_version is not None:
        records.append(SimpleRecord(value=encode_kraft_version(kraft_version),
                                    key=encode_control_key(ControlRecordType.KRAFT_VERSION), timestamp=now_ms))
    records.append(SimpleRecord(value=encode_voters(voters.to_record()),
                                key=encode_control_key(ControlRecordType.KRAFT_VOTERS), timestamp=now_ms))
    return as_control_batch(build_batch(records, base_offset=base_offset, partition_leader_epoch=epoch,
                                        now_ms=now_ms))


@dataclass(frozen=True)
class VoterSetEntry:
    offset: int  # -1: the bootstrap set
    voters: VoterSet


class KRaftControlRecordStateMachine:
    def __init__(self, bootstrap: VoterSet, bootstrap_kraft_version: int) -> None:
        self.bootstrap = VoterSetEntry(-1, bootstrap)
        self.bootstrap_kraft_version = bootstrap_kraft_version
        self.history: list[VoterSetEntry] = []
        self.kraft_versions: list[tuple[int, int]] = []
        self.next_offset = 0  # the next log offset not scanned yet

    # --- what is in force --------------------------------------------------------------------------
    def last_voter_set_entry(self) -> VoterSetEntry:
        return self.history[-1] if self.history else self.bootstrap

    def last_voter_set(self) -> VoterSet:
        return self.last_voter_set_entry().voters

    def voter_set_at(self, offset: int) -> VoterSet:
        """The voter set in force at `offset` (the latest entry at or below it)."""
        found = self.bootstrap
        for e in self.history:
            if e.offset <= offset:
                found = e
        return found.voters

    def kraft_version(self) -> int:
        return self.kraft_versions[-1][1] if self.kraft_versions else self.bootstrap_kraft_version

    def kraft_version_at(self, offset: int) -> int:
        level = self.bootstrap_kraft_version
        for off, v in self.kraft_versions:
            if off <= offset:
                level = v
        return level

    def has_voters_in_log(self) -> bool:
        """Kafka's `offsetOfVotersAtEpochStart != -1`: the log (or its snapshot) holds a VotersRecord."""
        return bool(self.history)

    # --- following the log -------------------------------------------------------------------------
    def truncate(self, end_offset: int) -> None:
        """The log now ends at `end_offset`: forget what was above it (reverts the voter set)."""
        self.history = [e for e in self.history if e.offset < end_offset]
        self.kraft_versions = [(o, v) for o, v in self.kraft_versions if o < end_offset]
        self.next_offset = min(self.next_offset, end_offset)

    def sync(self, log: RaftLog) -> bool:
        """Bring the history up to `log`'s end (after appends, truncations, snapshots). True if the
        voter set in force or kraft.version changed."""
        before = (self.last_voter_set_entry(), self.kraft_version())
        end = log.end_offset()
        if end < self.next_offset:
            self.truncate(end)
        snap = log.latest_snapshot_id()
        if log.start_offset() > self.next_offset or (self.next_offset == 0 and snap is not None and snap.offset > 0):
            # Kafka's maybeLoadSnapshot: the latest snapshot's header, then the log after it (with metadata
            # retention the log may still hold batches below the snapshot: they are not read again).
            self.reset_to_snapshot(log)
        while self.next_offset < end:
            data = log.read(self.next_offset, _SCAN_BYTES)
            if not data:
                break
            progressed = False
            try:
                for b in iter_whole_batches(data):
                    if b.next_offset <= self.next_offset:
                        continue
                    if b.is_control:
                        self._scan_control_batch(b)
                    self.next_offset = b.next_offset
                    progressed = True
            except (RecordsError, ValueError):
                break
            if not progressed:
                break
        return before != (self.last_voter_set_entry(), self.kraft_version())

    def reset_to_snapshot(self, log: RaftLog) -> None:
        """The log starts at its latest snapshot (installed from the leader, or found at start): the
        history is that snapshot's header, then the log after it is scanned again."""
        snap = log.latest_snapshot_id()
        self.history = []
        self.kraft_versions = []
        self.next_offset = log.start_offset()
        if snap is None:
            return
        self.next_offset = max(self.next_offset, snap.offset)
        data = log.read_snapshot(snap)
        if data is None:
            return
        try:
            contents = read_snapshot(data)
        except Exception:  # noqa: BLE001 - a snapshot we cannot read keeps the bootstrap set (the listener reports it)
            return
        if contents.kraft_version is not None:
            self.kraft_versions.append((snap.offset - 1, contents.kraft_version))
        if contents.voters is not None and contents.voters.voters:
            self.history.append(VoterSetEntry(snap.offset - 1, VoterSet.from_record(contents.voters)))

    def _scan_control_batch(self, b: RecordBatch) -> None:
        for record in b.iter_records():
            try:
                ctype = parse_control_record_type(record.key)
            except (RecordsError, ValueError):
                continue
            if record.value is None:
                continue
            offset = record.offset
            try:
                if ctype == ControlRecordType.KRAFT_VOTERS:
                    self.history.append(VoterSetEntry(offset, VoterSet.from_record(decode_voters(bytes(record.value)))))
                elif ctype == ControlRecordType.KRAFT_VERSION:
                    self.kraft_versions.append((offset, decode_kraft_version(bytes(record.value))))
            except Exception:  # noqa: BLE001 - an undecodable control record is skipped, as Kafka's reader would fail it
                continue


__all__ = ["KRaftControlRecordStateMachine", "VoterSetEntry", "build_voters_batch", "decode_voters",
           "encode_voters"]
