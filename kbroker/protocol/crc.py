"""CRC-32C (Castagnoli), the checksum of a v2 record batch (KIP-98), from the `crc32c` package's C code.

Why not `import crc32c`: the package's `__init__` asks `importlib.metadata` for its own version. That
imports email, csv and zipfile and reads every installed distribution's metadata: about 35 ms of a
default node's start (issue 17, P5: start to first produce), for a version string kbroker never reads.
The C extension inside the package (`crc32c._crc32c`, the same function `crc32c.crc32c` re-exports)
needs none of it, so it is loaded directly from the installed package's directory (0.9 ms) and
registered under its own name, so a later `import crc32c` (a test, a tool) reuses it. Anything
unexpected (another layout, a pure-Python fallback build) falls back to the plain import.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType

_EXTENSION = "crc32c._crc32c"


def _load_extension() -> ModuleType | None:
    if _EXTENSION in sys.modules:
        return sys.modules[_EXTENSION]
    spec = importlib.util.find_spec("crc32c")  # a top-level name: finds the package without running it
    if spec is None or not spec.submodule_search_locations:
        return None
    finder = importlib.machinery.FileFinder(
        list(spec.submodule_search_locations)[0],
        (importlib.machinery.ExtensionFileLoader, importlib.machinery.EXTENSION_SUFFIXES))
    ext = finder.find_spec(_EXTENSION)
    if ext is None or ext.loader is None:
        return None
    module = importlib.util.module_from_spec(ext)
    ext.loader.exec_module(module)
    sys.modules[_EXTENSION] = module
    return module


def _crc32c_function() -> Callable[..., int]:
    try:
        module = _load_extension()
        if module is not None and callable(getattr(module, "crc32c", None)):
            return module.crc32c  # type: ignore[no-any-return]
    except (ImportError, OSError):
        pass
    import crc32c as package  # the documented entry point, at its full import cost

    return package.crc32c


crc32c: Callable[..., int] = _crc32c_function()
"""`crc32c(data, value=0) -> int`: the CRC-32C of a bytes-like object, continuing from `value`."""

__all__ = ["crc32c"]
