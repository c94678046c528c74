"""Delayed produce/fetch are answered through chained loop futures, not a Task per request."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kbroker.protocol as protocol
from kbroker.api._futures import chain_future
from kbroker.api.context import CloseConnection
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages.fetch import FetchRequest
from kbroker.protocol.records import SimpleRecord, build_batch
from tests.replica.test_api_inprocess import Api, produce_req


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    a = Api(tmp_path, {"num.partitions": "1"})
    yield a
    a.close()


def _dispatch(api: Api, key: int, version: int, body: Any) -> Any:
    header = protocol.RequestHeader(api_key=key, api_version=version, correlation_id=1, client_id="t")
    frame = protocol.encode_request_frame(header, body)
    hdr, req = protocol.decode_request_frame(memoryview(bytearray(frame))[4:])
    return api.dispatcher.handle(api.ctx, hdr, req)


def test_long_poll_fetch_is_a_future_and_completes_when_data_arrives(api: Api) -> None:
    api.tm.create_topic("t", 1)
    fetch = FetchRequest(max_wait_ms=10_000, min_bytes=1, max_bytes=1 << 20, session_id=0, session_epoch=-1,
                         topics=[FetchRequest.FetchTopic(topic="t", partitions=[
                             FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])

    async def main() -> Any:
        tasks_before = len(asyncio.all_tasks())
        result = _dispatch(api, 1, 12, fetch)
        # A plain future: the network layer completes the response slot from its done-callback.
        assert asyncio.isfuture(result) and not isinstance(result, asyncio.Task)
        assert not result.done()
        assert len(asyncio.all_tasks()) == tasks_before
        records = bytes(build_batch([SimpleRecord(b"v", b"k", 1_700_000_000_000)]))
        produced = _dispatch(api, 0, 9, produce_req("t", 0, records, acks=1))
        assert produced.responses[0].partition_responses[0].error_code == 0
        return await asyncio.wait_for(result, 5)

    response = api.loop.run_until_complete(main())
    part = response.responses[0].partitions[0]
    assert part.error_code == 0 and part.high_watermark == 1


def test_chain_future_maps_results_errors_and_cancellation() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        src: asyncio.Future[int] = loop.create_future()
        out = chain_future(src, lambda v: v * 2)
        src.set_result(21)
        assert await out == 42

        src2: asyncio.Future[int] = loop.create_future()
        out2 = chain_future(src2, lambda v: v, lambda exc: f"error {exc.args[0]}")
        src2.set_exception(KafkaError("slow", error_code=ErrorCode.REQUEST_TIMED_OUT))
        assert (await out2).startswith("error")

        src3: asyncio.Future[int] = loop.create_future()
        out3 = chain_future(src3, lambda v: v)
        src3.set_exception(CloseConnection("bye"))
        with pytest.raises(CloseConnection):
            await out3

        src4: asyncio.Future[int] = loop.create_future()
        out4 = chain_future(src4, lambda v: v)
        src4.cancel()
        await asyncio.sleep(0)
        assert out4.cancelled()

        src5: asyncio.Future[int] = loop.create_future()
        out5 = chain_future(src5, lambda v: 1 // v)
        src5.set_result(0)
        with pytest.raises(ZeroDivisionError):
            await out5

    asyncio.run(main())
