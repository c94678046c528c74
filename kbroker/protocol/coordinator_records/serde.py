"""Framing of coordinator records: Kafka's ``CoordinatorRecordSerde`` (hand-written).

A coordinator record is a key and a value in an internal topic (``__consumer_offsets`` for the group
coordinator, ``__transaction_state`` for the transaction coordinator, ``__share_group_state`` for the
share coordinator)::

    key:   int16 record type, then the key struct at version 0
           (Kafka 4.x ``MessageUtil.toCoordinatorTypePrefixedBytes``; older brokers wrote a key
           "version" that is now read as the type: OffsetCommit keys of type 0 and 1 have one layout)
    value: int16 version, then the value struct at that version (``toVersionPrefixedBytes``);
           a null value is a tombstone that deletes the key

The record type space is per coordinator (``Coordinator``): type 0 is LegacyOffsetCommit in the group
coordinator, TransactionLog in the transaction coordinator and ShareSnapshot in the share coordinator.
Unknown types raise ``UnknownRecordTypeError`` (Kafka's loaders skip those records); unknown value
versions ``UnknownRecordVersionError``; any other malformed input ``CoordinatorRecordParseError``.
Like Kafka, bytes after the struct are not checked. Record modules load on first use.

Imports only ``kbroker.protocol`` (sans-IO).
"""

from __future__ import annotations

import importlib
import struct
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any

from kbroker.protocol.coordinator_records import (
    COORDINATOR_RECORDS,
    COORDINATOR_RECORDS_BY_CLASS,
    Coordinator,
    CoordinatorRecordSpec,
)
from kbroker.protocol.types import ProtocolError

_I16 = struct.Struct(">h")


class CoordinatorRecordParseError(ProtocolError):
    """A coordinator record key or value that cannot be parsed."""


class UnknownRecordTypeError(CoordinatorRecordParseError):
    """A key whose record type this coordinator does not know (Kafka's UnknownRecordTypeException)."""

    def __init__(self, coordinator: Coordinator, record_type: int) -> None:
        super().__init__(f"unknown {coordinator} coordinator record type {record_type}")
        self.coordinator = coordinator
        self.record_type = record_type


class UnknownRecordVersionError(CoordinatorRecordParseError):
    """A value whose version the record type does not know (Kafka's UnknownRecordVersionException)."""


@dataclass(frozen=True, slots=True)
class CoordinatorRecord:
    """A decoded record: ``value`` is None for a tombstone (Kafka's CoordinatorRecord)."""

    record_type: int
    key: Any
    value: Any | None
    value_version: int | None


@cache
def record_module(coordinator: Coordinator, record_type: int) -> ModuleType:
    """The generated module of a record type; ``KeyError`` when the coordinator has no such type."""
    return importlib.import_module(COORDINATOR_RECORDS[coordinator][record_type].module)


def spec_of(message: object) -> CoordinatorRecordSpec:
    """The registry entry of a key or value object; ``ValueError`` if it is neither."""
    spec = COORDINATOR_RECORDS_BY_CLASS.get(type(message).__name__)
    if spec is None or getattr(record_module(spec.coordinator, spec.record_type), type(message).__name__) is not type(
        message
    ):
        raise ValueError(f"{type(message).__name__} is not a coordinator record key or value")
    return spec


def encode_coordinator_key(key: object) -> bytes:
    """``int16 record type`` + the key struct (version 0)."""
    spec = spec_of(key)
    if type(key).__name__ != spec.key_class:
        raise ValueError(f"{type(key).__name__} is a value, not a key")
    out = bytearray(_I16.pack(spec.record_type))
    record_module(spec.coordinator, spec.record_type).KEY_ENCODERS[0](key, out, None)
    return bytes(out)


def encode_coordinator_value(value: object, version: int | None = None) -> bytes:
    """``int16 version`` + the value struct at ``version`` (default: the highest the spec knows)."""
    spec = spec_of(value)
    if type(value).__name__ != spec.value_class:
        raise ValueError(f"{type(value).__name__} is a key, not a value")
    v = spec.value_max_version if version is None else version
    if not spec.value_min_version <= v <= spec.value_max_version:
        raise ValueError(
            f"{spec.value_class} has no version {v} (valid: {spec.value_min_version}-{spec.value_max_version})"
        )
    out = bytearray(_I16.pack(v))
    record_module(spec.coordinator, spec.record_type).VALUE_ENCODERS[v](value, out, None)
    return bytes(out)


def record_type_of(key: bytes | bytearray | memoryview) -> int:
    """The record type of a key without parsing the rest."""
    try:
        (record_type,) = _I16.unpack_from(key, 0)
    except struct.error as exc:
        raise CoordinatorRecordParseError("could not read the record type from the key") from exc
    return int(record_type)


def decode_coordinator_key(coordinator: Coordinator, key: bytes | bytearray | memoryview) -> tuple[int, Any]:
    """``(record type, key object)``."""
    record_type = record_type_of(key)
    if record_type not in COORDINATOR_RECORDS[coordinator]:
        raise UnknownRecordTypeError(coordinator, record_type)
    try:
        obj, _ = record_module(coordinator, record_type).KEY_DECODERS[0](memoryview(key), 2)
    except (ProtocolError, IndexError, ValueError, struct.error, UnicodeDecodeError) as exc:
        raise CoordinatorRecordParseError(f"cannot parse {coordinator} coordinator key: {exc}") from exc
    return record_type, obj


def decode_coordinator_value(
    coordinator: Coordinator, record_type: int, value: bytes | bytearray | memoryview
) -> tuple[Any, int]:
    """``(value object, version)`` of a non-null value of ``record_type``."""
    specs = COORDINATOR_RECORDS[coordinator]
    if record_type not in specs:
        raise UnknownRecordTypeError(coordinator, record_type)
    spec = specs[record_type]
    try:
        (version,) = _I16.unpack_from(value, 0)
    except struct.error as exc:
        raise CoordinatorRecordParseError("could not read the version from the value") from exc
    if not spec.value_min_version <= version <= spec.value_max_version:
        raise UnknownRecordVersionError(f"{spec.value_class} has no version {version}")
    try:
        obj, _ = record_module(coordinator, record_type).VALUE_DECODERS[version](memoryview(value), 2)
    except (ProtocolError, IndexError, ValueError, struct.error, UnicodeDecodeError) as exc:
        raise CoordinatorRecordParseError(f"cannot parse {spec.value_class} v{version}: {exc}") from exc
    return obj, int(version)


def decode_coordinator_record(
    coordinator: Coordinator,
    key: bytes | bytearray | memoryview,
    value: bytes | bytearray | memoryview | None,
) -> CoordinatorRecord:
    """Both halves of a record (Kafka's ``CoordinatorRecordSerde.deserialize``)."""
    record_type, key_obj = decode_coordinator_key(coordinator, key)
    if value is None:
        return CoordinatorRecord(record_type, key_obj, None, None)
    value_obj, version = decode_coordinator_value(coordinator, record_type, value)
    return CoordinatorRecord(record_type, key_obj, value_obj, version)
