"""Wire-level produce/fetch behaviour against a real kbroker process, with hand-built requests.

For what stock clients cannot express: a request mixing a good and an unknown topic, Produce v0-2
(refused by closing the connection while still advertised), acks=0 errors, ApiVersions version
fallback (KIP-511), fetch sessions over the wire, KIP-74 with explicit limits, ListOffsets edge cases.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

import pytest

import kbroker.protocol as protocol
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.api_versions import ApiVersionsRequest
from kbroker.protocol.messages.fetch import FetchRequest
from kbroker.protocol.messages.list_offsets import ListOffsetsRequest
from kbroker.protocol.messages.metadata import MetadataRequest
from kbroker.protocol.messages.produce import ProduceRequest
from kbroker.protocol.records import SimpleRecord, build_batch

pytestmark = pytest.mark.interop


class RawClient:
    """A blocking Kafka client speaking through kbroker's own codec (tests only)."""

    def __init__(self, bootstrap: str, client_id: str = "raw-test") -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=15)
        self.client_id = client_id
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def send(self, key: int, version: int, body: Any) -> int:
        self.correlation += 1
        header = protocol.RequestHeader(api_key=key, api_version=version, correlation_id=self.correlation,
                                        client_id=self.client_id)
        self.sock.sendall(protocol.encode_request_frame(header, body))
        return self.correlation

    def send_raw(self, frame: bytes) -> None:
        self.sock.sendall(frame)

    def _read_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            buf += chunk
        return bytes(buf)

    def receive(self, key: int, version: int) -> Any:
        (size,) = struct.unpack(">i", self._read_exact(4))
        frame = self._read_exact(size)
        cid, body = protocol.decode_response_frame(key, version, memoryview(frame))
        assert cid == self.correlation
        return body

    def call(self, key: int, version: int, body: Any) -> Any:
        self.send(key, version, body)
        return self.receive(key, version)

    def is_closed(self, wait: float = 5.0) -> bool:
        self.sock.settimeout(wait)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False


def batch(n: int = 1, value: bytes = b"v", ts: int = -1, **kw: Any) -> bytes:
    return bytes(build_batch([SimpleRecord(value, b"k", ts) for _ in range(n)], **kw))


def create(client: RawClient, topic: str) -> None:
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=True)
    (t,) = client.call(3, 12, req).topics
    assert t.error_code == 0, t


def produce(topics: dict[str, dict[int, bytes]], acks: int = -1) -> ProduceRequest:
    return ProduceRequest(transactional_id=None, acks=acks, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=name, partition_data=[
            ProduceRequest.PartitionProduceData(index=p, records=r) for p, r in parts.items()])
        for name, parts in topics.items()])


def fetch_req(topic: str, offsets: dict[int, int], max_bytes: int = 1 << 20, partition_max: int = 1 << 20,
              max_wait: int = 0, min_bytes: int = 1, session: tuple[int, int] = (0, -1)) -> FetchRequest:
    return FetchRequest(max_wait_ms=max_wait, min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=0,
                        session_id=session[0], session_epoch=session[1],
                        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                            FetchRequest.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=partition_max)
                            for p, o in offsets.items()])])


@pytest.fixture
def client(kbroker: Any) -> Any:
    c = RawClient(kbroker.bootstrap)
    yield c
    c.close()


def test_partial_produce_failure_unknown_topic_next_to_good_one(kbroker: Any) -> None:
    c = RawClient(kbroker.bootstrap)
    c.call(3, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="good")],
                                 allow_auto_topic_creation=True))
    resp = c.call(0, 11, produce({"good": {0: batch()}, "unknown-topic": {0: batch()}}))
    codes = {t.name: [p.error_code for p in t.partition_responses] for t in resp.responses}
    assert codes == {"good": [0], "unknown-topic": [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]}
    # Produce does not auto-create: the unknown topic still does not exist.
    md = c.call(3, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="unknown-topic")],
                                       allow_auto_topic_creation=False))
    assert md.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    c.close()


def test_internal_topic_refused_to_clients(client: RawClient) -> None:
    from kbroker.protocol.messages.find_coordinator import FindCoordinatorRequest

    # Before the group coordinator created it, Kafka answers UNKNOWN_TOPIC_OR_PARTITION.
    resp = client.call(0, 11, produce({"__consumer_offsets": {0: batch()}}))
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # A group lookup creates __consumer_offsets; then the write is refused as Kafka's ReplicaManager
    # does for internal topics ("Cannot append to internal topic").
    deadline = time.monotonic() + 20
    while True:
        fc = client.call(10, 3, FindCoordinatorRequest(key="some-group", key_type=0))
        if fc.error_code == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert fc.error_code == 0
    resp = client.call(0, 11, produce({"__consumer_offsets": {0: batch()}}))
    p = resp.responses[0].partition_responses[0]
    assert p.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION and p.base_offset == -1
    md = client.call(3, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="__consumer_offsets")]))
    assert md.topics[0].is_internal


