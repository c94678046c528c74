"""kbroker.metadata is sans-IO and sits below the broker's services: it imports none of them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("asyncio", "kbroker.net", "kbroker.api", "kbroker.replica", "kbroker.coord", "kbroker.cluster",
             "kbroker.log", "kbroker.controller", "kbroker.broker", "kbroker.config")  # fmt: skip


def test_importing_metadata_loads_no_service_and_no_asyncio() -> None:
    code = (
        "import sys, kbroker.metadata\n"
        "print('\\n'.join(sorted(m for m in sys.modules if m == 'asyncio' or m.startswith('kbroker.'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert "kbroker.metadata.loader" in out
    bad = [m for m in out if m.startswith(FORBIDDEN)]
    assert not bad, bad


def test_sources_import_only_the_protocol_and_themselves() -> None:
    # ... and the ACL value type of the sans-IO kbroker.security.acl (AclsImage holds StandardAcl).
    for path in sorted((REPO_ROOT / "kbroker" / "metadata").glob("*.py")):
        for line in path.read_text(encoding="utf-8").splitlines():
            stripped = line.strip()
            if stripped.startswith(("import kbroker", "from kbroker")):
                module = stripped.split()[1]
                assert module.startswith(("kbroker.metadata", "kbroker.protocol", "kbroker.security.acl")), \
                    f"{path.name}: {line}"
