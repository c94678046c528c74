"""python-snappy vs cramjam for kbroker's snappy codec (issue 16): same output, what each call costs.

python-snappy (0.7) is a thin Python layer over cramjam's Rust snappy, so the question is only the cost
of that layer. Blocks as the broker sees them: 32 KiB xerial blocks (the Java client, and what kbroker
writes) and small raw blocks (librdkafka compresses a small batch as one raw block).

    .venv/bin/python benchmarks/snappy_codec.py
"""

from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Callable

import cramjam
import snappy


def _ns_per_call(f: Callable[[bytes], object], inputs: list[bytes]) -> float:
    t = time.perf_counter_ns()
    for b in inputs:
        f(b)
    return (time.perf_counter_ns() - t) / len(inputs)


def _medians(a: Callable[[bytes], object], b: Callable[[bytes], object], inputs: list[bytes],
             rounds: int) -> tuple[float, float]:
    """Rounds alternate which codec goes first, so neither always runs on a warmer cache."""
    ta, tb = [], []
    for i in range(rounds):
        if i % 2:
            ta.append(_ns_per_call(a, inputs))
            tb.append(_ns_per_call(b, inputs))
        else:
            tb.append(_ns_per_call(b, inputs))
            ta.append(_ns_per_call(a, inputs))
    return statistics.median(ta), statistics.median(tb)


def main() -> None:
    rng = random.Random(1)
    records = [json.dumps({"user": f"u{rng.randint(0, 999)}", "page": f"/p/{rng.randint(0, 99)}",
                           "ts": 1_700_000_000_000 + i}).encode() for i in range(40_000)]
    data = b"".join(records)
    large = [data[i:i + 32768] for i in range(0, 64 * 32768, 32768)]
    small = [r * 3 for r in records[:2000]]
    cases = {"32 KiB blocks": (large, 50), "~200 B blocks": (small, 20)}
    print(f"{'case':32s} {'cramjam ns/call':>16s} {'python-snappy ns/call':>22s} {'python-snappy cost':>19s}")
    for label, (inputs, rounds) in cases.items():
        compressed = [bytes(cramjam.snappy.compress_raw(b)) for b in inputs]
        assert all(snappy.compress(b) == c for b, c in zip(inputs, compressed, strict=True))
        for op, cj, sn, args in (
            ("compress", lambda b: bytes(cramjam.snappy.compress_raw(b)), snappy.compress, inputs),
            ("decompress", lambda c: bytes(cramjam.snappy.decompress_raw(c)), snappy.uncompress, compressed),
        ):
            a, b = _medians(cj, sn, args, rounds)
            print(f"{op + ', ' + label:32s} {a:16.0f} {b:22.0f} {100 * (b - a) / a:+18.1f}%")


if __name__ == "__main__":
    main()
