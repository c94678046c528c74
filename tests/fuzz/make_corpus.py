"""Build the fuzz targets' seed inputs: real client frames plus generated ones.

Usage (from the repository root): ``python tests/fuzz/make_corpus.py OUT_DIR``; it writes
``OUT_DIR/<target>/<sha1>`` for every target of ``tests/fuzz/targets.py``. ``scripts/fuzz.sh seed``
runs it and merges the seeds into the committed corpus (``tests/fuzz/corpus/``) with libFuzzer's
``-merge=1``, which keeps only the inputs that add coverage.

- ``request``: every request frame in ``tests/golden/captures`` (what Java, librdkafka,
  kafka-python, aiokafka and kcat really sent to Kafka 4.3.1; at most two per API and version), a few
  of them whole (header fuzzed too), and a default-valued request of every API key at every version.
- ``records``: the record sets of the captured Produce requests (every codec, idempotent and plain
  producers, headers, null keys and values) and generated batches (each codec, keys, headers, null
  values, explicit timestamps, idempotent, transactional, several batches in one set), each behind
  a few topic settings (byte 0, see ``targets.log_config``).
- ``metadata_record`` / ``coordinator_record``: a default-valued record of every type at every version.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kbroker.protocol import decode_request_frame  # noqa: E402
from kbroker.protocol.compression import CompressionType  # noqa: E402
from kbroker.protocol.coordinator_records import COORDINATOR_RECORDS  # noqa: E402
from kbroker.protocol.coordinator_records.serde import record_module as coordinator_module  # noqa: E402
from kbroker.protocol.frames import encode_request_frame  # noqa: E402
from kbroker.protocol.headers import RequestHeader, decode_request_header  # noqa: E402
from kbroker.protocol.messages import API_SPECS  # noqa: E402
from kbroker.protocol.metadata_records import METADATA_RECORDS  # noqa: E402
from kbroker.protocol.metadata_records.serde import encode_metadata_record, record_class  # noqa: E402
from kbroker.protocol.records import SimpleRecord, build_batch  # noqa: E402
from tests.fuzz.targets import NOW_MS, coordinator_input, request_input  # noqa: E402

CAPTURES = ROOT / "tests" / "golden" / "captures"
PRODUCE = 0
#: byte 0 of a ``records`` input: producer's codec; zstd forced; LogAppendTime + compacted; gzip
#: forced with tight timestamp bounds; a replica's append (not a client's); small size limits.
RECORDS_FLAGS = (0x05, 0x04, 0x1D, 0x41, 0x25, 0x85)


def captured_requests() -> list[tuple[int, int, bytes]]:
    """(api key, version, frame) of every captured request, in index order."""
    index = json.loads((CAPTURES.parent / "index.json").read_text())
    out = []
    for ex in index["captures"]:
        out.append((ex["api_key"], ex["api_version"], (CAPTURES.parent / ex["request"]).read_bytes()))
    return out


def request_seeds(captured: list[tuple[int, int, bytes]]) -> list[bytes]:
    seeds = []
    per_version: Counter[tuple[int, int]] = Counter()
    for key, version, frame in captured:
        per_version[key, version] += 1
        if per_version[key, version] > 2:
            continue
        _, pos = decode_request_header(memoryview(frame))
        seeds.append(request_input(key, version, frame[pos:]))
        if per_version[key, version] == 1 and len(seeds) % 5 == 0:
            seeds.append(bytes((0x80, 0)) + frame)  # the whole frame: the header parser too
    for key, spec in sorted(API_SPECS.items()):
        for version in range(spec.min_version, spec.max_version + 1):
            header = RequestHeader(api_key=key, api_version=version, correlation_id=1, client_id="seed")
            try:
                frame = encode_request_frame(header, spec.request_class())[4:]
            except ValueError:  # a default this version cannot carry
                continue
            _, pos = decode_request_header(memoryview(frame))
            seeds.append(request_input(key, version, frame[pos:]))
    return seeds


def captured_record_sets(captured: list[tuple[int, int, bytes]]) -> list[bytes]:
    sets = []
    for key, _version, frame in captured:
        if key != PRODUCE:
            continue
        _, body = decode_request_frame(frame)
        for topic in body.topic_data:
            for part in topic.partition_data:
                if part.records is not None:
                    sets.append(bytes(part.records))
    return sets


def generated_record_sets() -> list[bytes]:
    plain = [SimpleRecord(b"v%d" % i * (i + 1), b"k%d" % i, NOW_MS + i) for i in range(5)]
    varied = [
        SimpleRecord(b"value", b"key", NOW_MS, (("h1", b"x"), ("h2", None))),
        SimpleRecord(None, b"tombstone", NOW_MS + 1),
        SimpleRecord(b"no key", None, NOW_MS + 2),
        SimpleRecord(b"", b"", NOW_MS - 5),
        SimpleRecord(b"x" * 300, b"long", NOW_MS + 3),
    ]
    sets = []
    for codec in CompressionType:
        sets.append(bytes(build_batch(plain, compression=codec, now_ms=NOW_MS)))
        sets.append(bytes(build_batch(varied, compression=codec, now_ms=NOW_MS)))
    sets.append(bytes(build_batch(plain, producer_id=1000, producer_epoch=0, base_sequence=0, now_ms=NOW_MS)))
    sets.append(bytes(build_batch(varied, compression=CompressionType.ZSTD, producer_id=1000, producer_epoch=0,
                                  base_sequence=5, is_transactional=True, now_ms=NOW_MS)))
    big = [SimpleRecord(b"%03d" % i * 30, None, NOW_MS) for i in range(12)]  # > SMALL_MAX_MESSAGE_BYTES
    sets.append(bytes(build_batch(big, now_ms=NOW_MS)))
    sets.append(bytes(build_batch(big, compression=CompressionType.SNAPPY, now_ms=NOW_MS)))
    sets.append(bytes(build_batch(plain[:1], now_ms=NOW_MS) + build_batch(varied, compression=CompressionType.LZ4,
                                                                           now_ms=NOW_MS)))
    return sets


def metadata_seeds() -> list[bytes]:
    seeds = []
    for key, spec in sorted(METADATA_RECORDS.items()):
        for version in range(spec.min_version, spec.max_version + 1):
            try:
                seeds.append(encode_metadata_record(record_class(key)(), version))
            except ValueError:
                continue
    return seeds


def coordinator_seeds() -> list[bytes]:
    seeds = []
    for coordinator, specs in COORDINATOR_RECORDS.items():
        for record_type, spec in sorted(specs.items()):
            module = coordinator_module(coordinator, record_type)
            key = bytearray(record_type.to_bytes(2, "big"))
            try:
                module.KEY_ENCODERS[0](getattr(module, spec.key_class)(), key, None)
            except ValueError:
                continue
            seeds.append(coordinator_input(coordinator, bytes(key), None))
            for version in range(spec.value_min_version, spec.value_max_version + 1):
                value = bytearray(version.to_bytes(2, "big"))
                try:
                    module.VALUE_ENCODERS[version](getattr(module, spec.value_class)(), value, None)
                except ValueError:
                    continue
                seeds.append(coordinator_input(coordinator, bytes(key), bytes(value)))
    return seeds


def write(out: Path, target: str, seeds: list[bytes]) -> int:
    d = out / target
    d.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        (d / hashlib.sha1(seed).hexdigest()).write_bytes(seed)
    return len(set(seeds))


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} OUT_DIR")
    out = Path(sys.argv[1])
    captured = captured_requests()
    record_sets = captured_record_sets(captured) + generated_record_sets()
    counts = {
        "request": write(out, "request", request_seeds(captured)),
        "records": write(out, "records", [bytes((f,)) + s for s in record_sets for f in RECORDS_FLAGS]),
        "metadata_record": write(out, "metadata_record", metadata_seeds()),
        "coordinator_record": write(out, "coordinator_record", coordinator_seeds()),
    }
    for target, n in counts.items():
        print(f"{target}: {n} seeds in {os.path.join(out, target)}")


if __name__ == "__main__":
    main()
