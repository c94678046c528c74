"""The share coordinator's RPCs (83-87) below the wire: the state-batch merge, epoch fencing rebuilt
from the log on load, and CLUSTER_ACTION authorization (tests/differential/test_share_coordinator_rpcs_vs_kafka.py
compares the answers with Kafka 4.3.1 end to end)."""

from __future__ import annotations

import uuid
from typing import Any

from kbroker.api.dispatcher import ApiDispatcher
from kbroker.coord.share_coordinator import ShareCoordinatorShard, StateBatch, combine_state_batches
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.delete_share_group_state import DeleteShareGroupStateRequest as Del
from kbroker.protocol.messages.initialize_share_group_state import InitializeShareGroupStateRequest as Init
from kbroker.protocol.messages.read_share_group_state import ReadShareGroupStateRequest as Read
from kbroker.protocol.messages.read_share_group_state_summary import ReadShareGroupStateSummaryRequest as Sum
from kbroker.protocol.messages.write_share_group_state import WriteShareGroupStateRequest as W
from kbroker.security.acl import ALLOW, ALTER, CLUSTER, CLUSTER_ACTION, CLUSTER_NAME, LITERAL
from tests.security.test_authz_unit import _authorizer, _call, _services

TID = uuid.UUID(int=7)
KEY = ("g", TID, 0)


def B(a: int, b: int, state: int, count: int) -> StateBatch:  # noqa: N802 - reads like Kafka's PersisterStateBatch
    return StateBatch(a, b, state, count)


def test_new_batches_overwrite_split_and_coalesce() -> None:
    old = [B(0, 9, 2, 1), B(10, 19, 0, 1)]
    assert combine_state_batches(old, [B(5, 12, 4, 2)], 0) == [B(0, 4, 2, 1), B(5, 12, 4, 2), B(13, 19, 0, 1)]
    # the start offset drops and trims; contiguous equal batches become one
    merged = combine_state_batches([B(0, 4, 2, 1), B(5, 12, 4, 2), B(13, 19, 0, 1)], [B(15, 15, 2, 1)], 8)
    assert merged == [B(8, 12, 4, 2), B(13, 14, 0, 1), B(15, 15, 2, 1), B(16, 19, 0, 1)]
    assert combine_state_batches(merged, [B(20, 22, 0, 1)], 8)[-1] == B(16, 22, 0, 1)
    # a later new batch wins over an earlier overlapping one; everything below the start offset goes
    assert combine_state_batches([], [B(0, 5, 0, 1), B(3, 4, 2, 1)], 0) == [B(0, 2, 0, 1), B(3, 4, 2, 1),
                                                                         B(5, 5, 0, 1)]
    assert combine_state_batches([B(0, 5, 0, 1)], [], 6) == []


def _shard(log: list[tuple[bytes, bytes | None]]) -> ShareCoordinatorShard:
    def append(records: Any, producer: Any = None) -> ErrorCode:
        log.extend(records)
        return ErrorCode.NONE
    return ShareCoordinatorShard(append, lambda: 1000)


def test_fencing_epochs_survive_a_reload_and_a_tombstone_clears_them() -> None:
    log: list[tuple[bytes, bytes | None]] = []
    shard = _shard(log)
    assert shard.write(KEY, 0, 0, 0, -1, [], True).message == "Write operation on uninitialized share partition not allowed."
    assert shard.initialize(KEY, 2, 10, True).error == ErrorCode.NONE
    assert shard.read(KEY, 5, True).error == ErrorCode.NONE
    assert shard.write(KEY, 2, 5, 12, 3, [B(12, 13, 2, 1)], True).error == ErrorCode.NONE
    reloaded = _shard([])
    for offset, (k, v) in enumerate(log):
        reloaded.replay(offset, k, v)
    state = reloaded.states[KEY]
    assert (state.start_offset, state.state_epoch, state.leader_epoch, state.delivery_complete_count,
            state.batches) == (12, 2, 5, 3, [B(12, 13, 2, 1)])
    assert reloaded.read(KEY, 4, True).error == ErrorCode.FENCED_LEADER_EPOCH
    assert reloaded.write(KEY, 2, 4, -1, -1, [], True).error == ErrorCode.FENCED_LEADER_EPOCH
    assert reloaded.write(KEY, 1, 5, -1, -1, [], True).error == ErrorCode.FENCED_STATE_EPOCH
    assert reloaded.initialize(KEY, 1, 0, True).error == ErrorCode.FENCED_STATE_EPOCH
    assert reloaded.delete(KEY, True).error == ErrorCode.NONE
    assert reloaded.initialize(KEY, 0, 0, True).error == ErrorCode.NONE  # the tombstone forgot the epochs
    assert reloaded.summary(KEY, True).state is not None and reloaded.summary(("g", TID, 1), True).state is None


REQUESTS = [
    (83, 0, Init(group_id="g", topics=[Init.InitializeStateData(topic_id=TID, partitions=[Init.PartitionData()])])),
    (84, 0, Read(group_id="g", topics=[Read.ReadStateData(topic_id=TID, partitions=[Read.PartitionData()])])),
    (85, 1, W(group_id="g", topics=[W.WriteStateData(topic_id=TID, partitions=[W.PartitionData()])])),
    (86, 0, Del(group_id="g", topics=[Del.DeleteStateData(topic_id=TID, partitions=[Del.PartitionData()])])),
    (87, 1, Sum(group_id="g", topics=[Sum.ReadStateSummaryData(topic_id=TID, partitions=[Sum.PartitionData()])])),
]


def test_the_rpcs_need_cluster_action() -> None:
    authorizer = _authorizer((CLUSTER, CLUSTER_NAME, LITERAL, "User:broker", CLUSTER_ACTION, ALLOW),
                             (CLUSTER, CLUSTER_NAME, LITERAL, "User:bob", ALTER, ALLOW))
    dispatcher = ApiDispatcher(_services(authorizer), listener="broker")
    for api_key, version, body in REQUESTS:
        assert dispatcher.handlers[api_key]
        for principal, error in (("User:bob", ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                                 ("User:nobody", ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                                 # past the check: this stack has no share coordinator running
                                 ("User:broker", ErrorCode.COORDINATOR_NOT_AVAILABLE)):
            r = _call(dispatcher, principal, api_key, version, body)
            assert [(t.topic_id, p.partition, p.error_code) for t in r.results for p in t.partitions] == [
                (TID, 0, error)], (api_key, principal)
