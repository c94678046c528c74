"""Parse what the storage engine wrote with an independent reader of Kafka's formats.

The reader below is written from Kafka's documented layouts (RecordBatch v2, records with zigzag
varints, 8-byte .index entries, 12-byte .timeindex entries, text checkpoints) using only struct and
crc32c: it shares no code with kbroker.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import crc32c
from log_test_helpers import NOW, make_batch, open_log, small_config

from kbroker.protocol.compression import CompressionType

BATCH = struct.Struct(">qiibIhiqqqhii")


def varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def parse_records(data: bytes, count: int, base_offset: int, base_ts: int) -> list[tuple[int, int, bytes, bytes]]:
    out, pos = [], 0
    for _ in range(count):
        length, pos = varint(data, pos)
        end = pos + length
        pos += 1  # attributes
        ts_delta, pos = varint(data, pos)
        off_delta, pos = varint(data, pos)
        klen, pos = varint(data, pos)
        key = data[pos:pos + klen]
        pos += max(klen, 0)
        vlen, pos = varint(data, pos)
        value = data[pos:pos + vlen]
        pos = end
        out.append((base_offset + off_delta, base_ts + ts_delta, key, value))
    return out


def parse_log(path: Path) -> list[dict]:  # type: ignore[type-arg]
    data = path.read_bytes()
    pos, batches = 0, []
    while pos < len(data):
        (base, length, ple, magic, crc, attrs, lod, base_ts, max_ts, pid, pepoch, bseq, count) = BATCH.unpack_from(data, pos)
        end = pos + 12 + length
        assert magic == 2
        assert crc == crc32c.crc32c(data[pos + 21:end]), "CRC-32C covers attributes..end"
        recs = parse_records(data[pos + 61:end], count, base, base_ts) if attrs & 0x07 == 0 else []
        batches.append(dict(pos=pos, size=end - pos, base=base, last=base + lod, epoch=ple, max_ts=max_ts, records=recs,
                            pid=pid, attrs=attrs))
        pos = end
    return batches


def test_segments_indexes_and_checkpoints_match_kafka_layout(tmp_path: Path) -> None:
    interval = 300
    cfg = small_config(segment_bytes=3000, index_interval_bytes=interval)
    log = open_log(tmp_path / "my.topic-7", cfg)
    for i in range(60):
        codec = CompressionType.LZ4 if i % 7 == 3 else CompressionType.NONE
        log.append_as_leader(memoryview(make_batch(1 + i % 4, 40 + 3 * i, ts=NOW + 10 * i, tag=i, compression=codec)), 2 + i // 30)
    log.close()
    d = tmp_path / "my.topic-7"
    logs = sorted(d.glob("*.log"))
    assert len(logs) > 3
    expected_next = 0
    for lp in logs:
        base = int(lp.name[:20])
        assert lp.name == f"{base:020d}.log"
        batches = parse_log(lp)
        assert batches[0]["base"] == base == expected_next
        for b in batches:
            assert b["base"] == expected_next
            expected_next = b["last"] + 1
            for j, (off, _ts, key, value) in enumerate(b["records"]):
                assert off == b["base"] + j and key == b"k%d" % j and value[4:8] == struct.pack(">i", j)
        # .index: int32 relative offset, int32 position, one per batch after > interval bytes since the last.
        raw = (d / f"{base:020d}.index").read_bytes()
        entries = [struct.unpack_from(">ii", raw, k) for k in range(0, len(raw), 8)]
        want, since = [], 0
        for b in batches:
            if since > interval:
                want.append((b["last"] - base, b["pos"]))
                since = 0
            since += b["size"]
        assert entries == want
        # .timeindex: int64 timestamp, int32 relative offset of the max-timestamp batch, increasing;
        # inactive segments end with an entry for their max timestamp (written at roll/close).
        raw_t = (d / f"{base:020d}.timeindex").read_bytes()
        tentries = [struct.unpack_from(">qi", raw_t, k) for k in range(0, len(raw_t), 12)]
        assert tentries and tentries[-1] == (max(b["max_ts"] for b in batches),
                                             max(batches, key=lambda b: b["max_ts"])["last"] - base)
        assert all(a[0] < b[0] and a[1] <= b[1] for a, b in zip(tentries, tentries[1:], strict=False))
    assert expected_next == log.log_end_offset
    epoch_lines = (d / "leader-epoch-checkpoint").read_text().splitlines()
    assert epoch_lines[:2] == ["0", "2"] and epoch_lines[2] == "2 0"
    epoch3_start = int(epoch_lines[3].split()[1])
    assert epoch_lines[3].split()[0] == "3"
    all_batches = [b for lp in logs for b in parse_log(lp)]
    assert min(b["base"] for b in all_batches if b["epoch"] == 3) == epoch3_start
    names = os.listdir(d)
    assert {n.rsplit(".", 1)[-1] for n in names if n != "leader-epoch-checkpoint"} == {"log", "index", "timeindex", "snapshot"}
