"""Code emission: one straight-line decoder and encoder per (struct, version), deduplicated.

For each message the emitter walks every valid version from the root struct, generates the decode
and encode function text for each struct reachable in that version, and reuses an earlier
version's function when the text is identical (so ``_d_ProduceRequest_v9`` may serve v9-v12).
Consecutive fixed-width fields are read and written with one precompiled ``struct.Struct``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kbroker.protocol.generator.spec import FIXED_TYPES, FieldSpec, MessageSpec, StructSpec, Versions

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


@dataclass
class ModuleContext:
    """State shared by every message emitted into one module (the Struct constants)."""

    structs: dict[str, str] = field(default_factory=dict)

    def struct_const(self, fmt: str) -> str:
        name = self.structs.get(fmt)
        if name is None:
            name = self.structs[fmt] = f"_S{len(self.structs)}"
        return name


def _int_default(text: str) -> int:
    neg = text.startswith("-")
    body = text[1:] if neg else text
    value = int(body, 16) if body.lower().startswith("0x") else int(body)
    return -value if neg else value


class MessageEmitter:
    def __init__(self, spec: MessageSpec, ctx: ModuleContext) -> None:
        self.spec = spec
        self.ctx = ctx
        self.root_name = spec.name
        self.functions: list[str] = []
        # (struct name, version) -> (decoder name, encoder name)
        self._codecs: dict[tuple[str, int], tuple[str, str]] = {}
        self._bodies: dict[tuple[str, str], str] = {}  # (kind, body text) -> canonical function name
        self._min_sizes: dict[tuple[str, int], int] = {}

    # -- naming ------------------------------------------------------------------------------------

    def alias(self, struct_name: str) -> str:
        if struct_name == self.root_name:
            return self.root_name
        return f"_{self.root_name}_{struct_name}"

    def struct(self, name: str) -> StructSpec:
        return self.spec.root if name == self.root_name else self.spec.structs[name]

    def flexible(self, version: int) -> bool:
        return version in self.spec.flexible_versions

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
            return "None" if d == "null" else f"{self.alias(f.struct_name)}()"
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

    def min_size(self, struct_name: str, version: int) -> int:
        key = (struct_name, version)
        if key in self._min_sizes:
            return self._min_sizes[key]
        flexible = self.flexible(version)
        total = 1 if flexible else 0
        for f in self.struct(struct_name).fields:
            if version not in f.versions or f.is_tagged(version):
                continue
            compact = self.compact(f, version, flexible)
            if f.is_array:
                total += 1 if compact else 4
            elif f.is_struct:
                total += 1 if version in f.nullable_versions else self.min_size(f.struct_name, version)
            elif f.type in FIXED_TYPES:
                total += FIXED_TYPES[f.type][1]
            elif f.type == "string":
                total += 1 if compact else 2
            else:
                total += 1 if compact else 4
        self._min_sizes[key] = total
        return total

    # -- codecs ------------------------------------------------------------------------------------

    def codecs(self, struct_name: str, version: int) -> tuple[str, str]:
        key = (struct_name, version)
        if key not in self._codecs:
            st = self.struct(struct_name)
            for f in st.fields:
                if version in f.versions and f.is_struct:
                    self.codecs(f.struct_name, version)
            base = self.alias(struct_name).lstrip("_")
            dec = self._dedupe("d", f"_d_{base}_v{version}", self._decoder_body(st, version))
            enc = self._dedupe("e", f"_e_{base}_v{version}", self._encoder_body(st, version))
            self._codecs[key] = (dec, enc)
        return self._codecs[key]

    def _dedupe(self, kind: str, name: str, body: str) -> str:
        existing = self._bodies.get((kind, body))
        if existing is not None:
            return existing
        self._bodies[(kind, body)] = name
        self.functions.append(body.replace("__FN__", name, 1))
        return name

    # decoding

    def _decoder_body(self, st: StructSpec, version: int) -> str:
        flexible = self.flexible(version)
        cls = self.alias(st.name)
        lines = ["def __FN__(buf, pos):", f"    o = _new({cls})"]
        run: list[FieldSpec] = []

        def flush() -> None:
            if run:
                self._dec_fixed_run(run, lines, "    ")
                run.clear()

        absent: list[FieldSpec] = []
        tagged: list[FieldSpec] = []
        for f in st.fields:
            if version not in f.versions:
                absent.append(f)
            elif f.is_tagged(version):
                tagged.append(f)
            elif f.type in FIXED_TYPES:
                run.append(f)
            else:
                flush()
                self._dec_field(f, version, flexible, lines, "    ", f"o.{f.py_name}")
        flush()
        for f in absent + tagged:
            lines.append(f"    o.{f.py_name} = {self.default_expr(f)}")
        lines.append("    o.unknown_tagged_fields = _u = {}")
        if flexible:
            if not tagged:
                # Almost every section is empty: one byte, 0.
                lines.append("    if buf[pos]:")
                lines.append("        pos = _r_tagsec(buf, pos, _u)")
                lines.append("    else:")
                lines.append("        pos += 1")
            else:
                lines.append("    _nt, pos = _ruv(buf, pos)")
                lines.append("    for _ in range(_nt):")
                lines.append("        _tag, pos, _end = _tag_bounds(buf, pos)")
                kw = "if"
                for f in sorted(tagged, key=lambda x: x.tag or 0):
                    lines.append(f"        {kw} _tag == {f.tag}:")
                    self._dec_field(f, version, True, lines, "            ", f"o.{f.py_name}")
                    lines.append(f"            _chk_tag(pos, _end, {f.tag})")
                    kw = "elif"
                lines.append("        else:")
                lines.append("            _u[_tag] = bytes(buf[pos:_end])")
                lines.append("        pos = _end")
        lines.append("    return o, pos")
        return "\n".join(lines) + "\n"

    def _dec_fixed_run(self, run: list[FieldSpec], lines: list[str], ind: str) -> None:
        fmt = ">" + "".join(FIXED_TYPES[f.type][0] for f in run)
        size = sum(FIXED_TYPES[f.type][1] for f in run)
        name = self.ctx.struct_const(fmt)
        targets = []
        post = []
        for i, f in enumerate(run):
            if f.type == "uuid":
                targets.append(f"_u{i}")
                post.append(f"{ind}o.{f.py_name} = _uuid(_u{i})")
            else:
                targets.append(f"o.{f.py_name}")
        lhs = ", ".join(targets) + ("," if len(targets) == 1 else "")
        lines.append(f"{ind}{lhs} = {name}.unpack_from(buf, pos)")
        lines.append(f"{ind}pos += {size}")
        lines.extend(post)

    def _dec_field(
        self, f: FieldSpec, version: int, flexible: bool, lines: list[str], ind: str, target: str
    ) -> None:
        nullable = version in f.nullable_versions
        compact = self.compact(f, version, flexible)
        t = f.type
        if f.is_array and f.is_struct:
            dec, _ = self.codecs(f.struct_name, version)
            mn = max(1, self.min_size(f.struct_name, version))
            if compact:
                # Inline fast path: a one-byte count that fits in the bytes left.
                lines.append(f"{ind}_n = buf[pos]")
                lines.append(f"{ind}if 0 < _n < 0x80 and (_n - 1) * {mn} < len(buf) - pos:")
                lines.append(f"{ind}    _n -= 1")
                lines.append(f"{ind}    pos += 1")
                lines.append(f"{ind}else:")
                lines.append(f"{ind}    _n, pos = _r_alen(buf, pos, True, {mn})")
            else:
                lines.append(f"{ind}_n, pos = _r_alen(buf, pos, False, {mn})")
            lines.append(f"{ind}if _n < 0:")
            lines.append(
                f"{ind}    {target} = None" if nullable else f"{ind}    raise _null_err({f.py_name!r})"
            )
            lines.append(f"{ind}else:")
            lines.append(f"{ind}    _l = []")
            lines.append(f"{ind}    _a = _l.append")
            lines.append(f"{ind}    for _ in range(_n):")
            lines.append(f"{ind}        _e, pos = {dec}(buf, pos)")
            lines.append(f"{ind}        _a(_e)")
            lines.append(f"{ind}    {target} = _l")
        elif f.is_array:
            et = f.element_type
            if et == "string":
                call = f"_r_sarr(buf, pos, {compact})"
            elif et == "uuid":
                call = f"_r_uarr(buf, pos, {compact})"
            elif et in FIXED_TYPES:
                code, width = FIXED_TYPES[et]
                call = f"_r_parr(buf, pos, {code!r}, {width}, {compact})"
            else:
                raise ValueError(f"unsupported array element type {et}")
            lines.append(f"{ind}{target}, pos = {call}")
            if not nullable:
                lines.append(f"{ind}if {target} is None:")
                lines.append(f"{ind}    raise _null_err({f.py_name!r})")
        elif f.is_struct:
            dec, _ = self.codecs(f.struct_name, version)
            if nullable:
                lines.append(f"{ind}(_b,) = _I8.unpack_from(buf, pos)")
                lines.append(f"{ind}pos += 1")
                lines.append(f"{ind}if _b < 0:")
                lines.append(f"{ind}    {target} = None")
                lines.append(f"{ind}else:")
                lines.append(f"{ind}    {target}, pos = {dec}(buf, pos)")
            else:
                lines.append(f"{ind}{target}, pos = {dec}(buf, pos)")
        elif t in FIXED_TYPES:
            self._dec_fixed_run([f], lines, ind)
        elif t == "string":
            fn = {
                (False, False): "_r_str",
                (False, True): "_r_nstr",
                (True, False): "_r_cstr",
                (True, True): "_r_cnstr",
            }
            lines.append(f"{ind}{target}, pos = {fn[(compact, nullable)]}(buf, pos)")
        elif t == "bytes":
            lines.append(f"{ind}{target}, pos = _r_bytes(buf, pos, {nullable}, {compact})")
        elif t == "records":
            lines.append(f"{ind}{target}, pos = _r_records(buf, pos, {nullable}, {compact})")
        else:
            raise ValueError(f"unsupported type {t}")

    # encoding

    def _encoder_body(self, st: StructSpec, version: int) -> str:
        flexible = self.flexible(version)
        lines = ["def __FN__(o, out, rg):"]
        run: list[FieldSpec] = []

        def flush() -> None:
            if run:
                self._enc_fixed_run(run, lines, "    ", "out")
                run.clear()

        tagged: list[FieldSpec] = []
        checks: list[str] = []
        for f in st.fields:
            if version not in f.versions:
                if not f.ignorable:
                    rng = _range_text(f.versions)
                    checks.append(f"    if {self.nondefault_test(f, 'o.' + f.py_name)}:")
                    checks.append(f"        raise _unsup({f.py_name!r} + ' (versions {rng})', {version})")
            elif f.is_tagged(version):
                tagged.append(f)
            elif f.type in FIXED_TYPES:
                run.append(f)
            else:
                flush()
                self._enc_field(f, version, flexible, lines, "    ", f"o.{f.py_name}", "out", "rg")
        flush()
        if checks:
            # Kafka's generated write() checks these first; the order only changes which error wins.
            lines[1:1] = checks
        if flexible:
            if not tagged:
                lines.append("    _u = o.unknown_tagged_fields")
                lines.append("    if _u:")
                lines.append("        _w_utags(out, _u)")
                lines.append("    else:")
                lines.append("        out.append(0)")
            else:
                lines.append("    _tf = []")
                for f in sorted(tagged, key=lambda x: x.tag or 0):
                    src = f"o.{f.py_name}"
                    lines.append(f"    if {self.nondefault_test(f, src)}:")
                    lines.append("        _t = bytearray()")
                    self._enc_field(f, version, True, lines, "        ", src, "_t", "None")
                    lines.append(f"        _tf.append(({f.tag}, _t))")
                lines.append("    if _tf or o.unknown_tagged_fields:")
                lines.append("        _w_tags(out, _tf, o.unknown_tagged_fields)")
                lines.append("    else:")
                lines.append("        out.append(0)")
        if len(lines) == 1:
            lines.append("    pass")
        return "\n".join(lines) + "\n"

    def _enc_fixed_run(self, run: list[FieldSpec], lines: list[str], ind: str, out: str) -> None:
        fmt = ">" + "".join(FIXED_TYPES[f.type][0] for f in run)
        name = self.ctx.struct_const(fmt)
        args = ", ".join(f"o.{f.py_name}.bytes" if f.type == "uuid" else f"o.{f.py_name}" for f in run)
        lines.append(f"{ind}{out} += {name}.pack({args})")

    def _enc_field(
        self,
        f: FieldSpec,
        version: int,
        flexible: bool,
        lines: list[str],
        ind: str,
        src: str,
        out: str,
        rg: str,
    ) -> None:
        nullable = version in f.nullable_versions
        compact = self.compact(f, version, flexible)
        t = f.type
        if f.is_array and f.is_struct:
            _, enc = self.codecs(f.struct_name, version)
            lines.append(f"{ind}_l = {src}")
            inner = ind
            if nullable:
                lines.append(f"{ind}if _l is None:")
                lines.append(f"{ind}    _w_nullarr({out}, {compact})")
                lines.append(f"{ind}else:")
                inner = ind + "    "
            if compact:
                lines.append(f"{inner}_w_uv({out}, len(_l) + 1)")
            else:
                lines.append(f"{inner}{out} += _I32.pack(len(_l))")
            lines.append(f"{inner}for _e in _l:")
            lines.append(f"{inner}    {enc}(_e, {out}, {rg})")
        elif f.is_array:
            et = f.element_type
            if et == "string":
                lines.append(f"{ind}_w_sarr({out}, {src}, {nullable}, {compact})")
            elif et == "uuid":
                lines.append(f"{ind}_w_uarr({out}, {src}, {nullable}, {compact})")
            else:
                code = FIXED_TYPES[et][0]
                lines.append(f"{ind}_w_parr({out}, {src}, {code!r}, {nullable}, {compact})")
        elif f.is_struct:
            _, enc = self.codecs(f.struct_name, version)
            if nullable:
                lines.append(f"{ind}if {src} is None:")
                lines.append(f"{ind}    {out}.append(255)")
                lines.append(f"{ind}else:")
                lines.append(f"{ind}    {out}.append(1)")
                lines.append(f"{ind}    {enc}({src}, {out}, {rg})")
            else:
                lines.append(f"{ind}{enc}({src}, {out}, {rg})")
        elif t in FIXED_TYPES:
            code = FIXED_TYPES[t][0]
            name = self.ctx.struct_const(">" + code)
            arg = f"{src}.bytes" if t == "uuid" else src
            lines.append(f"{ind}{out} += {name}.pack({arg})")
        elif t == "string":
            fn = {
                (False, False): "_w_str",
                (False, True): "_w_nstr",
                (True, False): "_w_cstr",
                (True, True): "_w_cnstr",
            }
            lines.append(f"{ind}{fn[(compact, nullable)]}({out}, {src})")
        elif t == "bytes":
            lines.append(f"{ind}_w_bytes({out}, {src}, {nullable}, {compact})")
        elif t == "records":
            writer = "_w_crecords" if compact else "_w_records"
            lines.append(f"{ind}{writer}({out}, {rg}, {src}, {nullable})")
        else:
            raise ValueError(f"unsupported type {t}")

    # -- classes -----------------------------------------------------------------------------------

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
        flex = _range_text(spec.flexible_versions)
        key = f"api key {spec.api_key}, " if spec.api_key is not None else ""
        doc = f"Kafka {spec.name} ({key}versions {_range_text(spec.valid_versions)}, flexible {flex})."
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
            out.append(f"_D{self.alias(name)} = {self.alias(name)}()")
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

    def tables(self) -> tuple[list[str], list[str]]:
        """Per-version (decoders, encoders) as source names, indexed by version from 0."""
        decs = ["None"] * (self.spec.valid_versions.hi + 1)
        encs = ["None"] * (self.spec.valid_versions.hi + 1)
        for v in self.spec.versions:
            decs[v], encs[v] = self.codecs(self.root_name, v)
        return decs, encs


def _range_text(v: Versions) -> str:
    if v.empty:
        return "none"
    if v.hi == 0x7FFF:
        return f"{v.lo}+"
    return f"{v.lo}" if v.lo == v.hi else f"{v.lo}-{v.hi}"
