"""Kafka's small text state files, written atomically (temp file, fsync, rename, fsync directory).

Owns the formats of ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint`` and
``replication-offset-checkpoint`` (version line ``0``, entry count, ``topic partition offset`` lines),
``leader-epoch-checkpoint`` (``0``, count, ``epoch startOffset`` lines), ``meta.properties`` (Java
properties: version, cluster.id, node.id, directory.id) and ``partition.metadata``
(``version: 0`` / ``topic_id: <base64url uuid>``), plus Kafka's base64url rendering of UUIDs.
"""

from __future__ import annotations

import base64
import os
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path

from kbroker.log.errors import KafkaStorageError

__all__ = [
    "CheckpointError", "read_offset_checkpoint", "write_offset_checkpoint", "read_leader_epoch_checkpoint",
    "write_leader_epoch_checkpoint", "read_properties", "write_properties", "read_partition_metadata",
    "write_partition_metadata", "uuid_to_base64", "uuid_from_base64", "random_kafka_uuid", "atomic_write", "fsync_dir",
]

CHECKPOINT_VERSION = 0


class CheckpointError(ValueError):
    """A state file is malformed (Kafka raises a corruption error and the file is ignored/rebuilt)."""


def fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: Path, text: str, *, sync: bool = True) -> None:
    """Write ``text`` to ``path`` via ``path.tmp`` + rename, so a crash leaves the old or new file whole."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            if sync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
        if sync:
            fsync_dir(path.parent)
    except OSError as e:
        raise KafkaStorageError(f"cannot write {path}: {e}") from e


def _read_lines(path: Path, encoding: str = "utf-8") -> list[str] | None:
    try:
        with open(path, encoding=encoding) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{path}: not a text file ({e.reason} at byte {e.start})") from e
    except OSError as e:
        raise KafkaStorageError(f"cannot read {path}: {e}") from e


def _parse_checkpoint(path: Path, fields: int) -> list[list[str]]:
    lines = _read_lines(path)
    if lines is None:
        return []
    try:
        if int(lines[0].strip()) != CHECKPOINT_VERSION:
            raise CheckpointError(f"{path}: unrecognised version {lines[0]!r}")
        count = int(lines[1].strip())
        rows = [line.split() for line in lines[2:2 + count]]
    except (IndexError, ValueError) as e:
        raise CheckpointError(f"{path}: malformed checkpoint file: {e}") from e
    if len(rows) != count or any(len(r) != fields for r in rows):
        raise CheckpointError(f"{path}: expected {count} entries of {fields} fields")
    return rows


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """``{(topic, partition): offset}`` from an offset checkpoint file; {} if it does not exist."""
    out: dict[tuple[str, int], int] = {}
    for topic, partition, offset in _parse_checkpoint(path, 3):
        try:
            out[(topic, int(partition))] = int(offset)
        except ValueError as e:
            raise CheckpointError(f"{path}: malformed entry {topic} {partition} {offset}") from e
    return out


def write_offset_checkpoint(path: Path, offsets: Mapping[tuple[str, int], int]) -> None:
    lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
    lines += [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
    atomic_write(path, "\n".join(lines) + "\n")


def read_leader_epoch_checkpoint(path: Path) -> list[tuple[int, int]]:
    try:
        return [(int(e), int(o)) for e, o in _parse_checkpoint(path, 2)]
    except ValueError as e:
        raise CheckpointError(f"{path}: malformed entry: {e}") from e


def write_leader_epoch_checkpoint(path: Path, entries: Iterable[tuple[int, int]], *, sync: bool = True) -> None:
    entries = list(entries)
    lines = [str(CHECKPOINT_VERSION), str(len(entries))] + [f"{e} {o}" for e, o in entries]
    atomic_write(path, "\n".join(lines) + "\n", sync=sync)


# --- meta.properties ------------------------------------------------------------------------------
def read_properties(path: Path) -> dict[str, str] | None:
    """A Java properties file (the subset Kafka writes: ``key=value``, ``#`` comments); None if missing.

    Read as ISO-8859-1, as Java's ``Properties.load(InputStream)`` does: any bytes parse, so a garbage
    file is judged by its content (no node.id), never by a decode error."""
    lines = _read_lines(path, "iso-8859-1")
    if lines is None:
        return None
    props: dict[str, str] = {}
    for raw in lines:
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            props[line] = ""
        else:
            props[line[:sep].strip()] = line[sep + 1:].strip()
    return props


def _java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, int arithmetic; here as unsigned 32 bits)."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h


def java_properties_order(keys: Iterable[str]) -> list[str]:
    """The order Java 17's ``Properties.store`` writes ``keys`` in (inserted in the given order).

    ``Properties`` keeps its entries in a ``ConcurrentHashMap`` (16 bins for up to 12 keys, one more
    doubling per 0.75 load): ``store`` walks the bins in index order (``spread(hashCode) & (n - 1)``),
    a bin's keys in insertion order. So Kafka's meta.properties reads ``node.id, directory.id,
    version, cluster.id``; writing the same order makes kbroker's file byte-comparable to Kafka's."""
    ordered = list(dict.fromkeys(keys))
    n = 16
    while len(ordered) >= n * 3 // 4:
        n *= 2

    def bin_of(k: str) -> int:
        h = _java_string_hash(k)
        return ((h ^ (h >> 16)) & 0x7FFFFFFF) & (n - 1)

    return sorted(ordered, key=lambda k: bin_of(k))  # stable: insertion order within a bin


def write_properties(path: Path, props: Mapping[str, str]) -> None:
    """A Java properties file as Kafka writes meta.properties (``Properties.store(writer, "")``:
    an empty comment line, the date line, then ``key=value`` lines in Java's hash order), fsynced."""
    header = "#\n#" + time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime()) + "\n"
    atomic_write(path, header + "".join(f"{k}={props[k]}\n" for k in java_properties_order(props)))


# --- UUIDs and partition.metadata -----------------------------------------------------------------
def uuid_to_base64(u: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, without padding (22 characters)."""
    return base64.urlsafe_b64encode(u.bytes).decode("ascii").rstrip("=")


def uuid_from_base64(s: str) -> uuid.UUID:
    raw = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    if len(raw) != 16:
        raise ValueError(f"not a Kafka uuid: {s!r}")
    return uuid.UUID(bytes=raw)


def random_kafka_uuid() -> uuid.UUID:
    """A random UUID as Kafka's ``Uuid.randomUuid``: never the zero/metadata ids, never rendered with a leading '-'."""
    while True:
        u = uuid.uuid4()
        if u.int > 1 and not uuid_to_base64(u).startswith("-"):
            return u


def read_partition_metadata(path: Path) -> uuid.UUID | None:
    lines = _read_lines(path)
    if lines is None:
        return None
    fields = dict(line.split(":", 1) for line in lines if ":" in line)
    try:
        if fields["version"].strip() != "0":
            raise CheckpointError(f"{path}: unrecognised version {fields['version']!r}")
        return uuid_from_base64(fields["topic_id"].strip())
    except (KeyError, ValueError) as e:
        raise CheckpointError(f"{path}: malformed partition.metadata: {e}") from e


def write_partition_metadata(path: Path, topic_id: uuid.UUID, *, sync: bool = True) -> None:
    """Without ``sync`` the file is renamed into place unsynced; the caller fsyncs it (and its
    directory) later, batched (`LogManager.flush_partition_metadata`, Kafka's ``maybeFlush``)."""
    atomic_write(path, f"version: 0\ntopic_id: {uuid_to_base64(topic_id)}", sync=sync)
