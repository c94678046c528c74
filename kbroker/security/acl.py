"""ACLs and Kafka's `StandardAuthorizer` semantics, sans-IO.

`StandardAcl` is one `AccessControlEntryRecord` (resource type and pattern, principal, host, operation,
permission). `AclFilter` is a DescribeAcls / DeleteAcls filter (ANY matches any value, MATCH pattern
matches the literal, wildcard and prefixed ACLs that apply to a name). `StandardAuthorizer.authorize`:

1. a principal in `super.users` is allowed everything;
2. the ACLs that apply to the resource: LITERAL with the same name, the LITERAL wildcard `*`, and
   PREFIXED ACLs whose name begins the resource name;
3. of those, the ones for this principal (or `User:*`) and host (or `*`): a DENY for the operation (or
   ALL) denies, whatever else allows it (deny wins);
4. an ALLOW for the operation, for ALL, or for an operation implying it allows: DESCRIBE is implied
   by READ, WRITE, DELETE and ALTER; DESCRIBE_CONFIGS by ALTER_CONFIGS (Kafka's `AclEntry`);
5. otherwise denied, unless no ACL at all applies to the resource and
   `allow.everyone.if.no.acl.found=true`.

`authorize_by_resource_type` is Kafka's `Authorizer.authorizeByResourceType` (KIP-679: "may the
principal do this on any resource of the type", for an idempotent InitProducerId);
`authorized_operations` the KIP-430 bit field over `SUPPORTED_OPERATIONS` (Kafka's
`AclEntry.supportedOperations`).

Codes are Kafka's (`ResourceType`, `PatternType`, `AclOperation`, `AclPermissionType`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# ResourceType
UNKNOWN, ANY = 0, 1
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER = 2, 3, 4, 5, 6, 7
RESOURCE_TYPES = {TOPIC: "TOPIC", GROUP: "GROUP", CLUSTER: "CLUSTER", TRANSACTIONAL_ID: "TRANSACTIONAL_ID",
                  DELEGATION_TOKEN: "DELEGATION_TOKEN", USER: "USER"}
# PatternType
MATCH, LITERAL, PREFIXED = 2, 3, 4
# AclOperation
ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 2, 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12
CREATE_TOKENS, DESCRIBE_TOKENS, TWO_PHASE_COMMIT = 13, 14, 15
OPERATIONS = range(ALL, TWO_PHASE_COMMIT + 1)
# AclPermissionType
DENY, ALLOW = 2, 3

WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"

# The operations an ALLOW for the key also allows (Kafka's AclEntry / StandardAuthorizerData).
_IMPLIED_BY = {DESCRIBE: (READ, WRITE, DELETE, ALTER), DESCRIBE_CONFIGS: (ALTER_CONFIGS,)}

# Kafka's `AclEntry.supportedOperations(resourceType)`: the operations of a resource type, so the bits
# a KIP-430 authorized-operations field may carry (and all of them without an authorizer).
SUPPORTED_OPERATIONS: dict[int, tuple[int, ...]] = {
    TOPIC: (READ, WRITE, CREATE, DESCRIBE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS),
    GROUP: (READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS),
    CLUSTER: (CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER, DESCRIBE),
    TRANSACTIONAL_ID: (DESCRIBE, WRITE, TWO_PHASE_COMMIT),
    DELEGATION_TOKEN: (DESCRIBE,),
    USER: (CREATE_TOKENS, DESCRIBE_TOKENS),
}


def operations_bit_field(operations: Iterable[int]) -> int:
    """Kafka's `Utils.to32BitField`: bit n set for operation code n."""
    bits = 0
    for op in operations:
        bits |= 1 << op
    return bits


@dataclass(frozen=True, slots=True)
class StandardAcl:
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@dataclass(frozen=True, slots=True)
class AclFilter:
    resource_type: int = ANY
    resource_name: str | None = None
    pattern_type: int = ANY
    principal: str | None = None
    host: str | None = None
    operation: int = ANY
    permission_type: int = ANY

    def matches(self, acl: StandardAcl) -> bool:
        if self.resource_type != ANY and self.resource_type != acl.resource_type:
            return False
        if not self._pattern_matches(acl):
            return False
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation != ANY and self.operation != acl.operation:
            return False
        return self.permission_type == ANY or self.permission_type == acl.permission_type

    def _pattern_matches(self, acl: StandardAcl) -> bool:
        name, pattern = self.resource_name, self.pattern_type
        if pattern == MATCH:
            if name is None:
                return True
            if acl.pattern_type == LITERAL:
                return acl.resource_name in (name, WILDCARD)
            return acl.pattern_type == PREFIXED and name.startswith(acl.resource_name)
        if pattern != ANY and pattern != acl.pattern_type:
            return False
        return name is None or name == acl.resource_name


