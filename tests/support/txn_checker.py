"""A Jepsen-style checker for transactional histories: what the clients did, what the logs hold.

Pure (no I/O, no clients): the workload in `tests/transactions/test_txn_jepsen.py` records a `History`
(every send with the transaction it belongs to, every transaction's outcome as the client saw it, the
consume-transform-produce copies with the input record each one copies) and, after the run, what
read_committed and read_uncommitted consumers found (`Read`s) and the offsets each copier group
committed; `check` returns every `Violation`, each naming its rule, the transaction, the record and
where it was (or was not) found, so a failing run says exactly what went wrong.

The rules (Kafka's transactional guarantees, KIP-98 / KIP-447):

- `aborted-read`: a record of a transaction that was aborted (abort_transaction returned, or the commit
  failed with an abortable error and the abort then returned) is visible under read_committed.
- `lost-write`: a record of a transaction whose commit_transaction returned success is missing under
  read_committed.
- `duplicate`: a record read more than once under read_committed (in its partition or in any other).
- `unknown-record`: a value under read_committed that no send produced (garbage, a torn batch).
- `order`: a producer's records in one partition, read_committed, not in the order it sent them.
- `partial-txn`: a transaction whose outcome is unknown to the client (the commit timed out or failed
  with a fatal error: `Outcome.INDETERMINATE`) is partly visible: it must be all or nothing. (A
  committed one partly visible is a `lost-write`, an aborted one an `aborted-read`.)
- `committed-not-uncommitted`: a record read under read_committed is not at the same offset under
  read_uncommitted (the two views of one log disagree).
- `copy-duplicate` / `copy-missing` / `copy-beyond-offset`: consume-transform-produce. The copier's
  group committed offset O for an input partition (TxnOffsetCommit inside its transactions) says the
  inputs below O were processed: each committed input below O has exactly one copy under
  read_committed, and no input at or above O has one (its output and its offset are one transaction,
  so an output visible without its offset is a broken transaction).
"""

from __future__ import annotations

import enum
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field


class Outcome(enum.Enum):
    COMMITTED = "committed"  # commit_transaction returned
    ABORTED = "aborted"  # abort_transaction returned (after an explicit choice or an abortable error)
    INDETERMINATE = "indeterminate"  # the commit's outcome is unknown (timeout, fatal error, fenced)
    OPEN = "open"  # never ended by the client (the run stopped or the client crashed): must not be visible


@dataclass(frozen=True)
class Send:
    """One produce call: `value` is unique in the history. `seq` orders a producer's sends.

    `source` is, for a consume-transform-produce copy, the input it copies: (topic, partition, offset)."""

    value: str
    producer: str
    txn: str
    seq: int
    topic: str
    partition: int
    source: tuple[str, int, int] | None = None


@dataclass(frozen=True)
class Read:
    topic: str
    partition: int
    offset: int
    value: str


@dataclass(frozen=True)
class CopyStage:
    """A consume-transform-produce stage: inputs read from `input_topic` by `group`, whose final committed
    offsets are `committed_offsets` (partition -> offset), copies written to `output_topic`."""

    group: str
    input_topic: str
    output_topic: str
    committed_offsets: dict[int, int]


@dataclass
class History:
    sends: list[Send] = field(default_factory=list)
    outcomes: dict[str, Outcome] = field(default_factory=dict)  # txn -> outcome
    notes: dict[str, str] = field(default_factory=dict)  # txn -> the client's error text, if any
    stages: list[CopyStage] = field(default_factory=list)

    def send(self, s: Send) -> None:
        self.sends.append(s)

    def end(self, txn: str, outcome: Outcome, note: str = "") -> None:
        self.outcomes[txn] = outcome
        if note:
            self.notes[txn] = note


@dataclass(frozen=True)
class Violation:
    rule: str
    detail: str
    txn: str = ""
    value: str = ""
    topic: str = ""
    partition: int = -1
    offset: int = -1

    def __str__(self) -> str:
        where = f" {self.topic}-{self.partition}@{self.offset}" if self.topic else ""
        what = f" txn={self.txn}" if self.txn else ""
        rec = f" value={self.value}" if self.value else ""
        return f"[{self.rule}]{what}{rec}{where}: {self.detail}"


@dataclass
class Summary:
    violations: list[Violation]
    counts: dict[str, int]

    @property
    def ok(self) -> bool:
        return not self.violations

    def report(self, limit: int = 40) -> str:
        by_rule = Counter(v.rule for v in self.violations)
        lines = [f"{len(self.violations)} violation(s) {dict(by_rule)}; history {self.counts}"]
        lines += [f"  {v}" for v in self.violations[:limit]]
        if len(self.violations) > limit:
            lines.append(f"  ... {len(self.violations) - limit} more")
        return "\n".join(lines)


