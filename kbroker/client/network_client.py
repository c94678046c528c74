"""`NodeConnection`: one asyncio connection to one Kafka node, requests in flight matched by correlation id.

Why its own module: every broker-to-node path (BrokerRegistration and heartbeats to the controller,
forwarded admin requests, replica fetchers, Raft's Vote/Fetch) needs the same three things Kafka's
`NetworkClient` gives it: connect with a timeout, pipeline requests and match their responses by
correlation id, and fail every request in flight when the connection dies (the caller decides whether
to reconnect, as Kafka's `NodeToControllerChannelManager` and `ReplicaFetcherThread` do).

Version choice: `connect()` sends ApiVersions first (v3, falling back to v0 on UNSUPPORTED_VERSION as
Kafka's clients do) and `request(api_key, body)` uses the highest version both sides speak
(`version=` overrides it). Responses are decoded with the generated codecs.

Security (`security=`, a `ClientSecurity` from `kbroker.client.security`): TLS wraps the socket on
connect (the server's certificate checked against the truststore, its host name when
`ssl.endpoint.identification.algorithm=https`); on SASL_PLAINTEXT / SASL_SSL the SASL exchange follows
ApiVersions before any other request, as Kafka's `SaslClientAuthenticator` does (SaslHandshake v1, then
SaslAuthenticate until the mechanism is complete). A refused login raises `AuthenticationError` (Kafka's
`SaslAuthenticationException`, with the server's message). When the server gives the session a lifetime
(KIP-368 `session_lifetime_ms`, from `connections.max.reauth.ms`), the connection re-authenticates on
the same socket at 85-95 % of it, as Kafka's clients do, so the server never closes it for expiry.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import ssl
import struct
from typing import TypeVar

from kbroker.client.security import PLAINTEXT_SECURITY, ClientSecurity, SaslClientError, new_mechanism
from kbroker.protocol import API_SPECS, RequestHeader, decode_response_frame, encode_request_frame
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kbroker.protocol.messages.sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse
from kbroker.protocol.messages.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse

_SIZE = struct.Struct(">i")
_API_VERSIONS = 18
_SASL_HANDSHAKE = 17
_SASL_AUTHENTICATE = 36
T = TypeVar("T")
MAX_RESPONSE_BYTES = 512 * 1024 * 1024  # a response larger than this is a broken peer


class ConnectionClosedError(ConnectionError):
    """The connection closed (or could not open) before the response arrived."""


class AuthenticationError(ConnectionClosedError):
    """The server refused the TLS handshake or the SASL login (Kafka's AuthenticationException)."""


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
                 request_timeout_s: float = 30.0, security: ClientSecurity | None = None) -> None:
        self.host, self.port = host, port
        self.security = security or PLAINTEXT_SECURITY
        self.session_lifetime_ms = 0  # KIP-368: the server's answer to the last SaslAuthenticate
        self._reauth_task: asyncio.Task[None] | None = None
        # KIP-368: while a re-authentication runs, only SaslHandshake/SaslAuthenticate may go out (the broker
        # closes a connection that sends anything else mid-way, as Kafka's does); other requests wait here,
        # as Kafka's client holds them (KafkaChannel's reauthentication in progress).
        self._not_reauthenticating = asyncio.Event()
        self._not_reauthenticating.set()
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
        security = self.security
        if security.error is not None:
            self._closed = True
            raise AuthenticationError(f"cannot connect to {self.host}:{self.port}: {security.error}")
        tls = security.ssl_context if security.uses_tls else None
        if security.uses_tls and tls is None:
            raise ConnectionClosedError(f"{security.protocol} to {self.host}:{self.port} needs an SSL context")
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, ssl=tls,
                                        server_hostname=self.host if tls is not None else None),
                self.connect_timeout_s)
        except ssl.SSLError as exc:
            self._closed = True
            raise AuthenticationError(f"SSL handshake with {self.host}:{self.port} failed: {exc}") from exc
        except (TimeoutError, OSError) as exc:
            self._closed = True
            raise ConnectionClosedError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop())
        if negotiate or security.uses_sasl:
            resp = await self.request(_API_VERSIONS, ApiVersionsRequest(
                client_software_name="kbroker", client_software_version="1"), ApiVersionsResponse, version=3)
            if resp.error_code == ErrorCode.UNSUPPORTED_VERSION:
                resp = await self.request(_API_VERSIONS, ApiVersionsRequest(), ApiVersionsResponse, version=0)
            if resp.error_code != 0:
                await self.close()
                raise ConnectionClosedError(f"ApiVersions to {self.host}:{self.port} failed: {resp.error_code}")
            self.api_versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        if security.uses_sasl:
            try:
                await self._authenticate()
            except BaseException:
                await self.close()
                raise

    async def _authenticate(self) -> None:
        """SaslHandshake v1 + SaslAuthenticate tokens (Kafka's SaslClientAuthenticator)."""
        creds = self.security.sasl
        if creds is None:
            raise AuthenticationError(f"{self.security.protocol} to {self.host}:{self.port}: no SASL login configured")
        handshake = await self.request(_SASL_HANDSHAKE, SaslHandshakeRequest(mechanism=creds.mechanism),
                                       SaslHandshakeResponse, version=1)
        if handshake.error_code != ErrorCode.NONE:
            raise AuthenticationError(
                f"SASL handshake with {self.host}:{self.port} failed ({ErrorCode(handshake.error_code).name}): "
                f"{creds.mechanism} not in the enabled mechanisms {handshake.mechanisms}")
        try:
            mechanism = new_mechanism(creds)
            challenge = b""
            while True:
                token = mechanism.evaluate(challenge)
                if mechanism.complete and not token:
                    break
                resp = await self.request(_SASL_AUTHENTICATE, SaslAuthenticateRequest(auth_bytes=token),
                                          SaslAuthenticateResponse)
                if resp.error_code != ErrorCode.NONE:
                    raise AuthenticationError(
                        f"SASL authentication with {self.host}:{self.port} failed: {resp.error_message}")
                self.session_lifetime_ms = resp.session_lifetime_ms
                challenge = bytes(resp.auth_bytes)
                if mechanism.complete and not challenge:
                    break
        except SaslClientError as exc:
            raise AuthenticationError(f"SASL authentication with {self.host}:{self.port} failed: {exc}") from exc
        self._schedule_reauthentication()

    def _schedule_reauthentication(self) -> None:
        """KIP-368: re-authenticate at a random 85-95 % of the session lifetime (Kafka's client)."""
        lifetime = self.session_lifetime_ms
        if lifetime <= 0 or self._closed:
            return
        delay = lifetime / 1000 * (0.85 + 0.1 * random.random())

        async def reauthenticate_later() -> None:
            await asyncio.sleep(delay)
            await self.reauthenticate()

        self._reauth_task = asyncio.get_running_loop().create_task(reauthenticate_later())

    async def reauthenticate(self) -> None:
        """KIP-368: run the SASL exchange again on this connection; other requests wait until it is done
        (a failure closes the connection, as Kafka's client does)."""
        if self._closed:
            return
        self._not_reauthenticating.clear()
        try:
            await self._authenticate()
        except (ConnectionClosedError, RequestTimeoutError, OSError):
            await self.close()
        finally:
            self._not_reauthenticating.set()

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
        if not self._not_reauthenticating.is_set() and api_key not in (_SASL_HANDSHAKE, _SASL_AUTHENTICATE):
            await self._not_reauthenticating.wait()
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
        reauth, self._reauth_task = self._reauth_task, None
        if reauth is not None and reauth is not asyncio.current_task():
            reauth.cancel()
        task, self._read_task = self._read_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()
