"""Run one fuzz target under atheris (libFuzzer's coverage-guided engine for Python).

Usage (from the repository root; ``scripts/fuzz.sh`` and ``tests/fuzz/test_fuzz.py`` call it)::

    python tests/fuzz/run.py TARGET [libFuzzer flags] [CORPUS_DIR ...]

TARGET is one of ``tests/fuzz/targets.py``'s TARGETS. kbroker's modules are instrumented for line
and branch coverage as they are imported; inputs that reach new coverage go to the first corpus
directory. A finding (an exception out of the target, see ``targets.Finding``) stops the run, prints
the traceback and writes the input to ``-artifact_prefix`` (``crash-<sha1>``). libFuzzer's usual
flags apply (see LIGHT below for the environment): ``-max_total_time=S``, ``-runs=N``, ``-timeout=S``, ``-rss_limit_mb=M``, ``-merge=1``
(minimise a corpus), ``-print_final_stats=1``.

The ``records`` target gets a structure-aware mutator besides libFuzzer's byte mutations: it takes
one batch of the input apart (decompressing its records), mutates the records' bytes, the record
count, the codec, the attributes, the timestamps or the producer fields, or repeats its records
(up to past the decompression bound), and puts it back together as a well-formed, CRC-valid batch,
compressed again, so that the validator's checks inside the batch are reached.
"""

from __future__ import annotations

import os
import random
import shlex
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import atheris  # noqa: E402

NAME = sys.argv[1] if len(sys.argv) > 1 else ""
#: KBROKER_FUZZ_LIGHT=1: do not instrument the generated codec modules (kbroker/protocol/messages,
#: the metadata and coordinator record modules). Instrumenting the ~90 message modules costs about
#: ten seconds of start-up; the bounded run in the default test suite skips it and is guided by the
#: coverage of the hand-written readers they call (protocol/types.py, varint.py, headers.py) only.
LIGHT = os.environ.get("KBROKER_FUZZ_LIGHT") == "1"
with atheris.instrument_imports(include=["kbroker"]):
    from kbroker.protocol.compression import CompressionType, compress, decompress  # noqa: E402
    from kbroker.protocol.record_format import (  # noqa: E402
        ATTRIBUTES_OFFSET,
        CRC_OFFSET,
        HEADER,
        LENGTH_OFFSET,
        LOG_OVERHEAD,
        RECORD_BATCH_OVERHEAD,
        RECORDS_OFFSET,
        UINT32,
    )
    from tests.fuzz import targets  # noqa: E402

    if NAME in targets.TARGETS and not LIGHT:
        targets.preload(NAME)
if NAME in targets.TARGETS:
    targets.preload(NAME)  # with LIGHT: the generated codecs uninstrumented (already loaded otherwise)

from crc32c import crc32c  # noqa: E402

_CODECS = [int(c) for c in CompressionType]
_TIMESTAMPS = (targets.NOW_MS, 0, -1, targets.NOW_MS - 2 * 3_600_000, targets.NOW_MS + 2 * 3_600_000, 1 << 62)


def _spans(records: bytes) -> list[tuple[int, int]]:
    out, pos, n = [], 0, len(records)
    while pos + LOG_OVERHEAD <= n:
        size = int.from_bytes(records[pos + LENGTH_OFFSET:pos + LENGTH_OFFSET + 4], "big", signed=True) + LOG_OVERHEAD
        if size < RECORD_BATCH_OVERHEAD or pos + size > n:
            break
        out.append((pos, size))
        pos += size
    return out


def mutate_batch(batch: bytes, rng: random.Random) -> bytes:
    """One batch taken apart, changed inside and rebuilt well formed (see the module docstring)."""
    (base, _len, ple, magic, _crc, attrs, delta, base_ts, max_ts, pid, pepoch, seq, count) = HEADER.unpack_from(batch)
    codec = attrs & 0x07
    section = batch[RECORDS_OFFSET:]
    plain = section
    if 0 < codec <= CompressionType.ZSTD:
        try:
            plain = bytes(decompress(codec, section, targets.MAX_DECOMPRESSED))
        except Exception:  # noqa: BLE001 - garbage inside: mutate the compressed bytes as they are
            codec = 0
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(9)
        if op <= 2:
            plain = atheris.Mutate(plain, max(2 * len(plain), 64))
        elif op == 3:
            codec = rng.choice(_CODECS) if rng.random() < 0.9 else rng.randint(5, 7)
        elif op == 4:
            count = rng.choice((count - 1, count + 1, 0, 1, rng.randrange(16), -1, 1 << 30))
            delta = count - 1 if rng.random() < 0.8 else rng.randrange(-2, 16)
        elif op == 5:
            attrs ^= rng.choice((0x08, 0x10, 0x20, 0x40))
        elif op == 6:
            base_ts = rng.choice(_TIMESTAMPS)
            max_ts = rng.choice((base_ts, *_TIMESTAMPS))
        elif op == 7:
            pid, pepoch, seq = rng.choice(((-1, -1, -1), (1000, 0, 0), (1000, 0, -1), (1000, 5, 0x7FFFFFFF)))
        elif plain and count > 0 and len(plain) <= targets.MAX_DECOMPRESSED // 8:
            # many records: the decompressed-size bound, the per-record error list's bound, big walks
            # (the product stays under twice the bound: the mutator must not be what runs out of memory)
            times = rng.choice((10, 100, (targets.MAX_DECOMPRESSED + len(plain)) // len(plain) + 1))
            plain = plain * times
            count *= times
            delta = count - 1
    section = compress(codec, plain) if 0 < codec <= CompressionType.ZSTD else plain
    attrs = (attrs & ~0x07) | codec
    out = bytearray(RECORD_BATCH_OVERHEAD + len(section))
    try:
        HEADER.pack_into(out, 0, 0 if rng.random() < 0.95 else base, len(out) - LOG_OVERHEAD, ple,
                         magic if rng.random() < 0.98 else 1, 0, attrs, delta, base_ts, max_ts, pid, pepoch, seq,
                         count)
    except Exception:  # noqa: BLE001 - a field pushed out of its range: keep the old one
        return batch
    out[RECORDS_OFFSET:] = section
    UINT32.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def mutate_records(data: bytes, max_size: int, seed: int) -> bytes:
    rng = random.Random(seed)
    spans = _spans(data[1:]) if data else []
    if not spans or rng.random() < 0.3:
        return atheris.Mutate(data, max_size)
    flags = data[0] if rng.random() < 0.9 else rng.randrange(256)
    records = data[1:]
    pos, size = rng.choice(spans)
    choice = rng.random()
    if choice < 0.85:
        new = mutate_batch(records[pos:pos + size], rng)
    elif choice < 0.93:
        new = records[pos:pos + size] * 2  # two batches
    else:
        new = records[pos:pos + size][:rng.randrange(size)]  # a partial trailing batch
    out = bytes((flags,)) + records[:pos] + new + records[pos + size:]
    return out if len(out) <= max_size else atheris.Mutate(data, max_size)


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in targets.TARGETS:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(targets.TARGETS)}}} [libFuzzer flags] [corpus dirs]")
    name = sys.argv.pop(1)
    # libFuzzer's -merge=1 (and -fork) re-runs argv[0] through the shell: make it this whole command.
    sys.argv[0] = " ".join(shlex.quote(a) for a in (sys.executable, os.path.abspath(__file__), name))
    test_one = targets.guarded(targets.TARGETS[name], targets.INSTRUMENTED_MAX_SECONDS)
    if name == "records":
        atheris.Setup(sys.argv, test_one, custom_mutator=mutate_records)
    else:
        atheris.Setup(sys.argv, test_one)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
