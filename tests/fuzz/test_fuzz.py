"""Coverage-guided fuzzing of the decoders of untrusted bytes (issue 19, "Proof"), and its regressions.

- Every committed corpus input and every saved finding (``tests/fuzz/crashes/<target>/``, kept after
  its fix) replays through its target in process: the regression tests of what the fuzzer found.
- ``test_fuzz_bounded`` (default suite): each target under atheris for ``KBROKER_FUZZ_SECONDS``
  (default 2 s) after replaying its corpus, the four in parallel, with the generated codecs
  uninstrumented (``KBROKER_FUZZ_LIGHT``, see ``run.py``): under ten seconds on two idle cores.
- ``test_fuzz_long`` (slow): each target fully instrumented for ``KBROKER_FUZZ_SLOW_SECONDS``
  (default 300 s), the four in parallel.

A run fails on any finding and shows its traceback and input (base64, also written under pytest's
tmp dir); ``scripts/fuzz.sh replay TARGET FILE`` replays one. Each run prints the inputs it tried and
the coverage it reached (libFuzzer's ``cov``: instrumented edges, ``ft``: features).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kbroker.log.validator import CheckedBatch
from kbroker.protocol.record_format import RECORD_BATCH_OVERHEAD
from kbroker.protocol.records import SimpleRecord, build_batch

from . import targets
from .targets import TARGETS, guarded

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CORPUS = HERE / "corpus"
CRASHES = HERE / "crashes"


def test_every_target_has_a_corpus() -> None:
    for target in TARGETS:
        assert len(list((CORPUS / target).iterdir())) >= 10, target


@pytest.mark.parametrize("target", list(TARGETS))
def test_corpus_and_saved_findings_replay(target: str) -> None:
    """The committed corpus and the saved findings (each kept after its fix) pass their target."""
    paths = [p for d in (CORPUS / target, CRASHES / target) if d.is_dir() for p in sorted(d.iterdir())
             if p.is_file() and not p.name.startswith(".")]
    run = guarded(TARGETS[target])
    failures = []
    for path in paths:
        try:
            run(path.read_bytes())
        except Exception as e:  # noqa: BLE001 - every failure listed, not just the first
            failures.append(f"{path.relative_to(ROOT)}: {e!r}")
    assert not failures, "\n".join(failures)
    assert len(paths) >= 10


def test_records_oracle_catches_an_accepted_batch_the_log_cannot_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """The read-back is what makes the records target find validator bugs: a validator that accepted a
    CRC-valid batch with garbage records (the poisoned partitions of issue 19) is a finding."""
    batch = bytearray(build_batch([SimpleRecord(b"v", b"k")] * 3, now_ms=targets.NOW_MS))
    batch[RECORD_BATCH_OVERHEAD:] = b"\xff" * (len(batch) - RECORD_BATCH_OVERHEAD)
    data = bytes((0x05,)) + bytes(batch)
    targets.fuzz_records(data)  # the real validator refuses it
    monkeypatch.setattr(targets, "check_batches", lambda records, p: [
        CheckedBatch(0, len(records), None, targets.NOW_MS, False)])
    with pytest.raises(targets.Finding, match="cannot be read back"):
        targets.fuzz_records(data)


def test_request_target_lets_only_protocol_errors_through(monkeypatch: pytest.MonkeyPatch) -> None:
    frame = targets.request_input(0, 9, b"\x00")
    targets.fuzz_request(frame)  # truncated Produce v9: ProtocolError, swallowed

    def broken(frame: bytes) -> None:
        raise IndexError("a decoder bug")

    monkeypatch.setattr(targets, "decode_request_frame", broken)
    with pytest.raises(IndexError):
        targets.fuzz_request(frame)


_DONE = re.compile(r"Done (\d+) runs in (\d+) second")
_STATUS = re.compile(r"^#(\d+)\s+\S+\s+cov: (\d+) ft: (\d+) corp: (\d+)", re.M)


def _start(target: str, seconds: int, tmp_path: Path, light: bool) -> subprocess.Popen[str]:
    work = tmp_path / target / "new"
    work.mkdir(parents=True)
    env = dict(os.environ, KBROKER_FUZZ_LIGHT="1" if light else "0", PYTHONPATH=str(ROOT))
    cmd = [sys.executable, str(HERE / "run.py"), target, f"-max_total_time={seconds}", "-rss_limit_mb=2048",
           "-timeout=10", f"-artifact_prefix={tmp_path / target}/", str(work), str(CORPUS / target)]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(target: str, proc: subprocess.Popen[str], seconds: int, tmp_path: Path) -> tuple[str, str | None]:
    """(summary, failure or None) of one run."""
    out, _ = proc.communicate(timeout=seconds + 300)
    done = _DONE.search(out)
    status = _STATUS.findall(out)
    if proc.returncode != 0 or done is None:
        lines = [ln for ln in out.splitlines() if not ln.startswith("INFO: Instrumenting")]
        return "", (f"fuzzing {target} found a problem (exit {proc.returncode}); input saved under "
                    f"{tmp_path / target}:\n" + "\n".join(lines[-60:]))
    runs, secs = done.groups()
    cov = f", coverage {status[-1][1]} edges / {status[-1][2]} features, corpus {status[-1][3]}" if status else ""
    return f"{target}: {runs} inputs tried in {secs} s{cov}, no finding", None


def _fuzz_all(seconds: int, tmp_path: Path, light: bool, capsys: pytest.CaptureFixture[str]) -> None:
    """Every target at once (one process each), so the bounded run costs the slowest target's time."""
    pytest.importorskip("atheris", reason="atheris is in the test extra (make setup-test)")
    procs = {t: _start(t, seconds, tmp_path, light) for t in TARGETS}
    results = [_finish(t, p, seconds, tmp_path) for t, p in procs.items()]
    with capsys.disabled():
        print("".join(f"\n  {summary}" for summary, _ in results if summary))
    failures = [f for _, f in results if f]
    assert not failures, "\n\n".join(failures)


def test_fuzz_bounded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fuzz_all(int(os.environ.get("KBROKER_FUZZ_SECONDS", "2")), tmp_path, True, capsys)


@pytest.mark.slow
@pytest.mark.timeout(0)
def test_fuzz_long(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fuzz_all(int(os.environ.get("KBROKER_FUZZ_SLOW_SECONDS", "300")), tmp_path, False, capsys)
