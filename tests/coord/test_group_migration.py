"""Online migration between the classic and consumer group protocols (kbroker.coord.migration), fake clock."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from kbroker.coord.config import CoordinatorConfig
from kbroker.coord.consumer_group import MemberState
from kbroker.coord.consumer_records import (
    MEMBER_METADATA,
    ConsumerGroupRecordKey,
    member_metadata_value,
    replay,
)
from kbroker.coord.group import GroupState, JoinResult, SyncResult
from kbroker.coord.migration import decode_assignment, decode_subscription, encode_assignment
from kbroker.coord.offset_metadata_manager import CommitRequestPartition
from kbroker.coord.records import decode_key, encode_group_metadata_key
from kbroker.coord.shard import GroupCoordinatorShard
from kbroker.protocol.errors import ErrorCode
from tests.coord.support import FakeScheduler, MemoryLog
from tests.coord.test_consumer_group import H

E = ErrorCode
CLASSIC_SESSION = 10000


def subscription_v1(topic: str, owned: list[int]) -> bytes:
    """ConsumerProtocolSubscription v1: topics, null user data, owned partitions."""
    raw = topic.encode()
    out = struct.pack(">hi", 1, 1) + struct.pack(">h", len(raw)) + raw + struct.pack(">i", -1)
    if not owned:
        return out + struct.pack(">i", 0)
    return out + struct.pack(">ih", 1, len(raw)) + raw + struct.pack(f">i{len(owned)}i", len(owned), *owned)


def _into(answers: dict[str, JoinResult], member: str) -> Callable[[JoinResult], None]:
    def respond(result: JoinResult) -> None:
        answers[member] = result
    return respond


class M(H):
    """H plus classic requests."""

    def join(self, member: str, owned: list[int] | None = None, protocol: str = "range",
             group: str = "g", instance: str | None = None) -> JoinResult:
        out: list[JoinResult] = []
        self.coord.join_group(group, member, instance, "consumer", [(protocol, subscription_v1("orders", owned or []))],
                              CLASSIC_SESSION, 30000, "cl", "/h", True, out.append)
        return out[0] if out else JoinResult(E.UNKNOWN_SERVER_ERROR, "waiting")

    def sync(self, member: str, generation: int, assignments: dict[str, bytes] | None = None,
             group: str = "g") -> SyncResult:
        out: list[SyncResult] = []
        self.coord.sync_group(group, generation, member, None, "consumer", "range", assignments or {}, out.append)
        return out[0] if out else SyncResult(E.UNKNOWN_SERVER_ERROR)

    def classic_group(self, n: int) -> list[str]:
        """n classic members, range assignment of orders-0..5 stored by the leader: Stable, generation 1."""
        ids = []
        for _ in range(n):
            first = self.join("")
            assert first.error == E.MEMBER_ID_REQUIRED
            ids.append(first.member_id)
        answers: dict[str, JoinResult] = {}
        for mid in ids:
            self.coord.join_group("g", mid, None, "consumer", [("range", subscription_v1("orders", []))],
                                  CLASSIC_SESSION, 30000, "cl", "/h", True,
                                  _into(answers, mid))
        self.sched.advance(2 * self.coord.config.initial_rebalance_delay_ms)  # the delay is extended once
        per = 6 // n
        plan = {mid: encode_assignment({"orders": set(range(i * per, (i + 1) * per))}) for i, mid in enumerate(ids)}
        leader = answers[ids[0]].leader
        for mid in ids:
            assert self.sync(mid, answers[mid].generation_id, plan if mid == leader else None).error == E.NONE
        assert self.coord.groups["g"].state == GroupState.STABLE
        return ids

    def owners(self) -> dict[int, str]:
        """Partition -> member, failing on a partition held by two members (assigned or pending)."""
        out: dict[int, str] = {}
        for m in self.group().members.values():
            for a in (m.assigned, m.pending_revocation):
                for p in a.get(self.tid, ()):
                    assert p not in out, f"partition {p} owned by {out[p]} and {m.member_id}"
                    out[p] = m.member_id
        return out


def settle_classic(h: M, mid: str) -> JoinResult:
    """What a Java classic eager consumer does after REBALANCE_IN_PROGRESS: revoke all, rejoin, sync."""
    joined = h.join(mid, [])
    assert joined.error == E.NONE
    synced = h.sync(mid, joined.generation_id)
    assert synced.error == E.NONE
    return joined


def test_protocol_codecs() -> None:
    assert decode_subscription(subscription_v1("orders", [1, 4])) == (["orders"], {"orders": {1, 4}})
    assert decode_assignment(encode_assignment({"a": {2, 0}, "b": set()})) == {"a": {0, 2}, "b": set()}


def test_upgrade_converts_classic_members_with_their_metadata() -> None:
    h = M()
    a, b = h.classic_group(2)
    h.log.records.clear()
    r = h.hb("n", 0)
    assert r.error == E.NONE
    assert "g" not in h.coord.groups and "g" in h.coord.consumer_groups
    group = h.group()
    assert set(group.members) == {a, b, "n"}
    ma = group.members[a]
    assert ma.classic is not None and ma.classic.session_timeout_ms == CLASSIC_SESSION
    assert [n for n, _ in ma.classic.supported_protocols] == ["range"]
    assert ma.subscribed_topic_names == ["orders"]
    # The classic generation (1) became the epochs; the new member made epoch 2.
    assert group.group_epoch == 2 and ma.member_epoch == 1
    assert h.owners() == {0: a, 1: a, 2: a, 3: b, 4: b, 5: b}  # nothing moved before the classic members rejoin
    # The classic group's record was tombstoned, then the consumer group's records written.
    assert h.log.records[0] == ("g", encode_group_metadata_key("g"), None)
    written = [decode_key(k) for _, k, v in h.log.records[1:] if v is not None]
    assert {k.member for k in written if isinstance(k, ConsumerGroupRecordKey) and k.member} == {a, b, "n"}


def test_mixed_group_join_sync_heartbeat_until_stable() -> None:
    h = M()
    a, b = h.classic_group(2)
    h.hb("n", 0)
    assert h.coord.heartbeat("g", 1, a, None) == E.REBALANCE_IN_PROGRESS
    assert h.coord.heartbeat("g", 7, a, None) == E.ILLEGAL_GENERATION
    assert h.coord.heartbeat("g", 1, "nobody", None) == E.UNKNOWN_MEMBER_ID
    for _ in range(3):
        for mid in (a, b):
            if h.coord.heartbeat("g", h.group().members[mid].member_epoch, mid, None) == E.REBALANCE_IN_PROGRESS:
                settle_classic(h, mid)
            h.owners()
        r = h.hb("n", h.group().members["n"].member_epoch, owned={})
        assert r.error == E.NONE
        h.owners()
    group = h.group()
    assert str(group.state) == "Stable", {m.member_id: (m.member_epoch, m.state) for m in group.members.values()}
    assert sorted(len(m.assigned.get(h.tid, ())) for m in group.members.values()) == [2, 2, 2]
    for mid in (a, b):
        member = group.members[mid]
        assert h.coord.heartbeat("g", member.member_epoch, mid, None) == E.NONE
        synced = h.sync(mid, member.member_epoch)
        assert decode_assignment(synced.assignment) == {"orders": member.assigned[h.tid]}
        assert h.sync(mid, member.member_epoch - 1).error == E.ILLEGAL_GENERATION
    # Offsets: a classic member commits with its member epoch as generation.
    part = [CommitRequestPartition("orders", 0, 5)]
    epoch = group.members[a].member_epoch
    assert h.coord.commit_offsets("g", epoch, a, None, -1, part, api_version=8) == [E.NONE]
    assert h.coord.commit_offsets("g", epoch - 1, a, None, -1, part, api_version=8) == [E.ILLEGAL_GENERATION]


def test_cooperative_classic_member_revokes_by_rejoining() -> None:
    h = M()
    a, = h.classic_group(1)
    h.hb("n", 0)
    # A cooperative member rejoins still owning everything: it keeps its epoch and must revoke.
    joined = h.join(a, [0, 1, 2, 3, 4, 5], protocol="range")
    member = h.group().members[a]
    assert joined.generation_id == 1 and member.state == MemberState.UNREVOKED_PARTITIONS
    kept = decode_assignment(h.sync(a, 1).assignment)["orders"]
    assert len(kept) == 3
    assert h.coord.heartbeat("g", 1, a, None) == E.REBALANCE_IN_PROGRESS
    assert h.hb("n", h.group().members["n"].member_epoch, owned={}).assignment in ({}, None)  # still held by a
    rejoined = h.join(a, sorted(kept))
    assert rejoined.generation_id == h.group().group_epoch and member.state == MemberState.STABLE
    got = h.hb("n", h.group().members["n"].member_epoch, owned={})
    assert got.assignment == {h.tid: set(range(6)) - kept}
    h.owners()


def test_classic_leave_and_session_timeout_in_consumer_group() -> None:
    h = M()
    a, b = h.classic_group(2)
    h.hb("n", 0)
    epoch = h.group().group_epoch
    assert h.coord.leave_group("g", [(a, None), ("zz", None)]) == (E.NONE, [E.NONE, E.UNKNOWN_MEMBER_ID])
    assert a not in h.group().members and h.group().group_epoch == epoch + 1
    # b stops heartbeating: fenced after its classic session timeout, not group.consumer.session.timeout.ms.
    for _ in range(4):
        h.sched.advance(CLASSIC_SESSION // 4)
        h.hb("n", h.group().members["n"].member_epoch, owned={})
    assert b not in h.group().members


def test_downgrade_when_the_last_consumer_member_leaves() -> None:
    h = M()
    a, b = h.classic_group(2)
    h.hb("n", 0)
    for mid in (a, b):
        settle_classic(h, mid)
    h.hb("n", h.group().members["n"].member_epoch, owned={})
    epoch = h.group().group_epoch
    assert h.hb("n", -1).error == E.NONE
    assert "g" not in h.coord.consumer_groups
    classic = h.coord.groups["g"]
    assert classic.state == GroupState.PREPARING_REBALANCE and classic.generation_id == epoch
    assert set(classic.members) == {a, b} and classic.protocol_name == "range"
    # The members learn it from their heartbeat and rejoin the classic group.
    assert h.coord.heartbeat("g", epoch, a, None) == E.REBALANCE_IN_PROGRESS
    answers: dict[str, JoinResult] = {}
    for mid in (a, b):
        h.coord.join_group("g", mid, None, "consumer", [("range", subscription_v1("orders", []))], CLASSIC_SESSION,
                           30000, "cl", "/h", True, _into(answers, mid))
    assert {r.generation_id for r in answers.values()} == {epoch + 1}
    # The consumer group's records were tombstoned, a classic GroupMetadata written.
    assert h.coord.consumer_written.get("g") is None


def test_policy_disabled_keeps_groups_apart() -> None:
    h = M(consumer_migration_policy="disabled")
    h.classic_group(2)
    refused = h.hb("n", 0)
    assert (refused.error, refused.message) == (E.GROUP_ID_NOT_FOUND, "Group g is not a consumer group")
    h.hb("x", 0, group="c")
    out: list[JoinResult] = []
    h.coord.join_group("c", "", None, "consumer", [("range", subscription_v1("orders", []))], CLASSIC_SESSION, 30000,
                       "cl", "/h", False, out.append)
    assert out[0].error == E.INCONSISTENT_GROUP_PROTOCOL
    # upgrade only: no downgrade when the consumer member leaves.
    u = M(consumer_migration_policy="upgrade")
    a, _b = u.classic_group(2)
    u.hb("n", 0)
    u.hb("n", -1)
    assert "g" in u.coord.consumer_groups and a in u.group().members


def test_mixed_group_survives_a_restart_from_its_records() -> None:
    h = M()
    a, b = h.classic_group(2)
    h.hb("n", 0)
    settle_classic(h, a)
    log = MemoryLog()
    sched = FakeScheduler()
    fresh = GroupCoordinatorShard(CoordinatorConfig(), sched, log, sched.time_ms, lambda g: E.NONE, topics=h.topics)
    for _, key, value in h.log.records:
        decoded = decode_key(key)
        if isinstance(decoded, ConsumerGroupRecordKey):
            fresh.group_manager.replay_consumer_record(decoded, value)
    fresh.group_manager.consumer_persistence.finish_consumer_load(["g"])
    group = fresh.consumer_groups["g"]
    before = h.group()
    assert set(group.members) == set(before.members)
    for mid in (a, b):
        loaded, old = group.members[mid], before.members[mid]
        assert loaded.classic == old.classic and loaded.member_epoch == old.member_epoch
        assert loaded.assigned == old.assigned
    assert group.members["n"].classic is None
    assert fresh.heartbeat("g", group.members[a].member_epoch, a, None) in (E.NONE, E.REBALANCE_IN_PROGRESS)


# ConsumerGroupMemberMetadataValue records written by Apache Kafka 4.3.1 for group "mg" (read back from
# its __consumer_offsets): classic member "c1" (range, session.timeout.ms=7777) inside a consumer group,
# and consumer-protocol member "n1".
KAFKA_CLASSIC_MEMBER = bytes.fromhex(
    "000000000363310b2f3132372e302e302e3102027401000493e0000100260100001e61020672616e676518000300000001000174"
    "ffffffff00000000ffffffffffff0000")
KAFKA_CONSUMER_MEMBER = bytes.fromhex("00000000036e310b2f3132372e302e302e3102027401000493e00001000100")


def test_classic_member_metadata_bytes_match_kafka() -> None:
    groups: dict[str, Any] = {}
    replay(groups, ConsumerGroupRecordKey(MEMBER_METADATA, "mg", "c1"), KAFKA_CLASSIC_MEMBER)
    replay(groups, ConsumerGroupRecordKey(MEMBER_METADATA, "mg", "n1"), KAFKA_CONSUMER_MEMBER)
    c1, n1 = groups["mg"].members["c1"], groups["mg"].members["n1"]
    assert n1.classic is None
    assert c1.classic is not None and c1.classic.session_timeout_ms == 7777
    assert [n for n, _ in c1.classic.supported_protocols] == ["range"]
    assert decode_subscription(c1.classic.supported_protocols[0][1]) == (["t"], {})
    # Kafka stored "" as the regex of this member; with the same fields kbroker writes the same bytes.
    assert (c1.client_host, c1.rebalance_timeout_ms, c1.subscribed_topic_regex) == ("/127.0.0.1", 300000, "")
    assert member_metadata_value(c1) == KAFKA_CLASSIC_MEMBER
    # A consumer-protocol member: Kafka writes ClassicMemberMetadata as an explicit null (tag 0, one
    # zero byte); so does kbroker since its records come from the generated codecs.
    assert member_metadata_value(n1) == KAFKA_CONSUMER_MEMBER


def test_member_record_without_the_classic_tag_is_a_consumer_member() -> None:
    """Records written by kbroker before the generated codecs left tag 0 out for a consumer-protocol
    member; the generated reader gives the field's default (an empty struct) then, which must still
    read as "not a classic member"."""
    old_format = KAFKA_CONSUMER_MEMBER[:-4] + b"\x00"  # the same fields, no tagged field at all
    groups: dict[str, Any] = {}
    replay(groups, ConsumerGroupRecordKey(MEMBER_METADATA, "mg", "n1"), old_format)
    member = groups["mg"].members["n1"]
    assert member.classic is None and member.client_host == "/127.0.0.1"
