"""KRaft's control batches: the LeaderChangeMessage a new leader writes first in its epoch.

Kafka's leader appends one control batch (attributes: control, not transactional; producer id -1)
holding a LEADER_CHANGE record (key: version 0, type 2; value: `LeaderChangeMessage` v0 with the
voters and the voters that granted the election) at its epoch start offset. Committing it is what
lets the high watermark move in the new epoch (Raft's "commit an entry of your own term"), and
`kafka-dump-log` shows it as `LeaderChange`.
"""

from __future__ import annotations

from collections.abc import Iterable

from kbroker.protocol.messages import leader_change_message as _lcm
from kbroker.protocol.messages.leader_change_message import LeaderChangeMessage
from kbroker.protocol.record_format import (
    ATTRIBUTES_OFFSET,
    CONTROL_FLAG_MASK,
    CRC_OFFSET,
    INT16,
    UINT32,
    ControlRecordType,
    encode_control_key,
    parse_control_record_type,
)
from kbroker.protocol.records import RecordBatch, SimpleRecord, build_batch

LEADER_CHANGE_CURRENT_VERSION = 0  # Kafka's ControlRecordUtils.LEADER_CHANGE_CURRENT_VERSION


def encode_leader_change(message: LeaderChangeMessage) -> bytes:
    out = bytearray()
    _lcm.ENCODERS[LEADER_CHANGE_CURRENT_VERSION](message, out, None)
    return bytes(out)


def decode_leader_change(value: bytes) -> LeaderChangeMessage:
    msg, _ = _lcm.DECODERS[LEADER_CHANGE_CURRENT_VERSION](memoryview(value), 0)
    if not isinstance(msg, LeaderChangeMessage):
        raise ValueError("not a LeaderChangeMessage")
    return msg


def as_control_batch(batch: bytearray) -> bytearray:
    """Set the control flag on a built batch and recompute its CRC (the flag is inside the CRC)."""
    attrs = INT16.unpack_from(batch, ATTRIBUTES_OFFSET)[0] | CONTROL_FLAG_MASK
    INT16.pack_into(batch, ATTRIBUTES_OFFSET, attrs)
    UINT32.pack_into(batch, CRC_OFFSET, RecordBatch(memoryview(batch)).compute_crc())
    return batch


def build_leader_change_batch(*, leader_id: int, voters: Iterable[int], granting_voters: Iterable[int],
                              base_offset: int, epoch: int, now_ms: int) -> bytearray:
    message = LeaderChangeMessage(
        version=LEADER_CHANGE_CURRENT_VERSION, leader_id=leader_id,
        voters=[LeaderChangeMessage.Voter(voter_id=v) for v in sorted(voters)],
        granting_voters=[LeaderChangeMessage.Voter(voter_id=v) for v in sorted(granting_voters)])
    record = SimpleRecord(value=encode_leader_change(message), key=encode_control_key(ControlRecordType.LEADER_CHANGE),
                          timestamp=now_ms)
    batch = build_batch([record], base_offset=base_offset, partition_leader_epoch=epoch, now_ms=now_ms)
    return as_control_batch(batch)


def leader_change_of(batch: RecordBatch) -> LeaderChangeMessage | None:
    """The LeaderChangeMessage in a control batch, None for any other batch."""
    if not batch.is_control:
        return None
    for record in batch.iter_records():
        if parse_control_record_type(record.key) == ControlRecordType.LEADER_CHANGE and record.value is not None:
            return decode_leader_change(bytes(record.value))
    return None
