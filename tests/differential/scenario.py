"""One scripted scenario, run against any Kafka-compatible broker, returning what it observed.

The differential test runs it against Apache Kafka 4.3 and against kbroker and compares the two
observation dicts: Kafka's answer is the expected value. Requests are built with kbroker's codecs
and sent by `RawKafkaClient`, so both brokers receive the same bytes. Observations leave out what
legitimately differs between two brokers (ports, node/cluster/topic ids, throttle times).
"""

from __future__ import annotations

import time
from typing import Any

from kbroker.protocol import RequestHeader, encode_request_frame
from kbroker.protocol.messages import (
    create_topics,
    describe_configs,
    fetch,
    list_offsets,
    metadata,
    produce,
)
from kbroker.protocol.records import RecordBatch, SimpleRecord, build_batch, iter_batches
from tests.support.raw_client import ConnectionClosed, RawKafkaClient

TOPIC = "diff-topic"
SMALL = "diff-small-max"
BASE_TS = 1_700_000_000_000

# Versions both brokers are asked with: flexible and non-flexible encodings of the hot APIs.
PRODUCE_V, FETCH_V, LIST_OFFSETS_V, METADATA_V, CREATE_V, DESCRIBE_CONFIGS_V = 9, 12, 7, 12, 7, 4


def _batches() -> list[bytearray]:
    """Three batches: 1, 5 and 3 records, timestamps increasing except one out-of-order record."""
    ts = [[BASE_TS], [BASE_TS + 10, BASE_TS + 20, BASE_TS + 15, BASE_TS + 30, BASE_TS + 40], [BASE_TS + 50] * 3]
    out = []
    for i, group in enumerate(ts):
        recs = [SimpleRecord(value=f"v{i}-{j}".encode(), key=f"k{j}".encode(), timestamp=t) for j, t in enumerate(group)]
        out.append(build_batch(recs))
    return out


def _produce(c: RawKafkaClient, topic: str, records: bytes | bytearray, partition: int = 0) -> tuple[int, int]:
    req = produce.ProduceRequest(acks=1, timeout_ms=30000, topic_data=[produce.ProduceRequest.TopicProduceData(
        name=topic, partition_data=[produce.ProduceRequest.PartitionProduceData(index=partition, records=records)])])
    resp = c.request(0, PRODUCE_V, req)
    p = resp.responses[0].partition_responses[0]
    return p.error_code, p.base_offset


def _list_offsets(c: RawKafkaClient, topic: str, ts: int) -> tuple[int, int, int]:
    req = list_offsets.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
        list_offsets.ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
            list_offsets.ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=ts)])])
    p = c.request(2, LIST_OFFSETS_V, req).topics[0].partitions[0]
    return p.error_code, p.offset, p.timestamp


def _fetch(c: RawKafkaClient, topic: str, offset: int, partition_max: int = 1048576) -> dict[str, Any]:
    req = fetch.FetchRequest(replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=52428800, isolation_level=0,
                             session_id=0, session_epoch=-1, topics=[fetch.FetchRequest.FetchTopic(
                                 topic=topic, partitions=[fetch.FetchRequest.FetchPartition(
                                     partition=0, fetch_offset=offset, partition_max_bytes=partition_max)])])
    resp = c.request(1, FETCH_V, req)
    p = resp.responses[0].partitions[0]
    batches = [(b.base_offset, b.last_offset, b.records_count) for b in iter_batches(memoryview(bytes(p.records or b"")))]
    return {"error": p.error_code, "hw": p.high_watermark, "log_start": p.log_start_offset, "batches": batches}


def _create(c: RawKafkaClient, name: str, configs: dict[str, str]) -> int:
    T = create_topics.CreateTopicsRequest
    req = T(timeout_ms=30000, topics=[T.CreatableTopic(name=name, num_partitions=1, replication_factor=1, configs=[
        T.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()])])
    return int(c.request(19, CREATE_V, req).topics[0].error_code)