def check(history: History, committed: Iterable[Read], uncommitted: Iterable[Read]) -> Summary:
    """Every violation of the rules in the module docstring. `committed` / `uncommitted`: everything the
    read_committed / read_uncommitted consumers found in the topics the history wrote."""
    rc = list(committed)
    ru = list(uncommitted)
    sends = {s.value: s for s in history.sends}
    out: list[Violation] = []

    dup_sends = [v for v, n in Counter(s.value for s in history.sends).items() if n > 1]
    for v in dup_sends:
        out.append(Violation("bad-history", "the same value sent twice: the history cannot tell them apart", value=v))

    def outcome(txn: str) -> Outcome:
        return history.outcomes.get(txn, Outcome.OPEN)

    # Reads under read_committed, by value.
    seen: dict[str, list[Read]] = defaultdict(list)
    for r in rc:
        seen[r.value].append(r)

    for value, reads in seen.items():
        s = sends.get(value)
        if s is None:
            r = reads[0]
            out.append(Violation("unknown-record", "read_committed returned a value no send produced",
                                 value=value, topic=r.topic, partition=r.partition, offset=r.offset))
            continue
        if len(reads) > 1:
            where = ", ".join(f"{r.topic}-{r.partition}@{r.offset}" for r in reads)
            out.append(Violation("duplicate", f"read {len(reads)} times under read_committed: {where}",
                                 txn=s.txn, value=value, topic=s.topic, partition=s.partition,
                                 offset=reads[1].offset))
        o = outcome(s.txn)
        if o in (Outcome.ABORTED, Outcome.OPEN):
            r = reads[0]
            note = history.notes.get(s.txn, "")
            out.append(Violation("aborted-read", f"a record of a transaction the client saw {o.value} is visible"
                                 + (f" (client: {note})" if note else ""),
                                 txn=s.txn, value=value, topic=r.topic, partition=r.partition, offset=r.offset))
        elif (reads[0].topic, reads[0].partition) != (s.topic, s.partition):
            r = reads[0]
            out.append(Violation("unknown-record", f"found in another partition than sent to ({s.topic}-{s.partition})",
                                 txn=s.txn, value=value, topic=r.topic, partition=r.partition, offset=r.offset))

    # Per transaction: committed complete, indeterminate all or nothing.
    by_txn: dict[str, list[Send]] = defaultdict(list)
    for s in history.sends:
        by_txn[s.txn].append(s)
    for txn, ss in by_txn.items():
        o = outcome(txn)
        visible = [s for s in ss if s.value in seen]
        if o is Outcome.COMMITTED:
            for s in ss:
                if s.value not in seen:
                    out.append(Violation("lost-write", "the commit returned success but the record is not visible "
                                         "under read_committed", txn=txn, value=s.value, topic=s.topic,
                                         partition=s.partition))
        elif o is Outcome.INDETERMINATE and visible and len(visible) != len(ss):
            missing = [s.value for s in ss if s.value not in seen]
            out.append(Violation("partial-txn", f"{len(visible)} of {len(ss)} records visible; missing {missing[:8]}"
                                 + (f" (client: {history.notes[txn]})" if txn in history.notes else ""), txn=txn))

    # Order: a producer's records in a partition, read_committed by offset, follow its send order.
    chains: dict[tuple[str, str, int], list[tuple[int, Send, Read]]] = defaultdict(list)
    for r in rc:
        s = sends.get(r.value)
        if s is not None:
            chains[(s.producer, r.topic, r.partition)].append((r.offset, s, r))
    for (producer, topic, partition), chain in chains.items():
        chain.sort(key=lambda t: t[0])
        for (_, a, _ra), (_, b, rb) in zip(chain, chain[1:], strict=False):
            if b.seq < a.seq:  # equal: the same record twice, a `duplicate`
                out.append(Violation("order", f"producer {producer}: seq {b.seq} ({b.value}) after seq {a.seq} "
                                     f"({a.value}) in the log", txn=b.txn, value=b.value, topic=topic,
                                     partition=partition, offset=rb.offset))

    # The two isolation levels are views of one log.
    at: dict[tuple[str, int, int], str] = {(r.topic, r.partition, r.offset): r.value for r in ru}
    for r in rc:
        other = at.get((r.topic, r.partition, r.offset))
        if other != r.value:
            out.append(Violation("committed-not-uncommitted", f"read_uncommitted has {other!r} at this offset",
                                 value=r.value, topic=r.topic, partition=r.partition, offset=r.offset))

    # Consume-transform-produce: exactly once with respect to the committed offsets.
    for stage in history.stages:
        inputs = {(r.partition, r.offset): r for r in rc if r.topic == stage.input_topic}
        copies: dict[tuple[int, int], list[Read]] = defaultdict(list)
        for r in rc:
            s = sends.get(r.value)
            if r.topic == stage.output_topic and s is not None and s.source is not None:
                src_topic, src_part, src_off = s.source
                if src_topic == stage.input_topic:
                    copies[(src_part, src_off)].append(r)
        for (part, off), inp in sorted(inputs.items()):
            n = len(copies.get((part, off), []))
            limit = stage.committed_offsets.get(part, 0)
            if off < limit and n == 0:
                out.append(Violation("copy-missing", f"group {stage.group} committed offset {limit} but this input "
                                     f"has no copy in {stage.output_topic}", value=inp.value, topic=inp.topic,
                                     partition=part, offset=off))
            elif n > 1:
                where = ", ".join(f"{r.partition}@{r.offset}" for r in copies[(part, off)])
                out.append(Violation("copy-duplicate", f"copied {n} times to {stage.output_topic}: {where}",
                                     value=inp.value, topic=inp.topic, partition=part, offset=off))
            if off >= limit and n > 0:
                out.append(Violation("copy-beyond-offset", f"copied to {stage.output_topic} but group {stage.group}'s "
                                     f"committed offset is {limit}: output visible without its offset commit",
                                     value=inp.value, topic=inp.topic, partition=part, offset=off))
        for (part, off), rs in copies.items():
            if (part, off) not in inputs:
                r = rs[0]
                out.append(Violation("copy-missing", f"a copy of {stage.input_topic}-{part}@{off}, which is not a "
                                     "committed input", value=r.value, topic=r.topic, partition=r.partition,
                                     offset=r.offset))

    counts = Counter(o.value for o in history.outcomes.values())
    summary_counts = {"sends": len(history.sends), "transactions": len(by_txn),
                      "read_committed": len(rc), "read_uncommitted": len(ru), **counts}
    return Summary(out, summary_counts)
