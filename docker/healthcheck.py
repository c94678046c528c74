"""The image's HEALTHCHECK: GET /health/ready on the broker's HTTP listener; exit 0 when it answers 200.

The listener is read from the rendered server.properties (the last `kbroker.metrics.listener` line wins,
as in a properties file), so changing the port with KBROKER_KBROKER_METRICS_LISTENER needs no other
change. A wildcard host (0.0.0.0, ::, empty) is asked on 127.0.0.1. Standard library only.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

KEY = "kbroker.metrics.listener"


def ready_url(properties: str) -> str | None:
    listener = None
    for line in properties.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and not key.startswith(("#", "!")) and key.strip() == KEY:
            listener = value.strip().split(",")[0]
    if not listener:
        return None
    scheme, _, rest = listener.rpartition("://")
    host, _, port = rest.rpartition(":")
    if host in ("", "0.0.0.0", "::", "[::]"):
        host = "127.0.0.1"
    return f"http://{host}:{port}/health/ready"


def main() -> int:
    config = Path(os.environ.get("KBROKER_CONFIG_DIR", "/opt/kbroker/config")) / "server.properties"
    try:
        url = ready_url(config.read_text())
    except OSError as e:
        print(f"healthcheck: cannot read {config}: {e}", file=sys.stderr)
        return 1
    if url is None:
        print(f"healthcheck: no {KEY} in {config}", file=sys.stderr)
        return 1
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return 0 if response.status == 200 else 1
    except (urllib.error.URLError, OSError) as e:
        print(f"healthcheck: {url}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
