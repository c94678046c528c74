"""Apache Kafka's own serdes read the metadata and coordinator records we write and write them back
byte for byte (``tests/protocol/java/RoundTripRecords.java``: MetadataRecordSerde,
GroupCoordinatorRecordSerde, TransactionCoordinatorRecordSerde, ShareCoordinatorRecordSerde).

Every record type in every version, with deterministic pseudo-random content in every field the
version has (nullable fields null or not, unknown tagged fields in flexible versions) and with all
defaults. Equal output proves the bytes are the ones Kafka writes for the content Kafka read; our
decoder reading Kafka's output back to the same object proves the content is the one we meant.
"""

from __future__ import annotations

import random
import uuid
from pathlib import Path
from typing import Any

import pytest

from kbroker.protocol.coordinator_records import COORDINATOR_RECORDS
from kbroker.protocol.coordinator_records.serde import (
    decode_coordinator_record,
    encode_coordinator_key,
    encode_coordinator_value,
)
from kbroker.protocol.coordinator_records.serde import record_module as coordinator_module
from kbroker.protocol.metadata_records import METADATA_RECORDS
from kbroker.protocol.metadata_records.serde import encode_metadata_record, read_metadata_record
from kbroker.protocol.metadata_records.serde import record_module as metadata_module
from kbroker.protocol.types import FieldInfo, in_range

JAVA_SOURCE = Path(__file__).resolve().parent / "java" / "RoundTripRecords.java"
SEEDS = (0, 1, 2, 3)  # 0: every field at its default

_INTS = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}


def _scalar(rnd: random.Random, t: str) -> Any:
    if t in _INTS:
        lo, hi = _INTS[t]
        return rnd.choice([lo, hi, -1 if lo < 0 else 1, rnd.randint(lo, hi)])
    if t == "bool":
        return rnd.random() < 0.5
    if t == "float64":
        return rnd.uniform(-1e6, 1e6)
    if t == "uuid":
        return uuid.UUID(int=rnd.getrandbits(128))
    if t == "string":
        return "".join(rnd.choice("abcXYZ-._é€") for _ in range(rnd.randint(0, 9)))
    if t == "bytes":
        return rnd.randbytes(rnd.randint(0, 12))
    raise AssertionError(t)


def sample(cls: type, version: int, flexible: bool, rnd: random.Random | None) -> Any:
    """An instance of ``cls`` valid at ``version``: defaults when ``rnd`` is None."""
    obj = cls()
    if rnd is None:
        return obj
    info: FieldInfo
    for info in cls.FIELDS:  # type: ignore[attr-defined]
        if not in_range(info.versions, version):
            continue
        if in_range(info.nullable_versions, version) and rnd.random() < 0.3:
            setattr(obj, info.name, None)
            continue
        if info.type.startswith("[]"):
            value: Any = [_element(info, version, flexible, rnd) for _ in range(rnd.randint(0, 3))]
        else:
            value = _element(info, version, flexible, rnd)
        setattr(obj, info.name, value)
    if flexible and rnd.random() < 0.3:
        obj.unknown_tagged_fields = {1000 + rnd.randint(0, 5): rnd.randbytes(rnd.randint(0, 4))}
    return obj


def _element(info: FieldInfo, version: int, flexible: bool, rnd: random.Random) -> Any:
    if info.struct is not None:
        return sample(info.struct, version, flexible, rnd)
    return _scalar(rnd, info.type.removeprefix("[]"))


def _flexible(module: Any, prefix: str, version: int) -> bool:
    rng = getattr(module, prefix + "FLEXIBLE_VERSIONS")
    return in_range(rng, version)


def _lines() -> list[tuple[str, Any]]:
    """(input line, what we encoded) for every case."""
    out: list[tuple[str, Any]] = []
    for api_key, spec in sorted(METADATA_RECORDS.items()):
        module = metadata_module(api_key)
        for v in range(spec.min_version, spec.max_version + 1):
            for seed in SEEDS:
                rnd = random.Random(f"{spec.name}-{v}-{seed}") if seed else None
                record = sample(module.CLASS, v, _flexible(module, "", v), rnd)
                out.append((f"metadata\t{encode_metadata_record(record, v).hex()}", (record, v)))
    for coordinator, by_type in sorted(COORDINATOR_RECORDS.items()):
        for record_type, cspec in sorted(by_type.items()):
            module = coordinator_module(coordinator, record_type)
            for v in range(cspec.value_min_version, cspec.value_max_version + 1):
                for seed in SEEDS:
                    rnd = random.Random(f"{coordinator}-{cspec.name}-{v}-{seed}") if seed else None
                    key = sample(module.KEY_CLASS, 0, False, rnd)
                    value = sample(module.VALUE_CLASS, v, _flexible(module, "VALUE_", v), rnd)
                    line = f"{coordinator}\t{encode_coordinator_key(key).hex()}\t{encode_coordinator_value(value, v).hex()}"
                    out.append((line, (coordinator, record_type, key, value, v)))
            tombstone = f"{coordinator}\t{encode_coordinator_key(module.KEY_CLASS()).hex()}\tnull"
            out.append((tombstone, (coordinator, record_type, module.KEY_CLASS(), None, None)))
    return out


@pytest.mark.java
def test_kafka_serdes_read_and_rewrite_our_records(tmp_path: Path) -> None:
    support = pytest.importorskip("tests.support.java", reason="tests/support/java.py not importable")
    reason = support.java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    cases = _lines()
    (tmp_path / "records.tsv").write_text("".join(line + "\n" for line, _ in cases), encoding="utf-8")
    proc = support.run_java_main(str(JAVA_SOURCE), [str(tmp_path / "records.tsv")], timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = proc.stdout.splitlines()
    assert len(got) == len(cases)
    mismatches = [(line, java) for (line, _), java in zip(cases, got, strict=True) if line != java]
    assert not mismatches, f"{len(mismatches)} of {len(cases)} differ, first: {mismatches[:3]}"
    # Kafka's bytes decode back to what we encoded.
    for (line, meant), _java in zip(cases, got, strict=True):
        cols = line.split("\t")
        if cols[0] == "metadata":
            back = read_metadata_record(bytes.fromhex(cols[1]))
            assert (back.message, back.version) == meant
        else:
            coordinator, record_type, key, value, v = meant
            rec = decode_coordinator_record(
                coordinator, bytes.fromhex(cols[1]), None if cols[2] == "null" else bytes.fromhex(cols[2])
            )
            assert (rec.record_type, rec.key, rec.value, rec.value_version) == (record_type, key, value, v)


def test_the_cases_cover_every_record_type() -> None:
    kinds = {line.split("\t")[0] for line, _ in _lines()}
    assert kinds == {"metadata", "group", "transaction", "share"}
    assert len(_lines()) > 4 * (len(METADATA_RECORDS) + sum(len(t) for t in COORDINATOR_RECORDS.values()))
