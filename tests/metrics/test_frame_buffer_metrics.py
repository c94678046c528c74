"""The frame pool's figures on /metrics (issue 17): large Produce requests from a real socket, one
buffer allocated and then reused, as `kbroker_network_frame_buffers_*` report it."""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.net.frames import POOLED_FRAME_BYTES
from kbroker.protocol import RequestHeader, decode_response_frame, encode_request_frame
from kbroker.protocol.messages.produce import ProduceRequest
from kbroker.protocol.records import SimpleRecord, build_batch
from tests.metrics.scrape import http_get, metrics_broker, value

pytest.importorskip("kbroker.protocol._speedups", reason="frames are pooled only with the compiled module")


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        assert chunk, "the broker closed the connection"
        buf += chunk
    return bytes(buf)


def test_large_produce_requests_reuse_one_pooled_buffer(tmp_path: Path) -> None:
    broker, http = metrics_broker(tmp_path)
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic("frames", num_partitions=1, replication_factor=1)]).values():
            f.result(30)
        before = http_get(f"{http}/metrics")[1]
        reused0 = value(before, "kbroker_network_frame_buffers_reused_total")
        allocated0 = value(before, "kbroker_network_frame_buffers_allocated_total")

        records = [SimpleRecord(bytes([i]) * 1000, None, int(time.time() * 1000)) for i in range(200)]
        n = 6
        host, port = broker.bootstrap.split(":")
        with socket.create_connection((host, int(port)), timeout=30) as s:
            for i in range(n):
                body = ProduceRequest(acks=1, timeout_ms=30000, topic_data=[ProduceRequest.TopicProduceData(
                    name="frames", partition_data=[ProduceRequest.PartitionProduceData(
                        index=0, records=bytes(build_batch(records)))])])
                frame = encode_request_frame(
                    RequestHeader(api_key=0, api_version=9, correlation_id=i, client_id="frames"), body)
                assert len(frame) - 4 >= POOLED_FRAME_BYTES  # a pooled frame
                s.sendall(frame)
                (size,) = struct.unpack(">i", _recv_exact(s, 4))
                corr, response = decode_response_frame(0, 9, _recv_exact(s, size))
                assert corr == i
                assert response.responses[0].partition_responses[0].error_code == 0
                assert response.responses[0].partition_responses[0].base_offset == i * len(records)

        after = http_get(f"{http}/metrics")[1]
        allocated = value(after, "kbroker_network_frame_buffers_allocated_total") - allocated0
        reused = value(after, "kbroker_network_frame_buffers_reused_total") - reused0
        # One request at a time: the first needed a buffer, every later one found it free again.
        assert (allocated, reused) == (1, n - 1)
        assert value(after, "kbroker_network_frame_buffers_pooled_bytes") >= POOLED_FRAME_BYTES
    finally:
        assert broker.stop() == 0, broker.log_text()
