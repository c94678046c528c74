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
