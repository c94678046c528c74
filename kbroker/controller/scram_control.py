"""SCRAM credentials on the controller: Kafka's `ScramControlManager` (AlterUserScramCredentials, KIP-554).

An upsertion carries the client-computed SaltedPassword (the password never leaves the admin client);
the controller derives StoredKey and ServerKey (kbroker.security.scram) and writes a
`UserScramCredentialRecord`; a deletion writes `RemoveUserScramCredentialRecord`. Per-user errors, as
Kafka: an unknown mechanism is UNSUPPORTED_SASL_MECHANISM "Unknown SCRAM mechanism.", iterations
outside 4096..16384 UNACCEPTABLE_CREDENTIAL "Too few iterations" / "Too many iterations", an empty
name UNACCEPTABLE_CREDENTIAL "Username must not be empty", a user altered twice in one request
DUPLICATE_RESOURCE "A user credential cannot be altered twice in the same request" (every operation
of that user is refused), deleting a credential that does not exist RESOURCE_NOT_FOUND. A user's
operations are applied all or nothing.

Pure: reads the image it is given, returns a `ControllerResult`, writes nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from kbroker.controller.result import ControllerResult, MetadataRecord
from kbroker.metadata.image import ScramImage
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
)
from kbroker.protocol.metadata_records import RemoveUserScramCredentialRecord, UserScramCredentialRecord
from kbroker.security import scram

Result = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult
_MECHANISM_NAMES = {t: n for n, t in scram.MECHANISM_TYPES.items()}


class ScramControlManager:
    def __init__(self, scram_image: Callable[[], ScramImage]) -> None:
        self._image = scram_image

    def alter_credentials(
        self, request: AlterUserScramCredentialsRequest
    ) -> ControllerResult[AlterUserScramCredentialsResponse]:
        image = self._image()
        users: list[str] = []
        count: dict[str, int] = {}
        names = [d.name for d in request.deletions] + [u.name for u in request.upsertions]
        for name in names:
            if name not in count:
                users.append(name)
            count[name] = count.get(name, 0) + 1
        errors: dict[str, tuple[ErrorCode, str]] = {}
        records: dict[str, list[MetadataRecord]] = {u: [] for u in users}
        for user in users:
            if not user:
                errors[user] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
            elif count[user] > 1:
                errors[user] = (ErrorCode.DUPLICATE_RESOURCE,
                                "A user credential cannot be altered twice in the same request")
        for d in request.deletions:
            if d.name in errors:
                continue
            if d.mechanism not in _MECHANISM_NAMES:
                errors[d.name] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism.")
            elif image.get(d.mechanism, d.name) is None:
                errors[d.name] = (ErrorCode.RESOURCE_NOT_FOUND,
                                  "Attempt to delete a user credential that does not exist")
            else:
                records[d.name].append(RemoveUserScramCredentialRecord(name=d.name, mechanism=d.mechanism))
        for u in request.upsertions:
            if u.name in errors:
                continue
            mechanism = _MECHANISM_NAMES.get(u.mechanism)
            if mechanism is None:
                errors[u.name] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism.")
            elif u.iterations < scram.MIN_ITERATIONS:
                errors[u.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
            elif u.iterations > scram.MAX_ITERATIONS:
                errors[u.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
            else:
                h = scram.MECHANISMS[mechanism]
                salted = bytes(u.salted_password)
                stored_key = hashlib.new(h, scram.client_key(h, salted)).digest()
                server_key = scram.hmac_digest(h, salted, b"Server Key")
                records[u.name].append(UserScramCredentialRecord(
                    name=u.name, mechanism=u.mechanism, salt=bytes(u.salt), stored_key=stored_key,
                    server_key=server_key, iterations=u.iterations))
        results = []
        out: list[MetadataRecord] = []
        for user in users:
            error = errors.get(user)
            if error is None:
                out.extend(records[user])
                results.append(Result(user=user, error_code=0, error_message=None))
            else:
                results.append(Result(user=user, error_code=int(error[0]), error_message=error[1]))
        return ControllerResult(AlterUserScramCredentialsResponse(throttle_time_ms=0, results=results), out)
