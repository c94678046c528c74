"""The compiled produce checks (kbroker/protocol/_speedups.c) decide exactly what the Python checks decide.

``log.validator.check_produced``, ``assign_offsets`` and ``needs_worker`` take a compiled path when
the module is built, and ``check_and_assign_plain`` does the first two in one compiled call (the
leader's append); the Python code is the reference. Random produced requests (one or several
batches, a trailing partial batch, keys, null keys, headers, producer ids, transactional batches)
and random damage to them (header fields, CRC, attributes, counts, record bytes, truncation) under
random topic configs (compaction, LogAppendTime, a narrow timestamp window, a small
max.message.bytes, compression.type) go through both paths: the same CheckedBatch list, the same
patched bytes and ValidationResult, or the same Kafka error (type, message, record errors).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from kbroker.log import validator
from kbroker.log.config import LogConfig
from kbroker.log.errors import KafkaError
from kbroker.protocol.compression import CompressionType
from kbroker.protocol.crc import crc32c
from kbroker.protocol.record_format import ATTRIBUTES_OFFSET, CRC_OFFSET, UINT32
from kbroker.protocol.records import SimpleRecord, build_batch

NOW = 1_700_000_000_000


def test_the_compiled_checks_are_built() -> None:
    """Without them this file compares the Python path with itself."""
    assert validator._check_plain is not None and validator._assign_plain is not None
    assert validator._check_assign_plain is not None
    assert validator._needs_worker is not None, "run scripts/build-speedups.sh (or pip install -e .)"


def _batch(rng: random.Random) -> bytearray:
    n = rng.randrange(1, 12)
    base_ts = NOW + rng.choice((0, -5_000, 3_000, -10**9, 10**9))
    records = []
    for i in range(n):
        key = None if rng.random() < 0.3 else rng.randbytes(rng.randrange(0, 20))
        value = None if rng.random() < 0.05 else rng.randbytes(rng.choice((0, 10, 100, 700)))
        headers = tuple((f"h{j}", rng.randbytes(3)) for j in range(rng.choice((0, 0, 2))))
        records.append(SimpleRecord(value, key, base_ts + rng.choice((0, i, 50, -50)), headers))
    pid = rng.choice((-1, -1, 7, 1 << 40))
    kwargs: dict[str, Any] = {"now_ms": NOW}
    if pid >= 0:
        kwargs.update(producer_id=pid, producer_epoch=rng.randrange(0, 3), base_sequence=rng.randrange(0, 100),
                      is_transactional=rng.random() < 0.3)
    if rng.random() < 0.1:
        kwargs["compression"] = CompressionType.GZIP
    return build_batch(records, **kwargs)


def _damage(rng: random.Random, batch: bytearray) -> None:
    """One change a producer (or a bad disk, or an attacker) could make; the CRC is fixed up half the
    time so that the later checks are reached."""
    what = rng.randrange(12)
    if what == 0:
        batch[rng.randrange(61, len(batch))] ^= 1 << rng.randrange(8)  # a record byte
    elif what == 1:
        batch[rng.randrange(21, 61)] = rng.randrange(256)  # a header byte under the CRC
    elif what == 2:
        batch[7] = rng.choice((1, 5))  # baseOffset not 0
    elif what == 3:
        batch[16] = rng.choice((0, 1, 3))  # magic
    elif what == 4:
        batch[22] |= rng.choice((0x08, 0x10, 0x20, 0x05, 0x07))  # timestamp type, transactional, control, codec
    elif what == 5:
        batch[60] = (batch[60] + rng.choice((1, 255))) & 0xFF  # records count
    elif what == 6:
        batch[26] = (batch[26] + 1) & 0xFF  # last offset delta
    elif what == 7:
        batch[53:57] = b"\xff\xff\xff\xff"  # base sequence -1 (with or without a producer id)
    elif what == 8:
        batch[35:43] = (NOW + rng.choice((1, -1, 10**12))).to_bytes(8, "big", signed=True)  # max timestamp
    elif what == 9:
        batch[17] ^= 0xFF  # the CRC itself
        return
    elif what == 10:
        batch[43:51] = (-1).to_bytes(8, "big", signed=True)  # producer id -1
    elif what == 11:
        # The first record's offset delta 0 -> 1 (same length): a record out of place.
        pos = 61
        while batch[pos] & 0x80:  # the record's length
            pos += 1
        pos += 2  # its attributes
        while batch[pos] & 0x80:  # its timestamp delta
            pos += 1
        pos += 1
        batch[pos] = 0x02
    if rng.random() < 0.5:
        UINT32.pack_into(batch, CRC_OFFSET, crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))


def _config(rng: random.Random) -> LogConfig:
    return LogConfig(
        cleanup_policy=rng.choice(("delete", "delete", "compact", "compact,delete")),
        compression_type=rng.choice(("producer", "producer", "uncompressed", "gzip")),
        message_timestamp_type=rng.choice(("CreateTime", "CreateTime", "LogAppendTime")),
        message_timestamp_before_max_ms=rng.choice((2**63 - 1, 2**63 - 1, 60_000, 10**10)),
        message_timestamp_after_max_ms=rng.choice((3_600_000, 3_600_000, 60_000, 2**63 - 1)),
        max_message_bytes=rng.choice((1048588, 1048588, 1048588, 300)),
        segment_bytes=rng.choice((1 << 30, 1 << 30, 1 << 30, 500)),
    )


def _run(records: bytes, config: LogConfig, compiled: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    with monkeypatch.context() as m:
        if not compiled:
            m.setattr(validator, "_check_plain", None)
            m.setattr(validator, "_assign_plain", None)
            m.setattr(validator, "_needs_worker", None)
        buf = bytearray(records)
        view = memoryview(buf)
        heavy = validator.needs_worker(view, config)
        try:
            checked = validator.check_produced(view, config, NOW, "t-0")
            result = validator.assign_offsets(view, checked, 1000, 7, config.segment_bytes)
        except KafkaError as e:
            return heavy, type(e), str(e), getattr(e, "record_errors", None), bytes(buf)
        r = result
        return (heavy, checked, bytes(r.data), r.headers, r.first_offset, r.last_offset, r.next_offset,
                r.max_timestamp, r.offset_of_max_timestamp, r.num_messages, r.valid_bytes, r.recompressed, bytes(buf))


def _run_fused(records: bytes, config: LogConfig) -> tuple[Any, ...] | None:
    """The leader's path: ``check_and_assign_plain``, in the shape of :func:`_run`'s answer; None when
    it declined, having left the bytes as they were."""
    buf = bytearray(records)
    view = memoryview(buf)
    try:
        plain = validator.check_and_assign_plain(view, config, NOW, 1000, 7, config.segment_bytes)
    except KafkaError as e:
        return False, type(e), str(e), getattr(e, "record_errors", None), bytes(buf)
    if plain is None:
        assert bytes(buf) == records, "a declined call changed the batch"
        return None
    headers, infos, next_offset, max_ts, offset_of_max, num_messages, valid_bytes = plain
    assert infos == [(h.last_offset, h.max_timestamp, h.size) for h in headers]
    checked = [validator.CheckedBatch(pos, h.size, None, h.max_timestamp, config.log_append_time)
               for pos, h in zip(_positions(headers), headers, strict=True)]
    first, last = (1000, next_offset - 1) if headers else (-1, -1)
    return (False, checked, bytes(buf[:valid_bytes]), headers, first, last, next_offset if headers else -1, max_ts,
            offset_of_max, num_messages, valid_bytes, False, bytes(buf))


def _positions(headers: list[Any]) -> list[int]:
    out, pos = [], 0
    for h in headers:
        out.append(pos)
        pos += h.size
    return out


@pytest.mark.parametrize("seed", range(8))
def test_compiled_and_python_paths_agree(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    accepted = refused = fused_taken = 0
    fast = [0]
    compiled_check = validator._check_plain
    assert compiled_check is not None

    def counting(*args: Any) -> Any:
        out = compiled_check(*args)
        fast[0] += out is not None
        return out

    monkeypatch.setattr(validator, "_check_plain", counting)
    for _ in range(250):
        batches = [_batch(rng) for _ in range(rng.choice((1, 1, 1, 2, 3)))]
        if rng.random() < 0.5:
            _damage(rng, rng.choice(batches))
        records = b"".join(batches)
        if rng.random() < 0.08:
            records = records[:rng.randrange(0, len(records) + 1)]  # a partial (or empty) tail
        config = _config(rng)
        python = _run(records, config, False, monkeypatch)
        compiled = _run(records, config, True, monkeypatch)
        assert compiled == python, (seed, config)
        fused = _run_fused(records, config)
        if fused is not None:
            fused_taken += 1
            # Its own answer to needs_worker aside (the leader asks that first), the same as Python's.
            assert fused[1:] == python[1:], (seed, config)
        elif config.produce_check_args is not None:  # a recompressing topic never takes a compiled path
            # It declines exactly what the compiled check declines.
            assert compiled_check(bytes(records), *_check_args(config)) is None, (seed, config)
        if isinstance(python[1], list):
            accepted += 1
        else:
            refused += 1
    # Both outcomes exercised, and most accepted requests took the compiled path.
    assert accepted > 40 and refused > 30 and fast[0] > 30, (accepted, refused, fast[0])
    assert fused_taken > 30, fused_taken


def _check_args(config: LogConfig) -> tuple[Any, ...]:
    assert config.produce_check_args is not None
    mmb, before, after, compacted, lat = config.produce_check_args
    return (mmb, max(NOW - before, -(1 << 63)), min(NOW + after, (1 << 63) - 1), NOW, compacted, lat, crc32c)


def test_the_compiled_check_takes_the_common_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A producer's plain batch is decided in one compiled call: no ValidationParams, no Python check."""
    def no_python(*args: object, **kwargs: object) -> None:
        raise AssertionError("the Python checks ran")

    monkeypatch.setattr(validator, "check_batches", no_python)
    batch = build_batch([SimpleRecord(b"v" * 100, b"k", NOW)], now_ms=NOW)
    checked = validator.check_produced(memoryview(batch), LogConfig(), NOW, "t-0")
    assert checked == [validator.CheckedBatch(0, len(batch), None, NOW, False)]
    # And a batch it does not take still gets Kafka's error from the Python checks.
    monkeypatch.undo()
    batch[7] = 1
    with pytest.raises(KafkaError, match="baseOffset of the record batch in the append to t-0 should be 0"):
        validator.check_produced(memoryview(batch), LogConfig(), NOW, "t-0")
