"""The `quorum-state` file: the election state a voter must never forget (Kafka's FileQuorumStateStore).

Raft's safety rests on two durable facts per voter: the highest epoch it has seen and whom it voted
for in it. Kafka keeps them in `<metadata.log.dir>/__cluster_metadata-0/quorum-state`, one line of JSON
(`QuorumStateData`, with a `data_version` field), written to `quorum-state.tmp`, fsynced, then moved
over the old file (`Utils.atomicMoveWithFallback`), so a crash leaves the old or the new state, never
half of one.

Two versions, both read and written as Kafka 4.3 does (`KRaftVersion.quorumStateVersion()`):

- version 0 (kraft.version 0, a static `controller.quorum.voters` quorum)::

    {"clusterId":"","leaderId":1,"leaderEpoch":3,"votedId":-1,"appliedOffset":0,"currentVoters":[{"voterId":1}],"data_version":0}

- version 1 (kraft.version 1, KIP-853)::

    {"leaderId":1,"leaderEpoch":3,"votedId":-1,"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA","data_version":1}

A directory id is Kafka's `Uuid.toString()`: URL-safe base64 of the 16 bytes, no padding.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kbroker.protocol.types import ZERO_UUID

QUORUM_STATE_FILENAME = "quorum-state"
SUPPORTED_VERSIONS = (0, 1)


@dataclass(frozen=True)
class ElectionState:
    """Kafka's ElectionState: the epoch, the leader if known, the vote cast in this epoch if any."""

    epoch: int
    leader_id: int = -1
    voted_id: int = -1
    voted_directory_id: uuid.UUID = ZERO_UUID

    @property
    def has_leader(self) -> bool:
        return self.leader_id >= 0

    @property
    def has_voted(self) -> bool:
        return self.voted_id >= 0


class QuorumStateStore(Protocol):
    """Where the election state lives; `write` returns only once the state is durable."""

    def read(self) -> ElectionState | None: ...

    def write(self, state: ElectionState) -> None: ...


def uuid_to_kafka_string(value: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")


def uuid_from_kafka_string(text: str) -> uuid.UUID:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"not a Kafka Uuid: {text!r}")
    return uuid.UUID(bytes=raw)


class QuorumStateFormatError(ValueError):
    """The file is not a `QuorumStateData` Kafka could read."""


def encode_quorum_state(state: ElectionState, version: int, voters: list[int] | None = None) -> str:
    """One line of Kafka's JSON, fields in the spec's order, `data_version` last."""
    if version == 0:
        doc: dict[str, object] = {
            "clusterId": "", "leaderId": state.leader_id, "leaderEpoch": state.epoch, "votedId": state.voted_id,
            "appliedOffset": 0,
            "currentVoters": None if voters is None else [{"voterId": v} for v in sorted(voters)],
        }
    elif version == 1:
        doc = {"leaderId": state.leader_id, "leaderEpoch": state.epoch, "votedId": state.voted_id,
               "votedDirectoryId": uuid_to_kafka_string(state.voted_directory_id)}
    else:
        raise ValueError(f"Quorum state data version ({version}) is greater than the supported version (1)")
    doc["data_version"] = version
    return json.dumps(doc, separators=(",", ":"))


def decode_quorum_state(text: str) -> ElectionState:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise QuorumStateFormatError(f"quorum-state is not JSON: {e}") from e
    if not isinstance(doc, dict):
        raise QuorumStateFormatError("quorum-state is not a JSON object")
    version = doc.get("data_version")
    if not isinstance(version, int) or version not in SUPPORTED_VERSIONS:
        raise QuorumStateFormatError(f"data_version ({version}) is not within the min (0) and max (1) supported version")

    def int_field(name: str) -> int:
        value = doc.get(name, -1)
        if not isinstance(value, int) or isinstance(value, bool):
            raise QuorumStateFormatError(f"QuorumStateData.{name} is not an int: {value!r}")
        return value

    directory = ZERO_UUID
    if version >= 1 and doc.get("votedDirectoryId") is not None:
        raw = doc["votedDirectoryId"]
        if not isinstance(raw, str):
            raise QuorumStateFormatError("QuorumStateData.votedDirectoryId is not a string")
        try:
            directory = uuid_from_kafka_string(raw)
        except ValueError as e:
            raise QuorumStateFormatError(str(e)) from e
    return ElectionState(epoch=int_field("leaderEpoch"), leader_id=int_field("leaderId"),
                         voted_id=int_field("votedId"), voted_directory_id=directory)


class FileQuorumStateStore:
    """`quorum-state` in a directory (the `__cluster_metadata-0` log directory), written atomically."""

    def __init__(self, directory: Path, version: int = 0, voters: list[int] | None = None) -> None:
        if version not in SUPPORTED_VERSIONS:
            raise ValueError(f"Quorum state data version ({version}) is greater than the supported version (1)")
        self.path = Path(directory) / QUORUM_STATE_FILENAME
        self.version = version
        self.voters = voters

    def read(self) -> ElectionState | None:
        """The stored state, or None when the file does not exist (a new voter)."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        line = text.splitlines()[0] if text else ""
        if not line:
            raise QuorumStateFormatError(f"{self.path}: File ended prematurely.")
        return decode_quorum_state(line)

    def write(self, state: ElectionState) -> None:
        """Write `quorum-state.tmp`, fsync it, rename it over `quorum-state`, fsync the directory."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(QUORUM_STATE_FILENAME + ".tmp")
        data = encode_quorum_state(state, self.version, self.voters).encode("utf-8")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            tmp.unlink(missing_ok=True)  # a full disk: leave no empty .tmp behind; quorum-state is untouched
            # Named by the file, as Kafka's FileQuorumStateStore names it ("Error while writing the Quorum
            # status from the file ..."): fatal to the node's start, as in Kafka.
            raise OSError(e.errno, e.strerror, str(self.path)) from e
        os.replace(tmp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


class MemoryQuorumStateStore:
    """An in-memory store (tests, the simulation): `write` is durable the moment it returns."""

    def __init__(self, state: ElectionState | None = None) -> None:
        self.state = state
        self.writes = 0

    def read(self) -> ElectionState | None:
        return self.state

    def write(self, state: ElectionState) -> None:
        self.state = state
        self.writes += 1
