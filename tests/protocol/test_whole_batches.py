"""`iter_whole_batches`: the whole batches of a size-bounded read (kbroker/protocol/records.py), the one
reader the log loaders, the Raft log and client and the broker's metadata reader share."""

from __future__ import annotations

import pytest

from kbroker.protocol.records import CorruptRecordError, SimpleRecord, build_batch, iter_whole_batches


def _batches() -> bytes:
    first = build_batch([SimpleRecord(b"a"), SimpleRecord(b"b")], base_offset=0, now_ms=1)
    second = build_batch([SimpleRecord(b"c")], base_offset=2, now_ms=1)
    return bytes(first) + bytes(second)


def test_every_whole_batch_in_order() -> None:
    data = _batches()
    assert [(b.base_offset, b.next_offset) for b in iter_whole_batches(data)] == [(0, 2), (2, 3)]
    assert sum(len(b.buf) for b in iter_whole_batches(data)) == len(data)


@pytest.mark.parametrize("cut", [1, 11, 12, 30])
def test_a_partial_tail_is_left_out(cut: int) -> None:
    data = _batches()
    assert [b.base_offset for b in iter_whole_batches(data[:-cut])] == [0]
    assert list(iter_whole_batches(b"")) == []


def test_a_malformed_header_raises() -> None:
    data = bytearray(_batches())
    data[8:12] = (5).to_bytes(4, "big")  # batchLength below a batch header
    with pytest.raises(CorruptRecordError):
        list(iter_whole_batches(bytes(data)))
