"""ACLs on the controller: Kafka's `AclControlManager` (CreateAcls, DeleteAcls).

A creation that Kafka's `validateNewAcl` refuses gets INVALID_REQUEST with its message; an ACL equal
to one that exists is a success that writes nothing; a new one is an `AccessControlEntryRecord` with a
fresh id. A deletion filter removes every ACL it matches (`RemoveAccessControlEntryRecord` by id) and
lists them in its result; an ACL matched by an earlier filter of the same request is removed once.

Pure: reads the image it is given, returns a `ControllerResult`, writes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kbroker.controller.result import ControllerResult, MetadataRecord
from kbroker.metadata.image import AclsImage
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.metadata_records import AccessControlEntryRecord, RemoveAccessControlEntryRecord
from kbroker.security.acl import AclFilter, StandardAcl, validate_new_acl


@dataclass(frozen=True, slots=True)
class AclCreateResult:
    error_code: ErrorCode
    error_message: str | None


@dataclass(frozen=True, slots=True)
class AclDeleteResult:
    error_code: ErrorCode
    error_message: str | None
    deleted: tuple[StandardAcl, ...]


class AclControlManager:
    def __init__(self, acls_image: Callable[[], AclsImage], new_id: Callable[[], uuid.UUID] = uuid.uuid4) -> None:
        self._image = acls_image
        self._new_id = new_id

    def create_acls(self, acls: Sequence[StandardAcl]) -> ControllerResult[list[AclCreateResult]]:
        existing = set(self._image().acls.values())
        results: list[AclCreateResult] = []
        records: list[MetadataRecord] = []
        for acl in acls:
            problem = validate_new_acl(acl)
            if problem is not None:
                results.append(AclCreateResult(ErrorCode.INVALID_REQUEST, problem))
                continue
            if acl not in existing:
                existing.add(acl)
                records.append(AccessControlEntryRecord(
                    id=self._new_id(), resource_type=acl.resource_type, resource_name=acl.resource_name,
                    pattern_type=acl.pattern_type, principal=acl.principal, host=acl.host,
                    operation=acl.operation, permission_type=acl.permission_type))
            results.append(AclCreateResult(ErrorCode.NONE, None))
        return ControllerResult(results, records)

    def delete_acls(self, filters: Sequence[AclFilter]) -> ControllerResult[list[AclDeleteResult]]:
        image = self._image()
        removed: set[uuid.UUID] = set()
        results: list[AclDeleteResult] = []
        records: list[MetadataRecord] = []
        for f in filters:
            deleted = []
            for acl_id, acl in sorted(image.acls.items(), key=lambda kv: str(kv[0])):
                if acl_id not in removed and f.matches(acl):
                    removed.add(acl_id)
                    deleted.append(acl)
                    records.append(RemoveAccessControlEntryRecord(id=acl_id))
            results.append(AclDeleteResult(ErrorCode.NONE, None, tuple(deleted)))
        return ControllerResult(results, records)
