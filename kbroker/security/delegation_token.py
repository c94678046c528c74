"""Delegation token secrets and SCRAM credentials (KIP-48): Kafka's `DelegationTokenManager.createHmac`
and `DelegationTokenCache`, sans-IO.

A token is public information (id, owner, requester, renewers, timestamps: the DelegationTokenRecord of
the metadata log) plus a secret every node derives alone: HMAC = HmacSHA512(key =
`delegation.token.secret.key` as UTF-8, message = token id as UTF-8). The client's SCRAM password is
base64(HMAC) (Kafka's `DelegationToken.hmacAsBase64String`), its SCRAM user name the token id, with the
`tokenauth=true` extension in the client-first message (`ScramLoginModule` option `tokenauth`). The
broker keeps a SCRAM credential for that password per mechanism at the mechanism's minimum iterations
(4096) with a random salt, as Kafka's `DelegationTokenManager.prepareScramCredentials`; it is derived
once per token and node (`TokenCredentialCache`).

A token-authenticated connection's principal is `User:<owner name>` (Kafka's
`ScramServerCallbackHandler`: `tokenCache.owner(tokenId)`), flagged token-authenticated: such a
connection may not create, renew, expire or describe tokens (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED).

Imports nothing above kbroker.security (no image types: the broker wiring adapts the image to
`TokenCredentials`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from kbroker.security import scram

HMAC_ALGORITHM = "sha512"  # Kafka's DelegationTokenManager.DefaultHmacAlgorithm "HmacSHA512"
ERROR_TIMESTAMP = -1  # DelegationTokenManager.ErrorTimestamp: expiry_timestamp_ms of a failed renew/expire


def create_hmac(token_id: str, secret_key: str) -> bytes:
    """HmacSHA512 of the token id keyed with the secret key (both UTF-8), as every Kafka node computes it."""
    return hmac.new(secret_key.encode("utf-8"), token_id.encode("utf-8"), hashlib.sha512).digest()


def hmac_as_base64(mac: bytes) -> str:
    """The token's SCRAM password (Kafka's `DelegationToken.hmacAsBase64String`)."""
    return base64.b64encode(mac).decode("ascii")


def principal_name(principal: str) -> str:
    """"User:alice" -> "alice" (the name part of a "Type:name" principal string)."""
    return principal.partition(":")[2] if ":" in principal else principal


@dataclass(frozen=True, slots=True)
class TokenCredential:
    """What SCRAM authentication with a token needs: the credential, the owner, the expiry."""

    credential: scram.ScramCredential
    owner: str  # the owner's principal name (authentication makes it `User:<owner>`)
    expiry_timestamp_ms: int


class TokenCredentials(Protocol):
    """(SCRAM mechanism, token id) -> the token's credential, or None for an unknown token."""

    def __call__(self, mechanism: str, token_id: str) -> TokenCredential | None: ...


class TokenCredentialCache:
    """The SCRAM credentials of tokens, by (mechanism, token id, HMAC): derived once (PBKDF2 at 4096
    iterations is milliseconds), dropped with `retain` when tokens disappear from the image."""

    def __init__(self) -> None:
        self._credentials: dict[tuple[str, str, bytes], scram.ScramCredential] = {}

    def credential(self, mechanism: str, token_id: str, mac: bytes) -> scram.ScramCredential:
        key = (mechanism, token_id, mac)
        cred = self._credentials.get(key)
        if cred is None:
            cred = scram.new_credential(mechanism, hmac_as_base64(mac), iterations=scram.MIN_ITERATIONS)
            self._credentials[key] = cred
        return cred

    def retain(self, token_ids: set[str]) -> None:
        for key in [k for k in self._credentials if k[1] not in token_ids]:
            del self._credentials[key]


def allowed_to_renew(owner: str, renewers: Sequence[str], principal: str) -> bool:
    """Kafka's `DelegationTokenControlManager.allowedToRenew`: the owner or a renewer (not the requester)."""
    return principal == owner or principal in renewers


def owner_or_renewer(owner: str, token_requester: str, renewers: Sequence[str], principal: str) -> bool:
    """Kafka's `TokenInformation.ownerOrRenewer`: the owner, the token's requester (KIP-373) or a renewer."""
    return principal in (owner, token_requester) or principal in renewers


def filter_token(requester: str, owners: Sequence[str] | None, token_id: str, owner: str, token_requester: str,
                 renewers: Sequence[str], authorize_token: Callable[[str], bool],
                 authorize_requester: Callable[[str], bool]) -> bool:
    """Kafka's `DelegationTokenManager.filterToken` (DescribeDelegationToken): a token is described when
    it matches the requested owners (its owner, requester or a renewer is one of them; None: every
    token), and the one asking is its owner, requester or a renewer, or may DESCRIBE the
    DELEGATION_TOKEN resource of its id, or DESCRIBE_TOKENS on the USER resource of its owner (KIP-373)."""
    if owners is not None and not any(owner_or_renewer(owner, token_requester, renewers, o) for o in owners):
        return False
    if owner_or_renewer(owner, token_requester, renewers, requester):
        return True
    return authorize_token(token_id) or authorize_requester(owner)
