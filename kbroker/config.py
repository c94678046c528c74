"""Broker configuration: a loaded, validated, typed server.properties (`KafkaConfig`).

Owns `KafkaConfig`, the `.properties` file parser, listener parsing (`Endpoint`) and the checks that
span several keys. How broker keys become topic-level defaults (log.retention.hours -> retention.ms)
is resolved in one place, `kbroker.log.config.LogConfig.from_props`. The key table itself
(`CONFIG_DEFS`: types, defaults, validators) lives in `kbroker.config_defs`; its names are re-exported
here so `from kbroker.config import CONFIG_DEFS, ConfigError, ...` keeps working. Must not import
kbroker.net or kbroker.api.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbroker.client.security import (
    PLAINTEXT_SECURITY,
    ClientSecurity,
    SaslClientCredentials,
    TlsClientSettings,
    build_client_context,
)
from kbroker.config_defs import (
    CONFIG_DEFS,
    DEFAULT_CONFIG,
    INT_MAX,
    LONG_MAX,
    STATIC_BROKER_CONFIG,
    ConfigDef,
    ConfigError,
    Validator,
    at_least,
    between,
    one_of,
)

__all__ = [
    "CONFIG_DEFS",
    "DEFAULT_CONFIG",
    "INT_MAX",
    "LONG_MAX",
    "STATIC_BROKER_CONFIG",
    "ConfigDef",
    "ConfigError",
    "Endpoint",
    "KafkaConfig",
    "Validator",
    "at_least",
    "between",
    "format_value",
    "one_of",
    "parse_endpoints",
    "parse_properties",
]

log = logging.getLogger(__name__)

_PER_LISTENER = re.compile(r"^listener\.name\.[^.]+\.(.+)$")


def unsecured_login_token(options: Mapping[str, str]) -> str:
    """Kafka's OAuthBearerUnsecuredLoginCallbackHandler: an unsecured JWS (`alg: none`) from the JAAS
    options `unsecuredLoginStringClaim_<name>`, `unsecuredLoginNumberClaim_<name>`,
    `unsecuredLoginListClaim_<name>` (first character the separator) and
    `unsecuredLoginLifetimeSeconds` (default 3600); `iat` and `exp` added."""
    import base64
    import json
    import time

    # Millisecond precision, as Kafka's handler (time.milliseconds() / 1000.0): a finer `iat` can lie
    # a fraction of a millisecond after a validator's clock read in the same millisecond and be
    # refused ("Issued At ... was after the indicated time", allowable clock skew 0).
    now = int(time.time() * 1000) / 1000.0
    claims: dict[str, object] = {}
    for key, value in options.items():
        for prefix, kind in (("unsecuredLoginStringClaim_", "s"), ("unsecuredLoginNumberClaim_", "n"),
                             ("unsecuredLoginListClaim_", "l")):
            if key.startswith(prefix) and len(key) > len(prefix):
                name = key[len(prefix):]
                if kind == "s":
                    claims[name] = value
                elif kind == "n":
                    claims[name] = float(value) if "." in value else int(value)
                else:
                    claims[name] = [v for v in value[1:].split(value[0])] if value else []
    claims.setdefault("iat", now)
    claims.setdefault("exp", now + float(options.get("unsecuredLoginLifetimeSeconds", "3600")))

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).decode().rstrip("=")

    return f"{b64(json.dumps({'alg': 'none'}).encode())}.{b64(json.dumps(claims).encode())}."


def _per_listener_key(key: str) -> bool:
    """`listener.name.<l>.<key>` of a known key, or of a mechanism's JAAS entry / server callback handler."""
    m = _PER_LISTENER.match(key)
    if m is None:
        return False
    suffix = m.group(1)
    return suffix in CONFIG_DEFS or suffix.endswith((".sasl.jaas.config", ".sasl.server.callback.handler.class"))


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
# What kbroker's own outbound connections can log in with (kbroker/client/security.py).
CLIENT_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


# --- parsing -------------------------------------------------------------------------------

_TRUE = {"true"}
_FALSE = {"false"}


def _parse_value(d: ConfigDef, raw: str) -> Any:
    """Turn the text of a property into Kafka's typed value (ConfigDef.parseType)."""
    text = raw.strip()
    name = d.name
    if d.type in ("int", "long", "short"):
        if text == "" and d.default is None:
            return None
        try:
            value = int(text)
        except ValueError:
            raise ConfigError(
                f"Invalid value {raw} for configuration {name}: Not a number of type {d.type.upper()}"
            ) from None
        limit = {"int": INT_MAX, "long": LONG_MAX, "short": 2**15 - 1}[d.type]
        if not -limit - 1 <= value <= limit:
            raise ConfigError(
                f"Invalid value {raw} for configuration {name}: Not a number of type {d.type.upper()}"
            )
        return value
    if d.type == "double":
        try:
            return float(text)
        except ValueError:
            raise ConfigError(
                f"Invalid value {raw} for configuration {name}: Not a number of type DOUBLE"
            ) from None
    if d.type == "boolean":
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise ConfigError(
            f"Invalid value {raw} for configuration {name}: Expected value to be either true or false"
        )
    if d.type == "list":
        return [item.strip() for item in text.split(",") if item.strip()]
    return text


