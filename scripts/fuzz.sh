#!/usr/bin/env bash
# Coverage-guided fuzzing of kbroker's decoders of untrusted bytes (atheris; see docs/protocol.md,
# "Fuzzing", and tests/fuzz/).
#
#   scripts/fuzz.sh run TARGET [SECONDS] [libFuzzer flags...]   fuzz one target (default 600 s)
#   scripts/fuzz.sh merge TARGET [DIR...]                       minimise the committed corpus, plus DIRs
#   scripts/fuzz.sh add TARGET DIR...                           add DIRs' inputs that bring new coverage
#   scripts/fuzz.sh seed                                        rebuild the seeds and merge them in
#   scripts/fuzz.sh replay TARGET FILE...                       run inputs once (a crash, a corpus file)
#
# TARGET: request | records | metadata_record | coordinator_record (tests/fuzz/targets.py).
# `run` reads tests/fuzz/corpus/TARGET, writes the new inputs it finds to $KBROKER_FUZZ_WORK/TARGET
# (default /tmp/kbroker-fuzz) and a finding to tests/fuzz/crashes/TARGET/crash-<sha1>, and stops at the
# first finding (add -fork=1 -ignore_crashes=1 to go on and collect them all). Run
# `merge TARGET $KBROKER_FUZZ_WORK/TARGET` afterwards to fold what it found into the
# committed corpus (or `add`, which keeps what is there). With KBROKER_FUZZ_LIGHT=1 coverage counts
# only the hand-written modules (not the generated codecs): fewer, smaller corpus files for `request`.
# Runs under `nice`: the machine is shared.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${FUZZ_PYTHON:-.venv/bin/python}"  # the venv `make setup-test` builds (atheris is in the test extra)
WORK="${KBROKER_FUZZ_WORK:-/tmp/kbroker-fuzz}"
FLAGS=(-rss_limit_mb=2048 -timeout=10 -print_final_stats=1)

cmd="${1:-}"
case "$cmd" in
run)
    target="${2:?target}"; seconds="${3:-600}"; shift $(( $# < 3 ? $# : 3 ))
    mkdir -p "$WORK/$target" "tests/fuzz/crashes/$target"
    exec nice "$PY" tests/fuzz/run.py "$target" "${FLAGS[@]}" -max_total_time="$seconds" \
        -artifact_prefix="tests/fuzz/crashes/$target/" "$@" "$WORK/$target" "tests/fuzz/corpus/$target"
    ;;
merge)
    target="${2:?target}"; shift 2
    fresh="$(mktemp -d)"
    mkdir -p "tests/fuzz/corpus/$target"
    nice "$PY" tests/fuzz/run.py "$target" "${FLAGS[@]}" -merge=1 "$fresh" "tests/fuzz/corpus/$target" "$@"
    if [ -z "$(ls -A "$fresh")" ]; then echo "merge produced nothing: corpus left as it was" >&2; exit 1; fi
    rm -f "tests/fuzz/corpus/$target"/*
    cp "$fresh"/* "tests/fuzz/corpus/$target/"
    rm -rf "$fresh"
    echo "tests/fuzz/corpus/$target: $(ls "tests/fuzz/corpus/$target" | wc -l) inputs"
    ;;
add)
    target="${2:?target}"; shift 2
    nice "$PY" tests/fuzz/run.py "$target" "${FLAGS[@]}" -merge=1 "tests/fuzz/corpus/$target" "$@"
    echo "tests/fuzz/corpus/$target: $(ls "tests/fuzz/corpus/$target" | wc -l) inputs"
    ;;
seed)
    seeds="$(mktemp -d)"
    "$PY" tests/fuzz/make_corpus.py "$seeds"
    for target in request records metadata_record coordinator_record; do
        "$0" merge "$target" "$seeds/$target"
    done
    rm -rf "$seeds"
    ;;
replay)
    target="${2:?target}"; shift 2
    exec "$PY" tests/fuzz/run.py "$target" -runs=1 "$@"
    ;;
*)
    sed -n '2,19p' "$0"; exit 2
    ;;
esac
