"""KIP-848 consumer-group records: Kafka's byte layout, and a coordinator rebuilt from the written
records (a broker restart) knows the members, epochs and assignments."""

from __future__ import annotations

import struct

from kbroker.coord.consumer_group import ConsumerGroup
from kbroker.coord.consumer_records import (
    CURRENT_MEMBER_ASSIGNMENT,
    GROUP_METADATA,
    MEMBER_METADATA,
    TARGET_ASSIGNMENT_MEMBER,
    TARGET_ASSIGNMENT_METADATA,
    encode_key,
    group_metadata_value,
)
from kbroker.coord.records import decode_key
from kbroker.coord.shard import GroupCoordinatorShard
from kbroker.protocol.errors import ErrorCode
from tests.coord.test_consumer_group import H

E = ErrorCode


def s16(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def test_key_and_value_layout() -> None:
    assert encode_key(GROUP_METADATA, "g") == struct.pack(">h", 3) + s16("g")
    assert encode_key(CURRENT_MEMBER_ASSIGNMENT, "g", "m") == struct.pack(">h", 8) + s16("g") + s16("m")
    key = decode_key(encode_key(MEMBER_METADATA, "grp", "mem"))
    assert key is not None and (key.group, getattr(key, "member", None)) == ("grp", "mem")
    # version 0, epoch, empty tagged-field section
    assert group_metadata_value(ConsumerGroup("g", group_epoch=7)) == struct.pack(">hi", 0, 7) + b"\x00"


def _types(records: list[tuple[str, bytes, bytes | None]]) -> list[tuple[int, bool]]:
    return [(struct.unpack_from(">h", k)[0], v is None) for _, k, v in records]


def _restart(h: H) -> GroupCoordinatorShard:
    coord = GroupCoordinatorShard(h.coord.config, h.sched, h.log, h.sched.time_ms, lambda g: E.NONE, topics=h.topics)
    for _, key, value in h.log.records:
        coord.replay_record(key, value)
    coord.on_loaded()  # what the runtime calls once the partition is replayed
    return coord


def test_written_records_rebuild_the_group() -> None:
    h = H()
    h.hb("a", 0, instance="i-a")
    assert _types(h.log.records) == [(MEMBER_METADATA, False), (GROUP_METADATA, False),
                                     (TARGET_ASSIGNMENT_MEMBER, False), (TARGET_ASSIGNMENT_METADATA, False),
                                     (CURRENT_MEMBER_ASSIGNMENT, False)]
    count = len(h.log.records)
    h.hb("a", 1)  # nothing changed: nothing written
    assert len(h.log.records) == count
    h.hb("b", 0)
    kept = h.parts(h.hb("a", 1))  # a must revoke: written as UNREVOKED_PARTITIONS
    before = h.group()
    coord = _restart(h)
    g = coord.consumer_groups["g"]
    assert (g.group_epoch, g.target_assignment_epoch) == (before.group_epoch, before.target_assignment_epoch)
    assert g.target_assignment == before.target_assignment
    for mid, m in before.members.items():
        r = g.members[mid]
        assert (r.member_epoch, r.previous_member_epoch, r.state, r.assigned, r.pending_revocation) == \
            (m.member_epoch, m.previous_member_epoch, m.state, m.assigned, m.pending_revocation)
        assert r.assignment_epochs == m.assignment_epochs  # KIP-1251 tag 0
        assert (r.instance_id, r.client_id, r.client_host, r.subscribed_topic_names, r.rebalance_timeout_ms) == \
            (m.instance_id, m.client_id, m.client_host, m.subscribed_topic_names, m.rebalance_timeout_ms)
    assert g.static_members == {"i-a": "a"} and g.partition_owner == before.partition_owner
    # The members carry on against the restarted coordinator with their epochs.
    h.coord = coord
    ack = h.hb("a", 1, {h.tid: kept})
    assert ack.error == E.NONE and ack.member_epoch == 2
    assert h.parts(h.hb("b", 2)) == set(range(6)) - kept


def test_leave_and_delete_write_tombstones() -> None:
    h = H()
    h.hb("a", 0)
    h.hb("b", 0)
    n = len(h.log.records)
    h.hb("b", -1)
    tombstones = [t for t, dead in _types(h.log.records[n:]) if dead]
    assert tombstones == [CURRENT_MEMBER_ASSIGNMENT, TARGET_ASSIGNMENT_MEMBER, MEMBER_METADATA]
    h.hb("a", -1)
    assert h.coord.delete_groups(["g"]) == [E.NONE]
    coord = _restart(h)
    assert "g" not in coord.consumer_groups and "g" not in coord.groups


def test_session_expiry_after_restart_frees_partitions() -> None:
    h = H(consumer_session_timeout_ms=10000)
    h.hb("a", 0)
    h.hb("b", 0)
    coord = _restart(h)
    h.coord = coord
    h.sched.advance(5000)
    h.hb("a", 1)
    h.sched.advance(6000)  # b never came back after the restart
    assert set(coord.consumer_groups["g"].members) == {"a"}
