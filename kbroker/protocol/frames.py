"""Frame-level API: whole request/response frames <-> (header, message object).

Owns the contract in docs/architecture.md: ``decode_request_frame`` (server side),
``encode_response_frame`` (server side, parts with FileRegions passed through),
``encode_request_frame`` and ``decode_response_frame`` (client side: tests, replica fetchers).
Every malformed input surfaces as ``ProtocolError``; unknown API keys or versions as
``UnsupportedVersionError`` carrying the parsed header.

Trailing bytes after a complete request body are ignored, as Kafka does: its
``RequestContext.parseRequest`` reads the body with the generated ``read`` and never checks that
the buffer was consumed.
"""

from __future__ import annotations

import struct
from typing import Any

from kbroker.protocol.headers import (
    RequestHeader,
    decode_request_header,
    decode_response_header,
    encode_request_header,
    encode_response_header,
    response_header_version,
)
from kbroker.protocol.messages import API_SPECS
from kbroker.protocol.regions import FileRegion
from kbroker.protocol.types import (
    EncodeError,
    Encoder,
    FramePart,
    ProtocolError,
    Regions,
    UnsupportedVersionError,
    join_parts,
    split_parts,
)

_SIZE = struct.Struct(">i")
_DECODE_ERRORS = (struct.error, IndexError, ValueError, OverflowError)
_ENCODE_ERRORS = (struct.error, TypeError, AttributeError, ValueError, OverflowError)


def decode_request_frame(frame: memoryview | bytes | bytearray) -> tuple[RequestHeader, Any]:
    """Parse one request (``frame`` excludes the 4-byte size): ``(header, body)``."""
    buf = frame if isinstance(frame, memoryview) else memoryview(frame)
    header, pos = decode_request_header(buf)
    spec = API_SPECS.get(header.api_key)
    if spec is None:
        raise UnsupportedVersionError(f"unknown api key {header.api_key}", header)
    decoders = spec.request_decoders
    version = header.api_version
    decoder = decoders[version] if 0 <= version < len(decoders) else None
    if decoder is None:
        raise UnsupportedVersionError(
            f"{spec.name} version {version} is not supported (valid {spec.min_version}-{spec.max_version})",
            header,
        )
    try:
        body, _ = decoder(buf, pos)
    except ProtocolError:
        raise
    except _DECODE_ERRORS as exc:
        raise ProtocolError(f"malformed {spec.name} v{version} request: {exc}") from exc
    return header, body


def _encode(encoder: Encoder, body: object, out: bytearray, regions: Regions, what: str) -> None:
    try:
        encoder(body, out, regions)
    except ProtocolError:
        raise
    except _ENCODE_ERRORS as exc:
        raise EncodeError(f"cannot encode {what}: {exc}") from exc


def encode_response_frame(api_key: int, api_version: int, correlation_id: int, body: object) -> list[FramePart]:
    """Encode a response as parts (bytes-like or FileRegion); the first part starts with the size."""
    spec = API_SPECS[api_key]
    encoders = spec.response_encoders
    encoder = encoders[api_version] if 0 <= api_version < len(encoders) else None
    if encoder is None:
        raise EncodeError(f"{spec.name} response version {api_version} is not supported")
    out = bytearray(4)
    encode_response_header(correlation_id, spec.response_header_version(api_version), out)
    regions: Regions = []
    _encode(encoder, body, out, regions, f"{spec.name} v{api_version} response")
    if regions:
        size = len(out) - 4
        for _, part in regions:
            size += part.size if isinstance(part, FileRegion) else memoryview(part).nbytes
        parts = split_parts(out, regions)
    else:
        parts = [out]
        size = len(out) - 4
    _SIZE.pack_into(out, 0, size)
    return parts


def encode_request_frame(header: RequestHeader, body: object) -> bytes:
    """Encode a request including its 4-byte size prefix (FileRegions are read and inlined)."""
    spec = API_SPECS.get(header.api_key)
    encoders = spec.request_encoders if spec is not None else ()
    v = header.api_version
    encoder = encoders[v] if 0 <= v < len(encoders) else None
    if encoder is None or spec is None:
        raise EncodeError(f"api key {header.api_key} version {v} is not supported")
    out = bytearray(4)
    encode_request_header(header, out)
    regions: Regions = []
    _encode(encoder, body, out, regions, f"{spec.name} v{v} request")
    data = join_parts(split_parts(out, regions)) if regions else bytes(out)
    return _SIZE.pack(len(data) - 4) + data[4:]


def decode_response_frame(
    api_key: int, api_version: int, frame: memoryview | bytes | bytearray
) -> tuple[int, Any]:
    """Parse one response (``frame`` excludes the 4-byte size): ``(correlation_id, body)``."""
    buf = frame if isinstance(frame, memoryview) else memoryview(frame)
    spec = API_SPECS.get(api_key)
    decoders = spec.response_decoders if spec is not None else ()
    decoder = decoders[api_version] if 0 <= api_version < len(decoders) else None
    if decoder is None or spec is None:
        raise ProtocolError(f"api key {api_key} version {api_version} is not supported")
    correlation_id, pos = decode_response_header(buf, response_header_version(api_key, api_version))
    try:
        body, _ = decoder(buf, pos)
    except ProtocolError:
        raise
    except _DECODE_ERRORS as exc:
        raise ProtocolError(f"malformed {spec.name} v{api_version} response: {exc}") from exc
    return correlation_id, body


def decode_request(api_key: int, api_version: int, body: memoryview | bytes | bytearray) -> Any:
    """Decode a request body without a header (tools and tests)."""
    spec = API_SPECS[api_key]
    buf = body if isinstance(body, memoryview) else memoryview(body)
    decoder = spec.request_decoders[api_version] if 0 <= api_version < len(spec.request_decoders) else None
    if decoder is None:
        raise ProtocolError(f"{spec.name} version {api_version} is not supported")
    try:
        return decoder(buf, 0)[0]
    except ProtocolError:
        raise
    except _DECODE_ERRORS as exc:
        raise ProtocolError(f"malformed {spec.name} v{api_version} request: {exc}") from exc
