"""`kbroker/api/handler_index.py` (generated) is what a scan of the handler modules reads, and a node starts
without importing the handlers: each is imported at its API's first request (issue 17, P5: start time)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kbroker.api.dispatcher import discover_handlers, render_handler_index, scan_handlers

REPO = Path(__file__).resolve().parents[2]


def test_the_index_is_the_scan() -> None:
    text = (REPO / "kbroker" / "api" / "handler_index.py").read_text(encoding="utf-8")
    assert text == render_handler_index(), (
        "kbroker/api/handler_index.py is stale: run `python -m kbroker.api.dispatcher --write-index`")


def test_the_index_serves_what_the_scan_serves() -> None:
    scanned = {e.api_key: e for e in scan_handlers()}
    for listener in ("broker", "controller"):
        for kraft_broker in (False, True):
            specs = discover_handlers(listener=listener, kraft_broker=kraft_broker)
            assert specs, (listener, kraft_broker)
            for key, spec in specs.items():
                e = scanned[key]
                module = spec.module  # imported on first use
                assert module.__name__ == f"kbroker.api.{e.module}" and module.API_KEY == key
                assert (spec.min_version, spec.max_version) == (module.MIN_VERSION, module.MAX_VERSION)
                assert spec.advertised_min_version == getattr(module, "ADVERTISED_MIN_VERSION", module.MIN_VERSION)


def test_a_dispatcher_imports_a_handler_at_its_first_request() -> None:
    code = """
import sys
from kbroker.api.dispatcher import discover_handlers
specs = discover_handlers(kraft_broker=True)
before = sorted(m for m in sys.modules if m.startswith("kbroker.api.") and m[12:] not in ("dispatcher", "context",
               "handler_index") and not m[12:].startswith("_"))
assert "kbroker.api.produce" not in sys.modules
specs[0].module.handle
print(len(specs), len(before), "kbroker.api.produce" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    served, imported_at_start, produce_after = out.stdout.split()
    assert int(served) > 60 and int(imported_at_start) == 0 and produce_after == "True", out.stdout
