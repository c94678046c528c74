"""examples/pytest-plugin, run as its users run it: kbroker and the example installed into a new virtual
environment (nothing from this checkout on the path), then the example's own tests, which get every
fixture from the installed plugin through its `pytest11` entry point.

Dependencies come from the package index through pip's cache (about 10 s when cached)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from tests.distribution.support import REPO_ROOT, clean_env, copy_source, new_venv, pip_install


def test_example_project_passes_with_the_installed_plugin(tmp_path: Path) -> None:
    src = copy_source(tmp_path / "kbroker-src")
    example = tmp_path / "example"
    shutil.copytree(REPO_ROOT / "examples" / "pytest-plugin", example,
                    ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache", "*.egg-info", "build"))
    python = new_venv(tmp_path / "venv")
    pip_install(python, str(src), f"{example}[test]")
    where = subprocess.run([str(python), "-c", "import kbroker; print(kbroker.__file__)"], cwd=example,
                           capture_output=True, text=True, env=clean_env(), check=True).stdout
    assert str(tmp_path / "venv") in where  # the installed kbroker, not this checkout
    r = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning"],
                       cwd=example, capture_output=True, text=True, env=clean_env(), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"\b5 passed\b", r.stdout), r.stdout
