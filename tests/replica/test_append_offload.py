"""Produce checks off the event loop (issue 19 finding 2): compressed batches are checked by the
worker pool, the append happens back on the loop, and appends to one partition keep their order
even when a cheap batch arrives behind an expensive one."""

from __future__ import annotations

import asyncio

from kbroker.protocol.compression import CompressionType
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.records import SimpleRecord, build_batch, iter_batches
from tests.replica.conftest import Env


def batch(tag: bytes, n: int, codec: CompressionType = CompressionType.NONE) -> memoryview:
    return memoryview(build_batch([SimpleRecord(tag + b"%d" % i, b"k") for i in range(n)], compression=codec))


def test_heavy_then_light_appends_keep_partition_order(env: Env) -> None:
    env.create_topic("t")

    async def main() -> None:
        heavy = env.rm.append_records(1000, 1, False, {("t", 0): batch(b"h", 5000, CompressionType.GZIP)},
                                      offload=True)
        light = env.rm.append_records(1000, 1, False, {("t", 0): batch(b"l", 2)}, offload=True)
        # The gzip batch is with a worker; the small one queues behind it instead of overtaking.
        assert isinstance(heavy, asyncio.Future) and isinstance(light, asyncio.Future)
        assert env.rm.get_partition("t", 0).log_end_offset == 0
        h, l_ = await heavy, await light
        assert h[("t", 0)].base_offset == 0 and l_[("t", 0)].base_offset == 5000
        # Nothing queued: a small batch is appended at once, on the loop.
        now = env.rm.append_records(1000, -1, False, {("t", 0): batch(b"n", 1)}, offload=True)
        assert isinstance(now, dict) and now[("t", 0)].base_offset == 5002

    asyncio.run(main())
    log = env.rm.get_partition("t", 0).log
    data = log.read(0, 1 << 30, log.log_end_offset).region.read_bytes()
    values = [r.value for b in iter_batches(data) for r in b]
    assert values[0] == b"h0" and values[5000:] == [b"l0", b"l1", b"n0"]


def test_errors_found_by_a_worker_reach_the_response(env: Env) -> None:
    env.create_topic("t")
    bad = bytearray(build_batch([SimpleRecord(b"v")] * 3, compression=CompressionType.ZSTD))
    bad[-5] ^= 0xFF  # damage the zstd payload, then fix the CRC so only decompression can tell
    from crc32c import crc32c

    from kbroker.protocol.record_format import ATTRIBUTES_OFFSET, CRC_OFFSET, UINT32
    UINT32.pack_into(bad, CRC_OFFSET, crc32c(memoryview(bad)[ATTRIBUTES_OFFSET:]))

    async def main() -> None:
        out = env.rm.append_records(1000, 1, False, {("t", 0): memoryview(bad)}, offload=True)
        assert isinstance(out, asyncio.Future)
        r = (await out)[("t", 0)]
        assert r.error in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD) and r.base_offset == -1

    asyncio.run(main())
    assert env.rm.get_partition("t", 0).log_end_offset == 0


def test_without_offload_the_append_stays_synchronous(env: Env) -> None:
    env.create_topic("t")
    out = env.rm.append_records(1000, 1, False, {("t", 0): batch(b"z", 3, CompressionType.ZSTD)})
    assert isinstance(out, dict) and out[("t", 0)].error == ErrorCode.NONE