def test_produce_v0_to_v2_close_the_connection_but_are_advertised(client: RawClient) -> None:
    versions = client.call(18, 3, ApiVersionsRequest(client_software_name="raw", client_software_version="1"))
    produce_range = next(k for k in versions.api_keys if k.api_key == 0)
    assert (produce_range.min_version, produce_range.max_version) == (0, 13)  # Kafka 4.3.1's range
    # A v2 produce frame: header v1 + acks/timeout/topics (the v0-2 body layout).
    body = struct.pack(">hi", 1, 1000) + struct.pack(">i", 0)
    header = struct.pack(">hhih", 0, 2, 99, 3) + b"raw"
    client.send_raw(struct.pack(">i", len(header) + len(body)) + header + body)
    assert client.is_closed()


def test_api_versions_unknown_version_answers_v0_with_its_own_range(client: RawClient) -> None:
    # ApiVersions v99 with a v2 header: the broker answers a v0 body with UNSUPPORTED_VERSION and only
    # ApiVersions' range, as Kafka 4.3.1 does (ApiVersionsRequest.getErrorResponse; probed: [(18, 0, 4)]).
    # A full table here made franz-go keep the v0 answer, without finalized features (issue 14).
    header = struct.pack(">hhih", 18, 99, 7, 3) + b"raw" + b"\x00"
    client.send_raw(struct.pack(">i", len(header)) + header)
    (size,) = struct.unpack(">i", client._read_exact(4))
    frame = client._read_exact(size)
    cid, body = protocol.decode_response_frame(18, 0, memoryview(frame))
    assert cid == 7 and body.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [(18, 0, 4)]


def test_acks0_error_closes_connection_and_success_sends_nothing(client: RawClient) -> None:
    create(client, "a0")
    client.send(0, 9, produce({"a0": {0: batch()}}, acks=0))
    # No response to acks=0: the next request's response is the next thing on the wire.
    md = client.call(3, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="a0")]))
    assert md.topics[0].name == "a0"
    client.send(0, 9, produce({"does-not-exist": {0: batch()}}, acks=0))
    assert client.is_closed()


def test_kip74_oversized_first_batch_is_returned(client: RawClient) -> None:
    create(client, "big")
    big = batch(1, value=b"x" * 50_000)
    assert client.call(0, 11, produce({"big": {0: big}})).responses[0].partition_responses[0].error_code == 0
    resp = client.call(1, 12, fetch_req("big", {0: 0}, max_bytes=100, partition_max=100))
    records = resp.responses[0].partitions[0].records
    assert len(records) == len(big)


def test_fetch_only_returns_requested_partitions_and_offset_out_of_range(client: RawClient) -> None:
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="multi")], allow_auto_topic_creation=True)
    client.call(3, 12, req)
    client.call(0, 11, produce({"multi": {0: batch(3), 1: batch(2)}}))
    resp = client.call(1, 11, fetch_req("multi", {1: 0}))
    assert [(t.topic, [p.partition_index for p in t.partitions]) for t in resp.responses] == [("multi", [1])]
    resp = client.call(1, 11, fetch_req("multi", {0: 50}))
    p = resp.responses[0].partitions[0]
    # As Kafka 4.3: the error carries -1 offsets; clients reset through ListOffsets.
    assert (p.error_code, p.high_watermark, p.log_start_offset) == (ErrorCode.OFFSET_OUT_OF_RANGE, -1, -1)


def test_fetch_session_over_the_wire(client: RawClient) -> None:
    create(client, "sess")
    client.call(0, 11, produce({"sess": {0: batch(2)}}))
    full = client.call(1, 12, fetch_req("sess", {0: 0}, session=(0, 0)))
    assert full.session_id != 0 and full.responses[0].partitions[0].high_watermark == 2
    inc = client.call(1, 12, FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, session_id=full.session_id,
                                          session_epoch=1, topics=[FetchRequest.FetchTopic(topic="sess", partitions=[
                                              FetchRequest.FetchPartition(partition=0, fetch_offset=2,
                                                                          partition_max_bytes=1 << 20)])]))
    assert inc.error_code == 0 and inc.session_id == full.session_id and inc.responses == []
    stale = client.call(1, 12, FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                                            session_id=full.session_id, session_epoch=1, topics=[]))
    assert stale.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH


def test_long_poll_answers_when_data_arrives(kbroker: Any) -> None:
    consumer = RawClient(kbroker.bootstrap)
    producer = RawClient(kbroker.bootstrap)
    create(producer, "poll")
    start = time.monotonic()
    consumer.send(1, 12, fetch_req("poll", {0: 0}, max_wait=10_000))
    time.sleep(0.3)
    producer.call(0, 11, produce({"poll": {0: batch()}}))
    resp = consumer.receive(1, 12)
    elapsed = time.monotonic() - start
    assert len(resp.responses[0].partitions[0].records) > 0 and elapsed < 5
    consumer.close()
    producer.close()


