"""`python -m build` makes an sdist and a wheel; each installs into a clean venv and runs.

Both are built once (build isolation fetches setuptools through pip's cache); the wheel is installed and
runs `kbroker --version` and a short `kbroker serve` answering ApiVersions; the sdist is installed (pip
builds it into a wheel again) and serves too. About 12 s in all with a warm pip cache."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

import kbroker
from kbroker.client import NodeConnection
from tests.distribution.support import clean_env, copy_source, new_venv, pip_install


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("build")
    src = copy_source(root / "src")
    out = root / "dist"
    r = subprocess.run([sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out), str(src)],
                       capture_output=True, text=True, env=clean_env(), timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    # SPDX license metadata: no deprecation warnings about the license table.
    assert "license" not in r.stderr.lower() or "deprecat" not in r.stderr.lower(), r.stderr
    return out


def _serve_and_ask_api_versions(kbroker_bin: Path, workdir: Path) -> int:
    """Start the installed `kbroker serve` on a free port, send ApiVersions, stop it; the API count."""
    log = workdir / "serve.log"
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [str(kbroker_bin), "serve", "--override", "listeners=PLAINTEXT://127.0.0.1:0",
             "--override", f"log.dirs={workdir / 'data'}"],
            stdout=err, stderr=err, env=clean_env(), cwd=workdir)
    try:
        deadline = time.monotonic() + 30
        port = 0
        while not port:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            m = re.search(r"kbroker started: .* listening on PLAINTEXT://127\.0\.0\.1:(\d+)", log.read_text())
            port = int(m.group(1)) if m else 0
            time.sleep(0.05)

        async def ask() -> int:
            conn = NodeConnection("127.0.0.1", port)
            await conn.connect()  # ApiVersions
            await conn.close()
            return len(conn.api_versions)

        count = asyncio.run(ask())
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
    assert code == 0, log.read_text()
    assert "shut down cleanly" in log.read_text()
    return count


def test_wheel_installs_and_serves(dist: Path, tmp_path: Path) -> None:
    (wheel,) = dist.glob("kbroker-*.whl")
    (sdist,) = dist.glob("kbroker-*.tar.gz")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        entry_points = z.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert "License-Expression: Apache-2.0" in meta
    assert "[pytest11]" in entry_points and "kbroker.testing.pytest_plugin" in entry_points
    assert any(n.startswith("kbroker/protocol/messages/") for n in names)
    with tarfile.open(sdist) as t:
        assert any(n.endswith("/kbroker/testing/_zygote.py") for n in t.getnames())
    python = new_venv(tmp_path / "venv")
    pip_install(python, str(wheel))
    bin_dir = python.parent
    r = subprocess.run([str(bin_dir / "kbroker"), "--version"], capture_output=True, text=True, env=clean_env())
    assert r.returncode == 0 and r.stdout.strip() == f"kbroker {kbroker.__version__}"
    assert _serve_and_ask_api_versions(bin_dir / "kbroker", tmp_path) > 20


def test_sdist_installs_and_serves(dist: Path, tmp_path: Path) -> None:
    (sdist,) = dist.glob("kbroker-*.tar.gz")
    python = new_venv(tmp_path / "venv")
    pip_install(python, str(sdist))
    assert _serve_and_ask_api_versions(python.parent / "kbroker", tmp_path) > 20
