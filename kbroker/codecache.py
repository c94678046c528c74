"""Compiled dataclass methods, kept on disk like `.pyc` files (issue 17, P5: start time).

Why: Python 3.11 and 3.12 write every method of a `@dataclass` (`__init__`, `__repr__`, `__eq__`,
`__setattr__` of a frozen one, ...) as source text and `exec` it, one compile per method. kbroker
defines about 200 dataclasses on its start path: about 1,000 compiles, 0.2 s of a 0.7 s import on the
benchmark machine, more than a third of starting a node. The text of each method depends only on the class
definition, so its code object can be kept like a module's bytecode and loaded instead of compiled.

What: `install()` wraps `dataclasses._create_fn` for kbroker's own modules (the globals it is given say
whose class it is): the same text, the same globals and locals, the same function, but the code object
comes from a marshal file under `kbroker/__pycache__`, keyed by the full text (no hash to collide) and
named by the interpreter's cache tag (a marshal file is valid for one Python version only). Classes of
other packages are left to the original function. Entries compiled in this process are merged into the
file at exit (atomically: write, then rename, so concurrent nodes never read half a file); nothing is
written when `sys.dont_write_bytecode` (PYTHONDONTWRITEBYTECODE, `-B`) says not to write bytecode, as for
`.pyc` files. A file that cannot be read is ignored and rewritten.

Python 3.13 builds each class's methods in one `exec` and has no `_create_fn`: `install()` checks the
function's signature and does nothing when it is not the one this module wraps.

Imports only the standard library: it is installed by `kbroker/__init__.py` before any other kbroker module.
"""

from __future__ import annotations

import atexit
import dataclasses
import inspect
import marshal
import os
import sys
from collections.abc import Callable
from types import CodeType
from typing import Any

_EXPECTED = ("name", "args", "body", "globals", "locals", "return_type")
_MAX_ENTRIES = 20_000  # beyond it the file keeps only what this process used (old class shapes drop out)


class DataclassCodeCache:
    """The code objects of dataclass methods, by source text, loaded from and saved to `path`."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.codes: dict[str, CodeType] = {}
        self.used: set[str] = set()
        self.compiled = 0  # misses in this process
        self.unsaved = 0  # misses since the last save
        self.loaded_entries = 0
        if path is not None:
            try:
                with open(path, "rb") as f:
                    loaded = marshal.loads(f.read())  # load(f) reads the file in small pieces: 10x slower
            except (OSError, EOFError, ValueError, TypeError):
                loaded = None
            if isinstance(loaded, dict):
                self.codes = {k: v for k, v in loaded.items() if isinstance(k, str) and isinstance(v, CodeType)}
                self.loaded_entries = len(self.codes)

    def code_for(self, txt: str) -> CodeType:
        code = self.codes.get(txt)
        if code is None:
            code = compile(txt, "<string>", "exec")
            self.codes[txt] = code
            self.compiled += 1
            self.unsaved += 1
        self.used.add(txt)
        return code

    def release_used(self) -> None:
        """Forget the code objects already made into methods (their functions keep what they need): about
        1 MiB a node need not keep. Saved ones are in the file; the rest are saved first."""
        self.save()
        for txt in self.used:
            self.codes.pop(txt, None)

    def save(self, *, force: bool = False) -> None:
        """Merge what this process compiled into the file: nothing to do when it compiled nothing since the
        last save, or when bytecode is not to be written (unless `force`)."""
        if self.path is None or self.unsaved == 0 or (sys.dont_write_bytecode and not force):
            return
        self.unsaved = 0
        merged = DataclassCodeCache(self.path).codes  # what this or another process saved before
        merged.update(self.codes)
        if len(merged) > _MAX_ENTRIES:  # old class shapes drop out
            merged = {k: v for k, v in merged.items() if k in self.used or k in self.codes}
        tmp = f"{self.path}.{os.getpid()}.tmp"
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            with open(tmp, "wb") as f:
                marshal.dump(merged, f)
            os.replace(tmp, self.path)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass


_cache: DataclassCodeCache | None = None


def default_path() -> str | None:
    """Next to the package's bytecode: `kbroker/__pycache__`, or under PYTHONPYCACHEPREFIX when set."""
    tag = sys.implementation.cache_tag
    if tag is None:
        return None
    package = os.path.dirname(os.path.abspath(__file__))
    if sys.pycache_prefix:
        folder = os.path.join(sys.pycache_prefix, package.lstrip(os.sep))
    else:
        folder = os.path.join(package, "__pycache__")
    return os.path.join(folder, f"dataclass-methods.{tag}.marshal")


