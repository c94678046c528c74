"""ShareGroupStatePartitionMetadata (KIP-932) without sockets: the group coordinator's record of which
share-partitions have a state, on a shard with a fake clock and topics image, and the persister half
(initialize after a heartbeat, delete on DeleteGroups) against a fake share coordinator."""

from __future__ import annotations

import asyncio
import uuid

from kbroker.coord.config import CoordinatorConfig
from kbroker.coord.records import decode_key
from kbroker.coord.shard import GroupCoordinatorShard
from kbroker.coord.share_coordinator import SharePartitionKey, SharePartitionState
from kbroker.coord.share_group_initialization import (
    SHARE_GROUP_INITIALIZE_RETRY_INTERVAL_MS,
    InitializeRequest,
    decode_value,
)
from kbroker.coord.share_group_protocol import ShareHeartbeatRequestData
from kbroker.coord.share_group_state_client import delete_share_state, initialize_share_state
from kbroker.coord.share_persister import PartitionOutcome
from kbroker.coord.share_records import STATE_PARTITION_METADATA, ShareGroupRecordKey
from kbroker.protocol.coordinator_records.serde import record_type_of
from kbroker.protocol.errors import ErrorCode
from tests.coord.support import FakeScheduler, MemoryLog
from tests.coord.test_consumer_group import Topics

E = ErrorCode


class H:
    def __init__(self) -> None:
        self.sched = FakeScheduler()
        self.log = MemoryLog()
        self.topics = Topics()
        self.coord = self.shard()
        self.jobs = self.topics.add("jobs", 3)
        self.other = self.topics.add("other", 2)

    def shard(self) -> GroupCoordinatorShard:
        return GroupCoordinatorShard(CoordinatorConfig(), self.sched, self.log, self.sched.time_ms,
                                     lambda g: E.NONE, topics=self.topics)

    @property
    def meta(self):  # type: ignore[no-untyped-def]
        return self.coord.share_state_partitions

    def join(self, member: str, topics: list[str], group: str = "sg") -> InitializeRequest | None:
        r = self.coord.share_group_heartbeat(ShareHeartbeatRequestData(
            group_id=group, member_id=member, member_epoch=0, subscribed_topic_names=topics))
        assert r.error == E.NONE
        g = self.coord.group_manager.share_groups[group]
        return self.meta.maybe_initialize(group, g.group_epoch, g.subscribed_topic_names())

    def last_value(self) -> tuple[str, bytes | None]:
        g, k, v = next((g, k, v) for g, k, v in reversed(self.log.records) if record_type_of(k) == STATE_PARTITION_METADATA)
        return g, v


def test_a_heartbeat_records_its_subscribed_partitions_as_initializing_then_initialized() -> None:
    h = H()
    req = h.join("a", ["jobs"])
    assert req is not None and req.group_epoch == 1 and req.partitions == {h.jobs: frozenset({0, 1, 2})}
    group, value = h.last_value()
    assert group == "sg" and value is not None
    info = decode_value(value, 0)
    assert {t: set(v.partitions) for t, v in info.initializing.items()} == {h.jobs: {0, 1, 2}}
    assert info.initialized == {} and info.initializing[h.jobs].name == "jobs"
    # Nothing new while the initialization is pending (inside the retry interval).
    assert h.join("b", ["jobs"]) is None
    assert h.meta.initialize_succeeded("sg", {h.jobs: {0, 1, 2}}) == E.NONE
    assert h.meta.initialized_partitions("sg") == {h.jobs: {0, 1, 2}}
    info = decode_value(h.last_value()[1] or b"", 0)
    assert info.initializing == {} and set(info.initialized[h.jobs].partitions) == {0, 1, 2}
    # A new subscription and new partitions are initialized, only those.
    req = h.join("c", ["jobs", "other"])
    assert req is not None and req.partitions == {h.other: frozenset({0, 1})}
    h.meta.initialize_succeeded("sg", {h.other: {0, 1}})
    h.topics.add("jobs", 5)
    req = h.join("d", ["jobs"])
    assert req is not None and req.partitions == {h.jobs: frozenset({3, 4})}


def test_a_failed_initialization_is_retried_and_a_stale_one_after_the_retry_interval() -> None:
    h = H()
    assert h.join("a", ["jobs"]) is not None
    assert h.meta.initialize_failed("sg", {h.jobs: {0, 1, 2}}) == E.NONE
    assert decode_value(h.last_value()[1] or b"", 0).initializing == {}
    req = h.join("b", ["jobs"])
    assert req is not None and req.partitions == {h.jobs: frozenset({0, 1, 2})}
    # Still initializing (no answer): retried once the retry interval passed, not before.
    h.sched.now += SHARE_GROUP_INITIALIZE_RETRY_INTERVAL_MS - 1
    assert h.join("c", ["jobs"]) is None
    h.sched.now += 1
    req = h.join("d", ["jobs"])
    assert req is not None and req.partitions == {h.jobs: frozenset({0, 1, 2})}


def test_a_failed_write_records_nothing() -> None:
    h = H()
    h.coord.share_group_heartbeat(ShareHeartbeatRequestData("sg", "a", 0, subscribed_topic_names=["jobs"]))
    h.log.fail_with = E.NOT_LEADER_OR_FOLLOWER
    assert h.meta.maybe_initialize("sg", 1, ["jobs"]) is None
    assert h.meta.metadata == {}
    h.log.fail_with = None
    assert h.meta.maybe_initialize("sg", 1, ["jobs"]) is not None


