"""Request and response headers (RequestHeader v1/v2, ResponseHeader v0/v1) and their versions.

Owns the header formats and the rule for which header version an (api key, version) uses:
request header v2 / response header v1 for flexible versions, except that ApiVersions responses
always use header v0 (KIP-511). Header v0 (no client id) only served ControlledShutdown v0, which
Kafka 4 removed; it is still parsed and written for completeness.
"""

from __future__ import annotations

import struct

from kbroker.protocol.types import (
    ProtocolError,
    read_nullable_string,
    read_unknown_tags,
    write_nullable_string,
    write_unknown_tags,
)
from kbroker.protocol.varint import read_unsigned_varint

_HEADER = struct.Struct(">hhi")
_new = object.__new__
_I32 = struct.Struct(">i")

API_VERSIONS_KEY = 18
CONTROLLED_SHUTDOWN_KEY = 7


class RequestHeader:
    """A request header. ``header_version`` records which wire version it was read as or will use."""

    __slots__ = (
        "api_key",
        "api_version",
        "correlation_id",
        "client_id",
        "unknown_tagged_fields",
        "header_version",
    )

    def __init__(
        self,
        *,
        api_key: int,
        api_version: int,
        correlation_id: int,
        client_id: str | None = None,
        unknown_tagged_fields: dict[int, bytes] | None = None,
        header_version: int | None = None,
    ) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.unknown_tagged_fields = {} if unknown_tagged_fields is None else unknown_tagged_fields
        self.header_version = (
            request_header_version(api_key, api_version) if header_version is None else header_version
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RequestHeader):
            return NotImplemented
        return (
            self.api_key == other.api_key
            and self.api_version == other.api_version
            and self.correlation_id == other.correlation_id
            and self.client_id == other.client_id
            and self.unknown_tagged_fields == other.unknown_tagged_fields
            and self.header_version == other.header_version
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"RequestHeader(api_key={self.api_key}, api_version={self.api_version}, "
            f"correlation_id={self.correlation_id}, client_id={self.client_id!r}, header_version={self.header_version})"
        )


_FLEXIBLE_MIN: dict[int, int | None] = {}


def _flexible_min(api_key: int) -> int | None:
    if not _FLEXIBLE_MIN:
        from kbroker.protocol.messages import API_SPECS  # deferred: the registry is large

        _FLEXIBLE_MIN.update((key, spec.flexible_min) for key, spec in API_SPECS.items())
    return _FLEXIBLE_MIN.get(api_key)


def request_header_version(api_key: int, api_version: int) -> int:
    """Header version Kafka uses for this request; unknown keys get v1 (what Kafka parses them as)."""
    flex = _FLEXIBLE_MIN.get(api_key) if _FLEXIBLE_MIN else _flexible_min(api_key)
    if flex is not None and api_version >= flex:
        return 2
    if api_key == CONTROLLED_SHUTDOWN_KEY and api_version == 0:
        return 0
    return 1


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == API_VERSIONS_KEY:
        # KIP-511: an ApiVersions response is always written with header v0, so a client that sent
        # a version the broker does not support can still read the error and the broker's versions.
        return 0
    flex = _flexible_min(api_key)
    return 1 if flex is not None and api_version >= flex else 0


def decode_request_header(buf: memoryview) -> tuple[RequestHeader, int]:
    """Parse a request header at the start of ``buf``; return ``(header, body_offset)``.

    Raises ProtocolError on malformed bytes. The header version is chosen from the api key and
    version (unknown keys and versions are parsed as v1 / by the open-ended flexible range).
    """
    tags: dict[int, bytes] = {}
    try:
        api_key, api_version, correlation_id = _HEADER.unpack_from(buf, 0)
        version = request_header_version(api_key, api_version)
        pos = 8
        client_id = None
        if version >= 1:
            # ClientId keeps its int16 length even in header v2 (flexibleVersions "none") so an old
            # broker can read any ApiVersions request header.
            client_id, pos = read_nullable_string(buf, pos)
        if version >= 2:
            if buf[pos]:
                count, pos = read_unsigned_varint(buf, pos)
                pos = read_unknown_tags(buf, pos, count, tags)
            else:
                pos += 1
    except ProtocolError:
        raise
    except (struct.error, IndexError, ValueError, OverflowError) as exc:
        raise ProtocolError(f"malformed request header: {exc}") from exc
    header = _new(RequestHeader)
    header.api_key = api_key
    header.api_version = api_version
    header.correlation_id = correlation_id
    header.client_id = client_id
    header.unknown_tagged_fields = tags
    header.header_version = version
    return header, pos


def encode_request_header(header: RequestHeader, out: bytearray) -> None:
    version = request_header_version(header.api_key, header.api_version)
    out += _HEADER.pack(header.api_key, header.api_version, header.correlation_id)
    if version >= 1:
        write_nullable_string(out, header.client_id)
    if version >= 2:
        write_unknown_tags(out, header.unknown_tagged_fields)


def encode_response_header(correlation_id: int, header_version: int, out: bytearray) -> None:
    out += _I32.pack(correlation_id)
    if header_version >= 1:
        out.append(0)  # no tagged fields


def decode_response_header(buf: memoryview, header_version: int) -> tuple[int, int]:
    """Return ``(correlation_id, body_offset)``; tagged fields in header v1 are skipped."""
    try:
        (correlation_id,) = _I32.unpack_from(buf, 0)
        pos = 4
        if header_version >= 1:
            count, pos = read_unsigned_varint(buf, pos)
            if count:
                pos = read_unknown_tags(buf, pos, count, {})
    except ProtocolError:
        raise
    except (struct.error, IndexError, ValueError, OverflowError) as exc:
        raise ProtocolError(f"malformed response header: {exc}") from exc
    return correlation_id, pos
