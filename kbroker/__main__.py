"""`python -m kbroker` is the same as the `kbroker` console script.

Run with an interpreter that lacks kbroker's dependencies (the system `python3` from the repository
root instead of `.venv/bin/python`) it says so in one line with what to do, not with a traceback.
"""

import sys

_HINT = (
    "use the interpreter kbroker is installed in: `.venv/bin/python -m kbroker ...` or "
    "`.venv/bin/kbroker ...` after `make setup` in the repository, or `pip install kbroker` into this one"
)

if sys.version_info < (3, 11):  # noqa: UP036 (run by an older python3 from the repository root)
    print(f"kbroker: error: Python 3.11 or newer is needed; this is {sys.version.split()[0]} "
          f"({sys.executable}): {_HINT}", file=sys.stderr)
    raise SystemExit(1)

try:
    from kbroker.cli import main

    code = main()
except ModuleNotFoundError as e:
    if not e.name or e.name.split(".")[0] == "kbroker":
        raise
    print(f"kbroker: error: module {e.name!r} is missing from {sys.executable}: {_HINT}", file=sys.stderr)
    code = 1
raise SystemExit(code)
