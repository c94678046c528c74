"""`NodeConnection`: one asyncio connection to one Kafka node, requests in flight matched by correlation id.

Why its own module: every broker-to-node path (BrokerRegistration and heartbeats to the controller,
forwarded admin requests, replica fetchers, Raft's Vote/Fetch) needs the same three things Kafka's
`NetworkClient` gives it: connect with a timeout, pipeline requests and match their responses by
correlation id, and fail every request in flight when the connection dies (the caller decides whether
to reconnect, as Kafka's `NodeToControllerChannelManager` and `ReplicaFetcherThread` do).

Version choice: `connect()` sends ApiVersions first (v3, falling back to v0 on UNSUPPORTED_VERSION as
Kafka's clients do) and `request(api_key, body)` uses the highest version both sides speak
(`version=` overrides it). Responses are decoded with the generated codecs.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import struct
from typing import TypeVar

from kbroker.protocol import API_SPECS, RequestHeader, decode_response_frame, encode_request_frame
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse

_SIZE = struct.Struct(">i")
_API_VERSIONS = 18
T = TypeVar("T")
MAX_RESPONSE_BYTES = 512 * 1024 * 1024  # a response larger than this is a broken peer


class ConnectionClosedError(ConnectionError):
    """The connection closed (or could not open) before the response arrived."""


class RequestTimeoutError(TimeoutError):
    """No response within the request's timeout (the connection is closed, as Kafka's client does)."""


def _our_range(api_key: int) -> tuple[int, int] | None:
    spec = API_SPECS.get(api_key)
    if spec is None:
        return None
    versions = [v for v, enc in enumerate(spec.request_encoders) if enc is not None]
    return (min(versions), max(versions)) if versions else None


class NodeConnection:
    """A connection to `host:port`; `await connect()`, then `await request(...)` from any task."""

    def __init__(self, host: str, port: int, *, client_id: str = "kbroker", connect_timeout_s: float = 10.0,
                 request_timeout_s: float = 30.0) -> None:
        self.host, self.port = host, port
        self.client_id = client_id
        self.connect_timeout_s = connect_timeout_s
        self.request_timeout_s = request_timeout_s
        self.api_versions: dict[int, tuple[int, int]] = {}  # the peer's ranges, from ApiVersions
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation = itertools.count(1)
        self._in_flight: dict[int, tuple[int, int, asyncio.Future[object]]] = {}
        self._read_task: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._closed

    async def connect(self, *, negotiate: bool = True) -> None:
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port), self.connect_timeout_s)
        except (TimeoutError, OSError) as exc:
            self._closed = True
            raise ConnectionClosedError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop())
        if negotiate:
            resp = await self.request(_API_VERSIONS, ApiVersionsRequest(
                client_software_name="kbroker", client_software_version="1"), ApiVersionsResponse, version=3)
            if resp.error_code == ErrorCode.UNSUPPORTED_VERSION:
                resp = await self.request(_API_VERSIONS, ApiVersionsRequest(), ApiVersionsResponse, version=0)
            if resp.error_code != 0:
                await self.close()
                raise ConnectionClosedError(f"ApiVersions to {self.host}:{self.port} failed: {resp.error_code}")
            self.api_versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}

    def version_for(self, api_key: int) -> int:
        """The highest version of `api_key` both sides support (ValueError when there is none)."""
        ours = _our_range(api_key)
        theirs = self.api_versions.get(api_key)
        if ours is None or theirs is None or max(ours[0], theirs[0]) > min(ours[1], theirs[1]):
            raise ValueError(f"no common version of api {api_key} with {self.host}:{self.port}")
        return min(ours[1], theirs[1])

    async def request(self, api_key: int, body: object, response_type: type[T], *, version: int | None = None,
                      timeout_s: float | None = None) -> T:
        """Send one request and return the decoded response body (an instance of `response_type`)."""
        if self._writer is None or self._closed:
            raise ConnectionClosedError(f"not connected to {self.host}:{self.port}")
        v = self.version_for(api_key) if version is None else version
        cid = next(self._correlation) & 0x7FFFFFFF
        header = RequestHeader(api_key=api_key, api_version=v, correlation_id=cid, client_id=self.client_id)
        frame = encode_request_frame(header, body)
        fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._in_flight[cid] = (api_key, v, fut)
        self._writer.write(frame)
        try:
            body_out = await asyncio.wait_for(fut, timeout_s if timeout_s is not None else self.request_timeout_s)
        except TimeoutError as exc:
            await self.close()
            raise RequestTimeoutError(f"api {api_key} v{v} to {self.host}:{self.port} timed out") from exc
        finally:
            self._in_flight.pop(cid, None)
        if not isinstance(body_out, response_type):
            raise TypeError(f"api {api_key} v{v} answered {type(body_out).__name__}, not {response_type.__name__}")
        return body_out

    async def _read_loop(self) -> None:
        assert self._reader is not None
        error: BaseException = ConnectionClosedError(f"{self.host}:{self.port} closed the connection")
        try:
            while True:
                size = _SIZE.unpack(await self._reader.readexactly(4))[0]
                if size < 4 or size > MAX_RESPONSE_BYTES:
                    error = ConnectionClosedError(f"bad response size {size} from {self.host}:{self.port}")
                    break
                frame = await self._reader.readexactly(size)
                (cid,) = _SIZE.unpack_from(frame, 0)
                entry = self._in_flight.get(cid)
                if entry is None:
                    continue  # a timed-out request's late answer
                api_key, v, fut = entry
                try:
                    _, body = decode_response_frame(api_key, v, frame)
                except Exception as exc:  # noqa: BLE001 - a peer's bad response fails the request only
                    if not fut.done():
                        fut.set_exception(exc)
                    continue
                if not fut.done():
                    fut.set_result(body)
        except (asyncio.IncompleteReadError, OSError) as exc:
            error = ConnectionClosedError(f"{self.host}:{self.port}: {exc!r}")
        except asyncio.CancelledError:
            error = ConnectionClosedError(f"connection to {self.host}:{self.port} closed")
        finally:
            self._closed = True
            for _, _, fut in list(self._in_flight.values()):
                if not fut.done():
                    fut.set_exception(error)
            if self._writer is not None:
                self._writer.close()

    async def close(self) -> None:
        self._closed = True
        task, self._read_task = self._read_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()
