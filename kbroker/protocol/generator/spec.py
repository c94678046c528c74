"""Loading Kafka's JSON message specs into a small model: versions, fields, structs, naming rules."""

from __future__ import annotations

import json
import keyword
import os
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_VERSION = 0x7FFF

FIXED_TYPES: dict[str, tuple[str, int]] = {
    "bool": ("?", 1),
    "int8": ("b", 1),
    "int16": ("h", 2),
    "int32": ("i", 4),
    "int64": ("q", 8),
    "uint16": ("H", 2),
    "uint32": ("I", 4),
    "float64": ("d", 8),
    "uuid": ("16s", 16),
}
VARIABLE_TYPES = {"string", "bytes", "records"}
PRIMITIVE_TYPES = set(FIXED_TYPES) | VARIABLE_TYPES


class SpecError(Exception):
    """A spec this generator cannot handle (unknown type, bad version range...)."""


@dataclass(frozen=True)
class Versions:
    """An inclusive version range; ``lo > hi`` is the empty range ("none")."""

    lo: int
    hi: int

    @classmethod
    def parse(cls, text: str | None) -> Versions:
        if text is None or text.strip() == "none":
            return cls(1, 0)
        text = text.strip()
        if text.endswith("+"):
            return cls(int(text[:-1]), MAX_VERSION)
        if "-" in text:
            lo, hi = text.split("-", 1)
            return cls(int(lo), int(hi))
        return cls(int(text), int(text))

    @property
    def empty(self) -> bool:
        return self.lo > self.hi

    def __contains__(self, version: int) -> bool:
        return self.lo <= version <= self.hi

    def as_tuple(self) -> tuple[int, int] | None:
        return None if self.empty else (self.lo, self.hi)


_ACRONYM_FIXUPS = (("KRaft", "Kraft"),)


def snake_case(name: str) -> str:
    """Kafka's CamelCase field name -> a Python attribute name.

    Rules: a word boundary before an upper-case letter that follows a lower-case letter or a digit
    (``ThrottleTimeMs`` -> ``throttle_time_ms``, ``Enable2Pc`` -> ``enable2_pc``) and before the last
    capital of an upper-case run followed by lower case (``SASLAuthBytes`` -> ``sasl_auth_bytes``);
    ``KRaft`` counts as one word (``kraft_version``); a Python keyword gets a trailing underscore.
    """
    for old, new in _ACRONYM_FIXUPS:
        name = name.replace(old, new)
    s = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)
    s = re.sub(r"(?<=[A-Z])(?=[A-Z][a-z])", "_", s)
    s = s.lower()
    if keyword.iskeyword(s) or s in ("unknown_tagged_fields",):
        s += "_"
    return s


def upper_snake(name: str) -> str:
    return snake_case(name).upper()


@dataclass
class FieldSpec:
    name: str
    type: str
    versions: Versions
    nullable_versions: Versions
    tagged_versions: Versions
    tag: int | None
    ignorable: bool
    default: str | None
    flexible_versions: Versions | None
    fields: list[FieldSpec] | None

    @property
    def py_name(self) -> str:
        return snake_case(self.name)

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        """A struct or an array of structs."""
        return self.element_type not in PRIMITIVE_TYPES

    @property
    def struct_name(self) -> str:
        return self.element_type

    def is_tagged(self, version: int) -> bool:
        return self.tag is not None and version in self.tagged_versions


@dataclass
class StructSpec:
    name: str
    fields: list[FieldSpec]
    versions: Versions


@dataclass
class MessageSpec:
    name: str
    kind: str  # request / response / data / header
    api_key: int | None
    valid_versions: Versions
    flexible_versions: Versions
    listeners: tuple[str, ...]
    latest_version_unstable: bool
    root: StructSpec
    structs: dict[str, StructSpec] = field(default_factory=dict)

    @property
    def versions(self) -> range:
        return range(self.valid_versions.lo, self.valid_versions.hi + 1)


def strip_comments(text: str) -> str:
    """Remove ``//`` comments (outside string literals) so the spec parses as JSON."""
    out_lines = []
    for line in text.splitlines():
        in_str = False
        i = 0
        cut = len(line)
        while i < len(line):
            c = line[i]
            if in_str:
                if c == "\\":
                    i += 2
                    continue
                if c == '"':
                    in_str = False
            elif c == '"':
                in_str = True
            elif line.startswith("//", i):
                cut = i
                break
            i += 1
        out_lines.append(line[:cut])
    return "\n".join(out_lines)


