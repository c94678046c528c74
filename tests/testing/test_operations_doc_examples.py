"""The runnable examples of docs/operations.md's "Embedded broker and pytest plugin" section, run as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
pytest_plugins = ["pytester"]


def _section_python_blocks() -> list[str]:
    text = (REPO_ROOT / "docs" / "operations.md").read_text()
    start = text.index("## Embedded broker and pytest plugin")
    end = text.index("\n## ", start + 1)
    return re.findall(r"```python\n(.*?)```", text[start:end], re.S)


def test_embedded_broker_example_runs() -> None:
    example = _section_python_blocks()[0]
    assert "start_broker" in example
    r = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert r.returncode == 0, r.stderr


def test_pytest_plugin_example_runs(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.testing.test_pytest_plugin import _plugin_args

    example = _section_python_blocks()[1]
    assert "fresh_kafka_broker" in example
    pytester.makepyfile(test_example=example)
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    pytester.runpytest_subprocess(*_plugin_args(), "-q").assert_outcomes(passed=2)
