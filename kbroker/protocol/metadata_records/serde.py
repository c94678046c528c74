"""Framing of KRaft metadata records: Kafka's ``MetadataRecordSerde`` (hand-written).

A metadata record's value in the ``__cluster_metadata`` log (and in snapshots) is::

    unsigned varint  frame version (1; 0 was the unsupported KRaft preview of Kafka 2.8)
    unsigned varint  api key (the record type, ``MetadataRecordType``)
    unsigned varint  version of the record
    the record body at that version (every metadata record is flexible: compact strings, tag section)

``encode_metadata_record`` writes it, ``read_metadata_record`` reads it back as Kafka's
``ApiMessageAndVersion`` (``decode_metadata_record`` when only the record is wanted). Record modules
load on first use, so importing this module is cheap. Malformed input raises ``MetadataParseError``
(Kafka's ``MetadataParseException``), never another exception type. Like Kafka, bytes after the
record body are not checked.

Imports only ``kbroker.protocol`` (sans-IO).
"""

from __future__ import annotations

import importlib
import struct
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any

from kbroker.protocol.metadata_records import METADATA_RECORDS, METADATA_RECORDS_BY_NAME, MetadataRecordSpec
from kbroker.protocol.types import ProtocolError, write_uvarint
from kbroker.protocol.varint import read_unsigned_varint

FRAME_VERSION = 1


class MetadataParseError(ProtocolError):
    """A metadata record value that cannot be parsed (Kafka's MetadataParseException)."""


@dataclass(frozen=True, slots=True)
class ApiMessageAndVersion:
    """A record and the version it is (to be) written at (Kafka's ApiMessageAndVersion)."""

    message: Any
    version: int

    @property
    def api_key(self) -> int:
        return spec_of(self.message).api_key


@cache
def record_module(api_key: int) -> ModuleType:
    """The generated module of a record type; ``KeyError`` for an unknown api key."""
    return importlib.import_module(METADATA_RECORDS[api_key].module)


def record_class(api_key: int) -> type:
    """The generated class of a record type (``record_class(2) is TopicRecord``)."""
    cls: type = record_module(api_key).CLASS
    return cls


def spec_of(record: object) -> MetadataRecordSpec:
    """The registry entry of a record object; ``ValueError`` if it is not a metadata record."""
    spec = METADATA_RECORDS_BY_NAME.get(type(record).__name__)
    if spec is None or record_class(spec.api_key) is not type(record):
        raise ValueError(f"{type(record).__name__} is not a metadata record")
    return spec


def encode_metadata_record(record: object, version: int | None = None) -> bytes:
    """The framed value of ``record`` at ``version`` (default: the highest version the spec knows)."""
    spec = spec_of(record)
    v = spec.max_version if version is None else version
    if not spec.min_version <= v <= spec.max_version:
        raise ValueError(f"{spec.name} has no version {v} (valid: {spec.min_version}-{spec.max_version})")
    out = bytearray()
    write_uvarint(out, FRAME_VERSION)
    write_uvarint(out, spec.api_key)
    write_uvarint(out, v)
    record_module(spec.api_key).ENCODERS[v](record, out, None)
    return bytes(out)


def read_metadata_record(buf: bytes | bytearray | memoryview) -> ApiMessageAndVersion:
    """Parse one framed record value (Kafka's ``MetadataRecordSerde.read``)."""
    view = memoryview(buf)
    try:
        frame, pos = read_unsigned_varint(view, 0)
        if frame != FRAME_VERSION:
            if frame == 0:
                raise MetadataParseError(
                    "metadata record with frame version 0 (the KRaft preview of Kafka 2.8) is not supported"
                )
            raise MetadataParseError(f"unknown metadata record frame version {frame}")
        api_key, pos = read_unsigned_varint(view, pos)
        version, pos = read_unsigned_varint(view, pos)
        spec = METADATA_RECORDS.get(api_key)
        if spec is None:
            raise MetadataParseError(f"unknown metadata record type {api_key}")
        if not spec.min_version <= version <= spec.max_version:
            raise MetadataParseError(f"{spec.name} has no version {version}")
        record, _ = record_module(api_key).DECODERS[version](view, pos)
    except MetadataParseError:
        raise
    except (ProtocolError, IndexError, ValueError, struct.error, UnicodeDecodeError, OverflowError) as exc:
        raise MetadataParseError(f"cannot parse metadata record: {exc}") from exc
    return ApiMessageAndVersion(record, version)


def decode_metadata_record(buf: bytes | bytearray | memoryview) -> Any:
    """The record in one framed value (its version: ``read_metadata_record``)."""
    return read_metadata_record(buf).message
