"""Differential test: the share coordinator's RPCs (KIP-932) against Kafka 4.3.1.

One scripted sequence of raw requests, as a share-partition leader (or any caller) sends them to the
share coordinator: FindCoordinator with SHARE keys ("group:topicId:partition"), then
InitializeShareGroupState (83), ReadShareGroupState (84), WriteShareGroupState (85),
DeleteShareGroupState (86) and ReadShareGroupStateSummary (87): reads and writes before
initialization, the merge of overlapping state batches, leader-epoch and state-epoch fencing, an
unknown topic id and partition, an empty group id, deletion. Every error code and message, start
offset, state epoch, leader epoch and state batch must be Kafka's. Results are compared sorted by
topic and partition (Kafka answers in HashMap order).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from kbroker.coord.share_coordinator import kafka_uuid
from kbroker.protocol.messages.create_topics import CreateTopicsRequest as CT
from kbroker.protocol.messages.delete_share_group_state import DeleteShareGroupStateRequest as Del
from kbroker.protocol.messages.find_coordinator import FindCoordinatorRequest
from kbroker.protocol.messages.initialize_share_group_state import InitializeShareGroupStateRequest as Init
from kbroker.protocol.messages.read_share_group_state import ReadShareGroupStateRequest as Read
from kbroker.protocol.messages.read_share_group_state_summary import ReadShareGroupStateSummaryRequest as Sum
from kbroker.protocol.messages.write_share_group_state import WriteShareGroupStateRequest as W
from tests.support.broker import KBroker
from tests.support.raw_client import RawKafkaClient
from tests.support.reference_kafka import reference_unavailable_reason, start_reference_kafka

pytestmark = [pytest.mark.reference, pytest.mark.interop]

TOPIC, GROUP = "share-state-diff", "share-state-group"
UNKNOWN = uuid.UUID("6f1d0c8e-1111-4222-8333-944455556666")


def _results(r: Any, fields: tuple[str, ...]) -> list[Any]:
    out = []
    for t in r.results:
        for p in t.partitions:
            row: list[Any] = [t.topic_id, p.partition, p.error_code, p.error_message]
            for f in fields:
                v = getattr(p, f)
                if f == "state_batches":
                    v = [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in v]
                row.append(v)
            out.append(tuple(row))
    return sorted(out, key=lambda x: (str(x[0]), x[1]))


def _named(rows: list[Any], tid: uuid.UUID) -> list[Any]:
    return [("T" if r[0] == tid else "?" if r[0] == UNKNOWN else str(r[0]),) + r[1:] for r in rows]


def _init(c: RawKafkaClient, group: str, tid: uuid.UUID, parts: list[tuple[int, int, int]]) -> Any:
    r = c.request(83, 0, Init(group_id=group, topics=[Init.InitializeStateData(topic_id=tid, partitions=[
        Init.PartitionData(partition=p, state_epoch=se, start_offset=so) for p, se, so in parts])]))
    return r


def _read(c: RawKafkaClient, group: str, tid: uuid.UUID, parts: list[tuple[int, int]]) -> Any:
    return c.request(84, 0, Read(group_id=group, topics=[Read.ReadStateData(topic_id=tid, partitions=[
        Read.PartitionData(partition=p, leader_epoch=le) for p, le in parts])]))


def _write(c: RawKafkaClient, group: str, tid: uuid.UUID, p: int, state_epoch: int, leader_epoch: int,
           start: int, batches: list[tuple[int, int, int, int]], version: int = 1, dcc: int = -1) -> Any:
    return c.request(85, version, W(group_id=group, topics=[W.WriteStateData(topic_id=tid, partitions=[
        W.PartitionData(partition=p, state_epoch=state_epoch, leader_epoch=leader_epoch, start_offset=start,
                        delivery_complete_count=dcc,
                        state_batches=[W.StateBatch(first_offset=a, last_offset=b, delivery_state=s, delivery_count=n)
                                       for a, b, s, n in batches])])]))


def _summary(c: RawKafkaClient, group: str, tid: uuid.UUID, parts: list[tuple[int, int]], version: int = 1) -> Any:
    return c.request(87, version, Sum(group_id=group, topics=[Sum.ReadStateSummaryData(topic_id=tid, partitions=[
        Sum.PartitionData(partition=p, leader_epoch=le) for p, le in parts])]))


def _delete(c: RawKafkaClient, group: str, tid: uuid.UUID, parts: list[int]) -> Any:
    return c.request(86, 0, Del(group_id=group, topics=[Del.DeleteStateData(topic_id=tid, partitions=[
        Del.PartitionData(partition=p) for p in parts])]))


READ = ("state_epoch", "start_offset", "state_batches")
SUMMARY = ("state_epoch", "leader_epoch", "start_offset", "delivery_complete_count")


def scenario(bootstrap: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with RawKafkaClient(bootstrap) as c:
        created = c.request(19, 7, CT(topics=[CT.CreatableTopic(name=TOPIC, num_partitions=2, replication_factor=1,
                                                                assignments=[], configs=[])], timeout_ms=30000))
        tid = created.topics[0].topic_id
        keys = [f"{GROUP}:{kafka_uuid(tid)}:0", f"{GROUP}:{kafka_uuid(tid)}:1"]
        deadline = time.monotonic() + 60
        first = None
        while True:  # __share_group_state is created by the first SHARE lookup, then loaded
            r = c.request(10, 6, FindCoordinatorRequest(key_type=2, coordinator_keys=keys))
            found = [(x.key.replace(kafka_uuid(tid), "T"), x.error_code, x.error_message, x.node_id >= 0, x.port > 0) for x in r.coordinators]
            first = found if first is None else first
            init = _named(_results(_init(c, GROUP, tid, [(0, 0, 0)]), ()), tid)
            if (all(f[1] == 0 for f in found) and init[0][2] == 0) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        out["find_first"] = first
        out["find"] = found
        out["find_v5"] = c.request(10, 5, FindCoordinatorRequest(key_type=2, coordinator_keys=keys[:1])).coordinators[0].error_code
        out["find_bad_key"] = [(x.error_code, x.error_message) for x in c.request(
            10, 6, FindCoordinatorRequest(key_type=2, coordinator_keys=["no-colons", f"g:{kafka_uuid(tid)}:x"])).coordinators]
        out["init_p0"] = init
        out["read_uninitialized"] = _named(_results(_read(c, GROUP, tid, [(1, 0)]), READ), tid)
        out["write_uninitialized"] = _named(_results(_write(c, GROUP, tid, 1, 0, 0, 0, [(0, 4, 0, 1)]), ()), tid)
        out["summary_uninitialized"] = _named(_results(_summary(c, GROUP, tid, [(1, 0)]), SUMMARY), tid)
        out["init_more"] = _named(_results(_init(c, GROUP, tid, [(1, 0, 5), (7, 0, 0)]), ()), tid)
        out["summary_after_init"] = _named(_results(_summary(c, GROUP, tid, [(1, 0)]), SUMMARY), tid)
        out["init_unknown_topic"] = _named(_results(_init(c, GROUP, UNKNOWN, [(0, 0, 0)]), ()), tid)
        out["read_p0_p1"] = _named(_results(_read(c, GROUP, tid, [(0, 1), (1, 1)]), READ), tid)
        out["summary_after_read"] = _named(_results(_summary(c, GROUP, tid, [(0, 1), (1, 0)]), SUMMARY), tid)
        out["write_1"] = _named(_results(_write(c, GROUP, tid, 0, 0, 1, 0, [(0, 9, 2, 1), (10, 19, 0, 1)]), ()), tid)
        out["write_overlap"] = _named(_results(_write(c, GROUP, tid, 0, 0, 1, -1, [(5, 12, 4, 2)]), ()), tid)
        out["read_merged"] = _named(_results(_read(c, GROUP, tid, [(0, 1)]), READ), tid)
        out["write_start"] = _named(_results(_write(c, GROUP, tid, 0, 0, 2, 8, [(15, 15, 2, 1)], dcc=3), ()), tid)
        out["read_after_start"] = _named(_results(_read(c, GROUP, tid, [(0, -1)]), READ), tid)
        out["summary_after_start"] = _named(_results(_summary(c, GROUP, tid, [(0, 2)]), SUMMARY), tid)
        out["summary_v0"] = _named(_results(_summary(c, GROUP, tid, [(0, 2)], version=0), SUMMARY[:3]), tid)
        out["write_fenced_leader"] = _named(_results(_write(c, GROUP, tid, 0, 0, 1, 0, []), ()), tid)
        out["read_fenced_leader"] = _named(_results(_read(c, GROUP, tid, [(0, 1)]), READ), tid)
        out["read_higher_leader"] = _named(_results(_read(c, GROUP, tid, [(0, 5)]), READ), tid)
        out["write_lower_leader"] = _named(_results(_write(c, GROUP, tid, 0, 0, 4, -1, [(0, 0, 0, 1)]), ()), tid)
        out["read_lower_leader"] = _named(_results(_read(c, GROUP, tid, [(0, 4)]), READ), tid)
        out["summary_lower_leader"] = _named(_results(_summary(c, GROUP, tid, [(0, 4)]), SUMMARY), tid)
        out["write_adjacent"] = _named(_results(_write(c, GROUP, tid, 0, 0, 5, -1, [(20, 22, 0, 1)]), ()), tid)
        out["read_adjacent"] = _named(_results(_read(c, GROUP, tid, [(0, 5)]), READ), tid)
        out["write_v0"] = _named(_results(_write(c, GROUP, tid, 0, 0, 6, -1, [(23, 24, 0, 1)], version=0), ()), tid)
        out["read_after_v0"] = _named(_results(_read(c, GROUP, tid, [(0, -1)]), READ), tid)
        out["init_again"] = _named(_results(_init(c, GROUP, tid, [(0, 1, 30)]), ()), tid)
        out["summary_after_init_again"] = _named(_results(_summary(c, GROUP, tid, [(0, 0)]), SUMMARY), tid)
        out["read_after_init_again"] = _named(_results(_read(c, GROUP, tid, [(0, 7)]), READ), tid)
        out["write_fenced_state"] = _named(_results(_write(c, GROUP, tid, 0, 0, 7, 31, []), ()), tid)
        out["write_same_state"] = _named(_results(_write(c, GROUP, tid, 0, 1, 7, 31, [(31, 31, 2, 1)]), ()), tid)
        out["init_same_state"] = _named(_results(_init(c, GROUP, tid, [(0, 1, 40)]), ()), tid)
        out["init_fenced_state"] = _named(_results(_init(c, GROUP, tid, [(0, 0, 0)]), ()), tid)
        out["write_unknown_topic"] = _named(_results(_write(c, GROUP, UNKNOWN, 0, 0, 0, 0, []), ()), tid)
        out["write_unknown_partition"] = _named(_results(_write(c, GROUP, tid, 9, 0, 0, 0, []), ()), tid)
        out["write_negative_partition"] = _named(_results(_write(c, GROUP, tid, -1, 0, 0, 0, []), ()), tid)
        out["read_unknown_topic"] = _named(_results(_read(c, GROUP, UNKNOWN, [(0, 0)]), READ), tid)
        out["read_empty_group"] = _named(_results(_read(c, "", tid, [(0, 0)]), READ), tid)
        out["write_empty_group"] = _named(_results(_write(c, "", tid, 0, 0, 0, 0, []), ()), tid)
        out["init_empty_group"] = _named(_results(_init(c, "", tid, [(0, 0, 0)]), ()), tid)
        out["delete_p1"] = _named(_results(_delete(c, GROUP, tid, [1, 7]), ()), tid)
        out["read_after_delete"] = _named(_results(_read(c, GROUP, tid, [(1, 0)]), READ), tid)
        out["summary_after_delete"] = _named(_results(_summary(c, GROUP, tid, [(1, 0)]), SUMMARY), tid)
        out["delete_unknown_topic"] = _named(_results(_delete(c, GROUP, UNKNOWN, [0]), ()), tid)
        out["delete_empty_group"] = _named(_results(_delete(c, "", tid, [0]), ()), tid)
        out["delete_uninitialized"] = _named(_results(_delete(c, GROUP, tid, [1]), ()), tid)
        out["summary_unknown_topic"] = _named(_results(_summary(c, GROUP, UNKNOWN, [(0, 0)]), SUMMARY), tid)
        out["init_negative_partition"] = _named(_results(_init(c, GROUP, tid, [(-1, 0, 0)]), ()), tid)
        out["read_negative_partition"] = _named(_results(_read(c, GROUP, tid, [(-1, 0)]), READ), tid)
        out["summary_negative_partition"] = _named(_results(_summary(c, GROUP, tid, [(-1, 0)]), SUMMARY), tid)
        out["delete_negative_partition"] = _named(_results(_delete(c, GROUP, tid, [-1]), ()), tid)
    return out


STEPS = ["find_first", "find", "find_v5", "find_bad_key", "init_p0", "read_uninitialized", "write_uninitialized",
         "summary_uninitialized", "init_more", "summary_after_init", "init_unknown_topic", "read_p0_p1", "summary_after_read", "write_1",
         "write_overlap", "read_merged", "write_start", "read_after_start", "summary_after_start", "summary_v0",
         "write_fenced_leader", "read_fenced_leader", "read_higher_leader", "write_lower_leader", "read_lower_leader",
         "summary_lower_leader", "write_adjacent", "read_adjacent", "write_v0", "read_after_v0", "init_again",
         "summary_after_init_again", "read_after_init_again", "write_fenced_state", "write_same_state", "init_same_state", "init_fenced_state", "write_unknown_topic",
         "write_unknown_partition", "write_negative_partition", "read_unknown_topic", "read_empty_group",
         "write_empty_group", "init_empty_group", "delete_p1", "read_after_delete", "summary_after_delete",
         "delete_unknown_topic", "delete_empty_group", "delete_uninitialized", "summary_unknown_topic",
         "init_negative_partition", "read_negative_partition", "summary_negative_partition",
         "delete_negative_partition"]


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    reason = reference_unavailable_reason()
    if reason:
        pytest.fail(reason)
    bootstrap, stop = start_reference_kafka(Path(tmp_path_factory.mktemp("ref-share-state")))
    try:
        return scenario(bootstrap)
    finally:
        stop()


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    with KBroker(tmp_path_factory.mktemp("kb-share-state"), {}) as broker:
        return scenario(broker.bootstrap)


@pytest.mark.parametrize("step", STEPS)
def test_same_answer_as_kafka(step: str, kafka: dict[str, Any], ours: dict[str, Any]) -> None:
    assert ours[step] == kafka[step]
