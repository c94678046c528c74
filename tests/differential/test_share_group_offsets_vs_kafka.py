"""Differential test: AlterShareGroupOffsets (91) and DeleteShareGroupOffsets (92) against Kafka 4.3.1.

One scripted sequence of raw requests: delete on a group that does not exist, alter that creates the
group (a valid partition, a partition beyond the topic's count, an unknown topic), DescribeShareGroupOffsets
of the altered start offset, delete of a topic without offsets, of an unknown topic and of the altered
topic (then described again), alter and delete of a group with a member (NON_EMPTY_GROUP), and an empty
group id. Every error code and message, the start offsets and whether a topic id is named must be Kafka's.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from kbroker.protocol.messages.alter_share_group_offsets import AlterShareGroupOffsetsRequest as A
from kbroker.protocol.messages.create_topics import CreateTopicsRequest as CT
from kbroker.protocol.messages.delete_share_group_offsets import DeleteShareGroupOffsetsRequest as Del
from kbroker.protocol.messages.describe_share_group_offsets import DescribeShareGroupOffsetsRequest as D
from kbroker.protocol.messages.find_coordinator import FindCoordinatorRequest
from kbroker.protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest as H
from tests.support.broker import KBroker
from tests.support.raw_client import RawKafkaClient
from tests.support.reference_kafka import reference_unavailable_reason, start_reference_kafka

pytestmark = [pytest.mark.reference, pytest.mark.interop]

TOPIC, OTHER, GROUP, BUSY = "offsets-diff", "offsets-other", "offsets-group", "offsets-busy"
ZERO = uuid.UUID(int=0)


def _alter(c: RawKafkaClient, group: str, topics: list[tuple[str, list[tuple[int, int]]]]) -> Any:
    r = c.request(91, 0, A(group_id=group, topics=[A.AlterShareGroupOffsetsRequestTopic(
        topic_name=name, partitions=[A.AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=o)
                                     for p, o in parts]) for name, parts in topics]))
    return (r.error_code, r.error_message, [(t.topic_name, t.topic_id != ZERO, [
        (p.partition_index, p.error_code, p.error_message) for p in t.partitions]) for t in r.responses])


def _delete(c: RawKafkaClient, group: str, topics: list[str]) -> Any:
    r = c.request(92, 0, Del(group_id=group, topics=[Del.DeleteShareGroupOffsetsRequestTopic(topic_name=t)
                                                     for t in topics]))
    return (r.error_code, r.error_message, [(t.topic_name, t.topic_id != ZERO, t.error_code, t.error_message)
                                            for t in r.responses])


def _start(c: RawKafkaClient, group: str) -> Any:
    r = c.request(90, 1, D(groups=[D.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=[
        D.DescribeShareGroupOffsetsRequestTopic(topic_name=TOPIC, partitions=[0])])]))
    return [(g.error_code, [(p.partition_index, p.start_offset, p.error_code) for t in g.topics for p in t.partitions])
            for g in r.groups]


def scenario(bootstrap: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with RawKafkaClient(bootstrap) as c:
        c.request(19, 7, CT(topics=[CT.CreatableTopic(name=n, num_partitions=1, replication_factor=1, assignments=[],
                                                      configs=[]) for n in (TOPIC, OTHER)], timeout_ms=30000))
        deadline = time.monotonic() + 60
        while True:  # __consumer_offsets is created by the first FindCoordinator, then loaded
            found = [x.error_code for x in c.request(
                10, 6, FindCoordinatorRequest(key_type=0, coordinator_keys=[GROUP, BUSY])).coordinators]
            hb = c.request(76, 1, H(group_id=BUSY, member_id="busy-member-000000000", member_epoch=0,
                                    subscribed_topic_names=[TOPIC]))
            if (found == [0, 0] and hb.error_code == 0) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        out["delete_unknown_group"] = _delete(c, GROUP, [TOPIC])
        deadline = time.monotonic() + 60
        while True:  # the first state write waits for __share_group_state on Kafka too
            out["alter_creates"] = _alter(c, GROUP, [(TOPIC, [(0, 0), (3, 0)]), ("no-such-topic", [(0, 5)])])
            # Done once partition 0 of TOPIC was written (unknown topics are answered first).
            written = [parts[0][1] for name, _, parts in out["alter_creates"][2] if name == TOPIC]
            if written == [0] or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        out["start_after_alter"] = _start(c, GROUP)
        out["delete_mixed"] = _delete(c, GROUP, [OTHER, "no-such-topic"])
        out["delete_topic"] = _delete(c, GROUP, [TOPIC])
        out["start_after_delete"] = _start(c, GROUP)
        out["delete_again"] = _delete(c, GROUP, [TOPIC])
        # Joined now: the state-topic wait above can outlast a session timeout.
        hb = c.request(76, 1, H(group_id=BUSY, member_id="busy-member-000000000", member_epoch=0,
                                subscribed_topic_names=[TOPIC]))
        out["busy_joined"] = hb.error_code
        out["alter_busy"] = _alter(c, BUSY, [(TOPIC, [(0, 0)])])
        out["delete_busy"] = _delete(c, BUSY, [TOPIC])
        out["alter_empty_id"] = _alter(c, "", [(TOPIC, [(0, 0)])])
        out["delete_empty_id"] = _delete(c, "", [TOPIC])
    return out


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    reason = reference_unavailable_reason()
    if reason:
        pytest.fail(reason)
    bootstrap, stop = start_reference_kafka(Path(tmp_path_factory.mktemp("ref-share-offsets")))
    try:
        return scenario(bootstrap)
    finally:
        stop()


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    with KBroker(tmp_path_factory.mktemp("kb-share-offsets"), {}) as broker:
        return scenario(broker.bootstrap)


@pytest.mark.parametrize("step", ["delete_unknown_group", "alter_creates", "start_after_alter", "delete_mixed",
                                  "delete_topic", "start_after_delete", "delete_again", "busy_joined", "alter_busy",
                                  "delete_busy", "alter_empty_id", "delete_empty_id"])
def test_same_answer_as_kafka(step: str, kafka: dict[str, Any], ours: dict[str, Any]) -> None:
    assert ours[step] == kafka[step]
