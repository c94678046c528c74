"""The SASL exchange of one connection on a SASL listener: Kafka's `SaslServerAuthenticator`, sans-IO.

States (Kafka's names): HANDSHAKE_OR_VERSIONS_REQUEST -> (ApiVersions) HANDSHAKE_REQUEST ->
(SaslHandshake v1 naming an enabled mechanism) AUTHENTICATE -> (SaslAuthenticate tokens) COMPLETE, or
FAILED. Until COMPLETE a connection may send ApiVersions, SaslHandshake and SaslAuthenticate only; any
other request is an IllegalSaslStateException in Kafka ("Unexpected Kafka request of type X during
SASL handshake.") and the connection is closed: `allows(api_key)` says which.

- SaslHandshake naming a mechanism not in `sasl.enabled.mechanisms` answers UNSUPPORTED_SASL_MECHANISM
  with the enabled list, then the connection closes (FAILED).
- SaslHandshake v0 (tokens without Kafka framing, pre-KIP-152) is answered like v1 but kbroker then
  expects SaslAuthenticate: every client since Kafka 1.0 and librdkafka 1.x sends v1.
- A failed SaslAuthenticate answers SASL_AUTHENTICATION_FAILED with Kafka's message (PLAIN: its
  `SaslAuthenticationException` text; SCRAM: "Authentication failed during authentication due to
  invalid credentials with SASL mechanism SCRAM-SHA-256"), and the connection closes after
  `connection.failed.authentication.delay.ms` (the caller's job: `failed` is set).

Mechanisms: PLAIN (RFC 4616; users from the JAAS `user_<name>` options), SCRAM-SHA-256/512
(RFC 5802; credentials looked up through `ScramCredentials`, the metadata image in the broker) and
OAUTHBEARER (RFC 7628; a token validator from kbroker.security.oauthbearer).

Delegation tokens (KIP-48): a SCRAM client-first message with the `tokenauth=true` extension names a
token id as its user; its credential comes from `SaslServerConfig.token_credentials` (None: tokens
disabled, the authentication fails as for an unknown token: "Token Authentication failed: Invalid
tokenId"). The principal is then `User:<token owner>` and `token_authenticated` is set. The session
lifetime is bounded by the token's expiry even without `connections.max.reauth.ms` (Kafka's
`ScramSaslServer` negotiates the token expiry as the credential lifetime).

Re-authentication (KIP-368): with `connections.max.reauth.ms` > 0 (or an OAUTHBEARER token that
expires) a completed authentication has a session lifetime, sent in SaslAuthenticate v1+
(`session_lifetime_ms`: the smaller of the two). Before it ends the client sends SaslHandshake again
(`begin_reauthentication`): same mechanism, same principal, or the connection closes; after it ends
any other request closes the connection (`session_expired`, checked by the dispatcher, as Kafka's
SocketServer "Disconnecting expired channel").
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from kbroker.protocol.errors import ErrorCode
from kbroker.security import scram
from kbroker.security.delegation_token import TokenCredentials
from kbroker.security.oauthbearer import OAuthBearerFailure, OAuthBearerServer, TokenValidator
from kbroker.security.principal import KafkaPrincipal

API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
PLAIN = "PLAIN"
OAUTHBEARER = "OAUTHBEARER"


class SaslState(enum.Enum):
    HANDSHAKE_OR_VERSIONS_REQUEST = "HANDSHAKE_OR_VERSIONS_REQUEST"
    HANDSHAKE_REQUEST = "HANDSHAKE_REQUEST"
    AUTHENTICATE = "AUTHENTICATE"
    COMPLETE = "COMPLETE"
    FAILED = "FAILED"


class ScramCredentials(Protocol):
    def __call__(self, mechanism: str, user: str) -> scram.ScramCredential | None: ...


@dataclass(frozen=True, slots=True)
class HandshakeResult:
    error_code: ErrorCode
    mechanisms: list[str]


@dataclass(frozen=True, slots=True)
class AuthenticateResult:
    error_code: ErrorCode
    error_message: str | None
    auth_bytes: bytes
    # Close the connection after this response (after the failed-authentication delay on a failure).
    close: bool = False
    session_lifetime_ms: int = 0  # KIP-368, once complete (0: no re-authentication needed)


class SaslAuthenticationError(Exception):
    """Kafka's SaslAuthenticationException: its message goes to the client as is."""


