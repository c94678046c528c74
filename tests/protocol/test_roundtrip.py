"""Every generated message, every valid version, both directions: random object -> encode -> decode -> equal.

Objects are built from the generated ``FIELDS`` metadata (``message_strategy`` below): only fields the
version has are set, nullable fields may be null, flexible versions get random unknown tagged fields,
and struct arrays, nested/common structs and tagged fields are all exercised. Example counts follow
``KBROKER_HYPOTHESIS_PROFILE`` (default 10 per case; ``ci`` 25; ``thorough`` 200).
"""

from __future__ import annotations

import functools
import importlib
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbroker.protocol.messages import API_SPECS, DATA_MODULES
from kbroker.protocol.types import ZERO_UUID, FieldInfo, in_range

# Example counts per (message, version, direction); applied to this module's test only, so that
# loading it does not change the hypothesis settings of other test modules.
_MAX_EXAMPLES = {"default": 10, "ci": 25, "thorough": 200}[
    os.environ.get("KBROKER_HYPOTHESIS_PROFILE", "default")
]

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}
# Tags well above any tag the specs use, so random unknown tagged fields never collide with known ones.
_UNKNOWN_TAGS = st.dictionaries(st.integers(1000, 1010), st.binary(max_size=8), max_size=2)


def _ints(t: str) -> st.SearchStrategy[int]:
    lo, hi = _INT_RANGES[t]
    return st.one_of(st.sampled_from([lo, hi, 0, -1 if lo < 0 else 1]), st.integers(lo, hi))


def _scalar(t: str) -> st.SearchStrategy[Any]:
    if t in _INT_RANGES:
        return _ints(t)
    if t == "bool":
        return st.booleans()
    if t == "float64":
        return st.floats(allow_nan=False)
    if t == "uuid":
        return st.one_of(st.just(ZERO_UUID), st.uuids())
    if t == "string":
        return st.text(max_size=12)
    if t in ("bytes", "records"):
        return st.binary(max_size=24)
    raise AssertionError(f"no strategy for {t}")


@functools.cache
def message_strategy(cls: type, version: int, flexible: bool) -> st.SearchStrategy[Any]:
    """Random instances of ``cls`` valid at ``version``: only fields present in it are set."""
    fields: dict[str, st.SearchStrategy[Any]] = {}
    info: FieldInfo
    for info in cls.FIELDS:  # type: ignore[attr-defined]
        if not in_range(info.versions, version):
            continue
        nullable = in_range(info.nullable_versions, version)
        if info.struct is not None:
            inner = message_strategy(info.struct, version, flexible)
        else:
            inner = _scalar(info.type.removeprefix("[]"))
        if info.type.startswith("[]"):
            inner = st.lists(inner, max_size=2 if info.struct is not None else 3)
        if nullable:
            inner = st.one_of(st.none(), inner)
        fields[info.name] = inner
    if flexible:
        fields["unknown_tagged_fields"] = _UNKNOWN_TAGS
    return st.builds(lambda kw: cls(**kw), st.fixed_dictionaries(fields))


def _flexible(rng: tuple[int, int] | None, version: int) -> bool:
    return in_range(rng, version)


def all_cases() -> list[tuple[str, type, int, bool, Any, Any]]:
    """(id, class, version, flexible, encoder, decoder) for every message, version and direction."""
    cases = []
    for _key, spec in sorted(API_SPECS.items()):
        module = importlib.import_module(spec.request_class.__module__)
        for side, cls, decs, encs, flex in (
            (
                "request",
                spec.request_class,
                spec.request_decoders,
                spec.request_encoders,
                module.REQUEST_FLEXIBLE_VERSIONS,
            ),
            (
                "response",
                spec.response_class,
                spec.response_decoders,
                spec.response_encoders,
                module.RESPONSE_FLEXIBLE_VERSIONS,
            ),
        ):
            for v in range(len(decs)):
                if decs[v] is not None:
                    cases.append((f"{spec.name}-{side}-v{v}", cls, v, _flexible(flex, v), encs[v], decs[v]))
    for name in DATA_MODULES:
        module = importlib.import_module(f"kbroker.protocol.messages.{name}")
        for v in range(len(module.DECODERS)):
            if module.DECODERS[v] is not None:
                cls = module.CLASS
                cases.append(
                    (
                        f"{name}-v{v}",
                        cls,
                        v,
                        _flexible(module.FLEXIBLE_VERSIONS, v),
                        module.ENCODERS[v],
                        module.DECODERS[v],
                    )
                )
    return cases


CASES = all_cases()


def _roundtrip(obj: Any, encoder: Any, decoder: Any) -> Any:
    out = bytearray()
    encoder(obj, out, None)
    back, pos = decoder(memoryview(bytes(out)), 0)
    assert pos == len(out), "decoder did not consume exactly what the encoder wrote"
    return back, bytes(out)


@pytest.mark.parametrize(
    ("case_id", "cls", "version", "flexible", "encoder", "decoder"), CASES, ids=[c[0] for c in CASES]
)
@settings(
    max_examples=_MAX_EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_roundtrip(
    data: st.DataObject, case_id: str, cls: type, version: int, flexible: bool, encoder: Any, decoder: Any
) -> None:
    obj = data.draw(message_strategy(cls, version, flexible))
    back, raw = _roundtrip(obj, encoder, decoder)
    assert back == obj, f"{case_id}: {obj!r} != {back!r}"
    # Re-encoding the decoded object gives the same bytes (unknown tagged fields are re-emitted).
    again, raw2 = _roundtrip(back, encoder, decoder)
    assert raw2 == raw


def test_every_version_of_every_api_is_covered() -> None:
    ids = {c[0] for c in CASES}
    for spec in API_SPECS.values():
        for v in range(spec.min_version, spec.max_version + 1):
            assert f"{spec.name}-request-v{v}" in ids
            assert f"{spec.name}-response-v{v}" in ids


def test_defaults_roundtrip_in_every_version() -> None:
    """A default-constructed object encodes and decodes back equal in every version."""
    for case_id, cls, _version, _flexible, encoder, decoder in CASES:
        obj = cls()
        try:
            back, _ = _roundtrip(obj, encoder, decoder)
        except Exception as exc:  # pragma: no cover - the assertion message is the point
            raise AssertionError(f"{case_id}: default object failed: {exc!r}") from exc
        assert back == obj, case_id
