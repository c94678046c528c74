"""Helpers for the packaging tests: a copy of the source tree (so builds leave nothing in the checkout)
and clean virtual environments filled by the running interpreter's pip (`pip --python`, pip cache reused)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def copy_source(dest: Path) -> Path:
    """What an sdist holds: the package, pyproject.toml and README.md (no caches, no build output)."""
    dest.mkdir(parents=True)
    shutil.copytree(REPO_ROOT / "kbroker", dest / "kbroker", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, dest / name)
    return dest


def clean_env() -> dict[str, str]:
    """The environment without this checkout on PYTHONPATH: a venv sees only what was installed in it."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def new_venv(path: Path) -> Path:
    """A virtual environment without pip of its own (fast); returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, env=clean_env())
    return path / "bin" / "python"


def pip_install(python: Path, *args: str) -> None:
    r = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", *args],
                       capture_output=True, text=True, env=clean_env(), timeout=600)
    assert r.returncode == 0, f"pip install {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}"