def validate_new_acl(acl: StandardAcl) -> str | None:
    """Why Kafka's `AclControlManager.validateNewAcl` refuses an ACL, or None."""
    if acl.resource_type not in RESOURCE_TYPES:
        return "Invalid resourceType " + str(acl.resource_type)
    if acl.pattern_type not in (LITERAL, PREFIXED):
        return "Invalid patternType " + str(acl.pattern_type)
    if acl.operation not in OPERATIONS:
        return "Invalid operation " + str(acl.operation)
    if acl.permission_type not in (DENY, ALLOW):
        return "Invalid permissionType " + str(acl.permission_type)
    if not acl.resource_name:
        return "Resource name should not be empty"
    if ":" not in acl.principal or acl.principal.startswith(":"):
        return f"Could not parse principal from `{acl.principal}` (no colon is present separating the principal type from the principal name)"
    if acl.resource_type == CLUSTER and (acl.resource_name != CLUSTER_NAME or acl.pattern_type != LITERAL):
        return "The only valid name for the CLUSTER resource is kafka-cluster"
    return None


class AclIndex:
    """The ACLs of one metadata image, indexed by resource type and name for `authorize`."""

    __slots__ = ("_literal", "_prefixed")

    def __init__(self, acls: Iterable[StandardAcl]) -> None:
        self._literal: dict[tuple[int, str], list[StandardAcl]] = {}
        self._prefixed: dict[int, list[StandardAcl]] = {}
        for acl in acls:
            if acl.pattern_type == LITERAL:
                self._literal.setdefault((acl.resource_type, acl.resource_name), []).append(acl)
            elif acl.pattern_type == PREFIXED:
                self._prefixed.setdefault(acl.resource_type, []).append(acl)

    def of_type(self, resource_type: int) -> list[StandardAcl]:
        """Every ACL of a resource type (literal and prefixed), for `authorize_by_resource_type`."""
        out = [acl for (rt, _), acls in self._literal.items() if rt == resource_type for acl in acls]
        out.extend(self._prefixed.get(resource_type, ()))
        return out

    def applicable(self, resource_type: int, name: str) -> list[StandardAcl]:
        out = list(self._literal.get((resource_type, name), ()))
        if name != WILDCARD:
            out.extend(self._literal.get((resource_type, WILDCARD), ()))
        for acl in self._prefixed.get(resource_type, ()):
            if name.startswith(acl.resource_name):
                out.append(acl)
        return out


class StandardAuthorizer:
    """Kafka's `org.apache.kafka.metadata.authorizer.StandardAuthorizer`, over an `AclIndex`."""

    def __init__(self, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._index = AclIndex(())
        self._source: object = None

    def update(self, acls: Mapping[uuid.UUID, StandardAcl]) -> None:
        """Re-index when the image's ACL map changed (an identity check per call otherwise)."""
        if acls is not self._source:
            self._source = acls
            self._index = AclIndex(acls.values())

    def authorize(self, principal: str, host: str, operation: int, resource_type: int, name: str) -> bool:
        if principal in self.super_users:
            return True
        acls = self._index.applicable(resource_type, name)
        if not acls:
            return self.allow_everyone_if_no_acl_found
        allowed = False
        implied = _IMPLIED_BY.get(operation, ())
        for acl in acls:
            if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
                continue
            if acl.host != host and acl.host != WILDCARD:
                continue
            op = acl.operation
            if acl.permission_type == DENY:
                if op == operation or op == ALL:
                    return False
            elif op == operation or op == ALL or op in implied:
                allowed = True
        return allowed

    def authorized_operations(self, principal: str, host: str, resource_type: int, name: str,
                              operations: Iterable[int] | None = None) -> int:
        """The bit field of Metadata / DescribeCluster / DescribeGroups (KIP-430): bit n = operation n,
        over the resource type's supported operations unless `operations` are given."""
        ops = SUPPORTED_OPERATIONS.get(resource_type, ()) if operations is None else operations
        return operations_bit_field(op for op in ops if self.authorize(principal, host, op, resource_type, name))

    def authorize_by_resource_type(self, principal: str, host: str, operation: int, resource_type: int) -> bool:
        """Kafka's `Authorizer.authorizeByResourceType` (KIP-679): may the principal `operation` at
        least one resource of the type? Used by InitProducerId without a transactional id (WRITE on
        any topic). Allowed when a resource named "hardcode" is (super users; no ACL at all and
        `allow.everyone.if.no.acl.found`); denied by a matching DENY on the LITERAL wildcard; else
        allowed by a wildcard ALLOW, or by a LITERAL / PREFIXED ALLOW not dominated by a DENY (the
        same literal name, or a PREFIXED deny that is a prefix of it). Only the operation itself or
        ALL matches here: no implication (WRITE does not come from READ)."""
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow: list[tuple[int, str]] = []
        for acl in self._index.of_type(resource_type):
            if acl.host != host and acl.host != WILDCARD:
                continue
            if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
                continue
            if acl.operation != operation and acl.operation != ALL:
                continue
            if acl.permission_type == DENY:
                if acl.pattern_type == LITERAL:
                    if acl.resource_name == WILDCARD:
                        return False
                    deny_literal.add(acl.resource_name)
                else:
                    deny_prefixed.add(acl.resource_name)
            elif acl.permission_type == ALLOW:
                allow.append((acl.pattern_type, acl.resource_name))
        if any(pattern == LITERAL and name == WILDCARD for pattern, name in allow):
            return True
        for pattern, name in allow:
            if pattern == LITERAL and name in deny_literal:
                continue
            if not any(name[:i] in deny_prefixed for i in range(1, len(name) + 1)):
                return True
        return False
