"""The admin APIs, differentially: the same raw requests to Apache Kafka 4.3.1 and to kbroker.

Each request is encoded with kbroker's codec and sent over a plain socket, so the comparison sees
exactly what each broker put on the wire (no client-side rewriting): per-topic error codes and
messages of CreateTopics/CreatePartitions/DeleteTopics, DescribeConfigs values, sources and synonyms
for topics and brokers (including the cluster-default resource), IncrementalAlterConfigs and
AlterConfigs refusals, DeleteRecords, OffsetForLeaderEpoch and DescribeTopicPartitions paging.

kbroker is started with the reference broker's static settings (benchmarks/reference/kafka.sh) so that
sources line up. Two facts of the reference setup are normalized away, both environment rather than
behaviour: `kafka-storage format` writes a cluster-default `min.insync.replicas=1` (KIP-966), and the
log directory paths differ.
"""

from __future__ import annotations

import socket
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from kbroker.protocol import RequestHeader, decode_response_frame, encode_request_frame
from kbroker.protocol.messages import alter_configs as ac
from kbroker.protocol.messages import create_partitions as cp
from kbroker.protocol.messages import create_topics as ct
from kbroker.protocol.messages import delete_records as dr
from kbroker.protocol.messages import delete_topics as dt
from kbroker.protocol.messages import describe_configs as dc
from kbroker.protocol.messages import describe_topic_partitions as dtp
from kbroker.protocol.messages import incremental_alter_configs as iac
from kbroker.protocol.messages import offset_for_leader_epoch as ofle
from tests.support.broker import KBroker
from tests.support.reference_kafka import reference_unavailable_reason, start_reference_kafka

pytestmark = [pytest.mark.interop, pytest.mark.java, pytest.mark.reference]

# benchmarks/reference/kafka.sh's server.properties, as far as it sets broker keys kbroker knows.
REFERENCE_STATIC = {
    "num.partitions": "1",
    "default.replication.factor": "1",
    "log.segment.bytes": "1073741824",
    "log.retention.hours": "168",
    "log.retention.check.interval.ms": "300000",
    "auto.create.topics.enable": "true",
}
BROKER_KEYS = ["log.retention.ms", "log.retention.minutes", "log.retention.hours", "log.segment.bytes",
               "message.max.bytes", "log.roll.ms", "log.roll.hours", "num.partitions", "log.cleanup.policy",
               "default.replication.factor", "min.insync.replicas"]