_UNICODE_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})")
_SIMPLE_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and _UNICODE_ESCAPE.match(text, i):
                out.append(chr(int(text[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append(_SIMPLE_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def parse_properties(text: str) -> dict[str, str]:
    """Parse java.util.Properties text: comments (# !), `=`/`:`/space separators, `\\` continuations."""
    result: dict[str, str] = {}
    logical: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip()
        i += 1
        if not logical and (not line or line[0] in "#!"):
            continue
        # A line ending in an odd number of backslashes continues on the next line.
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            logical.append(line[:-1])
            if i < len(lines):
                continue
        else:
            logical.append(line)
        entry = "".join(logical)
        logical = []
        m = re.match(r"((?:\\.|[^=:\s\\])*)\s*[=:]?\s*(.*)$", entry)
        if m is None:
            continue
        key = _unescape(m.group(1))
        if key:
            result[key] = _unescape(m.group(2))
    return result


# --- typed helpers -------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    name: str
    host: str
    port: int
    security_protocol: str

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


_LISTENER = re.compile(r"^([A-Za-z0-9_.-]+)://(\[[0-9A-Fa-f:.]+\]|[^:\[\]]*):(-?\d+)$")


def parse_endpoints(name: str, items: list[str], protocol_map: dict[str, str]) -> list[Endpoint]:
    endpoints: list[Endpoint] = []
    seen: set[str] = set()
    for item in items:
        m = _LISTENER.match(item.strip())
        if m is None:
            raise ConfigError(
                f"Invalid value {item} for configuration {name}: listener must be NAME://HOST:PORT"
            )
        listener, host, port = m.group(1).upper(), m.group(2).strip("[]"), int(m.group(3))
        if not 0 <= port <= 65535:
            raise ConfigError(f"Invalid value {item} for configuration {name}: port {port} is out of range")
        if listener in seen:
            raise ConfigError(
                f"Invalid value {item} for configuration {name}: listener {listener} appears twice"
            )
        seen.add(listener)
        protocol = protocol_map.get(listener)
        if protocol is None:
            raise ConfigError(
                f"Invalid value {item} for configuration {name}: no security protocol defined for "
                f"listener {listener} in listener.security.protocol.map"
            )
        endpoints.append(Endpoint(listener, host, port, protocol))
    return endpoints


def suggest_keys(unknown: list[str]) -> dict[str, str]:
    """For each unknown key, the nearest key kbroker knows, when one is close (a typo, not a new key)."""
    import difflib

    found: dict[str, str] = {}
    for key in unknown:
        near = difflib.get_close_matches(key, CONFIG_DEFS.keys(), n=1, cutoff=0.8)
        if near:
            found[key] = near[0]
    return found


class KafkaConfig:
    """A validated broker configuration. `config[key]` is the typed value (None when unset, no default)."""

    def __init__(self, props: Mapping[str, str] | None = None) -> None:
        props = dict(props or {})
        self.originals: dict[str, str] = props
        self._values: dict[str, Any] = {}
        self._sources: dict[str, str] = {}
        self.unknown_keys: list[str] = sorted(k for k in props if k not in CONFIG_DEFS and not _per_listener_key(k))
        self._listeners: list[Endpoint] | None = None
        self._advertised: list[Endpoint] | None = None
        # Set by `with_implicit_quorum`: the controller listener and voter were added to a single-node config.
        self.implicit_quorum = False
        # ... and the socket of that listener, bound and listening since the port was picked: the server
        # takes it over (`listener_endpoint` -> `KafkaServer.start`), so no other process can take the port
        # in between (it was bound, released and bound again a second later: a race).
        self.implicit_controller_socket: socket.socket | None = None
        for name, d in CONFIG_DEFS.items():
            if name in props:
                value = _parse_value(d, props[name])
                self._sources[name] = STATIC_BROKER_CONFIG
            else:
                value = d.default
                self._sources[name] = DEFAULT_CONFIG
            if d.validator is not None:
                d.validator(name, value)
            self._values[name] = value
        self._validate_together()

    # -- loading --

    @classmethod
    def load(cls, path: Path | None = None, overrides: Mapping[str, str] | None = None) -> KafkaConfig:
        """Read a server.properties file (if any), apply `--override`s, validate, warn about unknown keys."""
        props: dict[str, str] = {}
        if path is not None:
            try:
                text = Path(path).read_text(encoding="utf-8")
            except OSError as e:
                raise ConfigError(f"Cannot read config file {path}: {e.strerror or e}") from None
            except UnicodeDecodeError as e:
                raise ConfigError(
                    f"Cannot read config file {path}: not a text properties file (byte 0x{e.object[e.start]:02x} "
                    f"at position {e.start} is not UTF-8)"
                ) from None
            props.update(parse_properties(text))
        props.update(overrides or {})
        config = cls(props)
        voters = [v for v in config["controller.quorum.voters"] if not v.startswith(f"{config.node_id}@")]
        if voters and not config.is_kraft_broker and not config.runs_controller:
            log.warning(
                "controller.quorum.voters lists other nodes (%s): kbroker runs a single node and ignores them",
                ",".join(voters),
            )
        if config.unknown_keys:
            # Kafka logs the same warning (AbstractConfig.logUnused) and carries on.
            log.warning("These configurations '%s' were supplied but are not used.", config.unknown_keys)
            for key, near in suggest_keys(config.unknown_keys).items():
                log.warning("Unknown configuration '%s': did you mean '%s'?", key, near)
        return config

    # -- access --

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def get(self, key: str, default: Any = None) -> Any:
        return self._values.get(key, default)

    def source(self, key: str) -> str:
        return self._sources[key]

    def items(self) -> list[tuple[str, Any]]:
        return list(self._values.items())

    def value_as_string(self, key: str) -> str | None:
        """The value as Kafka shows it in DescribeConfigs (lists comma-joined, booleans lower-case)."""
        return format_value(self._values[key])

    # -- typed helpers --

    @property
    def node_id(self) -> int:
        return int(self._values["node.id"])

    @property
    def is_kraft_broker(self) -> bool:
        """`process.roles=broker`: this node is a broker of a cluster run by KRaft controllers
        (kbroker/server/, docs/cluster.md). Unset or `broker,controller`: kbroker's single node."""
        return list(self._values["process.roles"]) == ["broker"]

    @property
    def is_kraft_controller(self) -> bool:
        """`process.roles=controller`: this node is a voter of a kbroker controller quorum (Raft over
        `controller.quorum.voters`, the QuorumController; kbroker/server/raft_manager.py, docs/cluster.md)."""
        return list(self._values["process.roles"]) == ["controller"]

    @property
    def is_kraft_combined(self) -> bool:
        """`process.roles=broker,controller` with a quorum (`controller.quorum.voters` or
        `controller.quorum.bootstrap.servers`): a combined node, Kafka's KafkaRaftServer running both a
        BrokerServer and a ControllerServer. Its controller side is a Raft voter with the QuorumController,
        its broker side reads the same Raft log and registers with the active controller (docs/cluster.md,
        "Combined nodes"). Without a quorum or without a controller listener (`controller.listener.names`
        naming one of `listeners`), `broker,controller` is kbroker's embedded single node, as before."""
        roles = set(self._values["process.roles"])
        return roles == {"broker", "controller"} and bool(
            self._values["controller.quorum.voters"] or self._values["controller.quorum.bootstrap.servers"]) \
            and bool(self.controller_listeners)

    @property
    def is_embedded_single_node(self) -> bool:
        """`process.roles` unset or `broker,controller` with no quorum or no controller listener: kbroker's
        own single node (no Kafka config looks like this: Kafka refuses it)."""
        return set(self._values["process.roles"]) == {"broker", "controller"} and not self.is_kraft_combined

    def with_implicit_quorum(self) -> KafkaConfig:
        """This single-node config as a combined node of a one-voter quorum (Kafka's defaults: the node is
        its quorum's only voter): a controller listener `CONTROLLER://127.0.0.1:<a free port>` (loopback
        only: nothing but this node and `kafka-metadata-quorum --bootstrap-controller` talk to it),
        `controller.listener.names` naming it, `controller.quorum.voters=<node.id>@127.0.0.1:<port>`. The
        port is asked of the OS when the node starts (a fixed one would collide with a second node on the
        machine); set a controller listener to choose one. The port is held from the moment it is picked:
        the socket stays bound and listening (`implicit_controller_socket`) and the controller's server
        serves on that very socket, so nothing else can take the port before the node serves it.

        With an authorizer (`authorizer.class.name`) the controller authorizes the broker side's
        registration and heartbeats (CLUSTER_ACTION), as Kafka's does: the implicit listener then takes the
        inter-broker listener's security protocol and its `listener.name.<l>.*` settings, and the broker
        side connects as its inter-broker principal (which a Kafka config lists in `super.users`), with the
        inter-broker SASL mechanism (else the listener's first enabled one). Without an authorizer it is
        PLAINTEXT."""
        name = "CONTROLLER"
        taken = {e.name for e in parse_endpoints("listeners", self._values["listeners"], self.security_protocol_map)}
        if name in taken:
            name = "KBROKER_CONTROLLER"
        reserved = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            reserved.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the real listener does
            reserved.bind(("127.0.0.1", 0))
            reserved.listen(int(self._values.get("socket.listen.backlog.size") or 50))
        except OSError:
            reserved.close()
            raise
        port = int(reserved.getsockname()[1])
        props = dict(self.originals)
        protocol = "PLAINTEXT"
        if self._values["authorizer.class.name"]:
            inter = self.inter_broker_listener_name
            protocol = self.security_protocol_map.get(inter, inter)
            prefix = f"listener.name.{inter.lower()}."
            for key, value in self.originals.items():
                if key.startswith(prefix):
                    props[f"listener.name.{name.lower()}.{key[len(prefix):]}"] = value
            if protocol in ("SASL_PLAINTEXT", "SASL_SSL") and "sasl.mechanism.controller.protocol" not in props:
                mechanisms = self.sasl_mechanisms(inter)
                props["sasl.mechanism.controller.protocol"] = str(
                    self.originals.get("sasl.mechanism.inter.broker.protocol")
                    or (mechanisms[0] if mechanisms else "GSSAPI"))
        props["listeners"] = ",".join([*self._values["listeners"], f"{name}://127.0.0.1:{port}"])
        props["listener.security.protocol.map"] = ",".join(
            [*self._values["listener.security.protocol.map"], f"{name}:{protocol}"])
        props["controller.listener.names"] = name
        props["controller.quorum.voters"] = f"{self.node_id}@127.0.0.1:{port}"
        config = KafkaConfig(props)
        config.implicit_quorum = True
        config.implicit_controller_socket = reserved
        return config

    @property
    def runs_controller(self) -> bool:
        """A KRaft voter: process.roles=controller or a combined node (both bind the controller listener)."""
        return self.is_kraft_controller or self.is_kraft_combined

    @property
    def controller_listeners(self) -> list[Endpoint]:
        """The listeners named in controller.listener.names (bound only by a process.roles=controller node)."""
        controller = self.controller_listener_names
        return [e for e in parse_endpoints("listeners", self._values["listeners"], self.security_protocol_map)
                if e.name in controller]

    @property
    def log_dirs(self) -> list[Path]:
        dirs = self._values["log.dirs"] or [self._values["log.dir"]]
        return [Path(d).expanduser().absolute() for d in dirs]

    @property
    def metadata_log_dir(self) -> Path:
        """Kafka's `metadata.log.dir`: where `__cluster_metadata-0` lives (default: the first log dir)."""
        value = self._values.get("metadata.log.dir")
        return Path(value).expanduser().absolute() if value else self.log_dirs[0]

    @property
    def security_protocol_map(self) -> dict[str, str]:
        result: dict[str, str] = {}
        for item in self._values["listener.security.protocol.map"]:
            listener, _, protocol = item.partition(":")
            result[listener.strip().upper()] = protocol.strip().upper()
        return result

    @property
    def controller_listener_names(self) -> set[str]:
        raw = self._values["controller.listener.names"] or ""
        return {n.strip().upper() for n in raw.split(",") if n.strip()}

    @property
    def listeners(self) -> list[Endpoint]:
        """The broker listeners kbroker binds. Listeners named in controller.listener.names (Kafka's
        KRaft sample config has `CONTROLLER://:9093`) are not bound: kbroker has no controller RPCs."""
        if self._listeners is None:
            controller = self.controller_listener_names
            self._listeners = [
                e
                for e in parse_endpoints("listeners", self._values["listeners"], self.security_protocol_map)
                if e.name not in controller
            ]
        return list(self._listeners)

    @property
    def advertised_listeners(self) -> list[Endpoint]:
        """advertised.listeners, defaulting to listeners; an empty host advertises this host's name.

        Computed once (Metadata asks for it on every request, and the host name lookup may be slow).
        """
        if self._advertised is None:
            raw = self._values["advertised.listeners"]
            if raw is None:
                endpoints = self.listeners
            else:
                controller = self.controller_listener_names
                endpoints = [
                    e
                    for e in parse_endpoints("advertised.listeners", raw, self.security_protocol_map)
                    if e.name not in controller
                ]
            self._advertised = [
                Endpoint(e.name, e.host or socket.getfqdn(), e.port, e.security_protocol) for e in endpoints
            ]
        return list(self._advertised)

    def listener_value(self, listener: str, key: str) -> Any:
        """`key` for one listener: `listener.name.<listener>.<key>` (Kafka's per-listener override,
        the listener name in lower case) over the broker-wide `key`. Typed as the broker key."""
        override = self.originals.get(f"listener.name.{listener.lower()}.{key}")
        if override is None:
            return self._values.get(key)
        d = CONFIG_DEFS.get(key)
        return _parse_value(d, override) if d is not None else override

    def sasl_mechanisms(self, listener: str) -> list[str]:
        return [m.strip().upper() for m in self.listener_value(listener, "sasl.enabled.mechanisms") or []]

    def sasl_jaas_config(self, listener: str, mechanism: str) -> str | None:
        """`listener.name.<l>.<mechanism>.sasl.jaas.config`, else `listener.name.<l>.sasl.jaas.config`,
        else `sasl.jaas.config`."""
        value = self.originals.get(f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config")
        if value is None:
            value = self.listener_value(listener, "sasl.jaas.config")
        return value if value else None

    @property
    def inter_broker_listener_name(self) -> str:
        """inter.broker.listener.name, else the listener whose protocol is security.inter.broker.protocol."""
        name = self._values["inter.broker.listener.name"]
        if name:
            return str(name).strip().upper()
        return str(self._values["security.inter.broker.protocol"]).upper()

    def client_security(self, listener: str, mechanism_key: str) -> ClientSecurity:
        """How this node connects to `listener` of other nodes (Kafka's `clientChannelBuilder`): the
        listener's security protocol, its `ssl.*` settings (`listener.name.<l>.` overrides first), and
        the SASL mechanism `mechanism_key` names with the `username` / `password` options of
        `listener.name.<l>.<mechanism>.sasl.jaas.config` (else `sasl.jaas.config`)."""
        protocol = self.security_protocol_map.get(listener.upper(), listener.upper())
        ssl_context = None
        if protocol in ("SSL", "SASL_SSL"):
            def text(key: str) -> str | None:
                value = self.listener_value(listener, key)
                return str(value) if value else None

            settings = TlsClientSettings(
                truststore_location=text("ssl.truststore.location"),
                truststore_certificates=text("ssl.truststore.certificates"),
                keystore_location=text("ssl.keystore.location"),
                keystore_key=text("ssl.keystore.key"),
                keystore_certificate_chain=text("ssl.keystore.certificate.chain"),
                key_password=text("ssl.key.password"),
                keystore_type=text("ssl.keystore.type") or "JKS",
                keystore_password=text("ssl.keystore.password"),
                truststore_type=text("ssl.truststore.type") or "JKS",
                truststore_password=text("ssl.truststore.password"),
                enabled_protocols=tuple(self.listener_value(listener, "ssl.enabled.protocols") or ()),
                cipher_suites=tuple(self.listener_value(listener, "ssl.cipher.suites") or ()),
                endpoint_identification_algorithm=str(
                    self.listener_value(listener, "ssl.endpoint.identification.algorithm") or ""))
            try:
                ssl_context = build_client_context(settings)
            except (OSError, ValueError) as exc:
                return ClientSecurity(protocol, error=f"invalid ssl.* client settings of listener {listener}: {exc}")
        sasl = None
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            mechanism = str(self.listener_value(listener, mechanism_key) or "GSSAPI").upper()
            try:
                sasl = self._sasl_client_credentials(listener, mechanism, mechanism_key)
            except ConfigError as exc:
                return ClientSecurity(protocol, ssl_context, error=str(exc))
        return ClientSecurity(protocol, ssl_context, sasl)

    def _sasl_client_credentials(self, listener: str, mechanism: str, mechanism_key: str) -> SaslClientCredentials:
        from kbroker.security.jaas import JaasConfigError, parse_jaas_config

        if mechanism not in CLIENT_SASL_MECHANISMS:
            raise ConfigError(f"Invalid value {mechanism} for configuration {mechanism_key}: kbroker's inter-node "
                              f"client speaks {', '.join(CLIENT_SASL_MECHANISMS)}")
        jaas = self.sasl_jaas_config(listener, mechanism)
        if jaas is None:
            raise ConfigError(f"Could not find a 'listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config' "
                              f"entry for {mechanism_key}={mechanism} (the login module's username and password)")
        try:
            entry = parse_jaas_config(jaas)
        except JaasConfigError as exc:
            raise ConfigError(f"Invalid sasl.jaas.config of listener {listener}: {exc}") from None
        if mechanism == "OAUTHBEARER":
            options = dict(entry.options)
            return SaslClientCredentials(mechanism, token_provider=lambda: unsecured_login_token(options))
        return SaslClientCredentials(mechanism, entry.options.get("username", ""), entry.options.get("password", ""))

    def inter_broker_security(self) -> ClientSecurity:
        """The security of broker-to-broker connections (replica fetchers, transaction markers)."""
        return self.client_security(self.inter_broker_listener_name, "sasl.mechanism.inter.broker.protocol")

    def controller_security(self) -> ClientSecurity:
        """The security of connections to the controllers (the first of controller.listener.names)."""
        raw = self._values["controller.listener.names"] or ""
        names = [n.strip().upper() for n in raw.split(",") if n.strip()]
        if not names:
            return PLAINTEXT_SECURITY
        return self.client_security(names[0], "sasl.mechanism.controller.protocol")

    def _validate_listener_security(self, e: Endpoint) -> None:
        if e.security_protocol in ("SSL", "SASL_SSL"):
            if not (self.listener_value(e.name, "ssl.keystore.location")
                    or (self.listener_value(e.name, "ssl.keystore.key")
                        and self.listener_value(e.name, "ssl.keystore.certificate.chain"))):
                raise ConfigError(
                    f"Invalid value {e} for configuration listeners: an {e.security_protocol} listener needs a "
                    "keystore: ssl.keystore.location (ssl.keystore.type JKS, PKCS12 or PEM) or ssl.keystore.key and "
                    f"ssl.keystore.certificate.chain (each may be set for this listener alone as "
                    f"listener.name.{e.name.lower()}.<key>)"
                )
            for kind in ("keystore", "truststore"):
                store_type = str(self.listener_value(e.name, f"ssl.{kind}.type") or "JKS").strip().upper()
                location = self.listener_value(e.name, f"ssl.{kind}.location")
                if location and store_type not in ("JKS", "PKCS12", "PEM"):
                    raise ConfigError(
                        f"Invalid value {store_type} for configuration ssl.{kind}.type of listener {e.name}: "
                        "kbroker reads JKS, PKCS12 and PEM stores"
                    )
        if e.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            mechanisms = self.sasl_mechanisms(e.name)
            unsupported = [m for m in mechanisms if m not in SASL_MECHANISMS]
            if unsupported or not mechanisms:
                raise ConfigError(
                    f"Invalid value {','.join(mechanisms)} for configuration sasl.enabled.mechanisms of "
                    f"listener {e.name}: kbroker serves {', '.join(SASL_MECHANISMS)} "
                    f"({', '.join(unsupported) or 'none'} not implemented)"
                )
            if "PLAIN" in mechanisms:
                from kbroker.security.jaas import JaasConfigError, parse_jaas_config

                jaas = self.sasl_jaas_config(e.name, "PLAIN")
                if jaas is None:
                    raise ConfigError(
                        f"Could not find a 'KafkaServer' or 'listener.name.{e.name.lower()}.plain.sasl.jaas.config' "
                        "entry in the JAAS configuration (PLAIN needs PlainLoginModule with user_<name> options)"
                    )
                try:
                    parse_jaas_config(jaas)
                except JaasConfigError as exc:
                    raise ConfigError(f"Invalid sasl.jaas.config of listener {e.name}: {exc}") from None

    def set_bound_ports(self, bound: list[Endpoint]) -> None:
        """After binding: a listener configured with port 0 reports (and advertises) the port it got."""
        ports = {e.name: e.port for e in bound}

        def resolve(e: Endpoint) -> Endpoint:
            return dataclasses.replace(e, port=ports[e.name]) if e.port == 0 and e.name in ports else e

        self._listeners = [resolve(e) for e in self.listeners]
        self._advertised = [resolve(e) for e in self.advertised_listeners]

    def broker_props(self) -> dict[str, str]:
        """Every broker key that has a value, rendered as text (what `LogConfig.from_props` reads)."""
        return {k: v for k, v in ((k, format_value(val)) for k, val in self._values.items()) if v is not None}

    # -- validation across keys --

    def _validate_together(self) -> None:
        if self.originals.get("node.id") is not None and self.originals.get("broker.id") is None:
            # Kafka's KafkaConfig.populateSynonyms: node.id set alone sets broker.id (a static key).
            self._values["broker.id"] = self._values["node.id"]
            self._sources["broker.id"] = STATIC_BROKER_CONFIG
        if self.originals.get("broker.id") is not None:
            broker_id = self._values["broker.id"]
            if "node.id" not in self.originals:
                self._values["node.id"] = broker_id
                self._sources["node.id"] = STATIC_BROKER_CONFIG
            elif broker_id != self._values["node.id"]:
                raise ConfigError(
                    f"If broker.id is set, its value must be equal to node.id: broker.id={broker_id}, "
                    f"node.id={self._values['node.id']}"
                )
        if "log.dirs" in self.originals and not self._values["log.dirs"]:
            raise ConfigError("Invalid value for configuration log.dirs: it must name at least one directory")
        listeners = self.listeners if not self.is_kraft_controller else self.controller_listeners
        if not listeners:
            raise ConfigError("Invalid value for configuration listeners: at least one listener is required"
                              + (" (a process.roles=controller node binds the listeners named in "
                                 "controller.listener.names)" if self.is_kraft_controller else ""))
        for e in listeners:
            if e.security_protocol not in SECURITY_PROTOCOLS:
                raise ConfigError(
                    f"Invalid value {e} for configuration listeners: unknown security protocol "
                    f"{e.security_protocol} (one of {', '.join(SECURITY_PROTOCOLS)})"
                )
            self._validate_listener_security(e)
        ibl = self._values["inter.broker.listener.name"]
        if ibl is not None and ibl.strip().upper() not in {e.name for e in listeners}:
            raise ConfigError(
                f"inter.broker.listener.name must be a listener name defined in advertised.listeners. "
                f"The valid options based on currently configured listeners are "
                f"{','.join(e.name for e in listeners)}"
            )
        for e in self.advertised_listeners:
            if e.host in ("0.0.0.0", "::"):
                raise ConfigError(
                    f"Invalid value {e} for configuration advertised.listeners: "
                    "advertised.listeners cannot use the nonroutable meta-address 0.0.0.0. "
                    "Use a routable IP address."
                )
        names = {e.name for e in listeners}
        for e in self.advertised_listeners:
            if e.name not in names:
                raise ConfigError(
                    f"Invalid value {e} for configuration advertised.listeners: listener {e.name} "
                    "is not in listeners"
                )
        lo, hi = (self._values["group.min.session.timeout.ms"], self._values["group.max.session.timeout.ms"])
        if lo > hi:
            raise ConfigError("group.max.session.timeout.ms must be at least group.min.session.timeout.ms")
        _validate_consumer_group_keys(self._values)
        _validate_share_group_keys(self._values)
        if self.is_kraft_broker:
            _validate_kraft_broker_keys(self._values, self.controller_listener_names)
        if self.is_kraft_combined:
            _validate_kraft_combined_keys(self._values, self.controller_listener_names,
                                          {e.name for e in self.controller_listeners})
        _validate_log_defaults(self._values)
        if (
            self._values["queued.max.request.bytes"] not in (-1,)
            and self._values["queued.max.request.bytes"] < 1
        ):
            raise ConfigError(
                f"Invalid value {self._values['queued.max.request.bytes']} for configuration "
                "queued.max.request.bytes: must be -1 (no bound) or positive"
            )


def format_value(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def _validate_log_defaults(v: dict[str, Any]) -> None:
    """The broker's `log.*` keys are the defaults of every topic config: check each against the topic
    config's rule now, before anything is written, and name the broker key that was set (not the topic
    key it feeds). Plus KafkaConfig.validateValues' own rules on the retention and roll times."""
    from kbroker.log.config import TOPIC_CONFIGS
    from kbroker.log.config import parse_value as parse_topic_value

    for d in TOPIC_CONFIGS:
        for key, multiplier in d.synonyms:
            raw = v.get(key)
            if raw is None:
                continue
            text = format_value(raw) or ""
            try:
                value = parse_topic_value(d, text)
            except ValueError as e:
                raise ConfigError(str(e).replace(f"configuration {d.name}:", f"configuration {key}:")) from None
            if d.name == "retention.ms" and isinstance(value, int) and value < 0:
                value = -1  # KafkaConfig.logRetentionTimeMillis: any negative value means forever
            elif multiplier != 1 and isinstance(value, int) and value >= 0:
                value *= multiplier
            problem = d.validator(value) if d.validator is not None and value is not None else None
            if problem:
                raise ConfigError(f"Invalid value {text} for configuration {key}: {problem}")
            if d.name == "retention.ms" and value == 0:
                raise ConfigError(f"Invalid value {text} for configuration {key}: log.retention.ms must be "
                                  "unlimited (-1) or, greater than or equal to 1")
            break


def _validate_kraft_broker_keys(v: dict[str, Any], controller_listeners: set[str]) -> None:
    """process.roles=broker, as Kafka's KafkaConfig checks it: the broker must be able to reach the
    quorum (voters or bootstrap servers) on a named controller listener."""
    if "controller" in v["process.roles"]:
        return
    if not v["controller.quorum.voters"] and not v["controller.quorum.bootstrap.servers"]:
        raise ConfigError("If using process.roles, either controller.quorum.bootstrap.servers must contain the "
                          "set of bootstrap controllers or controller.quorum.voters must contain a parseable "
                          "set of controllers.")
    if not controller_listeners:
        raise ConfigError("controller.listener.names must contain at least one value when running KRaft with "
                          "just the broker role")
    for item in v["controller.quorum.voters"]:
        if not re.match(r"^\d+@(\[[0-9A-Fa-f:.]+\]|[^:\[\]@]+):\d+$", item.strip()):
            raise ConfigError(f"Invalid value {item} for configuration controller.quorum.voters: "
                              "expected id@host:port")
    for item in v["controller.quorum.bootstrap.servers"]:
        if not re.match(r"^(\[[0-9A-Fa-f:.]+\]|[^:\[\]@]+):\d+$", item.strip()):
            raise ConfigError(f"Invalid value {item} for configuration controller.quorum.bootstrap.servers: "
                              "expected host:port")


def _validate_kraft_combined_keys(v: dict[str, Any], controller_names: set[str], bound: set[str]) -> None:
    """process.roles=broker,controller, as Kafka's KafkaConfig checks it: a controller listener must be
    named and be one of `listeners`, the voters must parse, and this node must be one of them."""
    if not controller_names:
        raise ConfigError("controller.listener.names must contain at least one value when running KRaft with "
                          "the controller role (process.roles=broker,controller)")
    first = str(v["controller.listener.names"]).split(",")[0].strip().upper()
    if first not in bound:
        raise ConfigError(f"controller.listener.names must contain at least one value appearing in the 'listeners' "
                          f"configuration when running the KRaft controller role: {first} is not in listeners "
                          f"({','.join(v['listeners'])})")
    ids = []
    for item in v["controller.quorum.voters"]:
        if not re.match(r"^\d+@(\[[0-9A-Fa-f:.]+\]|[^:\[\]@]+):\d+$", item.strip()):
            raise ConfigError(f"Invalid value {item} for configuration controller.quorum.voters: "
                              "expected id@host:port")
        ids.append(int(item.split("@", 1)[0]))
    if ids and int(v["node.id"]) not in ids:
        raise ConfigError(f"If process.roles contains the 'controller' role, the node id {v['node.id']} must be "
                          f"included in the set of voters controller.quorum.voters={set(ids)}")


def _require_at_least(v: dict[str, Any], name: str, low: str) -> None:
    """Kafka's `Utils.require(a >= b, "%s must be greater than or equal to %s")`."""
    if v[name] < v[low]:
        raise ConfigError(f"{name} must be greater than or equal to {low}")


def _require_at_most(v: dict[str, Any], name: str, high: str) -> None:
    if v[name] > v[high]:
        raise ConfigError(f"{name} must be less than or equal to {high}")


def _validate_share_group_keys(v: dict[str, Any]) -> None:
    """KIP-932 keys, checked at start in the order and words of Kafka 4.3.1 (the broker refuses to start):
    GroupCoordinatorConfig's share checks (heartbeat interval and session timeout within their bounds,
    the interval below the timeout, the assignment interval within its bounds), then ShareGroupConfig's
    (delivery count limit, record locks per partition and record lock duration within their bounds, at
    least as many share sessions as members of a share group)."""
    g = "group.share."
    _require_at_least(v, g + "max.heartbeat.interval.ms", g + "min.heartbeat.interval.ms")
    _require_at_least(v, g + "heartbeat.interval.ms", g + "min.heartbeat.interval.ms")
    _require_at_most(v, g + "heartbeat.interval.ms", g + "max.heartbeat.interval.ms")
    _require_at_least(v, g + "max.session.timeout.ms", g + "min.session.timeout.ms")
    _require_at_least(v, g + "session.timeout.ms", g + "min.session.timeout.ms")
    _require_at_most(v, g + "session.timeout.ms", g + "max.session.timeout.ms")
    if v[g + "heartbeat.interval.ms"] >= v[g + "session.timeout.ms"]:
        raise ConfigError(f"{g}heartbeat.interval.ms must be less than {g}session.timeout.ms")
    _require_at_least(v, g + "max.assignment.interval.ms", g + "min.assignment.interval.ms")
    _require_at_least(v, g + "assignment.interval.ms", g + "min.assignment.interval.ms")
    _require_at_most(v, g + "assignment.interval.ms", g + "max.assignment.interval.ms")
    # ShareGroupConfig.validate
    _require_at_least(v, g + "max.delivery.count.limit", g + "delivery.count.limit")
    _require_at_least(v, g + "delivery.count.limit", g + "min.delivery.count.limit")
    _require_at_least(v, g + "max.partition.max.record.locks", g + "partition.max.record.locks")
    _require_at_least(v, g + "partition.max.record.locks", g + "min.partition.max.record.locks")
    _require_at_least(v, g + "record.lock.duration.ms", g + "min.record.lock.duration.ms")
    _require_at_least(v, g + "max.record.lock.duration.ms", g + "record.lock.duration.ms")
    _require_at_least(v, g + "max.share.sessions", g + "max.size")


def _validate_consumer_group_keys(v: dict[str, Any]) -> None:
    """KIP-848 keys, checked as Kafka's GroupCoordinatorConfig does: each value within its min/max,
    and the heartbeat interval below the session timeout."""
    for name in ("session.timeout.ms", "heartbeat.interval.ms"):
        value = v[f"group.consumer.{name}"]
        lo, hi = v[f"group.consumer.min.{name}"], v[f"group.consumer.max.{name}"]
        if not lo <= value <= hi:
            raise ConfigError(f"group.consumer.{name} must be between group.consumer.min.{name} ({lo}) "
                              f"and group.consumer.max.{name} ({hi}), got {value}")
    if v["group.consumer.heartbeat.interval.ms"] >= v["group.consumer.session.timeout.ms"]:
        raise ConfigError("group.consumer.heartbeat.interval.ms must be less than "
                          "group.consumer.session.timeout.ms")
    unknown = [a for a in v["group.consumer.assignors"]
               if a.rsplit(".", 1)[-1].lower().removesuffix("assignor") not in ("uniform", "range")]
    if unknown:
        raise ConfigError(f"Invalid value {unknown} for configuration group.consumer.assignors: kbroker has "
                          "the uniform and range assignors only")
