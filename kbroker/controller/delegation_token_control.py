"""Delegation tokens on the controller: Kafka's `DelegationTokenControlManager` (KIP-48, KIP-373).

CreateDelegationToken, RenewDelegationToken and ExpireDelegationToken become DelegationTokenRecord /
RemoveDelegationTokenRecord in the metadata log; every node derives the token's HMAC itself from
`delegation.token.secret.key` (kbroker.security.delegation_token.create_hmac), so the HMAC is never
written. The API layer (broker or controller listener) has already refused what Kafka refuses before
the controller (token-authenticated or non-SASL connections, CreateTokens on another owner).

- Tokens are disabled while `delegation.token.secret.key` is unset: DELEGATION_TOKEN_AUTH_DISABLED;
  a `metadata.version` below 3.6-IV2 answers UNSUPPORTED_VERSION.
- Create: owner = the request's owner (v3+, KIP-373) else the requester; max lifetime =
  min(`delegation.token.max.lifetime.ms`, the request's when > 0); expiry = min(max timestamp, now +
  `delegation.token.expiry.time.ms`); renewers must be `User` principals (INVALID_PRINCIPAL_TYPE).
- Renew: the token is found by its HMAC (DELEGATION_TOKEN_NOT_FOUND); an expired one is
  DELEGATION_TOKEN_EXPIRED; only the owner or a renewer (DELEGATION_TOKEN_OWNER_MISMATCH); the new expiry
  is min(max timestamp, now + min(expiry time, the request's renew period when > 0)).
- Expire: same checks, but a negative period removes the token at once (RemoveDelegationTokenRecord)
  even if it has expired; otherwise the expiry becomes min(max timestamp, now + period).
- The sweep (every `delegation.token.expiry.check.interval.ms` on the active controller) removes each
  token whose expiry or max timestamp has passed.

Pure: reads the image it is given and a clock, returns `ControllerResult`s.
"""

from __future__ import annotations

import base64
import hmac as _hmac
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from kbroker.clock import Clock
from kbroker.controller.result import ControllerResult, MetadataRecord
from kbroker.metadata.image import DelegationTokenData, DelegationTokenImage
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.create_delegation_token import (
    CreateDelegationTokenRequest,
    CreateDelegationTokenResponse,
)
from kbroker.protocol.messages.expire_delegation_token import (
    ExpireDelegationTokenRequest,
    ExpireDelegationTokenResponse,
)
from kbroker.protocol.messages.renew_delegation_token import (
    RenewDelegationTokenRequest,
    RenewDelegationTokenResponse,
)
from kbroker.protocol.metadata_records import DelegationTokenRecord, RemoveDelegationTokenRecord
from kbroker.security.delegation_token import allowed_to_renew, create_hmac

log = logging.getLogger(__name__)

USER_TYPE = "User"
_LONG_MAX = (1 << 63) - 1
DELEGATION_TOKEN_METADATA_VERSION = 14  # MetadataVersion.IBP_3_6_IV2


@dataclass(frozen=True, slots=True)
class DelegationTokenConfig:
    """The broker keys of delegation tokens (Kafka's names and defaults)."""

    secret_key: str | None = None  # delegation.token.secret.key (None or empty: tokens disabled)
    max_lifetime_ms: int = 604800000  # delegation.token.max.lifetime.ms (7 days)
    expiry_time_ms: int = 86400000  # delegation.token.expiry.time.ms (1 day)
    expiry_check_interval_ms: int = 3600000  # delegation.token.expiry.check.interval.ms (1 hour)

    @property
    def enabled(self) -> bool:
        return bool(self.secret_key)


def _sum(now: int, duration: int) -> int:
    """Kafka's overflow-safe `sum`: now + duration, capped at Long.MAX_VALUE."""
    return _LONG_MAX if now > _LONG_MAX - duration else now + duration


def _split(principal: str) -> tuple[str, str]:
    kind, _, name = principal.partition(":")
    return kind, name


