"""tests/golden/index.json describes the committed captures truthfully: every listed file exists,
each request frame's header carries the api key and version its name and entry claim, and each
response frame carries the request's correlation id. (Decoding the frames with kbroker's codecs is
tests/protocol/test_golden.py's job.)"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from typing import Any

import pytest

from tests.golden.capture_proxy import API_NAMES

GOLDEN = Path(__file__).resolve().parent
INDEX = GOLDEN / "index.json"
NAME = re.compile(r"^(\d{4})-([A-Za-z]+)-v(\d+)\.req$")


def _entries() -> list[dict[str, Any]]:
    return list(json.loads(INDEX.read_text())["captures"])


def test_index_lists_every_capture_file_once() -> None:
    listed = set()
    for entry in _entries():
        listed.add(entry["request"])
        if entry["response"] is not None:
            listed.add(entry["response"])
    on_disk = {p.relative_to(GOLDEN).as_posix() for p in (GOLDEN / "captures").rglob("*") if p.is_file()}
    assert listed == on_disk


@pytest.mark.parametrize("entry", _entries(), ids=lambda e: e["request"].removeprefix("captures/"))
def test_capture_headers_match_the_index(entry: dict[str, Any]) -> None:
    request = (GOLDEN / entry["request"]).read_bytes()
    api_key, api_version, correlation_id = struct.unpack_from(">hhi", request)
    match = NAME.match(Path(entry["request"]).name)
    assert match is not None
    assert (api_key, api_version) == (entry["api_key"], entry["api_version"])
    assert match.group(2) == entry["api_name"] == API_NAMES[api_key]
    assert int(match.group(3)) == api_version
    assert correlation_id == entry["correlation_id"]
    if entry["response"] is not None:
        response = (GOLDEN / entry["response"]).read_bytes()
        assert struct.unpack_from(">i", response)[0] == correlation_id


def test_captures_cover_every_codec_for_each_producing_client() -> None:
    scenarios = {e["scenario"] for e in _entries() if e["api_name"] == "Produce"}
    for prefix in ("java-producer", "ck-producer", "kp-producer"):
        for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
            assert f"{prefix}-{codec}" in scenarios