def _parse_field(raw: dict[str, Any], structs: dict[str, StructSpec], parent_versions: Versions) -> FieldSpec:
    if "versions" in raw:
        versions = Versions.parse(str(raw["versions"]))
    elif "taggedVersions" in raw:
        # A tagged-only field may omit "versions": it exists in its tagged versions (Kafka's FieldSpec),
        # e.g. TransactionLogValue.PreviousProducerId.
        versions = Versions.parse(str(raw["taggedVersions"]))
    else:
        raise SpecError(f"field {raw.get('name')!r} has no versions")
    sub = raw.get("fields")
    fields = [_parse_field(f, structs, versions) for f in sub] if isinstance(sub, list) else None
    ftype = str(raw["type"])
    tag = raw.get("tag")
    default = raw.get("default")
    spec = FieldSpec(
        name=str(raw["name"]),
        type=ftype,
        versions=versions,
        nullable_versions=Versions.parse(raw.get("nullableVersions")),
        tagged_versions=Versions.parse(raw.get("taggedVersions")),
        tag=int(tag) if tag is not None else None,
        ignorable=bool(raw.get("ignorable", False)),
        default=None if default is None else str(default),
        flexible_versions=Versions.parse(str(raw["flexibleVersions"])) if "flexibleVersions" in raw else None,
        fields=fields,
    )
    if fields is not None:
        if spec.struct_name in structs:
            raise SpecError(f"struct {spec.struct_name} defined twice")
        structs[spec.struct_name] = StructSpec(spec.struct_name, fields, versions)
    elif spec.is_struct and spec.element_type not in FIXED_TYPES:
        pass  # a reference to a commonStruct, resolved after parsing
    return spec


def parse_spec(raw: dict[str, Any]) -> MessageSpec:
    structs: dict[str, StructSpec] = {}
    valid = Versions.parse(str(raw["validVersions"]))
    for cs in raw.get("commonStructs", []) or []:
        cs_versions = Versions.parse(cs.get("versions", "0+"))
        fields = [_parse_field(f, structs, cs_versions) for f in cs["fields"]]
        structs[cs["name"]] = StructSpec(cs["name"], fields, cs_versions)
    fields = [_parse_field(f, structs, valid) for f in raw.get("fields", [])]
    name = str(raw["name"])
    root = StructSpec(name, fields, valid)
    spec = MessageSpec(
        name=name,
        kind=str(raw["type"]),
        api_key=int(raw["apiKey"]) if "apiKey" in raw else None,
        valid_versions=valid,
        flexible_versions=Versions.parse(str(raw.get("flexibleVersions", "none"))),
        listeners=tuple(raw.get("listeners", ()) or ()),
        latest_version_unstable=bool(raw.get("latestVersionUnstable", False)),
        root=root,
        structs=structs,
    )
    _check_types(spec, root)
    return spec


def _check_types(spec: MessageSpec, struct: StructSpec) -> None:
    for f in struct.fields:
        if f.is_struct:
            if f.struct_name not in spec.structs:
                raise SpecError(f"{spec.name}.{f.name}: unknown type {f.type}")
            if f.fields is not None:
                _check_types(spec, spec.structs[f.struct_name])
    if struct is spec.root:
        for s in spec.structs.values():
            for f in s.fields:
                if f.is_struct and f.struct_name not in spec.structs:
                    raise SpecError(f"{spec.name}.{f.name}: unknown type {f.type}")


def load_json_text(text: str) -> MessageSpec:
    return parse_spec(json.loads(strip_comments(text)))


def load_specs(source: Path, prefix: str = "common/message/") -> tuple[dict[str, MessageSpec], str]:
    """Load every spec from a directory or a Kafka jar; return ``(specs by name, label)``.

    In a jar the specs are the ``*.json`` files under ``prefix``: ``common/message/`` in kafka-clients
    and the coordinator jars, ``common/metadata/`` in kafka-metadata.
    """
    texts: dict[str, str] = {}
    if source.is_dir():
        for p in sorted(source.glob("*.json")):
            texts[p.stem] = p.read_text(encoding="utf-8")
        label = str(source)
    elif source.is_file() and source.suffix == ".jar":
        with zipfile.ZipFile(source) as jar:
            for info in jar.infolist():
                n = info.filename
                if n.startswith(prefix) and n.endswith(".json") and "/" not in n[len(prefix) :]:
                    texts[Path(n).stem] = jar.read(info).decode("utf-8")
        label = source.name
    else:
        raise SpecError(f"{source} is neither a spec directory nor a kafka-clients jar")
    if not texts:
        raise SpecError(f"no message specs found in {source}")
    return {name: load_json_text(text) for name, text in sorted(texts.items())}, label


# The jars (under .cache/java/) whose specs each generated package comes from.
CLIENTS_JAR = "kafka-clients"
METADATA_JAR = "kafka-metadata"
COORDINATOR_JARS = {
    "group": "kafka-group-coordinator",
    "transaction": "kafka-transaction-coordinator",
    "share": "kafka-share-coordinator",
}


def find_jar(repo_root: Path, artifact: str) -> Path | None:
    """The newest ``<artifact>-<version>.jar`` under ``.cache/java/`` (not -sources/-test/-api jars)."""
    cache = repo_root / ".cache" / "java"
    if not cache.is_dir():
        return None
    pattern = re.compile(re.escape(artifact) + r"-\d[\w.]*\.jar")
    jars = sorted(
        j
        for j in cache.rglob(f"{artifact}-*.jar")
        if pattern.fullmatch(j.name)
        and not j.name.endswith(("-sources.jar", "-test.jar", "-tests.jar", "-javadoc.jar"))
    )
    return jars[-1] if jars else None


def find_default_source(repo_root: Path) -> Path | None:
    """``KBROKER_KAFKA_SPECS``, else a kafka-clients jar under ``.cache/java/``."""
    env = os.environ.get("KBROKER_KAFKA_SPECS")
    if env:
        return Path(env)
    return find_jar(repo_root, CLIENTS_JAR)
