"""`kbroker/codecache.py`: dataclass methods compiled once and kept on disk (issue 17, P5: start time).

The cached methods must be the methods `dataclasses` would have made (the same behaviour for `__init__`
with defaults and factories, `__repr__`, `__eq__`, `__hash__`, a frozen class's `__setattr__`, ordering),
only kbroker's classes are cached, and a second process loads what the first compiled instead of compiling.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from kbroker import codecache
from kbroker.codecache import DataclassCodeCache

REPO = Path(__file__).resolve().parents[2]

SOURCE = textwrap.dedent("""
    from __future__ import annotations
    import dataclasses
    from dataclasses import dataclass, field

    @dataclass(frozen=True, order=True)
    class Point:
        x: int
        y: int = 0
        tags: tuple[str, ...] = ()

    @dataclass(slots=True)
    class Bag:
        name: str
        items: list[int] = field(default_factory=list)
        hidden: int = field(default=7, repr=False, compare=False)
""")


def _define(module_name: str) -> types.ModuleType:
    module = types.ModuleType(module_name)
    sys.modules[module_name] = module
    try:
        exec(compile(SOURCE, f"<{module_name}>", "exec"), module.__dict__)  # noqa: S102
    finally:
        del sys.modules[module_name]
    return module


def _exercise(m: types.ModuleType) -> list[object]:
    p, q = m.Point(1), m.Point(1, 2, ("a",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 3
    b = m.Bag("n")
    b.items.append(1)
    return [repr(p), repr(q), p == m.Point(1), p < q, hash(p) == hash(m.Point(1)), repr(b), b == m.Bag("n", [1], 9),
            m.Bag("z").items is not m.Bag("z").items, m.Point.__init__.__defaults__, m.Bag.__slots__]


def test_cached_methods_behave_as_the_compiled_ones(tmp_path: Path) -> None:
    plain = _exercise(_define("plain_module"))  # not kbroker's: the original _create_fn either way
    path = tmp_path / "cache.marshal"
    first = DataclassCodeCache(str(path))
    original = dataclasses._create_fn  # type: ignore[attr-defined]
    wrapped = codecache._wrapping(getattr(original, "__wrapped__", original), first)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dataclasses, "_create_fn", wrapped)
        mp.setattr(sys, "dont_write_bytecode", False)
        assert _exercise(_define("kbroker._cache_probe")) == plain
        assert first.compiled > 5
        first.save()
        assert path.exists()
        second = DataclassCodeCache(str(path))
        assert second.loaded_entries == first.compiled
        mp.setattr(dataclasses, "_create_fn", codecache._wrapping(getattr(original, "__wrapped__", original), second))
        assert _exercise(_define("kbroker._cache_probe")) == plain
        assert second.compiled == 0  # every method came from the file
        foreign = _define("someone_else")  # other packages' classes are not cached
        assert second.compiled == 0 and len(second.codes) == first.compiled
        assert _exercise(foreign) == plain
        second.release_used()  # a node that serves keeps only what it has not made into methods yet
        assert second.codes == {} and DataclassCodeCache(str(path)).loaded_entries == first.compiled
        assert _exercise(_define("kbroker._cache_probe")) == plain  # compiled again, the same


def test_no_file_under_dont_write_bytecode_and_a_bad_file_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "cache.marshal"
    cache = DataclassCodeCache(str(path))
    cache.code_for("def __create_fn__():\n def f(self):\n  return 1\n return f")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "dont_write_bytecode", True)
        cache.save()
        assert not path.exists()
        cache.save(force=True)
        assert path.exists()
    path.write_bytes(b"\x00not marshal")
    assert DataclassCodeCache(str(path)).codes == {}


def _start_path_import(env: dict[str, str]) -> tuple[int, int]:
    code = ("import kbroker.broker, kbroker.services; from kbroker import codecache; "
            "c = codecache._cache; print(c.compiled, c.loaded_entries)")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, check=True)
    compiled, loaded = out.stdout.split()
    return int(compiled), int(loaded)


def test_a_second_process_compiles_nothing(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["KBROKER_DATACLASS_CACHE"] = str(tmp_path / "cache.marshal")
    compiled, loaded = _start_path_import(env)
    assert compiled > 300 and loaded == 0  # the broker's start path: hundreds of dataclass methods
    again, loaded = _start_path_import(env)
    assert again == 0 and loaded == compiled
    env["KBROKER_DATACLASS_CACHE"] = "0"  # off: no cache
    code = "import kbroker.broker; from kbroker import codecache; print(codecache._cache)"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "None"
