"""kcat (librdkafka's command-line client) against a real kbroker process.

kcat comes from the Debian package `kcat` (scripts/system-deps.sh installs it). Without it these
tests fail with a message saying so: a missing tool is a broken environment, not a pass.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from typing import Any

import pytest

pytestmark = pytest.mark.interop

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def kcat(*args: str, input: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    exe = shutil.which("kcat") or shutil.which("kafkacat")
    if exe is None:
        pytest.fail("kcat is not installed: run scripts/system-deps.sh (Debian package `kcat`)")
    return subprocess.run([exe, *args], input=input, capture_output=True, timeout=timeout, check=False)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_keys_headers_codec(kbroker: Any, codec: str) -> None:
    topic = unique(f"kcat-{codec}")
    lines = [f"key{i}:value {i} " + "x" * i for i in range(100)]
    produced = kcat("-b", kbroker.bootstrap, "-P", "-t", topic, "-p", "0", "-K", ":", "-z", codec,
                    "-H", "origin=kcat", "-H", f"codec={codec}", input="\n".join(lines).encode() + b"\n")
    assert produced.returncode == 0, produced.stderr.decode()
    consumed = kcat("-b", kbroker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-J")
    assert consumed.returncode == 0, consumed.stderr.decode()
    msgs = [json.loads(line) for line in consumed.stdout.decode().splitlines() if line.strip()]
    assert [(m["key"], m["payload"]) for m in msgs] == [tuple(line.split(":", 1)) for line in lines]
    assert [m["offset"] for m in msgs] == list(range(100))
    assert msgs[0]["headers"] == ["origin", "kcat", "codec", codec]


def test_metadata_listing(kbroker: Any) -> None:
    topic = unique("kcat-md")
    produced = kcat("-b", kbroker.bootstrap, "-P", "-t", topic, input=b"hello\n")
    assert produced.returncode == 0, produced.stderr.decode()
    listing = kcat("-b", kbroker.bootstrap, "-L", "-J")
    assert listing.returncode == 0, listing.stderr.decode()
    md = json.loads(listing.stdout)
    assert [b["id"] for b in md["brokers"]] == [1]
    assert md["brokers"][0]["name"] == kbroker.bootstrap  # from advertised.listeners
    (t,) = [t for t in md["topics"] if t["topic"] == topic]
    assert t["partitions"] and all(p["leader"] == 1 and p["isrs"] == [{"id": 1}] for p in t["partitions"])
    text = kcat("-b", kbroker.bootstrap, "-L", "-t", topic)
    assert text.returncode == 0 and f'topic "{topic}"' in text.stdout.decode()
