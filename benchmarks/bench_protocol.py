"""Micro-benchmark of the generated codecs on the broker's hot paths.

- decode of a Produce request (v9 and v11; v3 for comparison) carrying one 16 KiB batch;
- encode of a Fetch response (v12; v16) with a few partitions whose records are FileRegions;
- decode of a Metadata request and encode of an ApiVersions-sized response for scale.

Run: ``python benchmarks/bench_protocol.py [--seconds S]``. Prints CPU µs per operation (best of 5).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kbroker.protocol import (  # noqa: E402
    ApiKey,
    FileRegion,
    RequestHeader,
    decode_request_frame,
    encode_request_frame,
    encode_response_frame,
)
from kbroker.protocol.messages.fetch import FetchResponse  # noqa: E402
from kbroker.protocol.messages.metadata import MetadataRequest  # noqa: E402
from kbroker.protocol.messages.produce import ProduceRequest  # noqa: E402


def _time(fn: Callable[[], object], seconds: float) -> float:
    """Best-of-5 mean CPU µs per call (process time: less distorted by other load on the machine)."""
    n = 1
    while True:  # calibrate
        t0 = time.process_time()
        for _ in range(n):
            fn()
        if time.process_time() - t0 > seconds / 10:
            break
        n *= 2
    best = float("inf")
    for _ in range(5):
        t0 = time.process_time()
        for _ in range(n):
            fn()
        best = min(best, (time.process_time() - t0) / n)
    return best * 1e6


def produce_frame(version: int) -> memoryview:
    batch = os.urandom(16 * 1024)
    topic = ProduceRequest.TopicProduceData(
        name="bench-topic", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)]
    )
    req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[topic])
    data = encode_request_frame(
        RequestHeader(api_key=ApiKey.PRODUCE, api_version=version, correlation_id=1, client_id="producer-1"),
        req,
    )
    return memoryview(data)[4:]


def fetch_response(f: Any, partitions: int, version: int) -> FetchResponse:
    topic = FetchResponse.FetchableTopicResponse(
        topic="bench-topic" if version < 13 else "",
        topic_id=uuid.uuid4() if version >= 13 else uuid.UUID(int=0),
        partitions=[
            FetchResponse.PartitionData(
                partition_index=i,
                high_watermark=1_000_000,
                last_stable_offset=1_000_000,
                log_start_offset=0,
                records=FileRegion(f, i * 16384, 16384),
            )
            for i in range(partitions)
        ],
    )
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=[topic])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=1.0, help="target time per measurement")
    args = parser.parse_args()
    rows: list[tuple[str, float]] = []
    for v in (3, 9, 11):
        frame = produce_frame(v)
        rows.append(
            (
                f"decode Produce v{v} request, one 16 KiB batch",
                _time(partial(decode_request_frame, frame), args.seconds),
            )
        )
    with tempfile.TemporaryFile() as f:
        f.write(os.urandom(16384 * 8))
        f.flush()
        for v, n in ((12, 4), (16, 4), (12, 1), (12, 16)):
            resp = fetch_response(f, n, v)
            rows.append(
                (
                    f"encode Fetch v{v} response, {n} partitions (FileRegion)",
                    _time(partial(encode_response_frame, ApiKey.FETCH, v, 7, resp), args.seconds),
                )
            )
    meta = memoryview(
        encode_request_frame(
            RequestHeader(api_key=ApiKey.METADATA, api_version=12, correlation_id=1, client_id="c"),
            MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=f"t{i}") for i in range(3)]),
        )
    )[4:]
    rows.append(
        ("decode Metadata v12 request, 3 topics", _time(lambda: decode_request_frame(meta), args.seconds))
    )
    width = max(len(name) for name, _ in rows)
    print(f"{'operation':<{width}}  CPU µs/op")
    print(f"{'-' * width}  ---------")
    for name, us in rows:
        print(f"{name:<{width}}  {us:6.2f}")


if __name__ == "__main__":
    main()
