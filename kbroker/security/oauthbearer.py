"""SASL/OAUTHBEARER on the server (RFC 7628, KIP-255, KIP-768): the client's initial response, the
token validators, and the mechanism the SASL state machine runs.

Two validators, chosen as Kafka chooses its server callback handler:

- **Unsecured JWS** (Kafka's default `OAuthBearerUnsecuredValidatorCallbackHandler`, for development):
  the token's header must say `"alg":"none"`; the JAAS options of
  `listener.name.<l>.oauthbearer.sasl.jaas.config` name the principal claim
  (`unsecuredValidatorPrincipalClaimName`, default `sub`), the scope claim
  (`unsecuredValidatorScopeClaimName`, default `scope`), a required scope
  (`unsecuredValidatorRequiredScope`, space separated) and the clock skew
  (`unsecuredValidatorAllowableClockSkewMs`, default 0). `exp` is required, `iat` is optional, both in
  (possibly fractional) seconds; the checks and their messages are Kafka's `OAuthBearerValidationUtils`.
- **JWKS** (`OAuthBearerValidatorCallbackHandler`, with `sasl.oauthbearer.jwks.endpoint.url`): a
  signed JWS (RS256, RS384, RS512) whose `kid` names a key of the JWKS, `exp` required, `iat` and
  `nbf` honoured, `sasl.oauthbearer.expected.audience` / `.expected.issuer` checked when set, with
  `sasl.oauthbearer.clock.skew.seconds` of skew; the principal is `sasl.oauthbearer.sub.claim.name`.
  The JWKS itself (an HTTP fetch) is the wiring's job: the validator reads keys from a `JwksKeys`
  holder and asks it for a refresh when a `kid` is unknown, as Kafka's `RefreshingHttpsJwks` does.

A refused token is answered as Kafka's `OAuthBearerSaslServer` does: the server's challenge is the
JSON error (`{"status":"invalid_token"}`), the client replies `%x01`, and the exchange fails with that
JSON as the message (SASL_AUTHENTICATION_FAILED). The session lifetime (KIP-368) is the token's
remaining lifetime.

RSA signatures are checked here with `pow` (PKCS#1 v1.5, RFC 8017 section 8.2.2): no crypto package is a
dependency of kbroker.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

_AUTH = re.compile(r"^[Bb][Ee][Aa][Rr][Ee][Rr] +([-_.~+/0-9A-Za-z]+=*) *$")
_KV = re.compile(r"^([A-Za-z]+)=([\x21-\x7E \t\r\n]+)$")
_RS_HASHES = {"RS256": ("sha256", bytes.fromhex("3031300d060960864801650304020105000420")),
              "RS384": ("sha384", bytes.fromhex("3041300d060960864801650304020205000430")),
              "RS512": ("sha512", bytes.fromhex("3051300d060960864801650304020305000440"))}


class OAuthBearerValidationError(Exception):
    """A refused token; `status` is RFC 7628's error status (Kafka: `invalid_token` or
    `insufficient_scope`)."""

    def __init__(self, message: str, status: str = "invalid_token", scope: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.scope = scope

    def json(self) -> str:
        out: dict[str, str] = {"status": self.status}
        if self.scope:
            out["scope"] = self.scope
        return json.dumps(out, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class OAuthBearerToken:
    principal_name: str
    lifetime_ms: int  # `exp`, in ms since the epoch
    scope: frozenset[str] = frozenset()


class TokenValidator(Protocol):
    def validate(self, token: str) -> OAuthBearerToken: ...


def b64url_decode(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as e:
        raise OAuthBearerValidationError(f"Invalid base64url: {e}") from None


def _split(token: str) -> tuple[dict[str, object], dict[str, object], bytes, bytes]:
    parts = token.split(".")
    if len(parts) != 3:
        raise OAuthBearerValidationError("Invalid JWS: expected 3 dot-separated parts")
    try:
        header = json.loads(b64url_decode(parts[0]))
        claims = json.loads(b64url_decode(parts[1]))
    except (ValueError, UnicodeDecodeError) as e:
        raise OAuthBearerValidationError(f"Invalid JWS: {e}") from None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise OAuthBearerValidationError("Invalid JWS: header and claims must be JSON objects")
    return header, claims, f"{parts[0]}.{parts[1]}".encode(), b64url_decode(parts[2])


def _number(claims: Mapping[str, object], name: str, required: bool) -> float | None:
    value = claims.get(name)
    if value is None:
        if required:
            raise OAuthBearerValidationError(f"Required claim missing: {name}")
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise OAuthBearerValidationError(f"The claim had the incorrect type: {name}")
    return float(value)


def _scope(claims: Mapping[str, object], name: str) -> frozenset[str]:
    value = claims.get(name)
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list):
        return frozenset(str(v) for v in value)
    return frozenset()


def _check_times(claims: Mapping[str, object], now_ms: int, skew_ms: int) -> int:
    """Kafka's OAuthBearerValidationUtils: validateIssuedAt, validateExpirationTime, validateTimeConsistency."""
    exp = _number(claims, "exp", True)
    assert exp is not None
    iat = _number(claims, "iat", False)
    if iat is not None and iat * 1000 > now_ms + skew_ms:
        raise OAuthBearerValidationError(
            f"The Issued At value ({iat} seconds) was after the indicated time ({now_ms} ms) plus allowable "
            f"clock skew ({skew_ms} ms)")
    if now_ms - skew_ms >= exp * 1000:
        raise OAuthBearerValidationError(
            f"The indicated time ({now_ms} ms) minus allowable clock skew ({skew_ms} ms) was on or after the "
            f"Expiration Time value ({exp} seconds)")
    if iat is not None and iat > exp:
        raise OAuthBearerValidationError(
            f"The Issued At value ({iat} seconds) was after the Expiration Time value ({exp} seconds)")
    nbf = _number(claims, "nbf", False)
    if nbf is not None and nbf * 1000 > now_ms + skew_ms:
        raise OAuthBearerValidationError(f"The token is not valid before {nbf} seconds")
    return int(exp * 1000)


