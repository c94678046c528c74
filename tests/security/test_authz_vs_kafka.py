"""Differential: authorization, Kafka 4.3.1 with `StandardAuthorizer` vs kbroker, configured alike.

Both brokers get the same SASL/PLAIN users (admin is a super user; alice, bob and carol are not), the
same topics, groups and ACLs (created through the wire by admin), and `allow.everyone.if.no.acl.found
=true`, so one start per side covers both "no ACL applies: allowed" (the `*-open` resources) and "ACLs
apply, none for you: denied". Then each user sends the same raw requests to both, and the answers
(error codes per topic / partition / group / transactional id, listed names, KIP-430 authorized-
operations bit fields) must be equal. Cases: allowed, denied, deny wins, implied DESCRIBE, prefixed,
wildcard resource, wildcard principal, super user, allow-everyone.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kbroker.protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest as APT
from kbroker.protocol.messages.alter_replica_log_dirs import AlterReplicaLogDirsRequest as ARLD
from kbroker.protocol.messages.consumer_group_describe import ConsumerGroupDescribeRequest
from kbroker.protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest
from kbroker.protocol.messages.create_acls import CreateAclsRequest
from kbroker.protocol.messages.create_topics import CreateTopicsRequest
from kbroker.protocol.messages.delete_groups import DeleteGroupsRequest
from kbroker.protocol.messages.describe_cluster import DescribeClusterRequest
from kbroker.protocol.messages.describe_groups import DescribeGroupsRequest
from kbroker.protocol.messages.describe_log_dirs import DescribeLogDirsRequest
from kbroker.protocol.messages.describe_producers import DescribeProducersRequest
from kbroker.protocol.messages.describe_topic_partitions import DescribeTopicPartitionsRequest
from kbroker.protocol.messages.describe_transactions import DescribeTransactionsRequest
from kbroker.protocol.messages.end_txn import EndTxnRequest
from kbroker.protocol.messages.find_coordinator import FindCoordinatorRequest
from kbroker.protocol.messages.init_producer_id import InitProducerIdRequest
from kbroker.protocol.messages.list_config_resources import ListConfigResourcesRequest
from kbroker.protocol.messages.list_groups import ListGroupsRequest
from kbroker.protocol.messages.list_transactions import ListTransactionsRequest
from kbroker.protocol.messages.metadata import MetadataRequest
from kbroker.protocol.messages.offset_commit import OffsetCommitRequest as OC
from kbroker.protocol.messages.offset_delete import OffsetDeleteRequest as OD
from kbroker.protocol.messages.offset_fetch import OffsetFetchRequest as OF
from kbroker.protocol.messages.offset_for_leader_epoch import OffsetForLeaderEpochRequest as OFLE
from kbroker.protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from kbroker.protocol.messages.sasl_handshake import SaslHandshakeRequest
from kbroker.protocol.messages.txn_offset_commit import TxnOffsetCommitRequest as TOC
from kbroker.protocol.messages.write_txn_markers import WriteTxnMarkersRequest as WTM
from kbroker.security.acl import (
    ALL,
    ALLOW,
    CLUSTER,
    CLUSTER_ACTION,
    DELETE,
    DENY,
    DESCRIBE,
    GROUP,
    LITERAL,
    PREFIXED,
    READ,
    TOPIC,
    TRANSACTIONAL_ID,
    WRITE,
)
from tests.support.broker import KBroker, free_port
from tests.support.raw_client import RawKafkaClient
from tests.support.reference_kafka import reference_unavailable_reason, start_reference_kafka

pytestmark = [pytest.mark.reference, pytest.mark.interop]

USERS = ("admin", "alice", "bob", "carol")
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required username=\"admin\" "
        "password=\"admin-pw\" " + " ".join(f'user_{u}="{u}-pw"' for u in USERS) + ";")
SECURITY = {
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    # ANONYMOUS: Kafka's own broker <-> controller traffic on its PLAINTEXT listeners.
    "super.users": "User:admin;User:ANONYMOUS",
    "allow.everyone.if.no.acl.found": "true",
    "auto.create.topics.enable": "false",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
}
TOPICS = ("t-read", "t-deny", "pre-x", "t-open", "t-star")
# (resource type, name, pattern, principal, operation, permission)
ACLS = [
    (TOPIC, "t-read", LITERAL, "User:alice", READ, ALLOW),                # READ implies DESCRIBE
    (TOPIC, "t-deny", LITERAL, "User:alice", ALL, ALLOW),
    (TOPIC, "t-deny", LITERAL, "User:alice", DESCRIBE, DENY),             # deny wins (for DESCRIBE only)
    (TOPIC, "t-deny", LITERAL, "User:bob", READ, ALLOW),
    (TOPIC, "pre-", PREFIXED, "User:alice", WRITE, ALLOW),
    (TOPIC, "pre-", PREFIXED, "User:bob", DESCRIBE, ALLOW),
    (TOPIC, "pre-x", LITERAL, "User:bob", DESCRIBE, DENY),
    (TOPIC, "t-star", LITERAL, "User:*", DESCRIBE, ALLOW),               # any principal
    (GROUP, "g-read", LITERAL, "User:alice", READ, ALLOW),
    (GROUP, "g-deny", LITERAL, "User:alice", ALL, ALLOW),
    (GROUP, "g-deny", LITERAL, "User:alice", DELETE, DENY),
    (GROUP, "gp-", PREFIXED, "User:bob", DESCRIBE, ALLOW),
    (CLUSTER, "kafka-cluster", LITERAL, "User:alice", DESCRIBE, ALLOW),
    (CLUSTER, "kafka-cluster", LITERAL, "User:bob", CLUSTER_ACTION, ALLOW),
    (TRANSACTIONAL_ID, "*", LITERAL, "User:alice", DESCRIBE, ALLOW),       # wildcard resource
    (TRANSACTIONAL_ID, "tx-w", LITERAL, "User:alice", WRITE, ALLOW),
]
GROUPS = ("g-read", "g-deny", "g-open", "gp-1")
# KIP-848 consumer groups (one member each, subscribed by admin) and their subscriptions.
CONSUMER_GROUPS = {"gp-cg": ["t-read", "pre-x"], "gcg-open": ["t-open"], "gcg-mixed": ["t-open", "t-read"]}
UNKNOWN_ID = uuid.UUID("6b1fb5f0-0000-4000-8000-00000000abcd")
NAMED = ["t-read", "t-deny", "pre-x", "t-open", "t-star", "t-missing"]


def _connect(bootstrap: str, user: str) -> RawKafkaClient:
    c = RawKafkaClient(bootstrap)
    h = c.request(17, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    assert h.error_code == 0, h
    a = c.request(36, 2, SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{user}-pw".encode()))
    assert a.error_code == 0, a
    return c


def _retry(call: Callable[[], Any], ok: Callable[[Any], bool], what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        r = call()
        if ok(r) or time.monotonic() > deadline:
            assert ok(r), f"{what}: {r}"
            return r
        time.sleep(0.3)


def _setup(bootstrap: str) -> None:
    with _connect(bootstrap, "admin") as c:
        r = c.request(19, 7, CreateTopicsRequest(topics=[
            CreateTopicsRequest.CreatableTopic(name=t, num_partitions=2, replication_factor=1) for t in TOPICS]))
        assert all(t.error_code == 0 for t in r.topics), r
        r = c.request(30, 3, CreateAclsRequest(creations=[
            CreateAclsRequest.AclCreation(resource_type=rt, resource_name=n, resource_pattern_type=pt, principal=p,
                                          host="*", operation=op, permission_type=perm)
            for rt, n, pt, p, op, perm in ACLS]))
        assert all(x.error_code == 0 for x in r.results), r
        _retry(lambda: c.request(10, 4, FindCoordinatorRequest(key_type=0, coordinator_keys=list(GROUPS))),
               lambda r: all(x.error_code == 0 for x in r.coordinators), "FindCoordinator")
        for g in GROUPS:  # "simple" groups with committed offsets on every topic
            _retry(lambda g=g: c.request(8, 8, OC(group_id=g, generation_id_or_member_epoch=-1, member_id="",
                                                  topics=[OC.OffsetCommitRequestTopic(name=t, partitions=[
                                                      OC.OffsetCommitRequestPartition(partition_index=0,
                                                                                      committed_offset=5)])
                                                      for t in TOPICS])),
                   lambda r: all(p.error_code == 0 for t in r.topics for p in t.partitions), f"OffsetCommit {g}")
        for g, topics in CONSUMER_GROUPS.items():  # a member with its assignment
            member = f"member-{g}"
            _retry(lambda g=g, topics=topics, member=member: c.request(68, 1, ConsumerGroupHeartbeatRequest(
                group_id=g, member_id=member, member_epoch=0, rebalance_timeout_ms=30000,
                subscribed_topic_names=topics, topic_partitions=[])),
                lambda r: r.error_code == 0 and r.assignment is not None and len(r.assignment.topic_partitions) > 0,
                f"ConsumerGroupHeartbeat {g}")
    # The authorizer of each broker sees the ACLs once its metadata has them: wait for alice's view.
    with _connect(bootstrap, "alice") as c:
        _retry(lambda: c.request(3, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t-deny")],
                                                        allow_auto_topic_creation=False)),
               lambda r: r.topics[0].error_code == 29, "ACLs visible")


def _topics(r: Any) -> list[tuple[Any, ...]]:
    return sorted((t.name, t.error_code, t.topic_authorized_operations) for t in r.topics)


def _partitions(topics: Any, field: str = "partitions", code: str = "error_code", name: str = "name",
                index: str = "partition_index") -> list[tuple[Any, ...]]:
    return sorted((getattr(t, name), getattr(p, index), getattr(p, code)) for t in topics for p in getattr(t, field))


def _answers(bootstrap: str, user: str, ids: dict[str, uuid.UUID]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    names = {v: k for k, v in ids.items()}
    m_topics = [MetadataRequest.MetadataRequestTopic(name=n) for n in NAMED]
    with _connect(bootstrap, user) as c:
        r = c.request(3, 12, MetadataRequest(topics=m_topics, allow_auto_topic_creation=False,
                                             include_topic_authorized_operations=True))
        out["metadata named"] = _topics(r)
        r = c.request(3, 10, MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                             include_cluster_authorized_operations=True,
                                             include_topic_authorized_operations=True))
        out["metadata all"] = ([t for t in _topics(r) if not t[0].startswith("__")], r.cluster_authorized_operations)
        r = c.request(3, 9, MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                            include_cluster_authorized_operations=False))
        out["metadata no ops"] = r.cluster_authorized_operations
        r = c.request(60, 1, DescribeClusterRequest(include_cluster_authorized_operations=True, endpoint_type=1))
        out["describe cluster"] = (r.error_code, r.cluster_authorized_operations)
        r = c.request(75, 0, DescribeTopicPartitionsRequest(topics=[
            DescribeTopicPartitionsRequest.TopicRequest(name=n) for n in NAMED], response_partition_limit=100))
        out["describe topic partitions"] = _topics(r)
        r = c.request(16, 4, ListGroupsRequest(states_filter=[]))
        out["list groups"] = (r.error_code, sorted(g.group_id for g in r.groups))
        r = c.request(15, 5, DescribeGroupsRequest(groups=[*GROUPS, "g-none"], include_authorized_operations=True))
        out["describe groups"] = [(g.group_id, g.error_code, g.group_state, g.authorized_operations)
                                  for g in r.groups]
        r = c.request(69, 0, ConsumerGroupDescribeRequest(group_ids=["g-read", "g-deny", "gp-1", *CONSUMER_GROUPS],
                                                          include_authorized_operations=True))
        out["consumer group describe"] = [(g.group_id, g.error_code, g.error_message, g.authorized_operations,
                                           sorted(tp.topic_name for m in g.members for tp in m.assignment.topic_partitions))
                                          for g in r.groups]
        r = c.request(42, 2, DeleteGroupsRequest(groups_names=["g-deny", "gdel-open", "g-read", "g-read"]))
        out["delete groups"] = [(g.group_id, g.error_code) for g in r.results] if user != "admin" else None
        for g in ("g-read", "g-open", "g-deny"):
            r = c.request(8, 8, OC(group_id=g, generation_id_or_member_epoch=-1, member_id="", topics=[
                OC.OffsetCommitRequestTopic(name=t, partitions=[OC.OffsetCommitRequestPartition(
                    partition_index=0, committed_offset=7)]) for t in ("t-read", "t-deny", "pre-x", "t-missing")]))
            out[f"offset commit {g}"] = _partitions(r.topics)
        of_topics = [OF.OffsetFetchRequestTopic(name=t, partition_indexes=[0, 1]) for t in NAMED]
        for g in GROUPS:
            r = c.request(9, 7, OF(group_id=g, topics=of_topics, require_stable=False))
            out[f"offset fetch v7 {g}"] = (r.error_code, sorted((t.name, p.partition_index, p.committed_offset,
                                                                 p.error_code) for t in r.topics
                                                                for p in t.partitions))
            r = c.request(9, 7, OF(group_id=g, topics=None, require_stable=False))
            out[f"offset fetch v7 all {g}"] = (r.error_code, sorted(t.name for t in r.topics))
        r = c.request(9, 8, OF(groups=[OF.OffsetFetchRequestGroup(group_id=g, topics=[
            OF.OffsetFetchRequestTopics(name=t, partition_indexes=[0]) for t in NAMED] if g != "g-open" else None)
            for g in GROUPS]))
        out["offset fetch v8"] = sorted((g.group_id, g.error_code, sorted(
            (t.name, p.partition_index, p.committed_offset, p.error_code) for t in g.topics for p in t.partitions))
            for g in r.groups)
        # v10: topics by id (an unknown id: UNKNOWN_TOPIC_ID; unauthorized: TOPIC_AUTHORIZATION_FAILED).
        by_id = [ids[t] for t in ("t-read", "t-deny", "pre-x", "t-open")] + [UNKNOWN_ID]
        r = c.request(9, 10, OF(groups=[OF.OffsetFetchRequestGroup(group_id=g, topics=[
            OF.OffsetFetchRequestTopics(topic_id=i, partition_indexes=[0]) for i in by_id]) for g in GROUPS]))
        out["offset fetch v10"] = sorted((g.group_id, g.error_code, sorted(
            (names.get(t.topic_id, "?"), p.partition_index, p.committed_offset, p.error_code)
            for t in g.topics for p in t.partitions)) for g in r.groups)
        r = c.request(8, 10, OC(group_id="g-open", generation_id_or_member_epoch=-1, member_id="", topics=[
            OC.OffsetCommitRequestTopic(topic_id=i, partitions=[OC.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=9)]) for i in by_id]))
        out["offset commit v10"] = sorted((names.get(t.topic_id, "?"), p.partition_index, p.error_code)
                                          for t in r.topics for p in t.partitions)
        r = c.request(75, 0, DescribeTopicPartitionsRequest(topics=[], response_partition_limit=100))
        out["describe topic partitions all"] = [t for t in _topics(r) if not t[0].startswith("__")]
        r = c.request(3, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=None, topic_id=i)
                                                     for i in by_id], include_topic_authorized_operations=True))
        out["metadata by id"] = sorted((names.get(t.topic_id, "?"), t.name, t.error_code, t.topic_authorized_operations)
                                       for t in r.topics)
        r = c.request(23, 4, OFLE(replica_id=-1, topics=[OFLE.OffsetForLeaderTopic(topic=t, partitions=[
            OFLE.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0)])
            for t in ("t-read", "t-deny", "pre-x", "t-open")]))
        out["offset for leader epoch"] = _partitions(r.topics, code="error_code", name="topic", index="partition")
        r = c.request(74, 1, ListConfigResourcesRequest(resource_types=[]))
        out["list config resources"] = r.error_code
        r = c.request(68, 1, ConsumerGroupHeartbeatRequest(
            group_id=f"gcg-x-{user}", member_id=f"m-{user}", member_epoch=0, rebalance_timeout_ms=30000,
            subscribed_topic_names=["t-open", "t-read"], topic_partitions=[]))
        out["consumer group heartbeat"] = r.error_code
        out["regex subscription assignment"] = _regex_assignment(c, f"gre-{user}", {v: k for k, v in ids.items()})
        r = c.request(3, 1, MetadataRequest(topics=m_topics))
        out["metadata v1 named"] = sorted((t.name, t.error_code) for t in r.topics)
        # Kafka's transaction coordinator may still be loading on the first call (COORDINATOR_LOAD_IN_PROGRESS).
        r = _retry(lambda: c.request(22, 4, InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000,
                                                                  producer_id=-1, producer_epoch=-1)),
                   lambda r: r.error_code not in (14, 15), "InitProducerId")
        out["init producer id (idempotent)"] = r.error_code
        if user in ("bob", "carol"):  # refused before the transaction coordinator is asked
            r = c.request(22, 4, InitProducerIdRequest(transactional_id="tx-w", transaction_timeout_ms=60000,
                                                       producer_id=-1, producer_epoch=-1))
            out["init producer id tx-w"] = r.error_code
            r = c.request(26, 4, EndTxnRequest(transactional_id="tx-w", producer_id=1, producer_epoch=0,
                                               committed=True))
            out["end txn"] = r.error_code
            r = c.request(65, 0, DescribeTransactionsRequest(transactional_ids=["tx-w", "tx-none"]))
            out["describe transactions"] = [(s.transactional_id, s.error_code) for s in r.transaction_states]
        r = c.request(66, 1, ListTransactionsRequest(state_filters=[], producer_id_filters=[]))
        out["list transactions"] = (r.error_code, [s.transactional_id for s in r.transaction_states])
        r = c.request(24, 3, APT(v3_and_below_transactional_id="tx-w", v3_and_below_producer_id=1,
                                 v3_and_below_producer_epoch=0, v3_and_below_topics=[
                                     APT.AddPartitionsToTxnTopic(name=t, partitions=[0])
                                     for t in ("t-read", "pre-x", "__consumer_offsets", "t-missing")]))
        out["add partitions to txn v3"] = _partitions(r.results_by_topic_v3_and_below, "results_by_partition",
                                                                  "partition_error_code") \
            if user != "admin" else None
        if user != "admin":
            r = c.request(24, 4, APT(transactions=[APT.AddPartitionsToTxnTransaction(
                transactional_id="tx-w", producer_id=1, producer_epoch=0, verify_only=True,
                topics=[APT.AddPartitionsToTxnTopic(name="t-read", partitions=[0])])]))
            out["add partitions to txn v4"] = (r.error_code, len(r.results_by_transaction))
        r = c.request(28, 3, TOC(transactional_id="tx-w", group_id="g-open", producer_id=1, producer_epoch=0,
                                 generation_id=-1, member_id="", topics=[
                                     TOC.TxnOffsetCommitRequestTopic(name=t, partitions=[
                                         TOC.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=1)])
                                     for t in (("pre-x", "t-missing") if user == "alice" else ("t-read",))]))
        # admin passes the checks and meets the transaction coordinator (not authorization: not compared).
        out["txn offset commit"] = _partitions(r.topics) if user != "admin" else None
        r = c.request(27, 1, WTM(markers=[WTM.WritableTxnMarker(producer_id=9, producer_epoch=0,
                                                                transaction_result=False, coordinator_epoch=0,
                                                                topics=[WTM.WritableTxnMarkerTopic(
                                                                    name="t-missing", partition_indexes=[0])])]))
        out["write txn markers"] = sorted((t.name, p.partition_index, p.error_code)
                                          for m in r.markers for t in m.topics for p in t.partitions)
        r = c.request(35, 4, DescribeLogDirsRequest(topics=None))
        out["describe log dirs"] = (r.error_code, len(r.results) > 0)
        r = c.request(34, 2, ARLD(dirs=[ARLD.AlterReplicaLogDir(path="/nonexistent-dir", topics=[
            ARLD.AlterReplicaLogDirTopic(name="t-read", partitions=[0])])]))
        out["alter replica log dirs"] = sorted((t.topic_name, p.partition_index, p.error_code)
                                               for t in r.results for p in t.partitions)
        r = c.request(61, 0, DescribeProducersRequest(topics=[
            DescribeProducersRequest.TopicRequest(name=t, partition_indexes=[0])
            for t in ("t-read", "t-deny", "pre-x", "t-open")]))
        out["describe producers"] = sorted((t.name, p.partition_index, p.error_code, p.error_message)
                                           for t in r.topics for p in t.partitions)
        if user != "admin":  # last: it may delete g-open's offsets
            r = c.request(47, 0, OD(group_id="g-open", topics=[OD.OffsetDeleteRequestTopic(name=t, partitions=[
                OD.OffsetDeleteRequestPartition(partition_index=0)]) for t in ("t-read", "pre-x", "t-missing")]))
            out["offset delete"] = (r.error_code, _partitions(r.topics))
    return out


def _regex_assignment(c: RawKafkaClient, group: str, names: dict[uuid.UUID, str]) -> list[str]:
    """The topics a KIP-848 member subscribed by the regex `t-.*` is assigned: only those its principal
    may DESCRIBE (Kafka's TopicRegexResolver). Kafka resolves a regex after the heartbeat that brings
    it, so heartbeat (as the member) until the assignment arrives."""
    member, epoch = f"m-{group}", 0
    deadline = time.monotonic() + 30
    while True:
        r = c.request(68, 1, ConsumerGroupHeartbeatRequest(
            group_id=group, member_id=member, member_epoch=epoch, rebalance_timeout_ms=30000,
            subscribed_topic_regex="t-.*", topic_partitions=[] if epoch == 0 else None))
        assert r.error_code == 0, r
        epoch = r.member_epoch
        if r.assignment is not None and r.assignment.topic_partitions:
            return sorted(names.get(t.topic_id, "?") for t in r.assignment.topic_partitions)
        if time.monotonic() > deadline:
            return []
        time.sleep(0.5)


def _all_answers(bootstrap: str) -> dict[str, dict[str, Any]]:
    with _connect(bootstrap, "admin") as c:
        r = c.request(3, 12, MetadataRequest(topics=None, allow_auto_topic_creation=False))
        ids = {t.name: t.topic_id for t in r.topics}
    return {user: _answers(bootstrap, user, ids) for user in ("alice", "bob", "carol", "admin")}


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    reason = reference_unavailable_reason()
    if reason:
        pytest.skip(reason)
    tmp: Path = tmp_path_factory.mktemp("authz")
    port, cport, sport = free_port(), free_port(), free_port()
    _, stop = start_reference_kafka(tmp / "kafka", port=port, overrides={
        **SECURITY,
        "controller.quorum.voters": f"1@127.0.0.1:{cport}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport},SASL_PLAINTEXT://127.0.0.1:{sport}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sport}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
    })
    try:
        _setup(f"127.0.0.1:{sport}")
        kafka = _all_answers(f"127.0.0.1:{sport}")
    finally:
        stop()
    ours_port = free_port()
    with KBroker(tmp / "kbroker", port=ours_port, overrides={
            **SECURITY, "listeners": f"SASL_PLAINTEXT://127.0.0.1:{ours_port}",
            "inter.broker.listener.name": "SASL_PLAINTEXT"}) as broker:
        _setup(broker.bootstrap)
        ours = _all_answers(broker.bootstrap)
    yield kafka, ours


@pytest.mark.parametrize("user", ["alice", "bob", "carol", "admin"])
def test_authorization_answered_as_kafka(answers: tuple[dict[str, Any], dict[str, Any]], user: str) -> None:
    kafka, ours = answers
    assert set(ours[user]) == set(kafka[user])
    differ = {case: (kafka[user][case], ours[user][case]) for case in kafka[user]
              if kafka[user][case] != ours[user][case]}
    assert not differ, "\n".join(f"{case}:\n  kafka   {k}\n  kbroker {o}" for case, (k, o) in differ.items())


def test_cases_cover_allowed_denied_and_operations(answers: tuple[dict[str, Any], dict[str, Any]]) -> None:
    """The table is not vacuous: Kafka's own answers hold refusals, grants and partial bit fields."""
    kafka, _ = answers
    named = {t[0]: t for t in kafka["alice"]["metadata named"]}
    assert named["t-deny"][1] == 29 and named["t-read"][1] == 0 and named["t-open"][1] == 0
    assert 0 < named["t-read"][2] < named["t-open"][2]  # READ + DESCRIBE only vs everything (no ACL)
    assert kafka["bob"]["describe cluster"] == (0, 0) and kafka["alice"]["describe cluster"][1] > 0
    assert kafka["admin"]["describe cluster"][1] > kafka["alice"]["describe cluster"][1]
    assert 29 in {e for *_, e in kafka["carol"]["offset commit g-open"]}
    cgd = {g[0]: g for g in kafka["bob"]["consumer group describe"]}
    assert cgd["gp-cg"][1] == 29 and cgd["gcg-open"][1] == 0  # a group naming a topic bob may not describe
    assert ("t-read", None, 29, -2147483648) in kafka["carol"]["metadata by id"]
    assert kafka["bob"]["consumer group heartbeat"] == 29 and kafka["alice"]["consumer group heartbeat"] == 0
    # A regex subscription resolves to the DESCRIBE-able topics only: admin sees every t-* topic.
    regex = {u: set(kafka[u]["regex subscription assignment"]) for u in ("admin", "alice", "carol")}
    assert regex["admin"] == {"t-read", "t-deny", "t-open", "t-star"}
    assert regex["carol"] and regex["carol"] < regex["alice"] < regex["admin"]
    assert kafka["alice"]["init producer id (idempotent)"] == 0 and kafka["bob"]["init producer id tx-w"] == 53