def new_token_id() -> str:
    """Kafka's `Uuid.randomUuid().toString()`: 16 random bytes, URL-safe base64 without padding (22
    characters), never starting with '-' (Kafka draws again, so ids never look like command-line flags)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not text.startswith("-"):
            return text


def token_record(token: DelegationTokenData, expiration_timestamp: int | None = None) -> DelegationTokenRecord:
    return DelegationTokenRecord(
        owner=token.owner, requester=token.requester, renewers=list(token.renewers),
        issue_timestamp=token.issue_timestamp, max_timestamp=token.max_timestamp,
        expiration_timestamp=token.expiration_timestamp if expiration_timestamp is None else expiration_timestamp,
        token_id=token.token_id)


class DelegationTokenControlManager:
    def __init__(self, image: Callable[[], DelegationTokenImage], config: DelegationTokenConfig,
                 clock: Clock, metadata_version: Callable[[], int | None] = lambda: None) -> None:
        self._image = image
        self._metadata_version = metadata_version
        self.config = config
        self._clock = clock

    def is_enabled(self) -> bool:
        return self.config.enabled

    def _supported(self) -> bool:
        """`MetadataVersion.isDelegationTokenSupported`: 3.6-IV2 (level 14) or later, else UNSUPPORTED_VERSION."""
        level = self._metadata_version()
        return level is None or level >= DELEGATION_TOKEN_METADATA_VERSION

    def _token_for_hmac(self, mac: bytes) -> DelegationTokenData | None:
        secret = self.config.secret_key
        assert secret
        for token in self._image().tokens.values():
            if _hmac.compare_digest(create_hmac(token.token_id, secret), mac):
                return token
        return None

    def create_delegation_token(self, requester: str, request: CreateDelegationTokenRequest
                                ) -> ControllerResult[CreateDelegationTokenResponse]:
        now = self._clock()
        owner = requester
        if request.owner_principal_name:
            owner = f"{request.owner_principal_type}:{request.owner_principal_name}"
        owner_type, owner_name = _split(owner)
        requester_type, requester_name = _split(requester)
        response = CreateDelegationTokenResponse(
            error_code=0, principal_type=owner_type, principal_name=owner_name,
            token_requester_principal_type=requester_type, token_requester_principal_name=requester_name)
        if not self.is_enabled():
            response.error_code = int(ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED)
            return ControllerResult(response)
        if not self._supported():
            response.error_code = int(ErrorCode.UNSUPPORTED_VERSION)
            return ControllerResult(response)
        max_lifetime = self.config.max_lifetime_ms
        if request.max_lifetime_ms > 0:
            max_lifetime = min(max_lifetime, request.max_lifetime_ms)
        max_timestamp = _sum(now, max_lifetime)
        expiry_timestamp = min(max_timestamp, _sum(now, self.config.expiry_time_ms))
        renewers = []
        for r in request.renewers:
            if r.principal_type != USER_TYPE:
                response.error_code = int(ErrorCode.INVALID_PRINCIPAL_TYPE)
                return ControllerResult(response)
            renewers.append(f"{r.principal_type}:{r.principal_name}")
        token_id = new_token_id()
        secret = self.config.secret_key
        assert secret
        token = DelegationTokenData(token_id, owner, requester, tuple(renewers), now, max_timestamp,
                                    expiry_timestamp)
        response.issue_timestamp_ms = now
        response.expiry_timestamp_ms = expiry_timestamp
        response.max_timestamp_ms = max_timestamp
        response.token_id = token_id
        response.hmac = create_hmac(token_id, secret)
        return ControllerResult(response, [token_record(token)])

    def renew_delegation_token(self, principal: str, request: RenewDelegationTokenRequest
                               ) -> ControllerResult[RenewDelegationTokenResponse]:
        now = self._clock()
        if not self.is_enabled():
            return _renew_error(ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED)
        if not self._supported():
            return _renew_error(ErrorCode.UNSUPPORTED_VERSION)
        token = self._token_for_hmac(bytes(request.hmac))
        if token is None:
            return _renew_error(ErrorCode.DELEGATION_TOKEN_NOT_FOUND)
        if token.max_timestamp < now or token.expiration_timestamp < now:
            return _renew_error(ErrorCode.DELEGATION_TOKEN_EXPIRED)
        if not allowed_to_renew(token.owner, token.renewers, principal):
            return _renew_error(ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH)
        renew_lifetime = self.config.expiry_time_ms
        if request.renew_period_ms > 0:
            renew_lifetime = min(renew_lifetime, request.renew_period_ms)
        expiry_timestamp = min(token.max_timestamp, now + renew_lifetime)
        return ControllerResult(RenewDelegationTokenResponse(error_code=0, expiry_timestamp_ms=expiry_timestamp),
                                [token_record(token, expiry_timestamp)])

    def expire_delegation_token(self, principal: str, request: ExpireDelegationTokenRequest
                                ) -> ControllerResult[ExpireDelegationTokenResponse]:
        now = self._clock()
        if not self.is_enabled():
            return _expire_error(ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED)
        if not self._supported():
            return _expire_error(ErrorCode.UNSUPPORTED_VERSION)
        token = self._token_for_hmac(bytes(request.hmac))
        if token is None:
            return _expire_error(ErrorCode.DELEGATION_TOKEN_NOT_FOUND)
        if not allowed_to_renew(token.owner, token.renewers, principal):
            return _expire_error(ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH)
        if request.expiry_time_period_ms < 0:  # expire at once
            return ControllerResult(ExpireDelegationTokenResponse(error_code=0, expiry_timestamp_ms=now),
                                    [RemoveDelegationTokenRecord(token_id=token.token_id)])
        if token.max_timestamp < now or token.expiration_timestamp < now:
            return _expire_error(ErrorCode.DELEGATION_TOKEN_EXPIRED)
        expiry_timestamp = min(token.max_timestamp, _sum(now, request.expiry_time_period_ms))
        return ControllerResult(ExpireDelegationTokenResponse(error_code=0, expiry_timestamp_ms=expiry_timestamp),
                                [token_record(token, expiry_timestamp)])

    def sweep_expired_delegation_tokens(self) -> list[MetadataRecord]:
        """RemoveDelegationTokenRecords for every token past its expiry or max timestamp."""
        now = self._clock()
        records: list[MetadataRecord] = []
        for token in self._image().tokens.values():
            if token.max_timestamp < now or token.expiration_timestamp < now:
                log.info("Delegation token expired for token: %s for owner: %s", token.token_id, token.owner)
                records.append(RemoveDelegationTokenRecord(token_id=token.token_id))
        return records


def _renew_error(error: ErrorCode) -> ControllerResult[RenewDelegationTokenResponse]:
    # Kafka's controller answers an error with the response data's default expiry (0).
    return ControllerResult(RenewDelegationTokenResponse(error_code=int(error), expiry_timestamp_ms=0))


def _expire_error(error: ErrorCode) -> ControllerResult[ExpireDelegationTokenResponse]:
    return ControllerResult(ExpireDelegationTokenResponse(error_code=int(error), expiry_timestamp_ms=0))