def _principal(claims: Mapping[str, object], name: str) -> str:
    value = claims.get(name)
    if not isinstance(value, str) or not value.strip():
        raise OAuthBearerValidationError(f"Required claim missing: {name}")
    return value


@dataclass(frozen=True)
class UnsecuredJwsValidator:
    """Kafka's OAuthBearerUnsecuredValidatorCallbackHandler (JAAS options above)."""

    now_ms: Callable[[], int]
    principal_claim: str = "sub"
    scope_claim: str = "scope"
    required_scope: tuple[str, ...] = ()
    clock_skew_ms: int = 0

    @classmethod
    def from_jaas_options(cls, options: Mapping[str, str], now_ms: Callable[[], int]) -> UnsecuredJwsValidator:
        skew = options.get("unsecuredValidatorAllowableClockSkewMs", "0").strip() or "0"
        try:
            skew_ms = int(skew)
        except ValueError:
            raise ValueError(f"Invalid value for unsecuredValidatorAllowableClockSkewMs: {skew}") from None
        if skew_ms < 0:
            raise ValueError(f"Invalid value for unsecuredValidatorAllowableClockSkewMs: {skew}")
        return cls(now_ms, options.get("unsecuredValidatorPrincipalClaimName", "sub").strip() or "sub",
                   options.get("unsecuredValidatorScopeClaimName", "scope").strip() or "scope",
                   tuple(options.get("unsecuredValidatorRequiredScope", "").split()), skew_ms)

    def validate(self, token: str) -> OAuthBearerToken:
        header, claims, _, _ = _split(token)
        if header.get("alg") != "none":
            raise OAuthBearerValidationError("Unsecured JWS must have alg none")
        now = self.now_ms()
        exp_ms = _check_times(claims, now, self.clock_skew_ms)
        principal = _principal(claims, self.principal_claim)
        scope = _scope(claims, self.scope_claim)
        missing = [s for s in self.required_scope if s not in scope]
        if missing:
            raise OAuthBearerValidationError(
                f"The provided scope ({sorted(scope)}) was missing a required scope ({missing[0]}). All "
                f"required scope elements: {list(self.required_scope)}", status="insufficient_scope",
                scope=" ".join(self.required_scope))
        return OAuthBearerToken(principal, exp_ms, scope)


