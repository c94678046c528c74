"""docs/compatibility.md carries the version table the dispatcher actually advertises."""

from __future__ import annotations

from pathlib import Path

from kbroker.api.dispatcher import TABLE_END, TABLE_START, discover_handlers, render_version_table

PAGE = Path(__file__).resolve().parents[2] / "docs" / "compatibility.md"


def test_page_table_matches_the_handlers() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert TABLE_START in text and TABLE_END in text
    embedded = text.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0].strip("\n") + "\n"
    assert embedded == render_version_table(), (
        "docs/compatibility.md is stale: run `python -m kbroker.api.dispatcher --write docs/compatibility.md`"
    )


def test_every_advertised_range_is_within_the_spec() -> None:
    from kbroker.protocol.messages import API_SPECS

    for key, spec in discover_handlers().items():
        api = API_SPECS[key]
        assert api.min_version <= spec.min_version <= spec.max_version <= api.max_version, api.name
        # Advertising below the accepted floor is only allowed where Kafka does it (Produce).
        assert spec.advertised_min_version == spec.min_version or key == 0, api.name
