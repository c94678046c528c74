"""kbroker.net's import rules (issue 11): it depends on kbroker.protocol, the API dispatcher interface
(kbroker.api.context), the sans-IO kbroker.security (principals, SASL) and the key-store reader
kbroker.client.ssl_stores only, and records into
kbroker.metrics (issue 16); its settings come as a `SocketServerConfig`, never from kbroker.config.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import kbroker.net

NET_DIR = Path(kbroker.net.__file__).parent
# kbroker.client.ssl_stores: the JKS / PKCS12 store reader listeners share with outbound connections
# (file parsing only: no config, no storage, no sockets).
ALLOWED = ("kbroker.net", "kbroker.protocol", "kbroker.api.context", "kbroker.metrics.meters", "kbroker.security",
           "kbroker.client.ssl_stores")


def _kbroker_imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return [n for n in names if n == "kbroker" or n.startswith("kbroker.")]


def test_net_modules_import_only_protocol_and_the_dispatcher_interface() -> None:
    bad = {
        f"{path.name}: {name}"
        for path in sorted(NET_DIR.glob("*.py"))
        for name in _kbroker_imports(path)
        if not any(name == a or name.startswith(a + ".") for a in ALLOWED)
    }
    assert not bad, sorted(bad)


def test_importing_net_loads_no_config_or_storage() -> None:
    code = (
        "import sys, kbroker.net\n"
        "print(' '.join(m for m in sys.modules if m.startswith(('kbroker.config', 'kbroker.log', "
        "'kbroker.replica', 'kbroker.coord', 'kbroker.cluster'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