@dataclass(frozen=True, slots=True)
class RsaPublicKey:
    n: int
    e: int

    def verify_pkcs1v15(self, alg: str, message: bytes, signature: bytes) -> bool:
        hash_name, prefix = _RS_HASHES[alg]
        k = (self.n.bit_length() + 7) // 8
        if len(signature) != k:
            return False
        s = int.from_bytes(signature, "big")
        if s >= self.n:
            return False
        em = pow(s, self.e, self.n).to_bytes(k, "big")
        t = prefix + hashlib.new(hash_name, message).digest()
        if k < len(t) + 11:
            return False
        expected = b"\x00\x01" + b"\xff" * (k - len(t) - 3) + b"\x00" + t
        return hmac.compare_digest(em, expected)


def parse_jwks(document: bytes) -> dict[str, RsaPublicKey]:
    """The RSA signing keys of a JWKS document (RFC 7517), by `kid`; other keys are skipped."""
    data = json.loads(document)
    keys: dict[str, RsaPublicKey] = {}
    for jwk in data.get("keys", []) if isinstance(data, dict) else []:
        if not isinstance(jwk, dict) or jwk.get("kty") != "RSA" or jwk.get("use", "sig") != "sig":
            continue
        try:
            n = int.from_bytes(b64url_decode(str(jwk["n"])), "big")
            e = int.from_bytes(b64url_decode(str(jwk["e"])), "big")
        except (KeyError, OAuthBearerValidationError):
            continue
        keys[str(jwk.get("kid", ""))] = RsaPublicKey(n, e)
    return keys


@dataclass
class JwksKeys:
    """The keys last fetched from `sasl.oauthbearer.jwks.endpoint.url`; `request_refresh` is called
    (by the validator) for a `kid` it does not know; the wiring refreshes and calls `update`."""

    keys: dict[str, RsaPublicKey] = field(default_factory=dict)
    request_refresh: Callable[[], None] = field(default=lambda: None)

    def update(self, keys: dict[str, RsaPublicKey]) -> None:
        self.keys = keys


@dataclass(frozen=True)
class JwksValidator:
    """Kafka's OAuthBearerValidatorCallbackHandler over a JWKS (KIP-768)."""

    jwks: JwksKeys
    now_ms: Callable[[], int]
    expected_audience: tuple[str, ...] = ()
    expected_issuer: str | None = None
    clock_skew_ms: int = 30000
    sub_claim: str = "sub"
    scope_claim: str = "scope"

    def validate(self, token: str) -> OAuthBearerToken:
        header, claims, signed, signature = _split(token)
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in _RS_HASHES:
            raise OAuthBearerValidationError(f"Unsupported JWS algorithm {alg!r} (kbroker checks RS256, RS384, RS512)")
        kid = str(header.get("kid", ""))
        key = self.jwks.keys.get(kid)
        if key is None and not kid and len(self.jwks.keys) == 1:
            key = next(iter(self.jwks.keys.values()))
        if key is None:
            self.jwks.request_refresh()
            raise OAuthBearerValidationError(f"No key in the JWKS for kid {kid!r}")
        if not key.verify_pkcs1v15(alg, signed, signature):
            raise OAuthBearerValidationError("JWS signature verification failed")
        exp_ms = _check_times(claims, self.now_ms(), self.clock_skew_ms)
        if self.expected_issuer is not None and claims.get("iss") != self.expected_issuer:
            raise OAuthBearerValidationError(f"Issuer (iss) claim value ({claims.get('iss')}) doesn't match the "
                                             f"expected value ({self.expected_issuer})")
        if self.expected_audience:
            aud = claims.get("aud")
            auds = {aud} if isinstance(aud, str) else set(aud) if isinstance(aud, list) else set()
            if not auds & set(self.expected_audience):
                raise OAuthBearerValidationError(f"Audience (aud) claim {sorted(map(str, auds))} doesn't contain an "
                                                 f"acceptable identifier {list(self.expected_audience)}")
        return OAuthBearerToken(_principal(claims, self.sub_claim), exp_ms, _scope(claims, self.scope_claim))


