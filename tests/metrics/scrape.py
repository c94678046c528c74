"""Helpers of the metrics tests: fetch a URL of the broker's HTTP listener, parse the exposition."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.support.broker import KBroker, free_port

DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def http_get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    """(status, body) of a GET; 4xx/5xx are answers, not exceptions."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition: (name, sorted labels) -> value."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(text: str, name: str, **labels: str) -> float:
    return samples(text)[(name, tuple(sorted(labels.items())))]


def metrics_broker(workdir: Path, **overrides: str) -> tuple[KBroker, str]:
    """A started broker with its HTTP listener on a free port; (broker, http://host:port)."""
    port = free_port()
    props = {"kbroker.metrics.listener": f"http://127.0.0.1:{port}", **overrides}
    broker = KBroker(workdir, props).start()
    return broker, f"http://127.0.0.1:{port}"


def undocumented(text: str) -> list[str]:
    """Metric families of an exposition that docs/operations.md, "Metrics", does not name."""
    docs = DOCS.read_text()
    section = docs[docs.index("## Metrics"):]
    names = {f.name for f in text_string_to_metric_families(text)}
    return sorted(n for n in names
                  if not n.startswith(("process_", "python_"))
                  and not re.search(rf"`{re.escape(n)}(_total|_bucket|\b)", section))