def _wrapping(original: Callable[..., Any], cache: DataclassCodeCache) -> Callable[..., Any]:
    missing = dataclasses.MISSING

    def _create_fn(name: str, args: list[str], body: list[str], *, globals: dict[str, Any] | None = None,
                   locals: dict[str, Any] | None = None, return_type: Any = missing) -> Any:
        module = globals.get("__name__", "") if globals is not None else ""
        if not (module == "kbroker" or module.startswith("kbroker.")):
            return original(name, args, body, globals=globals, locals=locals, return_type=return_type)
        # The text exactly as Python 3.11/3.12's dataclasses.py builds it.
        if locals is None:
            locals = {}
        return_annotation = ""
        if return_type is not missing:
            locals["_return_type"] = return_type
            return_annotation = "->_return_type"
        args_text = ",".join(args)
        body_text = "\n".join(f"  {b}" for b in body)
        txt = f" def {name}({args_text}){return_annotation}:\n{body_text}"
        local_vars = ", ".join(locals.keys())
        txt = f"def __create_fn__({local_vars}):\n{txt}\n return {name}"
        ns: dict[str, Any] = {}
        exec(cache.code_for(txt), globals, ns)  # noqa: S102 - dataclasses' own generated text
        return ns["__create_fn__"](**locals)

    _create_fn.__wrapped__ = original  # type: ignore[attr-defined]
    return _create_fn


def install(path: str | None = None) -> DataclassCodeCache | None:
    """Wrap `dataclasses._create_fn` once per process; the cache, or None where it does not apply."""
    global _cache
    if _cache is not None:
        return _cache
    original = getattr(dataclasses, "_create_fn", None)
    setting = os.environ.get("KBROKER_DATACLASS_CACHE", "")
    if original is None or setting == "0":
        return None
    if path is None and setting not in ("", "1"):
        path = setting  # a file of its own (tests)
    try:
        params = tuple(inspect.signature(original).parameters)
    except (TypeError, ValueError):
        return None
    if params != _EXPECTED:
        return None
    _cache = DataclassCodeCache(path if path is not None else default_path())
    dataclasses._create_fn = _wrapping(original, _cache)  # type: ignore[attr-defined]
    atexit.register(_cache.save)
    return _cache


def started() -> None:
    """A node serves: save what it compiled now (a node stopped with SIGKILL runs no exit handler) and
    release the code objects it has made into methods."""
    if _cache is not None:
        _cache.release_used()


# The modules a node imports before it serves, handlers included (`prime`).
SERVE_PATH = ("kbroker.cli", "kbroker.broker", "kbroker.services", "kbroker.server.controller_apis")


def prime() -> int:
    """Compile and save every dataclass method of a node's start path, even under PYTHONDONTWRITEBYTECODE:
    what `compileall` is to `.pyc` files. The benchmarks and `make setup` run it first:
    `python -c "from kbroker import codecache; codecache.prime()"`. The number of entries compiled."""
    import importlib

    cache = install()
    if cache is None:
        return 0
    for name in SERVE_PATH:
        importlib.import_module(name)
    dispatcher = importlib.import_module("kbroker.api.dispatcher")
    for listener in ("broker", "controller"):
        dispatcher.discover_handlers(listener=listener)
        dispatcher.discover_handlers(listener=listener, kraft_broker=True)
    compiled = cache.compiled
    cache.save(force=True)
    return compiled