class RawClient:
    """One connection; requests encoded by kbroker's codec, responses decoded at the same version."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=60)
        self.correlation = 0

    def call(self, api_key: int, version: int, request: Any) -> Any:
        self.correlation += 1
        header = RequestHeader(api_key=api_key, api_version=version, correlation_id=self.correlation,
                               client_id="differential")
        self.sock.sendall(encode_request_frame(header, request))
        (size,) = struct.unpack(">i", self._read(4))
        correlation, response = decode_response_frame(api_key, version, memoryview(self._read(size)))
        assert correlation == self.correlation
        return response

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise EOFError("broker closed the connection")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


def _create(c: RawClient, topics: list[tuple[str, int, int, dict[str, str | None], list[tuple[int, list[int]]]]],
            validate_only: bool = False) -> list[Any]:
    req = ct.CreateTopicsRequest(timeout_ms=30000, validate_only=validate_only, topics=[
        ct.CreateTopicsRequest.CreatableTopic(
            name=name, num_partitions=n, replication_factor=rf,
            configs=[ct.CreateTopicsRequest.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()],
            assignments=[ct.CreateTopicsRequest.CreatableReplicaAssignment(partition_index=p, broker_ids=b)
                         for p, b in assignments])
        for name, n, rf, configs, assignments in topics])
    resp = c.call(19, 7, req)
    return sorted((
        [t.name, t.error_code, t.error_message, t.num_partitions, t.replication_factor,
         sorted([x.name, x.value, _creation_source(x.name, x.config_source), x.read_only, x.is_sensitive]
               for x in (t.configs or []))]
        for t in resp.topics), key=repr)


def _creation_source(name: str, source: int) -> int:
    # The reference's formatted cluster default min.insync.replicas=1 (KIP-966): environment.
    return 5 if name == "min.insync.replicas" and source == 3 else source


def _describe(c: RawClient, resources: list[tuple[int, str, list[str] | None]]) -> list[Any]:
    resp = c.call(32, 4, dc.DescribeConfigsRequest(include_synonyms=True, include_documentation=False, resources=[
        dc.DescribeConfigsRequest.DescribeConfigsResource(resource_type=t, resource_name=n, configuration_keys=k)
        for t, n, k in resources]))
    out = []
    for r in resp.results:
        configs = {}
        for x in r.configs:
            synonyms = [[s.name, s.value, s.source] for s in x.synonyms
                        if not (s.name == "min.insync.replicas" and s.source == 3)]
            source = x.config_source
            if x.name == "min.insync.replicas" and source == 3:
                source = synonyms[0][2] if synonyms else 5
            if r.resource_name == "" and x.name == "min.insync.replicas":
                continue
            configs[x.name] = [x.value, source, x.read_only, x.is_sensitive, x.config_type, synonyms]
        out.append([r.resource_type, r.resource_name, r.error_code, r.error_message, configs])
    return out


def _alter(c: RawClient, resources: list[tuple[int, str, list[tuple[str, int, str | None]]]],
           validate_only: bool = False) -> list[Any]:
    res, cfg = iac.IncrementalAlterConfigsRequest.AlterConfigsResource, iac.IncrementalAlterConfigsRequest.AlterableConfig
    resp = c.call(44, 1, iac.IncrementalAlterConfigsRequest(validate_only=validate_only, resources=[
        res(resource_type=t, resource_name=n, configs=[cfg(name=k, config_operation=op, value=v) for k, op, v in ops])
        for t, n, ops in resources]))
    return [[r.resource_type, r.resource_name, r.error_code, r.error_message] for r in resp.responses]


def battery(bootstrap: str) -> dict[str, Any]:
    """The same admin requests, in the same order; every answer normalized for comparison."""
    c = RawClient(bootstrap)
    out: dict[str, Any] = {}
    try:
        out["create"] = _create(c, [
            ("good", 2, 1, {"cleanup.policy": "compact", "retention.ms": "1000"}, []),
            ("bad-number", 1, 1, {"retention.ms": "soon"}, []),
            ("bad-int", 1, 1, {"max.message.bytes": "9999999999"}, []),
            ("bad-bool", 1, 1, {"preallocate": "yes"}, []),
            ("bad-policy", 1, 1, {"cleanup.policy": "compact,shred"}, []),
            ("small-segment", 1, 1, {"segment.bytes": "100"}, []),
            ("unknown-config", 1, 1, {"no.such.config": "1"}, []),
            ("null-config", 1, 1, {"retention.ms": None}, []),
            ("rf3", 1, 3, {}, []),
            ("zero", 0, 1, {}, []),
            ("rf0", 1, 0, {}, []),
            ("", 1, 1, {}, []),
            ("..", 1, 1, {}, []),
            ("bad name!", 1, 1, {}, []),
            ("x" * 250, 1, 1, {}, []),
            ("manual", -1, -1, {}, [(0, [1]), (1, [1])]),
            ("manual-gap", -1, -1, {}, [(0, [1]), (2, [1])]),
            ("manual-other", -1, -1, {}, [(0, [7])]),
            ("manual-count", 2, -1, {}, [(0, [1])]),
            ("dup", 1, 1, {}, []),
            ("dup", 2, 1, {}, []),
            ("a.b", 1, 1, {}, []),
        ])
        out["create-again"] = _create(c, [("good", 1, 1, {}, []), ("a_b", 1, 1, {}, [])])
        out["create-validate"] = _create(c, [("dry", 3, 1, {"segment.ms": "1000"}, [])], validate_only=True)

        t = cp.CreatePartitionsRequest.CreatePartitionsTopic
        a = cp.CreatePartitionsRequest.CreatePartitionsAssignment
        resp = c.call(37, 3, cp.CreatePartitionsRequest(timeout_ms=30000, validate_only=False, topics=[
            t(name="good", count=2, assignments=None), t(name="manual", count=1, assignments=None),
            t(name="missing", count=3, assignments=None), t(name="a.b", count=3, assignments=[a(broker_ids=[1])]),
            t(name="dup", count=3, assignments=None), t(name="dup", count=4, assignments=None)]))
        out["partitions"] = sorted(([r.name, r.error_code, r.error_message] for r in resp.results), key=repr)
        resp = c.call(37, 3, cp.CreatePartitionsRequest(timeout_ms=30000, validate_only=False, topics=[
            t(name="a.b", count=3, assignments=None)]))
        out["partitions-grow"] = [[r.name, r.error_code, r.error_message] for r in resp.results]

        topic_keys = ["retention.ms", "cleanup.policy", "segment.bytes", "segment.ms", "max.message.bytes",
                      "local.retention.ms", "min.insync.replicas", "unclean.leader.election.enable"]
        out["describe"] = _describe(c, [(2, "good", None), (2, "missing", None), (2, "bad name!", None),
                                        (4, "1", BROKER_KEYS), (4, "", None), (4, "2", None), (99, "x", None)])
        out["alter"] = _alter(c, [
            (2, "good", [("retention.ms", 0, "5000"), ("cleanup.policy", 2, "delete"), ("segment.ms", 1, None)]),
            (2, "a.b", [("retention.ms", 0, "never")]),
            (2, "a.b", [("max.message.bytes", 0, "1")]),
            (2, "missing", [("retention.ms", 0, "1")]),
            (4, "1", [("log.retention.ms", 0, "7200000"), ("message.max.bytes", 0, "2000000")]),
            (4, "", [("log.retention.ms", 0, "3600000")]),
        ])
        # Kafka applies config changes when the broker replays the controller's records: give it a moment.
        time.sleep(3)
        out["alter-refused"] = _alter(c, [
            (2, "good", [("nope", 0, "1")]), (2, "good", [("retention.ms", 2, "1")]),
            (2, "good", [("retention.ms", 0, "1"), ("retention.ms", 1, None)]),
            (4, "1", [("log.dirs", 0, "/elsewhere")]), (4, "1", [("log.retention.ms", 0, "soon")]),
        ])
        out["describe-after"] = _describe(c, [(2, "good", topic_keys), (2, "a.b", topic_keys),
                                              (4, "1", BROKER_KEYS), (4, "", None)])
        legacy = c.call(33, 2, ac.AlterConfigsRequest(validate_only=False, resources=[
            ac.AlterConfigsRequest.AlterConfigsResource(resource_type=2, resource_name="good", configs=[
                ac.AlterConfigsRequest.AlterableConfig(name="segment.ms", value="600000")])]))
        out["legacy"] = [[r.error_code, r.error_message] for r in legacy.responses]
        time.sleep(3)
        out["describe-legacy"] = _describe(c, [(2, "good", topic_keys)])
        # Back to no dynamic broker configs, so the data-path checks below see the defaults.
        out["alter-reset"] = _alter(c, [(4, "1", [("log.retention.ms", 1, None), ("message.max.bytes", 1, None)]),
                                        (4, "", [("log.retention.ms", 1, None)])])
        time.sleep(3)

        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        for i in range(10):
            producer.produce("a.b", f"v{i}".encode(), key=b"k", partition=0)
        assert producer.flush(30) == 0
        del producer
        dtop, dpart = dr.DeleteRecordsRequest.DeleteRecordsTopic, dr.DeleteRecordsRequest.DeleteRecordsPartition
        deleted = []
        for partition, offset in [(0, 4), (0, 11), (0, 2), (0, -7), (0, -1), (9, 0)]:
            resp = c.call(21, 2, dr.DeleteRecordsRequest(timeout_ms=30000, topics=[
                dtop(name="a.b", partitions=[dpart(partition_index=partition, offset=offset)])]))
            p = resp.topics[0].partitions[0]
            deleted.append([partition, offset, p.error_code, p.low_watermark])
        out["delete-records"] = deleted

        otop, opart = ofle.OffsetForLeaderEpochRequest.OffsetForLeaderTopic, ofle.OffsetForLeaderEpochRequest.OffsetForLeaderPartition
        resp = c.call(23, 4, ofle.OffsetForLeaderEpochRequest(replica_id=-1, topics=[otop(topic="a.b", partitions=[
            opart(partition=0, current_leader_epoch=-1, leader_epoch=0),
            opart(partition=0, current_leader_epoch=5, leader_epoch=0),
            opart(partition=1, current_leader_epoch=0, leader_epoch=0),
            opart(partition=7, current_leader_epoch=-1, leader_epoch=0)])]))
        out["epochs"] = [[p.partition, p.error_code, p.leader_epoch, p.end_offset] for p in resp.topics[0].partitions]

        req = dtp.DescribeTopicPartitionsRequest
        pages = []
        cursor = None
        for _ in range(10):
            resp = c.call(75, 0, req(topics=[req.TopicRequest(name=n) for n in ("manual", "good", "a.b", "nope")],
                                     response_partition_limit=2, cursor=cursor))
            pages.append([[t.name, t.error_code, t.is_internal, [(p.partition_index, p.leader_id, p.replica_nodes,
                                                                  p.isr_nodes) for p in t.partitions]]
                          for t in resp.topics])
            if resp.next_cursor is None:
                break
            cursor = req.Cursor(topic_name=resp.next_cursor.topic_name,
                                partition_index=resp.next_cursor.partition_index)
            pages[-1].append(["cursor", cursor.topic_name, cursor.partition_index])
        out["describe-topic-partitions"] = pages

        state = dt.DeleteTopicsRequest.DeleteTopicState
        resp = c.call(20, 6, dt.DeleteTopicsRequest(timeout_ms=30000, topics=[
            state(name="good"), state(name="missing"), state(name=None, topic_id=uuid.UUID(int=12345)),
            state(name=None), state(name="dup2"), state(name="dup2")]))
        out["delete"] = sorted(([r.name, r.error_code, r.error_message] for r in resp.responses), key=repr)
    finally:
        c.close()
    return out


@pytest.fixture
def reference_bootstrap(tmp_path: Path) -> Iterator[str]:
    reason = reference_unavailable_reason()
    if reason:
        pytest.skip(reason)
    bootstrap, stop = start_reference_kafka(tmp_path)
    try:
        yield bootstrap
    finally:
        stop()


def test_admin_answers_match_kafka(reference_bootstrap: str, kbroker_factory: Any) -> None:
    expected = battery(reference_bootstrap)
    broker: KBroker = kbroker_factory(REFERENCE_STATIC)
    actual = battery(broker.bootstrap)
    for key in expected:
        assert actual[key] == expected[key], key
