"""Issue 17 (P4, end-to-end latency at 50k records/s): a producer's 1 MB uncompressed batch is checked
and appended on the event loop when the compiled record walk is available, so the append, the wake-up
of the fetch waiting on the partition (min.bytes satisfied) and the produce response all happen in
the call that handled the request: no worker-thread hand-off on the produce round trip.

`kbroker.log.validator.compiled_walk_available` is switched per test (the check itself is the same
either way, the Python walk only being slower), so both sides of the bound are tested whatever the
build."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from kbroker.log import validator
from kbroker.protocol.records import SimpleRecord, build_batch
from kbroker.replica.delayed import FetchParams
from kbroker.replica.fetch_session import FetchPartitionRequest
from tests.replica.conftest import Env

Z = uuid.UUID(int=0)
KEY = ("t", 0)


def one_mb_batch() -> memoryview:
    """What kbench's e2e producer sends at 50k records/s: ~965 records of 1 KiB, ~1 MB, no compression."""
    return memoryview(build_batch([SimpleRecord(b"%08d" % i + bytes(1016)) for i in range(965)]))


def waiting_fetch(env: Env, min_bytes: int) -> asyncio.Future[object]:
    req = FetchPartitionRequest(KEY, "t", Z, 0, 0, 1 << 20)
    out = env.rm.fetch_messages(FetchParams(max_wait_ms=30_000, min_bytes=min_bytes), [req])
    assert isinstance(out, asyncio.Future) and not out.done()
    return out


def test_a_1mb_batch_is_appended_inline_and_completes_the_waiting_fetch_in_the_same_call(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(validator, "compiled_walk_available", lambda: True)
    env.create_topic("t")
    records = one_mb_batch()
    assert validator.INLINE_MAX_BYTES < len(records) <= validator.inline_max_bytes()

    async def main() -> None:
        fetch = waiting_fetch(env, min_bytes=512 * 1024)
        out = env.rm.append_records(1000, 1, False, {KEY: records}, offload=True)
        # Appended now (a dict, not a future for a worker's check) ...
        assert isinstance(out, dict) and out[KEY].base_offset == 0
        assert env.rm.get_partition("t", 0).log_end_offset == 965
        # ... and the fetch that waited for min.bytes was completed by that append, before any
        # timer or other callback could run: its response is ready when the produce answers.
        assert fetch.done()
        result = fetch.result()[KEY]  # type: ignore[index]
        assert result.records_size == len(records) and result.high_watermark == 965

    asyncio.run(main())


def test_without_the_compiled_walk_a_1mb_batch_still_goes_to_the_worker(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Python walk costs ~7 us a record: above INLINE_MAX_BYTES the check stays off the loop,
    and the waiting fetch is completed when the worker's check is back and the batch appended."""
    monkeypatch.setattr(validator, "compiled_walk_available", lambda: False)
    monkeypatch.setattr(validator, "_needs_worker", None)  # a build without the compiled module has neither
    env.create_topic("t")
    records = one_mb_batch()

    async def main() -> None:
        fetch = waiting_fetch(env, min_bytes=512 * 1024)
        out = env.rm.append_records(1000, 1, False, {KEY: records}, offload=True)
        assert isinstance(out, asyncio.Future)
        assert not fetch.done() and env.rm.get_partition("t", 0).log_end_offset == 0
        res = await asyncio.wait_for(out, 10)
        assert res[KEY].base_offset == 0
        # The append (back on the loop) woke the fetch in the same callback.
        assert fetch.done() and fetch.result()[KEY].records_size == len(records)  # type: ignore[index]

    asyncio.run(main())


def test_the_record_bound_still_sends_many_small_records_to_the_worker(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """The byte bound moved, the record bound did not: a malformed record makes even the compiled
    build run the Python walk, so a batch of more than INLINE_MAX_RECORDS records is never checked
    on the loop."""
    monkeypatch.setattr(validator, "compiled_walk_available", lambda: True)
    env.create_topic("t")
    many = memoryview(build_batch([SimpleRecord(b"v")] * (validator.INLINE_MAX_RECORDS + 1)))
    assert len(many) < validator.INLINE_MAX_BYTES

    async def main() -> None:
        out = env.rm.append_records(1000, 1, False, {KEY: many}, offload=True)
        assert isinstance(out, asyncio.Future)
        assert (await asyncio.wait_for(out, 10))[KEY].base_offset == 0

    asyncio.run(main())