def parse_client_initial_response(response: bytes) -> tuple[str, str, dict[str, str]]:
    """RFC 7628's client initial response as Kafka's OAuthBearerClientInitialResponse parses it:
    `n,[a=authzid],` then `%x01`-separated key=value pairs, `auth=Bearer <token>` required.
    Returns (token, authorization id, extensions); ValueError when malformed."""
    text = response.decode("utf-8")
    if not text.startswith("n,"):
        raise ValueError("Invalid OAUTHBEARER client first message: no GS2 header")
    gs2_end = text.find(",", 2)
    if gs2_end < 0:
        raise ValueError("Invalid OAUTHBEARER client first message: bad GS2 header")
    authz = text[2:gs2_end]
    if authz and not authz.startswith("a="):
        raise ValueError("Invalid OAUTHBEARER client first message: bad authorization id")
    rest = text[gs2_end + 1:]
    if not rest.startswith("\x01") or not rest.endswith("\x01\x01"):
        raise ValueError("Invalid OAUTHBEARER client first message: bad key/value separators")
    pairs: dict[str, str] = {}
    for kv in rest[1:-2].split("\x01"):
        m = _KV.match(kv)
        if m is None:
            raise ValueError(f"Invalid OAUTHBEARER key/value pair: {kv!r}")
        pairs[m.group(1)] = m.group(2)
    auth = pairs.pop("auth", None)
    m = _AUTH.match(auth or "")
    if m is None:
        raise ValueError("Invalid OAUTHBEARER client first message: no Bearer token")
    return m.group(1), authz[2:], pairs


class OAuthBearerServer:
    """The server side of one exchange (Kafka's OAuthBearerSaslServer)."""

    def __init__(self, validator: TokenValidator) -> None:
        self._validator = validator
        self._complete = False
        self._authorization_id = ""
        self._error: str | None = None
        self.token: OAuthBearerToken | None = None

    @property
    def complete(self) -> bool:
        return self._complete

    @property
    def authorization_id(self) -> str:
        return self._authorization_id

    def evaluate(self, response: bytes) -> bytes:
        """The next server message. Raises `OAuthBearerFailure` (its message goes to the client) when
        the client answers an error challenge, or sends garbage."""
        if self._error is not None:
            if response == b"\x01":
                raise OAuthBearerFailure(self._error)
            raise OAuthBearerFailure("Received %x01 response from client after it received our error")
        try:
            token, authzid, _extensions = parse_client_initial_response(response)
        except (ValueError, UnicodeDecodeError) as e:
            raise OAuthBearerFailure(f"Authentication failed: {e}") from None
        try:
            validated = self._validator.validate(token)
        except OAuthBearerValidationError as e:
            self._error = e.json()
            self.failure_detail = str(e)
            return self._error.encode()
        if authzid and authzid != validated.principal_name:
            raise OAuthBearerFailure(
                f"Authentication failed: Client requested an authorization id ({authzid}) that is different "
                f"from the token's principal name ({validated.principal_name})")
        self.token = validated
        self._authorization_id = validated.principal_name
        self._complete = True
        return b""

    failure_detail: str | None = None


class OAuthBearerFailure(Exception):
    """The exchange failed; the message is the client's (Kafka's SaslAuthenticationException)."""

