"""The checker of `tests/support/txn_checker.py` on hand-made histories: a clean one passes, and each
anomaly (one per history) is caught under its own rule and nothing else."""

from __future__ import annotations

from tests.support.txn_checker import CopyStage, History, Outcome, Read, Send, check

IN, OUT = "in", "out"


def _base() -> tuple[History, list[Read]]:
    """Producer p1: t1 committed (2 records in partition 0, 1 in partition 1), t2 aborted, t3 indeterminate
    and invisible; the log as it should be."""
    h = History()
    h.send(Send("p1/0", "p1", "t1", 0, IN, 0))
    h.send(Send("p1/1", "p1", "t1", 1, IN, 0))
    h.send(Send("p1/2", "p1", "t1", 2, IN, 1))
    h.end("t1", Outcome.COMMITTED)
    h.send(Send("p1/3", "p1", "t2", 3, IN, 0))
    h.end("t2", Outcome.ABORTED)
    h.send(Send("p1/4", "p1", "t3", 4, IN, 0))
    h.send(Send("p1/5", "p1", "t3", 5, IN, 1))
    h.end("t3", Outcome.INDETERMINATE, "commit: _TIMED_OUT")
    rc = [Read(IN, 0, 0, "p1/0"), Read(IN, 0, 1, "p1/1"), Read(IN, 1, 0, "p1/2")]
    return h, rc


def _uncommitted(rc: list[Read], extra: list[Read] | None = None) -> list[Read]:
    return [*rc, *(extra or [])]


def _rules(h: History, rc: list[Read], ru: list[Read] | None = None) -> list[str]:
    s = check(h, rc, _uncommitted(rc) if ru is None else ru)
    print(s.report())
    return sorted({v.rule for v in s.violations})


def test_clean_history_passes() -> None:
    h, rc = _base()
    s = check(h, rc, _uncommitted(rc, [Read(IN, 0, 2, "p1/3")]))
    assert s.ok, s.report()
    assert s.counts["sends"] == 6 and s.counts["committed"] == 1


def test_indeterminate_fully_visible_passes() -> None:
    h, rc = _base()
    rc += [Read(IN, 0, 3, "p1/4"), Read(IN, 1, 1, "p1/5")]
    assert _rules(h, rc) == []


def test_aborted_read() -> None:
    h, rc = _base()
    rc.append(Read(IN, 0, 2, "p1/3"))
    s = check(h, rc, rc)
    assert [v.rule for v in s.violations] == ["aborted-read"]
    v = s.violations[0]
    assert (v.txn, v.value, v.partition, v.offset) == ("t2", "p1/3", 0, 2)


def test_open_transaction_visible_is_an_aborted_read() -> None:
    h, rc = _base()
    h.send(Send("p1/6", "p1", "t4", 6, IN, 1))  # never ended by the client
    rc.append(Read(IN, 1, 1, "p1/6"))
    assert _rules(h, rc) == ["aborted-read"]


def test_lost_write() -> None:
    h, rc = _base()
    rc = [r for r in rc if r.value != "p1/2"]
    s = check(h, rc, rc)
    assert [(v.rule, v.value, v.txn) for v in s.violations] == [("lost-write", "p1/2", "t1")]


def test_duplicate() -> None:
    h, rc = _base()
    rc.append(Read(IN, 1, 1, "p1/2"))
    s = check(h, rc, rc)
    assert [v.rule for v in s.violations] == ["duplicate"]
    assert "in-1@0, in-1@1" in s.violations[0].detail


def test_order() -> None:
    h, rc = _base()
    rc = [Read(IN, 0, 0, "p1/1"), Read(IN, 0, 1, "p1/0"), Read(IN, 1, 0, "p1/2")]
    s = check(h, rc, rc)
    assert [v.rule for v in s.violations] == ["order"]
    assert s.violations[0].offset == 1