def test_list_offsets_edge_cases(client: RawClient) -> None:
    create(client, "lo")
    for ts in (1000, 2000, 3000):
        client.call(0, 11, produce({"lo": {0: batch(1, ts=ts)}}))

    def lo(ts: int, dup: bool = False, version: int = 9) -> list[tuple[int, int, int]]:
        parts = [ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=ts)] * (2 if dup else 1)
        req = ListOffsetsRequest(replica_id=-1, isolation_level=0,
                                 topics=[ListOffsetsRequest.ListOffsetsTopic(name="lo", partitions=parts)])
        return [(p.error_code, p.offset, p.timestamp) for p in client.call(2, version, req).topics[0].partitions]

    assert lo(2500) == [(0, 2, 3000)]
    assert lo(5000) == [(0, -1, -1)]
    assert lo(-3) == [(0, 2, 3000)]
    assert lo(-1, dup=True) == [(ErrorCode.INVALID_REQUEST, -1, -1)]  # one answer, as Kafka 4.3


def test_session_cache_slots_zero_disables_sessions(kbroker_factory: Any) -> None:
    broker = kbroker_factory({"max.incremental.fetch.session.cache.slots": "0"})
    c = RawClient(broker.bootstrap)
    create(c, "noslots")
    resp = c.call(1, 12, fetch_req("noslots", {0: 0}, session=(0, 0)))
    assert resp.error_code == 0 and resp.session_id == 0
    c.close()


def test_fetch_by_topic_id_and_unknown_topic_id(client: RawClient) -> None:
    import uuid

    create(client, "byid")
    client.call(0, 11, produce({"byid": {0: batch(2)}}))
    md = client.call(3, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="byid")]))
    topic_id = md.topics[0].topic_id
    assert topic_id.int != 0

    def by_id(tid: uuid.UUID) -> Any:
        return client.call(1, 17, FetchRequest(
            max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, session_id=0, session_epoch=-1,
            topics=[FetchRequest.FetchTopic(topic_id=tid, partitions=[
                FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])]))

    resp = by_id(topic_id)
    assert resp.responses[0].topic_id == topic_id
    part = resp.responses[0].partitions[0]
    assert part.error_code == 0 and part.high_watermark == 2 and len(part.records) > 0
    resp = by_id(uuid.uuid4())
    assert resp.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID


def test_producer_ids_not_reused_across_restart(kbroker: Any) -> None:
    from kbroker.protocol.messages.init_producer_id import InitProducerIdRequest

    def new_id() -> int:
        c = RawClient(kbroker.bootstrap)
        try:
            r = c.call(22, 4, InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000,
                                                   producer_id=-1, producer_epoch=-1))
            assert r.error_code == 0 and r.producer_epoch == 0
            return int(r.producer_id)
        finally:
            c.close()

    before = [new_id() for _ in range(3)]
    assert before == sorted(set(before))
    assert kbroker.stop() == 0
    kbroker.start()
    assert new_id() > max(before)


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_stored_bytes_equal_produced_bytes(kbroker: Any, codec: str) -> None:
    """With compression.type=producer the log keeps the producer's batch byte for byte (no
    recompression, no copy): only the base offset and partition leader epoch, which sit outside
    the CRC, are assigned by the broker."""
    from kbroker.protocol.compression import CompressionType

    c = RawClient(kbroker.bootstrap)
    topic = f"disk-{codec}"
    create(c, topic)
    first = batch(3, value=b"first " * 20, compression=CompressionType[codec.upper()])
    second = batch(5, value=b"second " * 20, compression=CompressionType[codec.upper()])
    for data in (first, second):
        resp = c.call(0, 11, produce({topic: {0: data}}))
        assert resp.responses[0].partition_responses[0].error_code == 0
    c.close()
    stored = (kbroker.log_dir / f"{topic}-0" / "00000000000000000000.log").read_bytes()
    assert len(stored) == len(first) + len(second)
    assert stored[16:len(first)] == first[16:]
    assert stored[len(first) + 16:] == second[16:]
    assert struct.unpack_from(">q", stored, len(first))[0] == 3  # second batch's base offset


def test_data_visible_after_kill_9_restart(kbroker: Any) -> None:
    """After an unclean shutdown the recovered log is readable at once: the high watermark is
    recomputed when the partition is hosted again (Kafka's makeLeader), not left at the checkpoint."""
    c = RawClient(kbroker.bootstrap)
    create(c, "crash")
    for _ in range(5):
        assert c.call(0, 11, produce({"crash": {0: batch(2)}})).responses[0].partition_responses[0].error_code == 0
    c.close()
    kbroker.kill()
    kbroker.start()
    c = RawClient(kbroker.bootstrap)
    part = c.call(1, 12, fetch_req("crash", {0: 0})).responses[0].partitions[0]
    assert part.error_code == 0 and part.high_watermark == 10 and len(part.records) > 0
    c.close()
