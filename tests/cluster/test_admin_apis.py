"""The admin API handlers driven in-process through real request/response frames.

Each request is encoded as a client would (`encode_request_frame`), decoded as the broker does, sent
through the `ApiDispatcher` over the real storage stack (LogManager, ReplicaManager, LocalController),
and the response encoded and decoded again at the same version: so every version we advertise is
shown to round-trip, and the answers are Kafka's.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kbroker.api.context import RequestContext
from kbroker.api.dispatcher import ApiDispatcher
from kbroker.config import KafkaConfig
from kbroker.log.config import TOPIC_CONFIGS
from kbroker.protocol import (
    RequestHeader,
    decode_request_frame,
    decode_response_frame,
    encode_request_frame,
    encode_response_frame,
)
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import create_partitions as cp
from kbroker.protocol.messages import create_topics as ct
from kbroker.protocol.messages import delete_records as dr
from kbroker.protocol.messages import delete_topics as dt
from kbroker.protocol.messages import describe_cluster as dc
from kbroker.protocol.messages import describe_configs as dcf
from kbroker.protocol.messages import describe_log_dirs as dld
from kbroker.protocol.messages import describe_topic_partitions as dtp
from kbroker.protocol.messages import incremental_alter_configs as iac
from kbroker.protocol.messages import offset_for_leader_epoch as ofle
from kbroker.protocol.records import SimpleRecord, build_batch
from kbroker.services import build_services, shutdown_services
from tests.support.sync import run_now

ZERO = uuid.UUID(int=0)


class Stack:
    def __init__(self, tmp: Path, **overrides: str) -> None:
        props = {"log.dirs": str(tmp / "data"), "node.id": "1", "listeners": "PLAINTEXT://127.0.0.1:9092"}
        props.update(overrides)
        self.config = KafkaConfig(props)
        self.services = build_services(self.config)
        self.log_manager = self.services.log_manager
        self.metadata = self.services.metadata
        self.replica_manager = self.services.replica_manager
        self.dispatcher = ApiDispatcher(self.services)
        self.correlation = 0

    def call(self, api_key: int, version: int, request: Any) -> Any:
        self.correlation += 1
        frame = encode_request_frame(RequestHeader(api_key=api_key, api_version=version,
                                                   correlation_id=self.correlation, client_id="t"), request)
        header, body = decode_request_frame(memoryview(frame)[4:])
        response = self.dispatcher.handle(RequestContext(listener_name="PLAINTEXT"), header, body)
        if inspect.iscoroutine(response):  # admin APIs await the controller, which commits at once
            response = run_now(response)
        parts = encode_response_frame(api_key, version, self.correlation, response)
        data = b"".join(bytes(p) for p in parts)
        cid, decoded = decode_response_frame(api_key, version, memoryview(data)[4:])
        assert cid == self.correlation
        return decoded

    def produce(self, topic: str, partition: int, count: int) -> None:
        p = self.replica_manager.get_partition(topic, partition)
        assert p is not None
        batch = build_batch([SimpleRecord(f"v{i}".encode()) for i in range(count)])
        p.append_records_to_leader(memoryview(bytearray(batch)), required_acks=1)

    def shutdown(self) -> None:
        shutdown_services(self.services)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(tmp_path)
    yield s
    s.shutdown()


def _create(stack: Stack, version: int, *topics: Any, validate_only: bool = False) -> Any:
    return stack.call(19, version, ct.CreateTopicsRequest(topics=list(topics), timeout_ms=30000,
                                                         validate_only=validate_only))


def _topic(name: str, n: int = 1, rf: int = 1, configs: dict[str, str | None] | None = None) -> Any:
    return ct.CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=n, replication_factor=rf, assignments=[],
        configs=[ct.CreateTopicsRequest.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()])


@pytest.mark.parametrize("version", range(2, 8))
def test_create_topics_every_version(stack: Stack, version: int) -> None:
    resp = _create(stack, version, _topic("a", 2, configs={"retention.ms": "1000"}), _topic("dup"), _topic("dup"),
                   _topic("bad", configs={"retention.ms": "x"}), _topic("rf", 1, 3))
    by_name = {t.name: t for t in resp.topics}
    assert by_name["a"].error_code == 0
    assert by_name["dup"].error_code == ErrorCode.INVALID_REQUEST
    assert by_name["dup"].error_message == "Duplicate topic name."
    assert [t.name for t in resp.topics][-1] == "dup"  # duplicates are answered last, as Kafka does
    assert by_name["bad"].error_code == ErrorCode.INVALID_CONFIG
    assert by_name["rf"].error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert "only 1 broker" in by_name["rf"].error_message
    if version >= 5:
        a = by_name["a"]
        assert (a.num_partitions, a.replication_factor) == (2, 1)
        configs = {c.name: c for c in a.configs}
        assert set(configs) == {d.name for d in TOPIC_CONFIGS if not d.internal}
        assert [c.name for c in a.configs] == sorted(configs)
        assert (configs["retention.ms"].value, configs["retention.ms"].config_source) == ("1000", 1)
        assert configs["segment.bytes"].config_source == 5
        assert by_name["bad"].num_partitions == -1
    if version >= 7:
        assert by_name["a"].topic_id == stack.metadata.topic("a").topic_id  # type: ignore[union-attr]
        assert by_name["bad"].topic_id == ZERO
    assert stack.replica_manager.get_partition("a", 1) is not None
    assert stack.replica_manager.get_partition("a", 0).log.config.retention_ms == 1000  # type: ignore[union-attr]
    again = _create(stack, version, _topic("a"))
    assert again.topics[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    dry = _create(stack, version, _topic("dry", 3), validate_only=True)
    assert dry.topics[0].error_code == 0 and stack.metadata.topic("dry") is None


@pytest.mark.parametrize("version", range(1, 7))
def test_delete_topics_every_version(stack: Stack, version: int) -> None:
    _create(stack, 7, _topic("x"), _topic("y"))
    tid = stack.metadata.topic("y").topic_id  # type: ignore[union-attr]
    if version < 6:
        req = dt.DeleteTopicsRequest(topic_names=["x", "nope"], timeout_ms=1000)
    else:
        state = dt.DeleteTopicsRequest.DeleteTopicState
        req = dt.DeleteTopicsRequest(topics=[state(name="x"), state(name=None, topic_id=tid),
                                             state(name=None, topic_id=uuid.uuid4()), state(name="nope"),
                                             state(name="x", topic_id=tid)], timeout_ms=1000)
    resp = stack.call(20, version, req)
    codes = sorted((r.name or "", r.error_code) for r in resp.responses)
    if version < 6:
        assert codes == [("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), ("x", 0)]
        assert stack.metadata.topic("y") is not None
    else:
        assert ("x", 0) in codes and ("y", 0) in codes and ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) in codes
        assert ("", ErrorCode.UNKNOWN_TOPIC_ID) in codes
        assert ("x", ErrorCode.INVALID_REQUEST) in codes
        assert stack.metadata.topic("y") is None
    assert stack.metadata.topic("x") is None and stack.replica_manager.get_partition("x", 0) is None


@pytest.mark.parametrize("version", range(0, 4))
def test_create_partitions_every_version(stack: Stack, version: int) -> None:
    _create(stack, 7, _topic("g", 1))
    t = cp.CreatePartitionsRequest.CreatePartitionsTopic
    resp = stack.call(37, version, cp.CreatePartitionsRequest(
        topics=[t(name="g", count=3, assignments=None), t(name="missing", count=2, assignments=None),
                t(name="d", count=2, assignments=None), t(name="d", count=3, assignments=None)],
        timeout_ms=1000, validate_only=False))
    codes = {r.name: (r.error_code, r.error_message) for r in resp.results}
    assert codes["g"] == (0, None)
    assert codes["missing"][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert codes["d"] == (ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
    assert len(resp.results) == 3
    assert stack.replica_manager.get_partition("g", 2) is not None


@pytest.mark.parametrize("version", range(1, 5))
def test_describe_configs_every_version(stack: Stack, version: int) -> None:
    _create(stack, 7, _topic("c", configs={"max.message.bytes": "2048"}))
    r = dcf.DescribeConfigsRequest.DescribeConfigsResource
    resp = stack.call(32, version, dcf.DescribeConfigsRequest(resources=[
        r(resource_type=2, resource_name="c", configuration_keys=None),
        r(resource_type=2, resource_name="nope", configuration_keys=None),
        r(resource_type=4, resource_name="1", configuration_keys=["log.dirs", "message.max.bytes"]),
        r(resource_type=4, resource_name="7", configuration_keys=None),
    ], include_synonyms=True, include_documentation=False))
    topic, missing, broker, other = resp.results
    entries = {c.name: c for c in topic.configs}
    assert topic.error_code == 0 and len(entries) == len([d for d in TOPIC_CONFIGS if not d.internal])
    # Kafka leaves ErrorMessage at the generated default "" (checked against the reference broker).
    assert topic.error_message == "" and missing.error_message == ""
    mmb = entries["max.message.bytes"]
    assert (mmb.value, mmb.config_source, mmb.read_only, mmb.is_sensitive) == ("2048", 1, False, False)
    assert [(s.name, s.source) for s in mmb.synonyms] == [("max.message.bytes", 1), ("message.max.bytes", 5)]
    if version >= 3:
        assert mmb.config_type == 3 and mmb.documentation is None
    assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    bentries = {c.name: c for c in broker.configs}
    assert set(bentries) == {"log.dirs", "message.max.bytes"}
    assert bentries["log.dirs"].read_only and bentries["log.dirs"].config_source == 4
    assert not bentries["message.max.bytes"].read_only and bentries["message.max.bytes"].config_source == 5
    assert other.error_code == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("version", [0, 1])
def test_incremental_alter_configs_every_version(stack: Stack, version: int) -> None:
    _create(stack, 7, _topic("i"))
    res, cfg = iac.IncrementalAlterConfigsRequest.AlterConfigsResource, iac.IncrementalAlterConfigsRequest.AlterableConfig
    resp = stack.call(44, version, iac.IncrementalAlterConfigsRequest(resources=[
        res(resource_type=2, resource_name="i", configs=[cfg(name="retention.ms", config_operation=0, value="777")]),
        res(resource_type=2, resource_name="nope", configs=[cfg(name="retention.ms", config_operation=0, value="1")]),
        res(resource_type=4, resource_name="1", configs=[cfg(name="log.retention.ms", config_operation=0, value="5555")]),
        res(resource_type=4, resource_name="", configs=[cfg(name="log.dirs", config_operation=0, value="/x")]),
        res(resource_type=2, resource_name="i2", configs=[cfg(name="a", config_operation=0, value="1"),
                                                          cfg(name="a", config_operation=1, value=None)]),
    ], validate_only=False))
    codes = [r.error_code for r in resp.responses]
    assert codes == [0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 0, ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST]
    assert stack.replica_manager.get_partition("i", 0).log.config.retention_ms == 777  # type: ignore[union-attr]
    assert stack.services.configs.dynamic_broker_configs(False) == {"log.retention.ms": "5555"}


def test_describe_cluster_and_log_dirs(stack: Stack) -> None:
    for version in range(0, 3):
        resp = stack.call(60, version, dc.DescribeClusterRequest(include_cluster_authorized_operations=True))
        assert (resp.error_code, resp.cluster_id, resp.controller_id) == (0, stack.log_manager.cluster_id, 1)
        assert resp.cluster_id  # the id the log dirs were formatted with (meta.properties)
        assert [(b.broker_id, b.host, b.port) for b in resp.brokers] == [(1, "127.0.0.1", 9092)]
        assert resp.cluster_authorized_operations > 0
    resp = stack.call(60, 1, dc.DescribeClusterRequest(endpoint_type=2))
    assert resp.error_code == ErrorCode.UNSUPPORTED_ENDPOINT_TYPE

    _create(stack, 7, _topic("l", 2))
    stack.produce("l", 0, 10)
    for version in range(1, 5):
        resp = stack.call(35, version, dld.DescribeLogDirsRequest(topics=None))
        [result] = resp.results
        assert result.error_code == 0 and result.log_dir == str(stack.config.log_dirs[0])
        [topic] = [t for t in result.topics if t.name == "l"]
        sizes = {p.partition_index: p.partition_size for p in topic.partitions}
        assert sizes[0] > 0 and sizes[1] == 0
        if version >= 4:
            assert result.total_bytes > 0 and result.usable_bytes > 0
    only = stack.call(35, 4, dld.DescribeLogDirsRequest(topics=[
        dld.DescribeLogDirsRequest.DescribableLogDirTopic(topic="l", partitions=[1])]))
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in only.results[0].topics] == [("l", [1])]


@pytest.mark.parametrize("version", range(0, 3))
def test_delete_records_every_version(stack: Stack, version: int) -> None:
    _create(stack, 7, _topic("r", 1), _topic("k", 1, configs={"cleanup.policy": "compact"}))
    stack.produce("r", 0, 10)
    t, p = dr.DeleteRecordsRequest.DeleteRecordsTopic, dr.DeleteRecordsRequest.DeleteRecordsPartition

    def delete(topic: str, offset: int, partition: int = 0) -> tuple[int, int]:
        resp = stack.call(21, version, dr.DeleteRecordsRequest(
            topics=[t(name=topic, partitions=[p(partition_index=partition, offset=offset)])], timeout_ms=1000))
        r = resp.topics[0].partitions[0]
        return r.error_code, r.low_watermark

    assert delete("r", 4) == (0, 4)
    assert delete("r", 11) == (ErrorCode.OFFSET_OUT_OF_RANGE, -1)
    assert delete("r", -7) == (ErrorCode.OFFSET_OUT_OF_RANGE, -1)
    assert delete("r", 2) == (0, 4)  # never moves backwards
    assert delete("r", -1) == (0, 10)
    assert delete("r", 0, partition=5) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)
    assert delete("k", 0)[0] == ErrorCode.POLICY_VIOLATION
    assert stack.replica_manager.get_partition("r", 0).log_start_offset == 10  # type: ignore[union-attr]


@pytest.mark.parametrize("version", range(2, 5))
def test_offset_for_leader_epoch_every_version(stack: Stack, version: int) -> None:
    _create(stack, 7, _topic("e", 1))
    stack.produce("e", 0, 5)
    t, p = ofle.OffsetForLeaderEpochRequest.OffsetForLeaderTopic, ofle.OffsetForLeaderEpochRequest.OffsetForLeaderPartition
    resp = stack.call(23, version, ofle.OffsetForLeaderEpochRequest(topics=[
        t(topic="e", partitions=[p(partition=0, current_leader_epoch=-1, leader_epoch=0),
                                 p(partition=0, current_leader_epoch=3, leader_epoch=0),
                                 p(partition=9, current_leader_epoch=-1, leader_epoch=0)])]))
    ok, fenced, missing = resp.topics[0].partitions
    assert (ok.error_code, ok.leader_epoch, ok.end_offset) == (0, 0, 5)
    assert fenced.error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_describe_topic_partitions_pagination(stack: Stack) -> None:
    _create(stack, 7, _topic("b", 3), _topic("a", 2), _topic("c", 1))
    req = dtp.DescribeTopicPartitionsRequest
    resp = stack.call(75, 0, req(topics=[], response_partition_limit=4))
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in resp.topics] == [("a", [0, 1]), ("b", [0, 1])]
    assert (resp.next_cursor.topic_name, resp.next_cursor.partition_index) == ("b", 2)
    cursor = req.Cursor(topic_name="b", partition_index=2)
    resp = stack.call(75, 0, req(topics=[], response_partition_limit=4, cursor=cursor))
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in resp.topics] == [("b", [2]), ("c", [0])]
    assert resp.next_cursor is None
    # Exactly filling the budget at a topic boundary: the cursor names the next topic at partition 0.
    resp = stack.call(75, 0, req(topics=[], response_partition_limit=2))
    assert [t.name for t in resp.topics] == ["a"]
    assert (resp.next_cursor.topic_name, resp.next_cursor.partition_index) == ("b", 0)
    named = stack.call(75, 0, req(topics=[req.TopicRequest(name="c"), req.TopicRequest(name="zz"),
                                          req.TopicRequest(name="bad name")]))
    codes = {t.name: t.error_code for t in named.topics}
    assert codes == {"c": 0, "zz": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "bad name": ErrorCode.INVALID_TOPIC_EXCEPTION}
    c = [t for t in named.topics if t.name == "c"][0]
    assert c.topic_id == stack.metadata.topic("c").topic_id  # type: ignore[union-attr]
    p0 = c.partitions[0]
    assert (p0.leader_id, p0.leader_epoch, p0.replica_nodes, p0.isr_nodes) == (1, 0, [1], [1])
    bad_cursor = stack.call(75, 0, req(topics=[req.TopicRequest(name="c")],
                                       cursor=req.Cursor(topic_name="b", partition_index=0)))
    assert [t.error_code for t in bad_cursor.topics] == [ErrorCode.INVALID_REQUEST]


def test_delete_topics_when_deletion_disabled(tmp_path: Path) -> None:
    stack = Stack(tmp_path, **{"delete.topic.enable": "false"})
    try:
        _create(stack, 7, _topic("keep"))
        old = stack.call(20, 2, dt.DeleteTopicsRequest(topic_names=["keep"], timeout_ms=1000))
        assert [r.error_code for r in old.responses] == [ErrorCode.INVALID_REQUEST]
        new = stack.call(20, 6, dt.DeleteTopicsRequest(
            topics=[dt.DeleteTopicsRequest.DeleteTopicState(name="keep")], timeout_ms=1000))
        assert [r.error_code for r in new.responses] == [ErrorCode.TOPIC_DELETION_DISABLED]
        assert stack.metadata.topic("keep") is not None
    finally:
        stack.shutdown()


def test_broker_loggers(stack: Stack) -> None:
    import logging

    r = dcf.DescribeConfigsRequest.DescribeConfigsResource
    resp = stack.call(32, 4, dcf.DescribeConfigsRequest(resources=[
        r(resource_type=8, resource_name="1", configuration_keys=None)]))
    levels = {c.name: (c.value, c.config_source) for c in resp.results[0].configs}
    assert levels["root"][1] == 6 and levels["root"][0] in ("FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE")
    res, cfg = iac.IncrementalAlterConfigsRequest.AlterConfigsResource, iac.IncrementalAlterConfigsRequest.AlterableConfig
    logger = logging.getLogger("kbroker.controller.local_controller")
    try:
        resp = stack.call(44, 1, iac.IncrementalAlterConfigsRequest(resources=[
            res(resource_type=8, resource_name="1", configs=[
                cfg(name="kbroker.controller.local_controller", config_operation=0, value="DEBUG")])]))
        assert resp.responses[0].error_code == 0 and logger.level == logging.DEBUG
        for configs, code in [
            ([cfg(name="kbroker.controller.local_controller", config_operation=0, value="LOUD")], ErrorCode.INVALID_CONFIG),
            ([cfg(name="no.such.logger", config_operation=0, value="INFO")], ErrorCode.INVALID_CONFIG),
            ([cfg(name="root", config_operation=1, value=None)], ErrorCode.INVALID_REQUEST),
            ([cfg(name="root", config_operation=2, value="INFO")], ErrorCode.INVALID_REQUEST),
        ]:
            resp = stack.call(44, 1, iac.IncrementalAlterConfigsRequest(resources=[
                res(resource_type=8, resource_name="1", configs=configs)]))
            assert resp.responses[0].error_code == code, configs
        resp = stack.call(44, 1, iac.IncrementalAlterConfigsRequest(resources=[
            res(resource_type=8, resource_name="1", configs=[
                cfg(name="kbroker.controller.local_controller", config_operation=1, value=None)])]))
        assert resp.responses[0].error_code == 0 and logger.level == logging.NOTSET
    finally:
        logger.setLevel(logging.NOTSET)