def test_order_is_per_producer() -> None:
    h, rc = _base()
    h.send(Send("p2/0", "p2", "u1", 0, IN, 0))
    h.end("u1", Outcome.COMMITTED)
    rc = [Read(IN, 0, 0, "p2/0"), *[Read(r.topic, r.partition, r.offset + 1, r.value) for r in rc]]
    assert _rules(h, rc) == []


def test_indeterminate_partly_visible() -> None:
    h, rc = _base()
    rc.append(Read(IN, 1, 1, "p1/5"))
    s = check(h, rc, rc)
    assert [v.rule for v in s.violations] == ["partial-txn"]
    assert s.violations[0].txn == "t3" and "p1/4" in s.violations[0].detail


def test_unknown_record() -> None:
    h, rc = _base()
    rc.append(Read(IN, 1, 1, "garbage"))
    assert _rules(h, rc) == ["unknown-record"]


def test_views_disagree() -> None:
    h, rc = _base()
    ru = [rc[0], rc[1], Read(IN, 1, 0, "p1/4")]
    assert _rules(h, rc, ru) == ["committed-not-uncommitted"]


def _ctp() -> tuple[History, list[Read]]:
    """Inputs in-0@0..2 committed; copier c1 copies them in two transactions (offsets 2 then 3), the first
    attempt at in-0@2 aborted."""
    h = History()
    for i in range(3):
        h.send(Send(f"p1/{i}", "p1", "t1", i, IN, 0))
    h.end("t1", Outcome.COMMITTED)
    h.send(Send("c1/0", "c1", "c-1", 0, OUT, 0, source=(IN, 0, 0)))
    h.send(Send("c1/1", "c1", "c-1", 1, OUT, 0, source=(IN, 0, 1)))
    h.end("c-1", Outcome.COMMITTED)
    h.send(Send("c1/2", "c1", "c-2", 2, OUT, 0, source=(IN, 0, 2)))
    h.end("c-2", Outcome.ABORTED)
    h.send(Send("c1/3", "c1", "c-3", 3, OUT, 0, source=(IN, 0, 2)))
    h.end("c-3", Outcome.COMMITTED)
    h.stages.append(CopyStage("g", IN, OUT, {0: 3}))
    rc = [Read(IN, 0, i, f"p1/{i}") for i in range(3)]
    rc += [Read(OUT, 0, 0, "c1/0"), Read(OUT, 0, 1, "c1/1"), Read(OUT, 0, 3, "c1/3")]
    return h, rc


def test_copy_clean() -> None:
    h, rc = _ctp()
    assert _rules(h, rc) == []


def test_copy_duplicate() -> None:
    """An input copied twice, by two committed transactions (a zombie copier not fenced)."""
    h, rc = _ctp()
    h.send(Send("c2/0", "c2", "d-1", 0, OUT, 1, source=(IN, 0, 1)))
    h.end("d-1", Outcome.COMMITTED)
    rc.append(Read(OUT, 1, 0, "c2/0"))
    s = check(h, rc, rc)
    assert [v.rule for v in s.violations] == ["copy-duplicate"]
    assert s.violations[0].offset == 1 and "0@1, 1@0" in s.violations[0].detail


def test_copy_missing_below_committed_offset() -> None:
    """The offset commit of c-3 took effect, its output did not (and the client saw an unknown outcome)."""
    h, rc = _ctp()
    h.end("c-3", Outcome.INDETERMINATE)
    rc = [r for r in rc if r.value != "c1/3"]
    s = check(h, rc, rc)
    assert [v.rule for v in s.violations] == ["copy-missing"]
    assert (s.violations[0].partition, s.violations[0].offset) == (0, 2)


def test_copy_beyond_committed_offset() -> None:
    """The output of c-3 visible, its offset commit lost: a restarted copier would copy in-0@2 again."""
    h, rc = _ctp()
    h.stages[0] = CopyStage("g", IN, OUT, {0: 2})
    assert _rules(h, rc) == ["copy-beyond-offset"]
