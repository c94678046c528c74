"""Kafka's wire protocol, sans-IO: generated message codecs, headers, frames, record batches, codecs.

Owns every byte format that crosses the wire. Must not import asyncio, sockets, or any other kbroker
package: it is plain synchronous code that unit tests drive directly.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kbroker.protocol.frames import (
        decode_request,
        decode_request_frame,
        decode_response_frame,
        encode_request_frame,
        encode_response_frame,
    )
    from kbroker.protocol.headers import RequestHeader, request_header_version, response_header_version
    from kbroker.protocol.messages import API_SPECS, ApiKey
    from kbroker.protocol.regions import FileRegion
    from kbroker.protocol.types import ApiSpec, EncodeError, ProtocolError, UnsupportedVersionError

# Re-exports resolve lazily (PEP 562): importing kbroker.protocol.records or .errors must not pay for
# loading every generated codec module (~0.5 s).
_EXPORTS = {
    "decode_request": "kbroker.protocol.frames",
    "decode_request_frame": "kbroker.protocol.frames",
    "decode_response_frame": "kbroker.protocol.frames",
    "encode_request_frame": "kbroker.protocol.frames",
    "encode_response_frame": "kbroker.protocol.frames",
    "RequestHeader": "kbroker.protocol.headers",
    "request_header_version": "kbroker.protocol.headers",
    "response_header_version": "kbroker.protocol.headers",
    "API_SPECS": "kbroker.protocol.messages",
    "ApiKey": "kbroker.protocol.messages",
    "FileRegion": "kbroker.protocol.regions",
    "ApiSpec": "kbroker.protocol.types",
    "EncodeError": "kbroker.protocol.types",
    "ProtocolError": "kbroker.protocol.types",
    "UnsupportedVersionError": "kbroker.protocol.types",
}

__all__ = [
    "API_SPECS",
    "ApiKey",
    "ApiSpec",
    "EncodeError",
    "FileRegion",
    "ProtocolError",
    "RequestHeader",
    "UnsupportedVersionError",
    "decode_request",
    "decode_request_frame",
    "decode_response_frame",
    "encode_request_frame",
    "encode_response_frame",
    "request_header_version",
    "response_header_version",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
