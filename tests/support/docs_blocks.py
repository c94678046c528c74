"""Running a docs page's ```sh blocks, so the page stays true: one reader of the marker convention and
one runner, used by every docs test (tests/unit/test_docs_getting_started.py, tests/spark/test_spark_docs.py).

A block may be preceded by a marker comment `<!-- docs-test: <kind> (reason) -->`; each page's test
says which kinds it knows (skip, serve, slow, ...) and that a marker gives its reason. Unmarked
blocks run with `bash -euo pipefail`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support.broker import REPO_ROOT

_MARKER = re.compile(r"<!-- docs-test: (\w+)(?: \((.*)\))? -->")


@dataclass(frozen=True)
class Block:
    line: int  # the line of the opening ```sh (1-based)
    marker: str  # "" for an unmarked block, else the marker's kind
    reason: str
    text: str


def sh_blocks(page: Path) -> list[Block]:
    """Every ```sh block of `page`, in order, with the marker comment just before it (if any)."""
    found: list[Block] = []
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```sh":
            prev = next((x.strip() for x in reversed(lines[:i]) if x.strip()), "")
            m = _MARKER.fullmatch(prev)
            end = lines.index("```", i + 1)
            found.append(Block(i + 1, m.group(1) if m else "", (m.group(2) or "") if m else "",
                               "\n".join(lines[i + 1:end])))
            i = end
        i += 1
    return found


def check_markers(blocks: list[Block], known: tuple[str, ...]) -> None:
    """Every marker is one the page's test knows, and says why."""
    for b in blocks:
        assert b.marker in ("", *known), b
        if b.marker:
            assert b.reason, f"block at line {b.line}: a {b.marker} marker says why"


def write_bin(bin_dir: Path, *, python: bool = False) -> Path:
    """A directory whose `kbroker` (and `python`, when asked) run this interpreter and this checkout."""
    bin_dir.mkdir(parents=True)
    (bin_dir / "kbroker").write_text(f'#!/usr/bin/env bash\nexec "{sys.executable}" -m kbroker "$@"\n')
    if python:
        (bin_dir / "python").write_text(f'#!/usr/bin/env bash\nexec "{sys.executable}" "$@"\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return bin_dir


def checkout_env(**extra: str) -> dict[str, str]:
    """This process's environment with this checkout first on PYTHONPATH, plus `extra`."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def run_block(line: int, script: str, *, cwd: Path, env: dict[str, str], timeout: float,
              log: Path | None = None, tail: int | None = None) -> str:
    """Run one block's script with bash; its stdout. It must exit 0 with no Python traceback on stderr
    (`log`: where the script and both outputs are kept; `tail`: how much of them a failure shows)."""
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, capture_output=True, text=True,
                       env=env, timeout=timeout)
    if log is not None:
        log.write_text(f"{script}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}")
    out, err = (r.stdout, r.stderr) if tail is None else (r.stdout[-tail:], r.stderr[-tail:])
    assert r.returncode == 0, f"block at line {line} failed:\n{script}\n--- stdout\n{out}\n--- stderr\n{err}"
    assert "Traceback" not in r.stderr, err
    return r.stdout
