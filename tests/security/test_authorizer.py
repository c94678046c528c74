"""StandardAuthorizer semantics driven directly (kbroker.security.acl): patterns, wildcards, deny wins,
implied operations, super users, allow.everyone.if.no.acl.found, host filters, and the filters of
DescribeAcls / DeleteAcls."""

from __future__ import annotations

import uuid

from kbroker.security.acl import (
    ALL,
    ALLOW,
    ALTER,
    ALTER_CONFIGS,
    ANY,
    CLUSTER,
    CREATE,
    DELETE,
    DENY,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    GROUP,
    LITERAL,
    MATCH,
    PREFIXED,
    READ,
    TOPIC,
    WRITE,
    AclFilter,
    StandardAcl,
    StandardAuthorizer,
    validate_new_acl,
)


def authorizer(*acls: StandardAcl, supers: tuple[str, ...] = (), allow_if_none: bool = False) -> StandardAuthorizer:
    a = StandardAuthorizer(supers, allow_if_none)
    a.update({uuid.uuid4(): acl for acl in acls})
    return a


def topic_acl(name: str, op: int, perm: int = ALLOW, pattern: int = LITERAL, principal: str = "User:alice",
              host: str = "*") -> StandardAcl:
    return StandardAcl(TOPIC, name, pattern, principal, host, op, perm)


def test_literal_prefixed_and_wildcard_resources() -> None:
    a = authorizer(topic_acl("orders", READ), topic_acl("pay-", WRITE, pattern=PREFIXED),
                   topic_acl("*", DESCRIBE, principal="User:bob"))
    assert a.authorize("User:alice", "1.2.3.4", READ, TOPIC, "orders")
    assert not a.authorize("User:alice", "1.2.3.4", READ, TOPIC, "orders2")
    assert a.authorize("User:alice", "1.2.3.4", WRITE, TOPIC, "pay-eu")
    assert not a.authorize("User:alice", "1.2.3.4", WRITE, TOPIC, "pa")
    assert a.authorize("User:bob", "h", DESCRIBE, TOPIC, "anything")
    assert not a.authorize("User:bob", "h", DESCRIBE, GROUP, "anything")


def test_deny_beats_allow_and_all() -> None:
    a = authorizer(topic_acl("t", ALL), topic_acl("t", WRITE, DENY))
    assert a.authorize("User:alice", "h", READ, TOPIC, "t")
    assert not a.authorize("User:alice", "h", WRITE, TOPIC, "t")
    a = authorizer(topic_acl("", ALL, pattern=PREFIXED), topic_acl("t", ALL, DENY, principal="User:*"))
    assert not a.authorize("User:alice", "h", DESCRIBE, TOPIC, "t")


def test_implied_operations() -> None:
    for op in (READ, WRITE, DELETE, ALTER):
        assert authorizer(topic_acl("t", op)).authorize("User:alice", "h", DESCRIBE, TOPIC, "t")
    assert authorizer(topic_acl("t", ALTER_CONFIGS)).authorize("User:alice", "h", DESCRIBE_CONFIGS, TOPIC, "t")
    assert not authorizer(topic_acl("t", DESCRIBE)).authorize("User:alice", "h", READ, TOPIC, "t")
    # A DENY of READ does not deny DESCRIBE.
    a = authorizer(topic_acl("t", WRITE), topic_acl("t", READ, DENY))
    assert a.authorize("User:alice", "h", DESCRIBE, TOPIC, "t")


def test_hosts_principals_super_users_and_the_default() -> None:
    a = authorizer(topic_acl("t", READ, host="10.0.0.1"), supers=("User:root",))
    assert a.authorize("User:alice", "10.0.0.1", READ, TOPIC, "t")
    assert not a.authorize("User:alice", "10.0.0.2", READ, TOPIC, "t")
    assert not a.authorize("User:mallory", "10.0.0.1", READ, TOPIC, "t")
    assert a.authorize("User:root", "x", ALTER, CLUSTER, "kafka-cluster")
    assert not a.authorize("User:alice", "h", READ, TOPIC, "no-acls")
    b = authorizer(topic_acl("t", READ), allow_if_none=True)
    assert b.authorize("User:alice", "h", READ, TOPIC, "no-acls")
    # An ACL for someone else on the resource: the default no longer applies.
    assert not b.authorize("User:bob", "h", READ, TOPIC, "t")


def test_authorized_operations_bits() -> None:
    a = authorizer(topic_acl("t", WRITE))
    bits = a.authorized_operations("User:alice", "h", TOPIC, "t", (READ, WRITE, CREATE, DESCRIBE))
    assert bits == (1 << WRITE) | (1 << DESCRIBE)


def test_filters() -> None:
    lit, pre, star = topic_acl("orders", READ), topic_acl("ord", WRITE, pattern=PREFIXED), topic_acl("*", READ)
    match = AclFilter(TOPIC, "orders", MATCH)
    assert [x for x in (lit, pre, star) if match.matches(x)] == [lit, pre, star]
    assert [x for x in (lit, pre, star) if AclFilter(TOPIC, "orders", LITERAL).matches(x)] == [lit]
    assert [x for x in (lit, pre, star) if AclFilter(ANY, None, ANY, operation=WRITE).matches(x)] == [pre]
    assert not AclFilter(GROUP).matches(lit)


def test_validation() -> None:
    assert validate_new_acl(topic_acl("t", READ)) is None
    assert validate_new_acl(topic_acl("t", ANY)) is not None
    assert validate_new_acl(topic_acl("t", READ, pattern=MATCH)) is not None
    assert validate_new_acl(topic_acl("t", READ, principal="alice")) is not None
    assert validate_new_acl(StandardAcl(CLUSTER, "other", LITERAL, "User:a", "*", ALTER, ALLOW)) is not None
