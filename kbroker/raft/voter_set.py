"""`VoterSet`: the voters of a KIP-853 quorum, as a `VotersRecord` names them (Kafka's `VoterSet`).

With kraft.version 1 the voters are not a config key: `kafka-storage format --standalone` /
`--initial-controllers` (and `kbroker storage format`) write them into the bootstrap checkpoint
`__cluster_metadata-0/00000000000000000000-0000000000.checkpoint` as a `VotersRecord` control record
(with `KRaftVersionRecord` 1), and a controller configured with `controller.quorum.bootstrap.servers`
reads them from there. Each voter is a `ReplicaKey` (node id and the directory id of its metadata
log dir) with its endpoints per listener.

What kbroker does with it today: the bootstrap voter set becomes the quorum's voter set for the
process's life (`bootstrap_voters`, used by kbroker/services.py when `controller.quorum.voters` is
empty). A voter set that changes through the log (AddRaftVoter / RemoveRaftVoter committing a new
`VotersRecord`) is not followed yet (docs/raft.md, "Dynamic quorums").
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

from kbroker.protocol.messages.voters_record import VotersRecord
from kbroker.snapshot.records_snapshot import read_snapshot_header_file

CLUSTER_METADATA_DIR = "__cluster_metadata-0"
BOOTSTRAP_CHECKPOINT = "00000000000000000000-0000000000.checkpoint"


class NoBootstrapVotersError(ValueError):
    """A controller with neither `controller.quorum.voters` nor a bootstrap VotersRecord (Kafka refuses
    to start such a voter the same way: it was formatted for a static quorum, or not at all)."""


@dataclass(frozen=True)
class ReplicaKey:
    """A voter's identity in kraft.version 1: its id and the directory id of its metadata log dir."""

    id: int
    directory_id: uuid.UUID


@dataclass(frozen=True)
class VoterNode:
    key: ReplicaKey
    endpoints: dict[str, tuple[str, int]]  # listener name -> (host, port)
    min_kraft_version: int = 0
    max_kraft_version: int = 1


@dataclass(frozen=True)
class VoterSet:
    voters: dict[int, VoterNode]

    @classmethod
    def from_record(cls, record: VotersRecord) -> VoterSet:
        return cls({v.voter_id: VoterNode(
            ReplicaKey(v.voter_id, v.voter_directory_id),
            {e.name: (e.host, e.port) for e in v.endpoints},
            v.kraft_version_feature.min_supported_version, v.kraft_version_feature.max_supported_version)
            for v in record.voters})

    def voters_config(self, listener: str) -> str:
        """The set as a `controller.quorum.voters` value on `listener` (`id@host:port,...`)."""
        out = []
        for node_id, node in sorted(self.voters.items()):
            if listener not in node.endpoints:
                raise NoBootstrapVotersError(f"voter {node_id} has no endpoint for listener {listener} "
                                             f"(it has {sorted(node.endpoints)})")
            host, port = node.endpoints[listener]
            out.append(f"{node_id}@[{host}]:{port}" if ":" in host else f"{node_id}@{host}:{port}")
        return ",".join(out)


def read_bootstrap_voter_set(metadata_log_dir: Path) -> VoterSet | None:
    """The VoterSet of the bootstrap checkpoint in `metadata_log_dir`, or None (a static quorum's dir)."""
    path = Path(metadata_log_dir) / CLUSTER_METADATA_DIR / BOOTSTRAP_CHECKPOINT
    if not path.exists():
        return None
    contents = read_snapshot_header_file(path)
    return None if contents.voters is None else VoterSet.from_record(contents.voters)


def bootstrap_voters(metadata_log_dir: Path, listener: str) -> str:
    voter_set = read_bootstrap_voter_set(metadata_log_dir)
    if voter_set is None or not voter_set.voters:
        raise NoBootstrapVotersError(
            "controller.quorum.voters is empty and the metadata log dir holds no bootstrap VotersRecord: "
            "format a dynamic quorum's controllers with --standalone or --initial-controllers, or set "
            "controller.quorum.voters")
    return voter_set.voters_config(listener)


__all__ = ["NoBootstrapVotersError", "ReplicaKey", "VoterNode", "VoterSet", "bootstrap_voters",
           "read_bootstrap_voter_set"]
