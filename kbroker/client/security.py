"""The client side of a secured connection: TLS and SASL for what a node opens to other nodes.

Kafka builds every outbound channel of a broker (replica fetchers, the controller channel, the Raft
client, the transaction marker sender) with `ChannelBuilders.clientChannelBuilder` from the security
protocol of one listener (`inter.broker.listener.name` for broker-to-broker traffic, the first of
`controller.listener.names` for traffic to the controllers), that listener's `ssl.*` settings and the
SASL mechanism `sasl.mechanism.inter.broker.protocol` / `sasl.mechanism.controller.protocol` with the
login module options of `listener.name.<l>.<mechanism>.sasl.jaas.config`. `ClientSecurity` is that
choice, as plain values: the wiring reads the config once and hands it down; `NodeConnection` applies
it (TLS on connect, then the SASL exchange before any other request, as Kafka's
`SaslClientAuthenticator`: ApiVersions, SaslHandshake v1, SaslAuthenticate tokens).

Mechanisms (sans-IO, one `evaluate(challenge) -> response` object per exchange):
- PLAIN (RFC 4616): one message `\\0user\\0password`.
- SCRAM-SHA-256/512 (RFC 5802, Kafka's `ScramSaslClient`): client-first, client-final with the
  proof, then the server signature is checked (a server that does not know the password is refused).
- OAUTHBEARER (RFC 7628, Kafka's `OAuthBearerSaslClient`): `n,,\\x01auth=Bearer <token>\\x01\\x01`;
  the token comes from `token_provider` (Kafka's login callback handler), called per authentication.

Why not `kbroker.security`: client/ sits below security/ in the layers; the client-side arithmetic is
small and independent of the server-side state machines.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import ssl
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field

from kbroker.client.ssl_stores import load_keystore_into, load_truststore_into

PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL = "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"
SECURITY_PROTOCOLS = (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)
_SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_TLS_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


class SaslClientError(Exception):
    """The client side of an exchange went wrong (a bad server message, a wrong server signature)."""


@dataclass(frozen=True)
class TlsClientSettings:
    """The `ssl.*` keys a client channel reads (stores: JKS, PKCS12 or PEM, as kbroker's listeners)."""

    truststore_location: str | None = None  # ssl.truststore.location (a store of truststore_type)
    truststore_certificates: str | None = None  # ssl.truststore.certificates (inline PEM)
    keystore_location: str | None = None  # ssl.keystore.location: key + chain, for mTLS
    keystore_key: str | None = None  # ssl.keystore.key (inline PEM)
    keystore_certificate_chain: str | None = None  # ssl.keystore.certificate.chain (inline PEM)
    key_password: str | None = None  # ssl.key.password
    keystore_type: str = "PEM"  # ssl.keystore.type: JKS, PKCS12, PEM (the wiring passes Kafka's default JKS)
    keystore_password: str | None = None  # ssl.keystore.password
    truststore_type: str = "PEM"  # ssl.truststore.type
    truststore_password: str | None = None  # ssl.truststore.password
    enabled_protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")  # ssl.enabled.protocols
    cipher_suites: tuple[str, ...] = ()  # ssl.cipher.suites
    endpoint_identification_algorithm: str = "https"  # ssl.endpoint.identification.algorithm ("" = off)


def build_client_context(settings: TlsClientSettings) -> ssl.SSLContext:
    """The SSLContext of a client channel: the server must present a certificate the truststore
    trusts (the system's CAs without one), its host name checked when
    `ssl.endpoint.identification.algorithm=https` (Kafka's default); our own certificate for mTLS."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    versions = [_TLS_VERSIONS[p] for p in settings.enabled_protocols if p in _TLS_VERSIONS]
    if not versions:
        raise ValueError(f"ssl.enabled.protocols {list(settings.enabled_protocols)}: none of TLSv1.2, TLSv1.3")
    ctx.minimum_version, ctx.maximum_version = min(versions), max(versions)
    if settings.cipher_suites:
        ctx.set_ciphers(":".join(settings.cipher_suites))
    if settings.truststore_location:
        load_truststore_into(ctx, settings.truststore_type, settings.truststore_location,
                             settings.truststore_password)
    elif settings.truststore_certificates:
        ctx.load_verify_locations(cadata=settings.truststore_certificates)
    else:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    ctx.check_hostname = settings.endpoint_identification_algorithm.lower() == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED
    if settings.keystore_location:
        load_keystore_into(ctx, settings.keystore_type, settings.keystore_location, settings.keystore_password,
                           settings.key_password)
    elif settings.keystore_key and settings.keystore_certificate_chain:
        fd, path = tempfile.mkstemp(prefix="kbroker-client-key-", suffix=".pem")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(settings.keystore_key.strip() + "\n" + settings.keystore_certificate_chain.strip() + "\n")
            ctx.load_cert_chain(path, password=settings.key_password)
        finally:
            os.unlink(path)
    return ctx


@dataclass(frozen=True)
class SaslClientCredentials:
    """One login: the mechanism and what the login module gives it (Kafka's JAAS options)."""

    mechanism: str
    username: str = ""
    password: str = ""
    # OAUTHBEARER: returns a compact JWS for each authentication (Kafka's login callback handler).
    token_provider: Callable[[], str] | None = field(default=None, compare=False)

    def __repr__(self) -> str:  # never print a password
        return f"SaslClientCredentials(mechanism={self.mechanism!r}, username={self.username!r})"


@dataclass(frozen=True, eq=False)
class ClientSecurity:
    """How to open a connection: the security protocol, the TLS context, the SASL login."""

    protocol: str = PLAINTEXT
    ssl_context: ssl.SSLContext | None = None
    sasl: SaslClientCredentials | None = None
    # A configuration that cannot work (no JAAS login, an unreadable truststore): every connect fails
    # with this message instead of the node refusing to start (a single node never connects out).
    error: str | None = None

    @property
    def uses_tls(self) -> bool:
        return self.protocol in (SSL, SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in (SASL_PLAINTEXT, SASL_SSL)


PLAINTEXT_SECURITY = ClientSecurity()


class SaslClientMechanism:
    """One client exchange: `evaluate(challenge)` gives the next token; `complete` once the server's
    last message has been checked."""

    complete: bool = False

    def evaluate(self, challenge: bytes) -> bytes:
        raise NotImplementedError


class PlainClient(SaslClientMechanism):
    def __init__(self, username: str, password: str) -> None:
        self._token = b"\x00" + username.encode() + b"\x00" + password.encode()
        self._sent = False

    def evaluate(self, challenge: bytes) -> bytes:
        if self._sent:
            self.complete = True
            return b""
        self._sent = True
        self.complete = True
        return self._token


def _sasl_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


class ScramClient(SaslClientMechanism):
    """RFC 5802 client (Kafka's `ScramSaslClient`)."""

    def __init__(self, mechanism: str, username: str, password: str, nonce: str | None = None) -> None:
        self._hash = _SCRAM_HASHES[mechanism]
        self._username, self._password = username, password
        self._nonce = nonce or base64.b64encode(os.urandom(24)).decode().rstrip("=")
        self._step = 0
        self._client_first_bare = ""
        self._server_signature = b""

    def _hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self._hash).digest()

    def evaluate(self, challenge: bytes) -> bytes:
        if self._step == 0:
            self._step = 1
            self._client_first_bare = f"n={_sasl_name(self._username)},r={self._nonce}"
            return f"n,,{self._client_first_bare}".encode()
        if self._step == 1:
            self._step = 2
            server_first = challenge.decode("utf-8", errors="replace")
            try:
                attrs = dict(part.split("=", 1) for part in server_first.split(","))
                nonce, salt, iterations = attrs["r"], base64.b64decode(attrs["s"]), int(attrs["i"])
            except (ValueError, KeyError) as exc:
                raise SaslClientError(f"Invalid SCRAM server first message: {server_first!r}") from exc
            if not nonce.startswith(self._nonce):
                raise SaslClientError("Invalid server nonce: does not start with client nonce")
            salted = hashlib.pbkdf2_hmac(self._hash, self._password.encode(), salt, iterations)
            client_key = self._hmac(salted, b"Client Key")
            stored_key = hashlib.new(self._hash, client_key).digest()
            without_proof = f"c=biws,r={nonce}"
            auth_message = f"{self._client_first_bare},{server_first},{without_proof}".encode()
            signature = self._hmac(stored_key, auth_message)
            proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
            self._server_signature = self._hmac(self._hmac(salted, b"Server Key"), auth_message)
            return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
        server_final = challenge.decode("utf-8", errors="replace")
        if server_final.startswith("e="):
            raise SaslClientError(f"SCRAM server error: {server_final[2:]}")
        try:
            signature = base64.b64decode(server_final[2:]) if server_final.startswith("v=") else b""
        except ValueError:
            signature = b""
        if not hmac.compare_digest(signature, self._server_signature):
            raise SaslClientError("Invalid server signature in the SCRAM server final message")
        self.complete = True
        return b""


class OAuthBearerClient(SaslClientMechanism):
    """RFC 7628 client initial response (Kafka's `OAuthBearerSaslClient`); an error challenge from the
    server is answered with `\\x01` as the RFC asks, and the server then fails the exchange."""

    def __init__(self, token: str) -> None:
        self._token = token
        self._step = 0

    def evaluate(self, challenge: bytes) -> bytes:
        if self._step == 0:
            self._step = 1
            return f"n,,\x01auth=Bearer {self._token}\x01\x01".encode()
        if challenge:
            return b"\x01"
        self.complete = True
        return b""


def new_mechanism(credentials: SaslClientCredentials) -> SaslClientMechanism:
    m = credentials.mechanism.upper()
    if m == "PLAIN":
        return PlainClient(credentials.username, credentials.password)
    if m in _SCRAM_HASHES:
        return ScramClient(m, credentials.username, credentials.password)
    if m == "OAUTHBEARER":
        if credentials.token_provider is None:
            raise SaslClientError("OAUTHBEARER needs a token provider")
        return OAuthBearerClient(credentials.token_provider())
    raise SaslClientError(f"SASL mechanism {credentials.mechanism} is not supported by kbroker's client")
