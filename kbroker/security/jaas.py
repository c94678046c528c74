"""`sasl.jaas.config` values, parsed as Kafka's `JaasConfig` does (one login module entry).

`org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="s"
user_admin="s" user_alice="a";` -> `JaasEntry(login_module=..., control_flag="required",
options={...})`. Values are quoted strings (with backslash escapes) or bare tokens. PLAIN's users are
the `user_<name>` options (Kafka's `PlainServerCallbackHandler`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"

_TOKEN = re.compile(r'\s*(?:"((?:\\.|[^"\\])*)"|([^\s=;"]+)|(=)|(;))')


class JaasConfigError(ValueError):
    pass


@dataclass(frozen=True)
class JaasEntry:
    login_module: str
    control_flag: str
    options: dict[str, str] = field(default_factory=dict)

    def plain_users(self) -> dict[str, str]:
        """PlainLoginModule's `user_<name>="<password>"` options."""
        return {k[len("user_"):]: v for k, v in self.options.items() if k.startswith("user_")}


def parse_jaas_config(text: str) -> JaasEntry:
    tokens: list[tuple[str, str]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise JaasConfigError(f"Value not specified for key in JAAS config: {text[pos:]!r}")
        pos = m.end()
        if m.group(1) is not None:
            tokens.append(("str", re.sub(r"\\(.)", r"\1", m.group(1))))
        elif m.group(2) is not None:
            tokens.append(("word", m.group(2)))
        elif m.group(3):
            tokens.append(("=", "="))
        elif m.group(4):
            tokens.append((";", ";"))
        if text[pos:].strip() == "":
            break
    if len(tokens) < 3 or tokens[-1][0] != ";":
        raise JaasConfigError("JAAS config entry not terminated by semi-colon")
    if tokens[0][0] != "word" or tokens[1][0] != "word":
        raise JaasConfigError("Invalid JAAS config: expected a login module and a control flag")
    flag = tokens[1][1].lower()
    if flag not in ("required", "requisite", "sufficient", "optional"):
        raise JaasConfigError(f"Invalid control flag {tokens[1][1]} in JAAS config")
    options: dict[str, str] = {}
    rest = tokens[2:-1]
    if any(t[0] == ";" for t in rest):
        raise JaasConfigError("Multiple JAAS login modules are not supported in sasl.jaas.config")
    if len(rest) % 3:
        raise JaasConfigError("Invalid JAAS config: an option without a value")
    for i in range(0, len(rest), 3):
        key, eq, value = rest[i : i + 3]
        if key[0] != "word" or eq[0] != "=" or value[0] not in ("str", "word"):
            raise JaasConfigError(f"Value not specified for key '{key[1]}' in JAAS config")
        options[key[1]] = value[1]
    return JaasEntry(tokens[0][1], flag, options)
