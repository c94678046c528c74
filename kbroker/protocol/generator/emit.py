"""Code emission: one straight-line decoder and encoder per (struct, version), deduplicated.

For each message the emitter walks every valid version from the root struct, generates the decode
and encode function text for each struct reachable in that version, and reuses an earlier
version's function when the text is identical (so ``_d_ProduceRequest_v9`` may serve v9-v12).
Consecutive fixed-width fields are read and written with one precompiled ``struct.Struct``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kbroker.protocol.generator.classes import StructEmitter, range_text
from kbroker.protocol.generator.spec import FIXED_TYPES, FieldSpec, MessageSpec, StructSpec


@dataclass
class ModuleContext:
    """State shared by every message emitted into one module (the Struct constants)."""

    structs: dict[str, str] = field(default_factory=dict)

    def struct_const(self, fmt: str) -> str:
        name = self.structs.get(fmt)
        if name is None:
            name = self.structs[fmt] = f"_S{len(self.structs)}"
        return name


class MessageEmitter(StructEmitter):
    """Decoders and encoders for one message spec, per version, deduplicated by text."""

    def __init__(self, spec: MessageSpec, ctx: ModuleContext) -> None:
        super().__init__(spec)
        self.ctx = ctx
        self.functions: list[str] = []
        # (struct name, version) -> (decoder name, encoder name)
        self._codecs: dict[tuple[str, int], tuple[str, str]] = {}
        self._bodies: dict[tuple[str, str], str] = {}  # (kind, body text) -> canonical function name
        self._min_sizes: dict[tuple[str, int], int] = {}

    def flexible(self, version: int) -> bool:
        return version in self.spec.flexible_versions

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
                    self._dec_field(f, version, True, lines, "            ", f"o.{f.py_name}", tagged=True)
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
        self,
        f: FieldSpec,
        version: int,
        flexible: bool,
        lines: list[str],
        ind: str,
        target: str,
        tagged: bool = False,
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
            if nullable and tagged:
                # A tagged nullable struct starts with an unsigned varint: 0 null, 1 present (Kafka's
                # generated readers take any value <= 0 as null).
                lines.append(f"{ind}_b, pos = _ruv(buf, pos)")
                lines.append(f"{ind}if not _b:")
                lines.append(f"{ind}    {target} = None")
                lines.append(f"{ind}else:")
                lines.append(f"{ind}    {target}, pos = {dec}(buf, pos)")
            elif nullable:
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
                    rng = range_text(f.versions)
                    checks.append(f"    if {self.nondefault_test(f, 'o.' + f.py_name)}:")
                    qual = st.name if st.name == self.root_name else f"{self.root_name}.{st.name}"
                    what = f"{qual}.{f.py_name} (versions {rng})"
                    checks.append(f"        raise _unsup({what!r}, {version})")
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
                    self._enc_field(f, version, True, lines, "        ", src, "_t", "None", tagged=True)
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
        tagged: bool = False,
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
                null = f"{out}.append(0)" if compact else f"{out} += _NULL_I32"
                lines.append(f"{ind}    {null}")
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
                # Presence: int8 -1/1; in a tagged field an unsigned varint 0/1 (Kafka's generated code).
                lines.append(f"{ind}if {src} is None:")
                lines.append(f"{ind}    {out}.append({0 if tagged else 255})")
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

    def tables(self) -> tuple[list[str], list[str]]:
        """Per-version (decoders, encoders) as source names, indexed by version from 0."""
        decs = ["None"] * (self.spec.valid_versions.hi + 1)
        encs = ["None"] * (self.spec.valid_versions.hi + 1)
        for v in self.spec.versions:
            decs[v], encs[v] = self.codecs(self.root_name, v)
        return decs, encs
