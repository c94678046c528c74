"""SCRAM credentials and messages (RFC 5802, RFC 7677), as Kafka's `ScramFormatter` and `ScramMessages`.

A credential is what the broker stores (Kafka's `ScramCredential`, the `UserScramCredentialRecord`):
salt, StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey = HMAC(SaltedPassword, "Server Key")
and the iteration count; never the password. SaltedPassword = PBKDF2-HMAC(password, salt, i).
Kafka's mechanisms are SCRAM-SHA-256 and SCRAM-SHA-512, 4096 to 16384 iterations
(`ScramMechanism.minIterations`/`maxIterations`).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass

MECHANISMS: dict[str, str] = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# The mechanism type numbers of DescribeUserScramCredentials / UserScramCredentialRecord.
MECHANISM_TYPES: dict[str, int] = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def hmac_digest(hash_name: str, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hash_name).digest()


def salted_password(hash_name: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(hash_name, password.encode("utf-8"), salt, iterations)


def client_key(hash_name: str, salted: bytes) -> bytes:
    return hmac_digest(hash_name, salted, b"Client Key")


def new_credential(mechanism: str, password: str, *, salt: bytes | None = None,
                   iterations: int = MIN_ITERATIONS) -> ScramCredential:
    hash_name = MECHANISMS[mechanism]
    salt = os.urandom(32) if salt is None else salt
    salted = salted_password(hash_name, password, salt, iterations)
    stored = hashlib.new(hash_name, client_key(hash_name, salted)).digest()
    server = hmac_digest(hash_name, salted, b"Server Key")
    return ScramCredential(salt, stored, server, iterations)


def xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def parse_attributes(message: str) -> dict[str, str]:
    """`a=1,b=2` -> {'a': '1', 'b': '2'}; raises ValueError on a malformed attribute."""
    out: dict[str, str] = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ValueError(f"Invalid SCRAM attribute {part!r}")
        out[part[0]] = part[2:]
    return out


def decode_sasl_name(name: str) -> str:
    """RFC 5802 saslname: `=2C` is ',' and `=3D` is '='; any other '=' is invalid."""
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise ValueError(f"Invalid username: {name}")
    return name.replace("=2C", ",").replace("=3D", "=")


def encode_sasl_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")
