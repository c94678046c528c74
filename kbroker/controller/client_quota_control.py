"""Client quotas on the controller: Kafka's `ClientQuotaControlManager` (AlterClientQuotas, KIP-546).

An alteration names an entity (a map of entity type -> name: "user", "client-id", "ip"; a None name is
the type's default entity) and a list of ops (key -> value, or remove). Each entity is checked and
turned into `ClientQuotaRecord`s on its own; the whole request commits as one batch (Kafka's
`ControllerResult.atomicOf`). Kafka 4.3's checks and messages, in its order:

- two ops with the same key: INVALID_REQUEST "Ignoring duplicate entity ClientQuotaEntity(entries=...)"
  (Kafka first writes "Duplicate quota key ..." and then overwrites it with that message);
- an empty entity: "Invalid empty client quota entity"; an unknown type: "Unhandled client quota
  entity type: <t>"; an empty name: "Empty <t> not supported";
- "ip" with "user" or "client-id": "Invalid quota entity combination, IP entity shouldnot be combined
  with User or ClientId" (sic); an ip that is neither an address nor a resolvable host: "<ip> is not a
  valid IP or resolvable host.";
- per key (the first failing key fails the entity, nothing of it is written): a key the entity's kind
  does not have: "Invalid configuration key <k>"; a value <= 0: "Quota <k> must be greater than 0";
  LONG keys (the byte rates) above 2^63 "Proposed value for <k> is too large for a LONG.", INT keys
  (connection_creation_rate) above 2^31-1 "... too large for an INT.", fractional integral values
  "<k> cannot be a fractional value.".

A key set to the value it already has writes nothing; removing a key that is not set writes nothing.
An entity named twice in one request answers "Ignoring duplicate entity ..." for it, though the
records of its first entry are written (Kafka's result map is overwritten, its records are not).

Pure: reads the image it is given, returns a `ControllerResult`, writes nothing.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kbroker.controller.result import ControllerResult, MetadataRecord
from kbroker.metadata.image import ClientQuotaEntityKey, ClientQuotasImage, quota_entity_key
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.metadata_records import ClientQuotaRecord

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

# Kafka's QuotaConfig.userAndClientQuotaConfigs() / ipConfigs(): key -> ConfigDef type.
USER_CLIENT_QUOTA_KEYS = {PRODUCER_BYTE_RATE: "LONG", CONSUMER_BYTE_RATE: "LONG",
                          REQUEST_PERCENTAGE: "DOUBLE", CONTROLLER_MUTATION_RATE: "DOUBLE"}
IP_QUOTA_KEYS = {CONNECTION_CREATION_RATE: "INT"}
_INTEGRAL_MAX = {"SHORT": (32767.0, "a SHORT"), "INT": (2147483647.0, "an INT"),
                 "LONG": (9.223372036854776e18, "a LONG")}


@dataclass(frozen=True, slots=True)
class ClientQuotaAlteration:
    """One entry of AlterClientQuotas: the entity's (type, name) pairs as sent, and its ops (None: remove)."""

    entity: tuple[tuple[str, str | None], ...]
    ops: tuple[tuple[str, float | None], ...]


@dataclass(frozen=True, slots=True)
class ClientQuotaAlterationResult:
    entity: tuple[tuple[str, str | None], ...]
    error_code: int
    error_message: str | None


def _java_string_hash(s: str) -> int:
    h = 0
    for ch in s.encode("utf-16-be").decode("utf-16-be"):
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h


def java_hash_map_order(keys: Sequence[str]) -> list[str]:
    """The order a small java.util.HashMap (16 buckets) iterates its String keys: Kafka prints entities
    (`ClientQuotaEntity.toString`) and lists them in responses in that order."""

    def bucket(k: str) -> int:
        h = _java_string_hash(k)
        return (h ^ (h >> 16)) & 15

    return sorted(keys, key=bucket)  # stable: same-bucket keys keep insertion order


def entity_string(entity: Sequence[tuple[str, str | None]]) -> str:
    """Kafka's `ClientQuotaEntity.toString`: ClientQuotaEntity(entries={client-id=x, user=null})."""
    names = dict(entity)
    inner = ", ".join(f"{t}={'null' if names[t] is None else names[t]}" for t in java_hash_map_order(list(names)))
    return f"ClientQuotaEntity(entries={{{inner}}})"