class _InvalidCredentials(Exception):
    """Kafka's SaslException from a mechanism: the client gets the generic per-mechanism message."""


class _Mechanism(Protocol):
    def evaluate(self, token: bytes) -> bytes: ...

    @property
    def complete(self) -> bool: ...

    @property
    def authorization_id(self) -> str: ...


class PlainServer:
    """RFC 4616 PLAIN: one token `authzid NUL authcid NUL passwd` (Kafka's `PlainSaslServer`)."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self._complete = False
        self._authorization_id = ""

    @property
    def complete(self) -> bool:
        return self._complete

    @property
    def authorization_id(self) -> str:
        return self._authorization_id

    def evaluate(self, token: bytes) -> bytes:
        parts = token.decode("utf-8", errors="replace").split("\x00")
        if len(parts) != 3:
            raise SaslAuthenticationError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, username, password = parts
        if not username:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        expected = self._users.get(username)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username")
        self._authorization_id = username
        self._complete = True
        return b""


class ScramServer:
    """RFC 5802 SCRAM server (Kafka's `ScramSaslServer`): client-first, server-first, client-final, server-final."""

    def __init__(self, mechanism: str, credentials: ScramCredentials,
                 nonce: Callable[[], str] | None = None, token_credentials: TokenCredentials | None = None) -> None:
        self._mechanism = mechanism
        self._token_credentials = token_credentials
        # Set when a delegation token authenticated (KIP-48): its expiry (wall-clock ms).
        self.token_authenticated = False
        self.token_expiry_timestamp_ms: int | None = None
        self._hash = scram.MECHANISMS[mechanism]
        self._credentials = credentials
        self._nonce = nonce or (lambda: base64.b64encode(os.urandom(24)).decode().rstrip("="))
        self._step = 0
        self._complete = False
        self._authorization_id = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._credential: scram.ScramCredential | None = None

    @property
    def complete(self) -> bool:
        return self._complete

    @property
    def authorization_id(self) -> str:
        return self._authorization_id

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise _InvalidCredentials("Invalid SCRAM message") from None
        if self._step == 0:
            return self._client_first(text)
        if self._step == 1:
            return self._client_final(text)
        raise SaslAuthenticationError("Unexpected SCRAM message after completion")

    def _client_first(self, text: str) -> bytes:
        # gs2-header: "n,," or "y,," (no channel binding), optionally "n,a=authzid,"
        try:
            cbind, authz, bare = text.split(",", 2)
            if cbind not in ("n", "y") or (authz and not authz.startswith("a=")):
                raise ValueError(text)
            # client-first-message-bare: n=saslname,r=nonce[,extensions] where Kafka's extensions
            # (ScramExtensions, e.g. tokenauth=true) are key=value with multi-character keys.
            parts = bare.split(",")
            attrs = scram.parse_attributes(",".join(parts[:2]))
            if any("=" not in p[1:] for p in parts[2:]):
                raise ValueError(bare)
            extensions = dict(p.partition("=")[::2] for p in parts[2:])
            username = scram.decode_sasl_name(attrs["n"])
            client_nonce = attrs["r"]
        except (ValueError, KeyError):
            raise _InvalidCredentials("Invalid SCRAM client first message") from None
        if set(extensions) - {"tokenauth"}:
            # ScramSaslServer: only ScramLoginModule.TOKEN_AUTH_CONFIG is a supported extension.
            raise _InvalidCredentials(f"Unsupported extensions will not be accepted, extensions received: {extensions}")
        authzid = scram.decode_sasl_name(authz[2:]) if authz else ""
        if authzid and authzid != username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username")
        if extensions.get("tokenauth", "").lower() == "true":
            # ScramSaslServer with a DelegationTokenCredentialCallback: the user name is a token id.
            token = self._token_credentials(self._mechanism, username) if self._token_credentials else None
            if token is None:
                raise _InvalidCredentials(f"Token Authentication failed: Invalid tokenId : {username}")
            credential = token.credential
            self._authorization_id = token.owner
            self.token_authenticated = True
            self.token_expiry_timestamp_ms = token.expiry_timestamp_ms
        else:
            found = self._credentials(self._mechanism, username)
            if found is None:
                raise _InvalidCredentials("Authentication failed: Invalid user credentials")
            credential = found
            self._authorization_id = username
        self._credential = credential
        self._client_first_bare = bare
        nonce = client_nonce + self._nonce()
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={nonce},s={salt},i={credential.iterations}"
        self._nonce_value = nonce
        self._step = 1
        return self._server_first.encode()

    def _client_final(self, text: str) -> bytes:
        credential = self._credential
        assert credential is not None
        try:
            without_proof, _, proof_attr = text.rpartition(",")
            attrs = scram.parse_attributes(without_proof)
            if not proof_attr.startswith("p="):
                raise ValueError(text)
            proof = base64.b64decode(proof_attr[2:], validate=True)
        except ValueError:
            raise _InvalidCredentials("Invalid SCRAM client final message") from None
        if attrs.get("r") != self._nonce_value:
            raise _InvalidCredentials("Invalid client nonce in the final client message.")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = scram.hmac_digest(self._hash, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise _InvalidCredentials("Invalid client credentials")
        client_key = scram.xor(proof, signature)
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), credential.stored_key):
            raise _InvalidCredentials("Invalid client credentials")
        server_signature = scram.hmac_digest(self._hash, credential.server_key, auth_message)
        self._step = 2
        self._complete = True
        return b"v=" + base64.b64encode(server_signature)


