"""Principals: Kafka's `KafkaPrincipal` and the SSL principal from a certificate subject.

`DefaultKafkaPrincipalBuilder` names an SSL client by its certificate's subject distinguished name in
RFC 2253 form (Java's `X500Principal.getName()`: most specific RDN first, `CN=alice,OU=eng,O=acme,C=US`),
passed through `ssl.principal.mapping.rules` (KIP-371, Kafka's `SslPrincipalMapper`): a list of
`RULE:pattern/replacement/[LU]` and `DEFAULT`, the first rule whose pattern matches the whole DN wins,
`DEFAULT` keeps the DN; no match is an error (Kafka: "No rules apply to <dn>, rules <rules>"), which
fails the connection. A TLS connection without a client certificate (`ssl.client.auth=none` or
`requested`) is `User:ANONYMOUS`, as in Kafka.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def user(cls, name: str) -> KafkaPrincipal:
        return cls(USER_TYPE, name)


ANONYMOUS = KafkaPrincipal.user("ANONYMOUS")

# Java's X500Name keywords for RFC 2253 output; Python's ssl names the attributes by their long names.
_RFC2253_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
_OIDS = {"emailAddress": "1.2.840.113549.1.9.1", "serialNumber": "2.5.4.5", "title": "2.5.4.12"}


def _escape(value: str) -> str:
    out = []
    for i, c in enumerate(value):
        if c in ',+"\\<>;' or (c == "#" and i == 0) or (c == " " and i in (0, len(value) - 1)):
            out.append("\\" + c)
        else:
            out.append(c)
    return "".join(out)


def dn_from_peercert(peercert: object) -> str | None:
    """The RFC 2253 DN of `ssl.SSLSocket.getpeercert()`'s subject, or None without a certificate."""
    if not isinstance(peercert, dict) or not peercert.get("subject"):
        return None
    rdns: list[str] = []
    for rdn in peercert["subject"]:
        parts = []
        for attr, value in rdn:
            key = _RFC2253_KEYWORDS.get(attr) or _OIDS.get(attr) or attr
            if key in _OIDS.values():
                # Java renders attributes without a keyword as OID=#hex of the DER value (IA5String here).
                raw = value.encode("utf-8")
                parts.append(f"{key}=#16{len(raw):02x}{raw.hex()}")
            else:
                parts.append(f"{key}={_escape(value)}")
        rdns.append("+".join(parts))
    return ",".join(reversed(rdns))


class PrincipalMappingError(ValueError):
    """No `ssl.principal.mapping.rules` rule applies to a DN (the connection fails)."""


_RULE = re.compile(
    r"\s*((DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?))\s*(,\s*|$)"
)


@dataclass(frozen=True, slots=True)
class _Rule:
    default: bool
    pattern: re.Pattern[str] | None = None
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        if self.default:
            return dn
        assert self.pattern is not None
        if self.pattern.fullmatch(dn) is None:
            return None
        # Java's Matcher.replaceAll: $1 group references; the replacement applies to every match.
        result = self.pattern.sub(re.sub(r"\$(\d)", r"\\\1", self.replacement), dn)
        if self.case == "L":
            result = result.lower()
        elif self.case == "U":
            result = result.upper()
        return result


class SslPrincipalMapper:
    """Kafka's `SslPrincipalMapper.fromRules`: `ssl.principal.mapping.rules` (default `DEFAULT`)."""

    def __init__(self, rules: str = "DEFAULT") -> None:
        self.rules_text = rules
        self._rules = self._parse(rules)

    @staticmethod
    def _parse(rules: str) -> list[_Rule]:
        parsed: list[_Rule] = []
        text = rules.strip()
        pos = 0
        while pos < len(text):
            m = _RULE.match(text, pos)
            if m is None or m.end() == pos:
                raise ValueError(f"Invalid rule: {text[pos:]}")
            if m.group(8):
                raise ValueError(f"Invalid rule: {m.group(8)}")
            if m.group(2):
                parsed.append(_Rule(True))
            else:
                parsed.append(_Rule(False, re.compile(m.group(3)), m.group(5), m.group(7) or ""))
            pos = m.end()
        return parsed or [_Rule(True)]

    def name(self, dn: str) -> str:
        for rule in self._rules:
            result = rule.apply(dn)
            if result is not None:
                return result
        raise PrincipalMappingError(f"No rules apply to {dn}, rules {self.rules_text}")

    def principal(self, peercert: object) -> KafkaPrincipal:
        dn = dn_from_peercert(peercert)
        return ANONYMOUS if dn is None else KafkaPrincipal.user(self.name(dn))


# -- KIP-590: the principal an Envelope carries ------------------------------------------------------
# Kafka's DefaultKafkaPrincipalBuilder.serialize: `MessageUtil.toVersionPrefixedBytes` of a
# DefaultPrincipalData v0 (flexible): int16 version, compact strings Type and Name, a boolean
# TokenAuthenticated, an empty tagged-field section.

class PrincipalSerdeError(ValueError):
    pass


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def serialize_principal(principal: KafkaPrincipal, token_authenticated: bool = False) -> bytes:
    out = bytearray(b"\x00\x00")
    for text in (principal.principal_type, principal.name):
        raw = text.encode("utf-8")
        out += _uvarint(len(raw) + 1) + raw
    out.append(1 if token_authenticated else 0)
    out.append(0)  # no tagged fields
    return bytes(out)


def deserialize_principal(data: bytes) -> KafkaPrincipal:
    """The inverse (Kafka's DefaultKafkaPrincipalBuilder.deserialize); PrincipalSerdeError when malformed."""
    buf = memoryview(data)
    if len(buf) < 2 or int.from_bytes(buf[:2], "big") != 0:
        raise PrincipalSerdeError("unsupported DefaultPrincipalData version")
    pos = 2

    def uvarint() -> int:
        nonlocal pos
        shift = result = 0
        while True:
            if pos >= len(buf) or shift > 28:
                raise PrincipalSerdeError("truncated DefaultPrincipalData")
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    fields = []
    for _ in range(2):
        n = uvarint() - 1
        if n < 0 or pos + n > len(buf):
            raise PrincipalSerdeError("bad string in DefaultPrincipalData")
        try:
            fields.append(bytes(buf[pos:pos + n]).decode("utf-8"))
        except UnicodeDecodeError:
            raise PrincipalSerdeError("bad string in DefaultPrincipalData") from None
        pos += n
    if pos >= len(buf):
        raise PrincipalSerdeError("truncated DefaultPrincipalData")
    return KafkaPrincipal(fields[0], fields[1])


def parse_principal(text: str) -> KafkaPrincipal:
    """`User:alice` -> KafkaPrincipal("User", "alice") (Kafka's SecurityUtils.parseKafkaPrincipal)."""
    principal_type, sep, name = text.partition(":")
    if not sep:
        raise ValueError(f"expected a string in format principalType:principalName but got {text}")
    return KafkaPrincipal(principal_type, name)