def test_delete_moves_initialized_and_initializing_to_deleting_and_the_group_tombstone_removes_it() -> None:
    h = H()
    h.join("a", ["jobs", "other"])
    h.meta.initialize_succeeded("sg", {h.jobs: {0, 1, 2}})  # other: still initializing
    error, partitions = h.meta.prepare_delete("sg")
    assert error == E.NONE and partitions == {h.jobs: {0, 1, 2}, h.other: {0, 1}}
    info = decode_value(h.last_value()[1] or b"", 0)
    assert info.initialized == {} and info.initializing == {} and info.deleting == {h.jobs: "jobs", h.other: "other"}
    # A retried delete (the persister failed): the deleting topics with all their partitions.
    assert h.meta.prepare_delete("sg") == (E.NONE, {h.jobs: {0, 1, 2}, h.other: {0, 1}})
    # Re-subscribing moves a deleting topic back to initializing.
    req = h.meta.maybe_initialize("sg", 2, ["jobs"])
    assert req is not None and set(h.meta.metadata["sg"].deleting) == {h.other}
    # DeleteGroups of the empty group writes the record's tombstone too.
    h.coord.share_group_heartbeat(ShareHeartbeatRequestData("sg", "a", -1))
    assert h.coord.delete_groups(["sg"]) == [E.NONE]
    assert h.last_value() == ("sg", None) and "sg" not in h.meta.metadata


def test_deleted_topics_leave_every_group_and_a_reload_replays_the_record() -> None:
    h = H()
    h.join("a", ["jobs", "other"], group="g1")
    h.meta.initialize_succeeded("g1", {h.jobs: {0, 1, 2}})
    h.join("b", ["other"], group="g2")
    h.meta.on_topics_deleted({h.other})
    assert h.meta.metadata["g1"].initializing == {} and set(h.meta.metadata["g1"].initialized) == {h.jobs}
    assert h.meta.metadata["g2"].empty()
    fresh = h.shard()
    for _g, k, v in h.log.records:
        assert isinstance(decode_key(k), ShareGroupRecordKey)
        fresh.replay_record(k, v)
    fresh.on_loaded()
    assert fresh.share_state_partitions.initialized_partitions("g1") == {h.jobs: {0, 1, 2}}
    assert fresh.share_state_partitions.metadata["g2"].empty()
    # The share groups themselves still load (the record is not one of theirs).
    assert set(fresh.group_manager.share_groups) == {"g1", "g2"}


def test_alter_and_delete_offsets_update_the_record() -> None:
    h = H()
    h.coord.group_manager.share.offsets_alterable("sg", True)
    assert h.meta.initialize_succeeded("sg", {h.other: {1}}) == E.NONE
    assert h.meta.initialized_partitions("sg") == {h.other: {1}}
    assert h.meta.remove_topics("sg", {h.other}) == E.NONE
    assert h.meta.initialized_partitions("sg") == {}


class FakeShareCoordinator:
    """A share coordinator answering the group coordinator's RPCs from a dict (errors by key)."""

    def __init__(self) -> None:
        self.states: dict[SharePartitionKey, SharePartitionState] = {}
        self.fail: dict[SharePartitionKey, ErrorCode] = {}
        self.initialized: list[tuple[SharePartitionKey, int, int]] = []
        self.deleted: list[SharePartitionKey] = []

    async def read_summary(self, keys: list[SharePartitionKey]) -> dict[SharePartitionKey, PartitionOutcome]:
        # As ReadShareGroupStateSummary answers: no state is start offset -1 with state epoch 0.
        return {k: PartitionOutcome(E.NONE, None, self.states.get(k, SharePartitionState(-1, 0, 0))) for k in keys}

    async def initialize(self, key: SharePartitionKey, start_offset: int, state_epoch: int = 0) -> ErrorCode:
        if key in self.fail:
            return self.fail[key]
        self.initialized.append((key, start_offset, state_epoch))
        self.states[key] = SharePartitionState(start_offset, 0, state_epoch)
        return E.NONE

    async def delete(self, key: SharePartitionKey) -> ErrorCode:
        if key in self.fail:
            return self.fail[key]
        self.deleted.append(key)
        self.states.pop(key, None)
        return E.NONE


def test_the_persister_initializes_what_has_no_state_and_deletes_exactly_the_given_partitions() -> None:
    t = uuid.uuid4()
    sc = FakeShareCoordinator()
    sc.states[("sg", t, 1)] = SharePartitionState(40, 3, 0)  # its leader initialized it first
    sc.fail[("sg", t, 2)] = E.COORDINATOR_NOT_AVAILABLE
    done, failed = asyncio.run(initialize_share_state(sc, InitializeRequest("sg", 7, {t: frozenset({0, 1, 2})})))
    assert done == {t: {0, 1}} and failed == {t: {2}}
    assert sc.initialized == [(("sg", t, 0), -1, 7)]  # start offset -1, the group epoch as state epoch
    assert sc.states[("sg", t, 1)].start_offset == 40  # not reset
    sc.fail.clear()
    assert asyncio.run(delete_share_state(sc, "sg", {t: {0, 1}})) == E.NONE
    assert sorted(k[2] for k in sc.deleted) == [0, 1] and ("sg", t, 2) not in sc.deleted
    sc.fail[("sg", t, 0)] = E.COORDINATOR_LOAD_IN_PROGRESS
    assert asyncio.run(delete_share_state(sc, "sg", {t: {0}})) == E.COORDINATOR_LOAD_IN_PROGRESS