@dataclass(frozen=True)
class SaslServerConfig:
    """One SASL listener's settings: `sasl.enabled.mechanisms` and where credentials come from."""

    enabled_mechanisms: tuple[str, ...]
    plain_users: Mapping[str, str]
    scram_credentials: ScramCredentials
    oauthbearer: TokenValidator | None = None  # the listener's OAUTHBEARER validator
    connections_max_reauth_ms: int = 0  # connections.max.reauth.ms (0: sessions never expire)
    # Delegation tokens (KIP-48) for SCRAM with tokenauth=true; None: delegation.token.secret.key unset.
    token_credentials: TokenCredentials | None = None


class SaslServerAuthenticator:
    """The SASL state of one connection; `principal` is set once `state` is COMPLETE."""

    __slots__ = ("config", "state", "mechanism", "principal", "_server", "failure_message",
                 "session_expiration_ms", "reauthenticating", "reauthentications", "token_authenticated")

    def __init__(self, config: SaslServerConfig) -> None:
        self.config = config
        self.state = SaslState.HANDSHAKE_OR_VERSIONS_REQUEST
        self.mechanism: str | None = None
        self.principal: KafkaPrincipal | None = None
        self._server: _Mechanism | None = None
        self.failure_message: str | None = None
        self.session_expiration_ms = 0  # KIP-368: wall-clock ms the session ends (0: never)
        self.reauthenticating = False
        self.reauthentications = 0
        # Kafka's KafkaPrincipal.tokenAuthenticated: the connection authenticated with a delegation token.
        self.token_authenticated = False

    def session_expired(self, now_ms: int) -> bool:
        return self.state is SaslState.COMPLETE and 0 < self.session_expiration_ms <= now_ms

    def begin_reauthentication(self) -> bool:
        """A SaslHandshake on an authenticated connection: re-authentication when the session has a
        lifetime (KIP-368), else False (the handshake is then answered ILLEGAL_SASL_STATE, as Kafka)."""
        if self.state is not SaslState.COMPLETE or self.session_expiration_ms <= 0:
            return False
        self.state = SaslState.HANDSHAKE_REQUEST
        self.reauthenticating = True
        return True

    @property
    def complete(self) -> bool:
        return self.state is SaslState.COMPLETE

    def allows(self, api_key: int) -> bool:
        """May a request of `api_key` be handled now? False: Kafka closes the connection."""
        state = self.state
        if state is SaslState.COMPLETE:
            return True
        if state is SaslState.HANDSHAKE_OR_VERSIONS_REQUEST:
            return api_key in (API_VERSIONS, SASL_HANDSHAKE)
        if state is SaslState.HANDSHAKE_REQUEST:
            return api_key == SASL_HANDSHAKE
        if state is SaslState.AUTHENTICATE:
            return api_key == SASL_AUTHENTICATE
        return False

    def on_api_versions(self) -> None:
        if self.state is SaslState.HANDSHAKE_OR_VERSIONS_REQUEST:
            self.state = SaslState.HANDSHAKE_REQUEST

    def handshake(self, mechanism: str) -> HandshakeResult:
        enabled = list(self.config.enabled_mechanisms)
        if self.reauthenticating and mechanism != self.mechanism:
            self.state = SaslState.FAILED
            self.failure_message = f"Cannot change mechanisms during re-authentication from {self.mechanism} to {mechanism}"
            return HandshakeResult(ErrorCode.ILLEGAL_SASL_STATE, enabled)
        if mechanism not in enabled:
            self.state = SaslState.FAILED
            self.failure_message = f"Unsupported SASL mechanism {mechanism}"
            return HandshakeResult(ErrorCode.UNSUPPORTED_SASL_MECHANISM, enabled)
        self.mechanism = mechanism
        if mechanism == PLAIN:
            self._server = PlainServer(self.config.plain_users)
        elif mechanism == OAUTHBEARER:
            if self.config.oauthbearer is None:
                self.state = SaslState.FAILED
                return HandshakeResult(ErrorCode.UNSUPPORTED_SASL_MECHANISM, enabled)
            self._server = OAuthBearerServer(self.config.oauthbearer)
        else:
            self._server = ScramServer(mechanism, self.config.scram_credentials,
                                       token_credentials=self.config.token_credentials)
        self.state = SaslState.AUTHENTICATE
        return HandshakeResult(ErrorCode.NONE, enabled)

    def authenticate(self, token: bytes, now_ms: int = 0) -> AuthenticateResult:
        server = self._server
        assert server is not None and self.state is SaslState.AUTHENTICATE
        try:
            reply = server.evaluate(token)
        except (SaslAuthenticationError, OAuthBearerFailure) as e:
            if isinstance(server, OAuthBearerServer) and server.failure_detail:
                return self._fail(str(e), detail=server.failure_detail)
            return self._fail(str(e))
        except _InvalidCredentials as e:
            self.failure_message = str(e)
            return self._fail(
                "Authentication failed during authentication due to invalid credentials with SASL "
                f"mechanism {self.mechanism}", detail=str(e))
        if server.complete:
            principal = KafkaPrincipal.user(server.authorization_id)
            if self.reauthenticating and principal != self.principal:
                return self._fail(f"Cannot change principals during re-authentication from {self.principal}: "
                                  f"{principal}")
            self.state = SaslState.COMPLETE
            self.principal = principal
            self.token_authenticated = isinstance(server, ScramServer) and server.token_authenticated
            if self.reauthenticating:
                self.reauthentications += 1
            self.reauthenticating = False
            lifetime = self._session_lifetime_ms(server, now_ms)
            self.session_expiration_ms = now_ms + lifetime if lifetime > 0 else 0
            if isinstance(server, ScramServer) and server.token_expiry_timestamp_ms is not None and lifetime == 0:
                # An expired token (not yet removed): Kafka's session ends at once (zeroIfNegative).
                self.session_expiration_ms = now_ms
            return AuthenticateResult(ErrorCode.NONE, None, reply, session_lifetime_ms=lifetime)
        return AuthenticateResult(ErrorCode.NONE, None, reply)

    def _session_lifetime_ms(self, server: _Mechanism, now_ms: int) -> int:
        """Kafka's SaslServerAuthenticator: min(connections.max.reauth.ms, the credential's remaining
        lifetime); 0 when neither bounds the session."""
        lifetimes = []
        if self.config.connections_max_reauth_ms > 0:
            lifetimes.append(self.config.connections_max_reauth_ms)
        if isinstance(server, OAuthBearerServer) and server.token is not None and \
                self.config.connections_max_reauth_ms > 0:
            # Kafka bounds the session by the token only when re-authentication is on.
            lifetimes.append(max(1, server.token.lifetime_ms - now_ms))
        if isinstance(server, ScramServer) and server.token_expiry_timestamp_ms is not None:
            # ScramSaslServer's negotiated credential lifetime: the token's expiry, with or without
            # connections.max.reauth.ms (SaslServerAuthenticator.calcCompletionTimesAndReturnSessionLifetimeMs).
            lifetimes.append(max(0, server.token_expiry_timestamp_ms - now_ms))
        return min(lifetimes) if lifetimes else 0

    def _fail(self, message: str, detail: str | None = None) -> AuthenticateResult:
        self.state = SaslState.FAILED
        self.failure_message = detail or message
        return AuthenticateResult(ErrorCode.SASL_AUTHENTICATION_FAILED, message, b"", close=True)
