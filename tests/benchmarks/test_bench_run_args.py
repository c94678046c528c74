"""benchmarks/run.py's flags pick the scale: `--p6-records N` sets P6's record count over any scale
(issue 12), the other rows keep theirs, and a count that is not positive is refused."""

from __future__ import annotations

import pytest

from benchmarks.run import SCALES, build_parser, chosen_scale


def _scale(*argv: str) -> dict[str, int]:
    return chosen_scale(build_parser().parse_args(list(argv)))


def test_p6_records_overrides_only_p6() -> None:
    assert _scale() == SCALES["full"]
    assert _scale("--quick")["p6"] == SCALES["quick"]["p6"]
    quick = _scale("--quick", "--p6-records", "1234567")
    assert quick["p6"] == 1_234_567
    assert {k: v for k, v in quick.items() if k != "p6"} == {k: v for k, v in SCALES["quick"].items() if k != "p6"}
    assert _scale("--p6-records", "42")["p6"] == 42
    assert SCALES["full"]["p6"] == 200_000  # the table is not changed by an override


def test_p6_records_must_be_a_positive_count() -> None:
    with pytest.raises(SystemExit):
        _scale("--p6-records", "0")
    with pytest.raises(SystemExit):
        _scale("--p6-records", "many")
