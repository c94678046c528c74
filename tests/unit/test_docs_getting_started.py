"""docs/getting-started.md, executed: every ```sh block runs against a fresh broker, so the page stays true.

A block may be preceded by a marker comment:
- `<!-- docs-test: skip (reason) -->`: not run (the reason says what covers it instead);
- `<!-- docs-test: serve (...) -->`: each line starts a broker in the foreground; the test gives it a
  free port and a temporary data dir, waits until it accepts connections, then stops it (SIGTERM, exit 0);
- `<!-- docs-test: slow (...) -->`: run by the slow suite only (the Java tools: four JVM starts).
Unmarked blocks run with bash from the repository root: `127.0.0.1:9092` becomes the test broker's
address and `.venv/bin/` a directory whose `kbroker` and `python` run this checkout.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.broker import KBroker, free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
PAGE = REPO_ROOT / "docs" / "getting-started.md"


@dataclass
class Block:
    line: int
    marker: str  # "", "skip", "serve", "slow"
    reason: str
    text: str


def blocks() -> list[Block]:
    found: list[Block] = []
    lines = PAGE.read_text().splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```sh":
            prev = next((x.strip() for x in reversed(lines[:i]) if x.strip()), "")
            m = re.fullmatch(r"<!-- docs-test: (\w+)(?: \((.*)\))? -->", prev)
            end = lines.index("```", i + 1)
            found.append(Block(i + 1, m.group(1) if m else "", (m.group(2) or "") if m else "",
                               "\n".join(lines[i + 1:end])))
            i = end
        i += 1
    return found


@pytest.fixture
def venv_bin(tmp_path: Path) -> Path:
    """Stands in for the repository's .venv/bin: this interpreter, this checkout."""
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "kbroker").write_text(f'#!/usr/bin/env bash\nexec "{sys.executable}" -m kbroker "$@"\n')
    (bin_dir / "python").write_text(f'#!/usr/bin/env bash\nexec "{sys.executable}" "$@"\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return bin_dir


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _run_block(block: Block, bootstrap: str, venv_bin: Path) -> str:
    script = block.text.replace("127.0.0.1:9092", bootstrap).replace(".venv/bin/", f"{venv_bin}/")
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=REPO_ROOT, capture_output=True, text=True,
                       env=_env(), timeout=300)
    assert r.returncode == 0, f"block at line {block.line} failed:\n{script}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"
    assert "Traceback" not in r.stderr, r.stderr
    return r.stdout


def test_page_markers_are_known_and_explained() -> None:
    found = blocks()
    assert len(found) >= 6
    for b in found:
        assert b.marker in ("", "skip", "serve", "slow"), b
        if b.marker:
            assert b.reason, f"block at line {b.line}: a {b.marker} marker says why"


def test_shell_blocks_run_against_a_fresh_broker(tmp_path: Path, venv_bin: Path) -> None:
    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed (scripts/system-deps.sh installs it)")
    broker = KBroker(tmp_path / "broker")
    broker.start()
    try:
        outputs = [_run_block(b, broker.bootstrap, venv_bin) for b in blocks() if b.marker == ""]
    finally:
        broker.stop()
    text = "\n".join(outputs)
    # What the page promises in its comments.
    assert "0: one\n1: two\n2: three" in text
    assert "[b'hello']" in text
    assert "kbroker 0.1.0" in text and "--override" in text


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def test_serve_lines_start_and_stop(tmp_path: Path, venv_bin: Path) -> None:
    lines = [line for b in blocks() if b.marker == "serve" for line in b.text.splitlines() if line.strip()]
    assert len(lines) >= 3
    for n, line in enumerate(lines):
        port = free_port()
        command = (line.replace(".venv/bin/", f"{venv_bin}/")
                   + f" --override listeners=PLAINTEXT://127.0.0.1:{port} --override log.dirs={tmp_path / f'data{n}'}")
        log = tmp_path / f"serve{n}.log"
        with open(log, "w") as err:
            proc = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=REPO_ROOT, stdout=err, stderr=err,
                                    env=_env())
        try:
            deadline = time.monotonic() + 30
            while not _accepts(port):
                assert proc.poll() is None and time.monotonic() < deadline, f"{line}\n{log.read_text()}"
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0, log.read_text()
            assert "Traceback" not in log.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.slow
@pytest.mark.java
def test_java_tool_blocks(tmp_path: Path, venv_bin: Path) -> None:
    from tests.support.java import java_unavailable_reason

    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    broker = KBroker(tmp_path / "broker")
    broker.start()
    try:
        out = "\n".join(_run_block(b, broker.bootstrap, venv_bin) for b in blocks() if b.marker == "slow")
    finally:
        broker.stop()
    assert "PartitionCount: 3" in out and out.rstrip().endswith("c")
