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

import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.broker import REPO_ROOT, KBroker, free_port
from tests.support.docs_blocks import Block, check_markers, checkout_env, run_block, sh_blocks, write_bin

PAGE = REPO_ROOT / "docs" / "getting-started.md"


def blocks() -> list[Block]:
    return sh_blocks(PAGE)


@pytest.fixture
def venv_bin(tmp_path: Path) -> Path:
    """Stands in for the repository's .venv/bin: this interpreter, this checkout."""
    return write_bin(tmp_path / "venv" / "bin", python=True)


def _run_block(block: Block, bootstrap: str, venv_bin: Path) -> str:
    script = block.text.replace("127.0.0.1:9092", bootstrap).replace(".venv/bin/", f"{venv_bin}/")
    return run_block(block.line, script, cwd=REPO_ROOT, env=checkout_env(), timeout=300)


def test_page_markers_are_known_and_explained() -> None:
    found = blocks()
    assert len(found) >= 6
    check_markers(found, ("skip", "serve", "slow"))


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
                                    env=checkout_env())
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
    # The console producer's sticky partitioner puts the three lines in one or more of the three
    # partitions; the consumer reads all of them (in partition order, not necessarily a, b, c).
    assert "PartitionCount: 3" in out and {"a", "b", "c"} <= set(out.splitlines())
