"""A default node starts without the modules only an optional feature needs (issue 17, P5: start time).

`prometheus_client` (with email, http.server, urllib.request: ~50 ms) is for `kbroker.metrics.listener`,
off by default; `importlib.metadata` (~35 ms, with email, csv, zipfile and a scan of every installed
distribution) came only from the `crc32c` package's `__init__` asking for its own version;
`urllib.request` is for OAUTHBEARER's JWKS endpoint. The broker runs with Python's import-time
tracing (PYTHONPROFILEIMPORTTIME, the env form of `-X importtime`), which lists every module it imported
until it served; a node with the metrics listener shows the tracing sees a lazily imported module.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.broker import KBroker, free_port

OPTIONAL = ("prometheus_client", "importlib.metadata", "urllib.request", "http.server", "email")


def imported(log: str) -> set[str]:
    return {m.group(1) for m in re.finditer(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)\s*$", log, re.M)}


def test_a_default_node_imports_no_optional_feature(tmp_path: Path) -> None:
    broker = KBroker(tmp_path / "default", env={"PYTHONPROFILEIMPORTTIME": "1"})
    with broker:
        modules = imported(broker.log_text())
    assert "kbroker.broker" in modules and "kbroker.protocol.crc" in modules  # the tracing saw the start
    assert not modules & set(OPTIONAL), sorted(modules & set(OPTIONAL))
    assert "crc32c" not in modules  # its C extension is loaded alone, not the package


def test_the_metrics_listener_imports_prometheus_client(tmp_path: Path) -> None:
    broker = KBroker(tmp_path / "metrics", {"kbroker.metrics.listener": f"http://127.0.0.1:{free_port()}"},
                     env={"PYTHONPROFILEIMPORTTIME": "1"})
    with broker:
        modules = imported(broker.log_text())
    assert "prometheus_client" in modules


def test_the_crc32c_module_is_the_package_function() -> None:
    import crc32c as package

    from kbroker.protocol.crc import crc32c

    for data in (b"", b"123456789", bytes(range(256)) * 33):
        assert crc32c(data) == package.crc32c(data)
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert crc32c(b"56789", crc32c(b"1234")) == crc32c(b"123456789")
