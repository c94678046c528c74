"""Class emission: message and struct classes (slots, keyword __init__, __eq__, __repr__, FIELDS).

``StructEmitter`` also owns the naming and default rules the codec emitter (emit.py) builds on.
"""

from __future__ import annotations

from kbroker.protocol.generator.spec import FieldSpec, MessageSpec, StructSpec, Versions

_TYPE_HINTS = {
    "bool": "bool",
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "int64": "int",
    "uint16": "int",
    "uint32": "int",
    "float64": "float",
    "uuid": "uuid.UUID",
    "string": "str",
    "bytes": "bytes",
    "records": "Any",
}


def _int_default(text: str) -> int:
    neg = text.startswith("-")
    body = text[1:] if neg else text
    value = int(body, 16) if body.lower().startswith("0x") else int(body)
    return -value if neg else value


class StructEmitter:
    """Naming, defaults and class source for one message spec."""

    def __init__(self, spec: MessageSpec) -> None:
        self.spec = spec
        self.root_name = spec.name

    def alias(self, struct_name: str) -> str:
        if struct_name == self.root_name:
            return self.root_name
        return f"_{self.root_name}_{struct_name}"

    def struct(self, name: str) -> StructSpec:
        return self.spec.root if name == self.root_name else self.spec.structs[name]

    @staticmethod
    def compact(f: FieldSpec, version: int, flexible: bool) -> bool:
        if f.flexible_versions is not None:
            return version in f.flexible_versions
        return flexible

    # -- defaults ----------------------------------------------------------------------------------

    def default_expr(self, f: FieldSpec) -> str:
        """Python expression for the field's default (evaluated fresh each time for mutable ones)."""
        d = f.default
        if f.is_array:
            return "None" if d == "null" else "[]"
        if f.is_struct:
            # A factory that skips keyword-argument parsing: default structs are built often
            # (every tagged struct field of every decoded or constructed object).
            return "None" if d == "null" else f"_mk{self.alias(f.struct_name)}()"
        t = f.type
        if t == "bool":
            return "True" if (d or "false").lower() == "true" else "False"
        if t in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
            return str(_int_default(d)) if d else "0"
        if t == "float64":
            return repr(float(d)) if d else "0.0"
        if t == "uuid":
            return "_ZERO_UUID"
        if t == "string":
            return "None" if d == "null" else repr(d or "")
        if t == "bytes":
            return "None" if d == "null" else "b''"
        if t == "records":
            return "None"
        raise ValueError(f"no default for type {t}")

    def is_mutable_default(self, f: FieldSpec) -> bool:
        return (f.is_array or f.is_struct) and f.default != "null"

    def nondefault_test(self, f: FieldSpec, src: str) -> str:
        d = self.default_expr(f)
        if d == "None":
            return f"{src} is not None"
        if f.is_array:
            return f"{src} != []"
        if f.is_struct:
            st = self.struct(f.struct_name)
            if st.fields and all(not g.is_struct and not g.is_array for g in st.fields):
                # Inline Java's ``!x.equals(new X())`` for flat structs: no call, no allocation.
                tests = [self.nondefault_test(g, "_s." + g.py_name) for g in st.fields]
                tests[0] = tests[0].replace("_s.", f"(_s := {src}).", 1)
                return "(" + " or ".join([*tests, "_s.unknown_tagged_fields"]) + ")"
            # A shared default instance, only ever compared against (never handed out).
            return f"{src} != _D{self.alias(f.struct_name)}"
        return f"{src} != {d}"

    def type_hint(self, f: FieldSpec) -> str:
        if f.is_struct:
            base = f"{self.root_name}.{f.struct_name}" if f.struct_name != self.root_name else self.root_name
        else:
            base = _TYPE_HINTS[f.element_type]
        hint = f"list[{base}]" if f.is_array else base
        if not f.nullable_versions.empty or f.default == "null" or f.type == "records":
            hint += " | None"
        return hint

    # -- minimum sizes (allocation guard for arrays) ---------------------------------------------------

    def reachable_structs(self) -> list[str]:
        """Every struct of the message in declaration order (nested and common), root excluded."""
        order: list[str] = []

        def walk(st: StructSpec) -> None:
            for f in st.fields:
                if f.is_struct and f.struct_name not in order and f.struct_name != self.root_name:
                    order.append(f.struct_name)
                    walk(self.struct(f.struct_name))

        walk(self.spec.root)
        for name in self.spec.structs:  # common structs not referenced from any field still get a class
            if name not in order:
                order.append(name)
        return order

    def class_source(self, st: StructSpec, qualname: str, ind: str, doc: str) -> list[str]:
        names = [f.py_name for f in st.fields]
        slots = ", ".join(repr(n) for n in [*names, "unknown_tagged_fields"])
        out = [f"{ind}class {st.name}:", f'{ind}    """{doc}"""', "", f"{ind}    __slots__ = ({slots},)"]
        out.append(f"{ind}    FIELDS: tuple[FieldInfo, ...] = ()")
        params = ["self", "*"]
        body = []
        for f in st.fields:
            hint = self.type_hint(f)
            if self.is_mutable_default(f):
                params.append(f"{f.py_name}: {hint} = MISSING")
                body.append(
                    f"self.{f.py_name} = {self.default_expr(f)} if {f.py_name} is MISSING else {f.py_name}"
                )
            else:
                params.append(f"{f.py_name}: {hint} = {self.default_expr(f)}")
                body.append(f"self.{f.py_name} = {f.py_name}")
        params.append("unknown_tagged_fields: dict[int, bytes] | None = None")
        body.append(
            "self.unknown_tagged_fields = {} if unknown_tagged_fields is None else unknown_tagged_fields"
        )
        out.append("")
        out.append(f"{ind}    def __init__(")
        out.append(f"{ind}        " + ", ".join(params))
        out.append(f"{ind}    ) -> None:")
        out.extend(f"{ind}        {b}" for b in body)
        out.append("")
        out.append(f"{ind}    def __eq__(self, other: object) -> bool:")
        out.append(f"{ind}        if other.__class__ is not self.__class__:")
        out.append(f"{ind}            return NotImplemented")
        cmp = [f"self.{n} == other.{n}" for n in [*names, "unknown_tagged_fields"]]
        out.append(f"{ind}        return (")
        out.append(f"{ind}            " + f"\n{ind}            and ".join(cmp))
        out.append(f"{ind}        )")
        out.append("")
        out.append(f"{ind}    __hash__ = None  # type: ignore[assignment]")
        out.append("")
        out.append(f"{ind}    def __repr__(self) -> str:")
        reprs = ", ".join(f"{n}={{self.{n}!r}}" for n in names)
        out.append(f'{ind}        s = f"{qualname}({reprs}"')
        out.append(f"{ind}        if self.unknown_tagged_fields:")
        out.append(f'{ind}            s += f", unknown_tagged_fields={{self.unknown_tagged_fields!r}}"')
        out.append(f'{ind}        return s + ")"')
        return out

    def classes_source(self) -> list[str]:
        spec = self.spec
        flex = range_text(spec.flexible_versions)
        key = f"api key {spec.api_key}, " if spec.api_key is not None else ""
        doc = f"Kafka {spec.name} ({key}versions {range_text(spec.valid_versions)}, flexible {flex})."
        out = self.class_source(spec.root, spec.name, "", doc)
        for name in self.reachable_structs():
            out.append("")
            out.extend(
                self.class_source(self.struct(name), f"{spec.name}.{name}", "    ", f"{spec.name}.{name}")
            )
        out.append("")
        out.append("")
        for name in self.reachable_structs():
            out.append(f"{self.alias(name)} = {spec.name}.{name}")
        for name in self.reachable_structs():
            alias = self.alias(name)
            out += ["", "", f"def _mk{alias}():", f"    o = _new({alias})"]
            for f in self.struct(name).fields:
                out.append(f"    o.{f.py_name} = {self.default_expr(f)}")
            out += ["    o.unknown_tagged_fields = {}", "    return o"]
        out.append("")
        out.append("")
        for name in self.reachable_structs():
            out.append(f"_D{self.alias(name)} = _mk{self.alias(name)}()")
        return out

    def fields_source(self) -> list[str]:
        out = []
        for name in [self.root_name, *self.reachable_structs()]:
            st = self.struct(name)
            infos = []
            for f in st.fields:
                struct_ref = self.alias(f.struct_name) if f.is_struct else "None"
                infos.append(
                    f"    FieldInfo({f.py_name!r}, {f.name!r}, {f.type!r}, {f.versions.as_tuple()!r}, "
                    f"{f.nullable_versions.as_tuple()!r}, {f.tag!r}, {f.tagged_versions.as_tuple()!r}, "
                    f"{f.ignorable!r}, {struct_ref}),"
                )
            out.append(f"{self.alias(name)}.FIELDS = (")
            out.extend(infos)
            out.append(")")
        return out


def range_text(v: Versions) -> str:
    if v.empty:
        return "none"
    if v.hi == 0x7FFF:
        return f"{v.lo}+"
    return f"{v.lo}" if v.lo == v.hi else f"{v.lo}-{v.hi}"