def _valid_ip_entity(ip: str | None) -> bool:
    if ip is None:
        return True
    try:
        ipaddress.ip_address(ip)
        return True
    except ValueError:
        pass
    try:
        socket.getaddrinfo(ip, None)
        return True
    except (OSError, UnicodeError):
        return False


def validate_quota_key_value(valid_keys: dict[str, str], key: str, value: float) -> str | None:
    """Kafka's `validateQuotaKeyValue`: None when valid, else the INVALID_REQUEST message."""
    kind = valid_keys.get(key)
    if kind is None:
        return f"Invalid configuration key {key}"
    if not value > 0:
        return f"Quota {key} must be greater than 0"
    if kind in _INTEGRAL_MAX:
        limit, name = _INTEGRAL_MAX[kind]
        if value > limit:
            return f"Proposed value for {key} is too large for {name}."
        if abs(value % 1.0) > 1e-6:
            return f"{key} cannot be a fractional value."
    return None


def validate_entity(entity: Sequence[tuple[str, str | None]]) -> tuple[dict[str, str] | None, str]:
    """(the entity's valid keys, "") or (None, the INVALID_REQUEST message)."""
    if not entity:
        return None, "Invalid empty client quota entity"
    seen: dict[str, str | None] = {}
    for entity_type, name in entity:
        if entity_type in seen:
            return None, f"Invalid client quota entity, duplicate entity entry {entity_type}"
        if entity_type not in (USER, CLIENT_ID, IP):
            return None, f"Unhandled client quota entity type: {entity_type}"
        seen[entity_type] = name
        if name is not None and name == "":
            return None, f"Empty {entity_type} not supported"
    has_ip = IP in seen
    if has_ip and (USER in seen or CLIENT_ID in seen):
        return None, "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"
    if has_ip:
        if not _valid_ip_entity(seen[IP]):
            return None, f"{seen[IP]} is not a valid IP or resolvable host."
        return IP_QUOTA_KEYS, ""
    return USER_CLIENT_QUOTA_KEYS, ""


class ClientQuotaControlManager:
    def __init__(self, client_quotas: Callable[[], ClientQuotasImage]) -> None:
        self._image = client_quotas

    def alter_client_quotas(
        self, alterations: Sequence[ClientQuotaAlteration]
    ) -> ControllerResult[list[ClientQuotaAlterationResult]]:
        image = self._image()
        # One result per entity (Kafka's result map): an entity named again in the same request is
        # "Ignoring duplicate entity ..." (the records of its first entry are still written, as in Kafka).
        results: dict[ClientQuotaEntityKey, ClientQuotaAlterationResult] = {}
        records: list[MetadataRecord] = []
        for alteration in alterations:
            entity = alteration.entity
            key_of = quota_entity_key(entity)
            ops: dict[str, float | None] = {}
            duplicate = False
            for key, value in alteration.ops:
                if key in ops:
                    duplicate = True
                ops[key] = value
            if duplicate or key_of in results:
                results[key_of] = ClientQuotaAlterationResult(entity, int(ErrorCode.INVALID_REQUEST),
                                                              f"Ignoring duplicate entity {entity_string(entity)}")
                continue
            valid_keys, message = validate_entity(entity)
            if valid_keys is None:
                results[key_of] = ClientQuotaAlterationResult(entity, int(ErrorCode.INVALID_REQUEST), message)
                continue
            current = image.quotas(key_of)
            entity_records: list[MetadataRecord] = []
            error: str | None = None
            for key, value in ops.items():
                if value is None:
                    if key in current:
                        entity_records.append(self._record(entity, key, 0.0, remove=True))
                    continue
                error = validate_quota_key_value(valid_keys, key, value)
                if error is not None:
                    break
                if current.get(key) != value:
                    entity_records.append(self._record(entity, key, value, remove=False))
            if error is not None:
                results[key_of] = ClientQuotaAlterationResult(entity, int(ErrorCode.INVALID_REQUEST), error)
                continue
            records.extend(entity_records)
            results[key_of] = ClientQuotaAlterationResult(entity, 0, None)
        return ControllerResult(list(results.values()), records)

    @staticmethod
    def _record(entity: Sequence[tuple[str, str | None]], key: str, value: float, *, remove: bool) -> ClientQuotaRecord:
        return ClientQuotaRecord(
            entity=[ClientQuotaRecord.EntityData(entity_type=t, entity_name=n) for t, n in entity],
            key=key, value=value, remove=remove)
