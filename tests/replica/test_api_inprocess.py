"""The data-path handlers through the real codecs and dispatcher, in process (no sockets).

Each call encodes a request frame, decodes it as the network layer does, dispatches it, encodes
the response and decodes it as a client would: field names, versions and error codes are checked
end to end without a broker process.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kbroker.protocol as protocol
from kbroker.api.context import NO_RESPONSE, CloseConnection, RequestContext
from kbroker.api.dispatcher import ApiDispatcher
from kbroker.config import KafkaConfig
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.api_versions import ApiVersionsRequest
from kbroker.protocol.messages.fetch import FetchRequest
from kbroker.protocol.messages.init_producer_id import InitProducerIdRequest
from kbroker.protocol.messages.list_offsets import ListOffsetsRequest
from kbroker.protocol.messages.metadata import MetadataRequest
from kbroker.protocol.messages.produce import ProduceRequest
from kbroker.protocol.records import RecordBatch, SimpleRecord, build_batch
from kbroker.services import build_services, shutdown_services
from tests.support.sync import SyncAdmin


class Api:
    def __init__(self, root: Path, props: dict[str, str]) -> None:
        self.root = root
        self.props = props
        self.config = KafkaConfig({"log.dirs": str(root / "logs"), **props})
        self.services = build_services(self.config)
        self.lm = self.services.log_manager
        self.md = self.services.metadata
        self.rm = self.services.replica_manager
        self.tm = SyncAdmin(self.services.controller, self.services.configs)
        self.dispatcher = ApiDispatcher(self.services)
        self.ctx = RequestContext(listener_name="PLAINTEXT")
        self.correlation = 0
        self.loop = asyncio.new_event_loop()

    def call(self, key: int, version: int, body: Any, client_id: str = "test") -> Any:
        self.correlation += 1
        header = protocol.RequestHeader(api_key=key, api_version=version, correlation_id=self.correlation,
                                        client_id=client_id)
        frame = protocol.encode_request_frame(header, body)
        hdr, req = protocol.decode_request_frame(memoryview(bytearray(frame))[4:])  # net frames are writable
        self.ctx.client_id = hdr.client_id

        async def dispatch() -> Any:  # handlers run on the broker's loop, as in the server
            result = self.dispatcher.handle(self.ctx, hdr, req)
            return await result if inspect.isawaitable(result) else result

        result = self.loop.run_until_complete(dispatch())
        if result is NO_RESPONSE:
            return NO_RESPONSE
        parts = protocol.encode_response_frame(key, version, self.correlation, result)
        raw = b"".join(p.read_bytes() if isinstance(p, protocol.FileRegion) else bytes(p) for p in parts)
        cid, resp = protocol.decode_response_frame(key, version, memoryview(raw)[4:])
        assert cid == self.correlation
        return resp

    def close(self) -> None:
        shutdown_services(self.services)
        self.loop.close()


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    a = Api(tmp_path, {"num.partitions": "2"})
    yield a
    a.close()


def produce_req(topic: str, partition: int, records: Any, acks: int = -1) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=None, acks=acks, timeout_ms=5000,
        topic_data=[ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=partition, records=records)])],
    )


def batch(n: int = 2, **kw: Any) -> bytes:
    return bytes(build_batch([SimpleRecord(b"value-%d" % i, b"key", 1_700_000_000_000 + i) for i in range(n)], **kw))


def test_api_versions_advertises_exact_ranges_and_features(api: Api) -> None:
    resp = api.call(18, 3, ApiVersionsRequest(client_software_name="kbroker-test", client_software_version="1.0"))
    assert resp.error_code == 0
    ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert ranges[0] == (0, 13) and ranges[1] == (4, 18) and ranges[2] == (1, 11)
    assert ranges[3] == (0, 13) and ranges[18] == (0, 4) and ranges[22] == (0, 5)
    assert ranges == api.dispatcher.advertised_ranges()
    # group.version 1 enables KIP-848's consumer protocol (ConsumerGroupHeartbeat/Describe);
    # transaction.version 2 (a new single node's) KIP-890 part 2; eligible.leader.replicas.version 1 (KIP-966).
    assert [(f.name, f.max_version_level) for f in resp.finalized_features] == [
        ("metadata.version", 30), ("group.version", 1), ("share.version", 1), ("transaction.version", 2),
        ("eligible.leader.replicas.version", 1)]
    assert ranges[68] == (0, 1) and ranges[69] == (0, 1)
    assert api.ctx.client_software_name == "kbroker-test"
    bad = api.call(18, 3, ApiVersionsRequest(client_software_name="-bad", client_software_version="1"))
    assert bad.error_code == ErrorCode.INVALID_REQUEST
    v0 = api.call(18, 0, ApiVersionsRequest())
    assert v0.error_code == 0 and len(v0.api_keys) == len(resp.api_keys)


def test_unsupported_versions(api: Api) -> None:
    header = protocol.RequestHeader(api_key=18, api_version=9, correlation_id=1, client_id="x")
    body = api.dispatcher.handle_unsupported(api.ctx, header)
    parts = protocol.encode_response_frame(18, 0, 1, body)
    _, resp = protocol.decode_response_frame(18, 0, memoryview(b"".join(bytes(p) for p in parts))[4:])
    assert resp.error_code == ErrorCode.UNSUPPORTED_VERSION and resp.api_keys
    with pytest.raises(CloseConnection):
        api.dispatcher.handle_unsupported(api.ctx, protocol.RequestHeader(api_key=0, api_version=2, correlation_id=1))


@pytest.mark.parametrize("version", [0, 1, 4, 9, 10, 12, 13])
def test_metadata_autocreate_and_listing(api: Api, version: int) -> None:
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="auto")])
    if version >= 4:
        req.allow_auto_topic_creation = True
    resp = api.call(3, version, req)
    (topic,) = resp.topics
    assert topic.error_code == 0 and topic.name == "auto" and len(topic.partitions) == 2
    assert [p.leader_id for p in topic.partitions] == [1, 1]
    assert resp.brokers[0].node_id == 1 and resp.brokers[0].port == 9092
    if version >= 10:
        assert topic.topic_id == api.md.topic("auto").topic_id
    if version >= 2:
        # The cluster id the log dirs were formatted with (meta.properties).
        assert resp.cluster_id == api.lm.cluster_id == api.services.cluster_id and resp.cluster_id
    all_req = MetadataRequest(topics=[] if version == 0 else None)
    assert [t.name for t in api.call(3, version, all_req).topics] == ["auto"]


def test_metadata_no_autocreate_when_disallowed(api: Api) -> None:
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="nope")], allow_auto_topic_creation=False)
    (topic,) = api.call(3, 12, req).topics
    assert topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="bad name!")], allow_auto_topic_creation=True)
    (topic,) = api.call(3, 12, req).topics
    assert topic.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_produce_fetch_roundtrip_bytes_equal(api: Api) -> None:
    api.tm.create_topic("t", 1)
    data = batch(3)
    resp = api.call(0, 11, produce_req("t", 0, data))
    p = resp.responses[0].partition_responses[0]
    assert (p.error_code, p.base_offset, p.log_start_offset) == (0, 0, 0)
    f = api.call(1, 12, FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                                     session_id=0, session_epoch=-1,
                                     topics=[FetchRequest.FetchTopic(topic="t", partitions=[
                                         FetchRequest.FetchPartition(partition=0, fetch_offset=0,
                                                                     partition_max_bytes=1 << 20)])]))
    part = f.responses[0].partitions[0]
    assert part.error_code == 0 and part.high_watermark == 3
    got = bytes(part.records)
    # Same bytes except the offsets / leader epoch the broker assigns outside the CRC.
    assert len(got) == len(data) and got[17:] == data[17:]
    assert RecordBatch(memoryview(got)).is_valid()


def test_produce_partial_failure_and_validation(api: Api) -> None:
    api.tm.create_topic("good", 1)
    req = ProduceRequest(transactional_id=None, acks=1, timeout_ms=1000, topic_data=[
        ProduceRequest.TopicProduceData(name="good", partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=batch(1))]),
        ProduceRequest.TopicProduceData(name="missing", partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=batch(1))]),
        ProduceRequest.TopicProduceData(name="good", partition_data=[
            ProduceRequest.PartitionProduceData(index=0 + 1, records=batch(1) + batch(1))]),
    ])
    resp = api.call(0, 9, req)
    codes = [(t.name, p.index, p.error_code) for t in resp.responses for p in t.partition_responses]
    assert codes == [("good", 0, 0), ("missing", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                     ("good", 1, ErrorCode.INVALID_RECORD)]
    # zstd needs v7+.
    from kbroker.protocol.compression import CompressionType
    resp = api.call(0, 6, produce_req("good", 0, batch(1, compression=CompressionType.ZSTD)))
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    resp = api.call(0, 7, produce_req("good", 0, batch(1, compression=CompressionType.ZSTD)))
    assert resp.responses[0].partition_responses[0].error_code == 0


def test_produce_to_internal_topic_refused(api: Api) -> None:
    api.tm.create_topic("__consumer_offsets", 1)
    resp = api.call(0, 11, produce_req("__consumer_offsets", 0, batch(1)))
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_acks0_no_response_and_close_on_error(api: Api) -> None:
    api.tm.create_topic("t", 1)
    assert api.call(0, 11, produce_req("t", 0, batch(1), acks=0)) is NO_RESPONSE
    with pytest.raises(CloseConnection):
        api.call(0, 11, produce_req("missing", 0, batch(1), acks=0))


def test_transactional_batch_refused(api: Api) -> None:
    api.tm.create_topic("t", 1)
    data = batch(1, producer_id=5, producer_epoch=0, base_sequence=0, is_transactional=True)
    # Without a transactional id: the whole request fails, as in Kafka.
    resp = api.call(0, 11, produce_req("t", 0, data))
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # With one, KIP-890 verification: no __transaction_state yet, so the coordinator is unavailable
    # (Kafka answers NOT_ENOUGH_REPLICAS then).
    req = produce_req("t", 0, data)
    req.transactional_id = "tx"
    resp = api.call(0, 11, req)
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.NOT_ENOUGH_REPLICAS


def test_idempotent_producer_ids_and_duplicates(api: Api) -> None:
    api.tm.create_topic("t", 1)
    r1 = api.call(22, 4, InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000,
                                               producer_id=-1, producer_epoch=-1))
    r2 = api.call(22, 0, InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000))
    assert r1.error_code == 0 and r1.producer_epoch == 0 and r2.producer_id == r1.producer_id + 1
    pid = r1.producer_id
    first = api.call(0, 11, produce_req("t", 0, batch(2, producer_id=pid, producer_epoch=0, base_sequence=0)))
    dup = api.call(0, 11, produce_req("t", 0, batch(2, producer_id=pid, producer_epoch=0, base_sequence=0)))
    assert first.responses[0].partition_responses[0].base_offset == 0
    assert dup.responses[0].partition_responses[0].error_code == 0
    assert dup.responses[0].partition_responses[0].base_offset == 0
    gap = api.call(0, 11, produce_req("t", 0, batch(1, producer_id=pid, producer_epoch=0, base_sequence=7)))
    assert gap.responses[0].partition_responses[0].error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    # A transactional id goes to the transaction coordinator, which bounds the timeout first.
    txn = api.call(22, 4, InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=900001,
                                                producer_id=-1, producer_epoch=-1))
    assert txn.error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT


def test_producer_ids_never_reused_after_restart(tmp_path: Path) -> None:
    a = Api(tmp_path, {})
    ids = [a.call(22, 4, InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1,
                                               producer_id=-1, producer_epoch=-1)).producer_id for _ in range(3)]
    a.close()
    b = Api(tmp_path, {})
    nxt = b.call(22, 4, InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1,
                                              producer_id=-1, producer_epoch=-1)).producer_id
    b.close()
    assert nxt > max(ids)


def test_list_offsets(api: Api) -> None:
    api.tm.create_topic("t", 1)
    for i in range(3):
        api.call(0, 11, produce_req("t", 0, bytes(build_batch([SimpleRecord(b"v", None, 1000 * (i + 1))]))))

    def lo(ts: int, version: int = 9, isolation: int = 0, dup: bool = False) -> list[Any]:
        parts = [ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=ts)]
        if dup:
            parts.append(ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=ts))
        req = ListOffsetsRequest(replica_id=-1, isolation_level=isolation,
                                 topics=[ListOffsetsRequest.ListOffsetsTopic(name="t", partitions=parts)])
        return [(p.error_code, p.offset, p.timestamp) for p in api.call(2, version, req).topics[0].partitions]

    assert lo(-2) == [(0, 0, -1)]
    assert lo(-1) == [(0, 3, -1)]
    assert lo(-1, isolation=1) == [(0, 3, -1)]
    assert lo(1500) == [(0, 1, 2000)]
    assert lo(1000) == [(0, 0, 1000)]
    assert lo(99999) == [(0, -1, -1)]
    assert lo(-3) == [(0, 2, 3000)]
    assert lo(-4) == [(0, 0, -1)]
    assert lo(-5) == [(0, -1, -1)]
    assert lo(-1, dup=True) == [(ErrorCode.INVALID_REQUEST, -1, -1)]  # answered once, as Kafka 4.3
    assert lo(-1, version=1) == [(0, 3, -1)]


def test_fetch_incremental_session_and_topic_ids(api: Api) -> None:
    info = api.tm.create_topic("t", 2)
    api.call(0, 11, produce_req("t", 0, batch(1)))

    def fetch(version: int, session_id: int, epoch: int, parts: dict[int, int],
              forgotten: list[int] | None = None) -> Any:
        topic = FetchRequest.FetchTopic(partitions=[
            FetchRequest.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20)
            for p, o in parts.items()])
        if version >= 13:
            topic.topic_id = info.topic_id
        else:
            topic.topic = "t"
        req = FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, session_id=session_id,
                           session_epoch=epoch, topics=[topic] if parts else [])
        if forgotten:
            f = FetchRequest.ForgottenTopic(partitions=forgotten)
            if version >= 13:
                f.topic_id = info.topic_id
            else:
                f.topic = "t"
            req.forgotten_topics_data = [f]
        return api.call(1, version, req)

    for version in (12, 13, 17):
        hw1 = api.rm.get_partition("t", 1).high_watermark
        full = fetch(version, 0, 0, {0: 0, 1: hw1})
        assert full.error_code == 0 and full.session_id != 0
        assert sorted(p.partition_index for t in full.responses for p in t.partitions) == [0, 1]
        if version >= 13:
            assert full.responses[0].topic_id == info.topic_id
        # The client moves partition 0's position past what it got; nothing else changed.
        inc = fetch(version, full.session_id, 1, {0: 1})
        assert inc.error_code == 0 and inc.responses == []
        api.call(0, 11, produce_req("t", 1, batch(1)))
        inc = fetch(version, full.session_id, 2, {})
        # Only the partition whose high watermark moved is in the incremental response.
        assert [p.partition_index for t in inc.responses for p in t.partitions] == [1]
        # Forgetting partition 1: it is no longer read or sent.
        api.call(0, 11, produce_req("t", 1, batch(1)))
        inc = fetch(version, full.session_id, 3, {}, forgotten=[1])
        assert inc.error_code == 0 and inc.responses == []
        assert fetch(version, full.session_id, 9, {}).error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
        assert fetch(version, 424242, 1, {}).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    unknown = FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, session_id=0, session_epoch=-1,
                           topics=[FetchRequest.FetchTopic(topic_id=uuid.uuid4(), partitions=[
                               FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=100)])])
    resp = api.call(1, 13, unknown)
    assert resp.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID


def test_fetch_long_poll_through_dispatcher(api: Api) -> None:
    api.tm.create_topic("t", 1)
    req = FetchRequest(max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, session_id=0, session_epoch=-1,
                       topics=[FetchRequest.FetchTopic(topic="t", partitions=[
                           FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])
    resp = api.call(1, 11, req)  # waits max_wait_ms, then answers empty
    assert resp.responses[0].partitions[0].error_code == 0
    assert bytes(resp.responses[0].partitions[0].records or b"") == b""


def test_storage_failure_maps_to_kafka_storage_error(api: Api) -> None:
    api.tm.create_topic("t", 1)
    api.call(0, 11, produce_req("t", 0, batch(1)))
    halts: list[str] = []
    api.rm.halt = halts.append  # Kafka halts when its only log dir fails; record it instead of exiting
    api.rm.get_partition("t", 0).log.offline = True  # what the log does after an unrecoverable I/O error
    assert halts and halts[0].startswith("Shutdown broker because all log dirs in")
    resp = api.call(0, 11, produce_req("t", 0, batch(1)))
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR
    f = api.call(1, 12, FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, session_id=0, session_epoch=-1,
                                     topics=[FetchRequest.FetchTopic(topic="t", partitions=[
                                         FetchRequest.FetchPartition(partition=0, fetch_offset=0,
                                                                     partition_max_bytes=1 << 20)])]))
    assert f.responses[0].partitions[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR
    md = api.call(3, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t")]))
    p = md.topics[0].partitions[0]
    assert (p.error_code, p.leader_id, p.offline_replicas) == (ErrorCode.LEADER_NOT_AVAILABLE, -1, [1])


def test_auto_create_disabled_by_broker_config(tmp_path: Path) -> None:
    a = Api(tmp_path, {"auto.create.topics.enable": "false"})
    try:
        req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="nope")],
                              allow_auto_topic_creation=True)
        assert a.call(3, 12, req).topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert a.md.topic("nope") is None
    finally:
        a.close()


def test_topic_authorized_operations(api: Api) -> None:
    api.tm.create_topic("t", 1)
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t")],
                          include_topic_authorized_operations=True)
    assert api.call(3, 12, req).topics[0].topic_authorized_operations == 3576
    req.include_topic_authorized_operations = False
    assert api.call(3, 12, req).topics[0].topic_authorized_operations == -2147483648


def test_topic_compression_type_recompresses(api: Api) -> None:
    from kbroker.protocol.compression import CompressionType

    api.tm.create_topic("gz", 1, configs={"compression.type": "gzip"})
    api.call(0, 11, produce_req("gz", 0, batch(5, compression=CompressionType.LZ4)))
    f = api.call(1, 12, FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, session_id=0, session_epoch=-1,
                                     topics=[FetchRequest.FetchTopic(topic="gz", partitions=[
                                         FetchRequest.FetchPartition(partition=0, fetch_offset=0,
                                                                     partition_max_bytes=1 << 20)])]))
    stored = RecordBatch(memoryview(bytearray(f.responses[0].partitions[0].records)))
    assert stored.compression_type == CompressionType.GZIP and stored.is_valid()
    assert [r.value for r in stored.iter_records()] == [b"value-%d" % i for i in range(5)]


def test_produce_v13_names_topics_by_id(api: Api) -> None:
    """Produce v13 (KIP-516): topics by id; an unknown id answers UNKNOWN_TOPIC_ID per partition and the
    response echoes the ids (Kafka 4.3.1's answers); v12 is v11's schema."""
    info = api.tm.create_topic("t", 1)
    unknown = uuid.uuid4()
    req = ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(topic_id=info.topic_id, partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=batch(2))]),
        ProduceRequest.TopicProduceData(topic_id=unknown, partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=batch(1)),
            ProduceRequest.PartitionProduceData(index=1, records=batch(1))])])
    resp = api.call(0, 13, req)
    assert [(t.topic_id, [(p.index, p.error_code, p.base_offset) for p in t.partition_responses])
            for t in resp.responses] == [
        (info.topic_id, [(0, 0, 0)]),
        (unknown, [(0, ErrorCode.UNKNOWN_TOPIC_ID, -1), (1, ErrorCode.UNKNOWN_TOPIC_ID, -1)])]
    resp = api.call(0, 12, produce_req("t", 0, batch(1)))
    p = resp.responses[0].partition_responses[0]
    assert (resp.responses[0].name, p.error_code, p.base_offset) == ("t", 0, 2)


def test_list_offsets_v11_earliest_pending_upload(api: Api) -> None:
    """-6 (KIP-1023) is known from v11; without tiered storage Kafka 4.3.1 answers -1/-1/-1, and
    UNSUPPORTED_VERSION below v11."""
    api.tm.create_topic("t", 1)
    api.call(0, 11, produce_req("t", 0, batch(2)))

    def ask(version: int) -> Any:
        req = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[ListOffsetsRequest.ListOffsetsTopic(
            name="t", partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-6)])])
        return api.call(2, version, req).topics[0].partitions[0]

    p = ask(11)
    assert (p.error_code, p.offset, p.timestamp, p.leader_epoch) == (0, -1, -1, -1)
    assert ask(10).error_code == ErrorCode.UNSUPPORTED_VERSION
