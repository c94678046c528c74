"""The compiled record walk (kbroker/protocol/_speedups.c) agrees with the Python walk, byte for byte.

``walk_batch_records`` must give exactly what ``walk_records(buf, pos, 0, count)`` gives: the same
RecordsWalk for well-formed records, the same InvalidRecordError (type and message) for malformed
ones. Random batches (keys, null keys, headers, large and negative timestamp deltas, offset deltas
that are not their index) and random corruptions of them (flipped bytes, truncations, wrong counts)
are walked both ways.
"""

from __future__ import annotations

import random

import pytest

from kbroker.protocol import record_format
from kbroker.protocol.record_format import (
    RECORDS_OFFSET,
    InvalidRecordError,
    RecordsWalk,
    encode_record,
    walk_batch_records,
    walk_records,
)


def test_the_compiled_walk_is_built() -> None:
    """The benchmarks and this test's comparisons mean nothing if the fallback ran instead."""
    assert record_format._walk_compiled is not None, "run scripts/build-speedups.sh (or pip install -e .)"


def _records(rng: random.Random, n: int) -> bytes:
    out = bytearray()
    for i in range(n):
        key = None if rng.random() < 0.5 else rng.randbytes(rng.randrange(0, 40))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.choice((0, 5, 100, 300, 9000)))
        headers = [(f"h{j}", None if rng.random() < 0.3 else rng.randbytes(rng.randrange(0, 20)))
                   for j in range(rng.choice((0, 0, 1, 3)))]
        ts = rng.choice((0, i, -5, 1 << 20, 1 << 40, -(1 << 50), (1 << 62)))
        offset = i if rng.random() < 0.95 else i + rng.choice((1, -1, 1000))
        out += encode_record(offset, ts, key, value, headers)
    return bytes(out)


def _walk_both(buf: bytes, count: int) -> tuple[object, object]:
    results: list[object] = []
    for fn in (lambda: walk_records(memoryview(buf), RECORDS_OFFSET, 0, count),
               lambda: walk_batch_records(memoryview(buf), RECORDS_OFFSET, count)):
        try:
            results.append(fn())
        except InvalidRecordError as e:
            results.append((type(e), str(e)))
    return results[0], results[1]


@pytest.mark.parametrize("seed", range(6))
def test_compiled_and_python_walks_agree(seed: int) -> None:
    rng = random.Random(seed)
    ok = failed = 0
    for _ in range(300):
        n = rng.randrange(0, 40)
        buf = bytes(RECORDS_OFFSET) + _records(rng, n)
        count = n
        mutation = rng.random()
        if mutation < 0.3:
            b = bytearray(buf)
            for _ in range(rng.randrange(1, 4)):
                if len(b) > RECORDS_OFFSET:
                    b[rng.randrange(RECORDS_OFFSET, len(b))] = rng.randrange(256)
            buf = bytes(b)
        elif mutation < 0.4:
            buf = buf[:rng.randrange(RECORDS_OFFSET, len(buf) + 1)]
        elif mutation < 0.5:
            count = max(0, n + rng.choice((-1, 1, 5)))
        py, compiled = _walk_both(buf, count)
        assert py == compiled, (seed, n, count, mutation)
        ok += isinstance(py, RecordsWalk)
        failed += not isinstance(py, RecordsWalk)
    assert ok > 50 and failed > 20  # both branches exercised


def test_a_long_but_valid_varint_falls_back_to_the_python_walk() -> None:
    # A 10-byte varlong timestamp delta (the compiled walk decodes at most 9 bytes): still accepted.
    rec = encode_record(0, -(1 << 63), None, b"v")
    buf = bytes(RECORDS_OFFSET) + rec
    py, compiled = _walk_both(buf, 1)
    assert isinstance(py, RecordsWalk) and py == compiled and py.min_ts_delta == -(1 << 63)