def _wait_for_leader(c: RawKafkaClient, topic: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        req = metadata.MetadataRequest(topics=[metadata.MetadataRequest.MetadataRequestTopic(name=topic)],
                                       allow_auto_topic_creation=False)
        resp = c.request(3, METADATA_V, req)
        t = resp.topics[0]
        if t.error_code == 0 and t.partitions and t.partitions[0].leader_id >= 0:
            p = t.partitions[0]
            return {"brokers": len(resp.brokers), "topic_error": t.error_code, "is_internal": t.is_internal,
                    "partitions": len(t.partitions), "leader_is_a_broker": p.leader_id in {b.node_id for b in resp.brokers},
                    "replicas": len(p.replica_nodes), "isr": len(p.isr_nodes), "offline": len(p.offline_replicas),
                    "has_topic_id": t.topic_id.int != 0, "controller_is_a_broker":
                        resp.controller_id in {b.node_id for b in resp.brokers}}
        if time.monotonic() > deadline:
            raise TimeoutError(f"no leader for {topic}")
        time.sleep(0.1)


def _describe_configs(c: RawKafkaClient, topic: str) -> dict[str, tuple[str | None, int, bool]]:
    R = describe_configs.DescribeConfigsRequest
    req = R(include_synonyms=False, include_documentation=False,
            resources=[R.DescribeConfigsResource(resource_type=2, resource_name=topic, configuration_keys=None)])
    res = c.request(32, DESCRIBE_CONFIGS_V, req).results[0]
    return {cfg.name: (cfg.value, cfg.config_source, cfg.is_sensitive) for cfg in res.configs}


def _produce_twice(c: RawKafkaClient, topic: str, same_topic_entry: bool) -> dict[str, Any]:
    """One Produce naming partition 0 twice: a 1-record batch, then a 2-record batch; in one topic entry
    or in two entries of the same topic. What is answered, and what the log holds after."""
    P = produce.ProduceRequest
    first = build_batch([SimpleRecord(value=b"first", timestamp=BASE_TS)])
    second = build_batch([SimpleRecord(value=b"second", timestamp=BASE_TS), SimpleRecord(value=b"2", timestamp=BASE_TS)])
    if same_topic_entry:
        topic_data = [P.TopicProduceData(name=topic, partition_data=[P.PartitionProduceData(index=0, records=first),
                                                                    P.PartitionProduceData(index=0, records=second)])]
    else:
        topic_data = [P.TopicProduceData(name=topic, partition_data=[P.PartitionProduceData(index=0, records=first)]),
                      P.TopicProduceData(name=topic, partition_data=[P.PartitionProduceData(index=0, records=second)])]
    resp = c.request(0, PRODUCE_V, P(acks=1, timeout_ms=30000, topic_data=topic_data))
    answered = [(t.name, [(p.index, p.error_code, p.base_offset) for p in t.partition_responses])
                for t in resp.responses]
    return {"answered": answered, "log": _fetch(c, topic, 0)["batches"]}


def run(bootstrap: str) -> dict[str, Any]:
    obs: dict[str, Any] = {}
    with RawKafkaClient(bootstrap) as c:
        obs["create"] = _create(c, TOPIC, {})
        obs["create_again"] = _create(c, TOPIC, {})  # TOPIC_ALREADY_EXISTS
        obs["create_small"] = _create(c, SMALL, {"max.message.bytes": "200"})
        obs["create_bad_config"] = _create(c, "diff-bad", {"retention.ms": "not-a-number"})
        obs["metadata"] = _wait_for_leader(c, TOPIC)
        _wait_for_leader(c, SMALL)
        obs["produce"] = [_produce(c, TOPIC, b) for b in _batches()]
        obs["produce_unknown_topic"] = _produce(c, "diff-no-such-topic", _batches()[0])[0]
        big = build_batch([SimpleRecord(value=b"x" * 500, timestamp=BASE_TS)])
        obs["produce_too_large"] = _produce(c, SMALL, big)[0]
        corrupt = bytearray(_batches()[0])
        corrupt[-1] ^= 0xFF  # flips a byte inside the CRC-covered records section
        obs["produce_bad_crc"] = _produce(c, TOPIC, corrupt)[0]
        obs["list_offsets"] = {ts: _list_offsets(c, TOPIC, ts) for ts in (
            -2, -1, -3, BASE_TS - 1, BASE_TS, BASE_TS + 15, BASE_TS + 16, BASE_TS + 50, BASE_TS + 51)}
        obs["fetch"] = {off: _fetch(c, TOPIC, off) for off in (0, 1, 3, 6, 8, 9)}
        obs["fetch_out_of_range"] = _fetch(c, TOPIC, 100)["error"]
        obs["fetch_kip74_tiny_max"] = _fetch(c, TOPIC, 1, partition_max=10)["batches"]
        obs["describe_configs"] = _describe_configs(c, TOPIC)
        # A partition named twice in one request (no client sends it; a hand-written one may).
        for name, same_entry in (("diff-dup-a", True), ("diff-dup-b", False)):
            _create(c, name, {})
            _wait_for_leader(c, name)
            obs[f"produce_partition_twice_{'one_entry' if same_entry else 'two_entries'}"] = \
                _produce_twice(c, name, same_entry)
    with RawKafkaClient(bootstrap) as c:
        # Fetch v3 was removed in Kafka 4.0 (KIP-896): the broker must not answer it.
        frame = bytearray(encode_request_frame(RequestHeader(api_key=1, api_version=4, correlation_id=1,
                                                             client_id="diff"),
                                               fetch.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1)))
        frame[6:8] = (3).to_bytes(2, "big")  # same bytes, version field says 3 (v3 and v4 share a header)
        c.send_raw(bytes(frame))
        obs["fetch_v3_connection_closed"] = _closed(c)
    return obs


def _closed(c: RawKafkaClient) -> bool:
    try:
        c.sock.settimeout(10)
        c.recv_frame()
        return False
    except (ConnectionClosed, ConnectionResetError):
        return True


def first_record_batch(records: bytes) -> RecordBatch:
    return next(iter_batches(memoryview(records)))
