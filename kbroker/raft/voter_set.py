"""`VoterSet`: the voters of a KIP-853 quorum, as a `VotersRecord` names them (Kafka's `VoterSet`).

With kraft.version 1 the voters are not a config key: `kafka-storage format --standalone` /
`--initial-controllers` (and `kbroker storage format`) write them into the bootstrap checkpoint
`__cluster_metadata-0/00000000000000000000-0000000000.checkpoint` as a `VotersRecord` control record
(with `KRaftVersionRecord` 1), and a controller configured with `controller.quorum.bootstrap.servers`
reads them from there. Each voter is a `ReplicaKey` (node id and the directory id of its metadata
log dir) with its endpoints per listener.

The bootstrap voter set is the quorum's voter set until the log holds a `VotersRecord`: every replica
then follows the latest VotersRecord in its log, committed or not (`partition_state.py`, Kafka's
`KRaftControlRecordStateMachine`), and AddRaftVoter / RemoveRaftVoter append new ones
(`voter_handlers.py`). `add_voter` / `remove_voter` / `to_record` are Kafka's `VoterSet` operations.
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

    def to_record(self) -> VotersRecord:
        """Kafka's `VoterSet.toVotersRecord` (VotersRecord version 0, voters in id order)."""
        return VotersRecord(version=0, voters=[VotersRecord.Voter(
            voter_id=node_id, voter_directory_id=node.key.directory_id,
            endpoints=[VotersRecord.Endpoint(name=name, host=host, port=port)
                       for name, (host, port) in node.endpoints.items()],
            kraft_version_feature=VotersRecord.KRaftVersionFeature(
                min_supported_version=node.min_kraft_version, max_supported_version=node.max_kraft_version))
            for node_id, node in sorted(self.voters.items())])

    def add_voter(self, node: VoterNode) -> VoterSet | None:
        """The set with `node` added; None if its id is already a voter (Kafka's `VoterSet.addVoter`)."""
        if node.key.id in self.voters:
            return None
        return VoterSet({**self.voters, node.key.id: node})

    def remove_voter(self, key: ReplicaKey) -> VoterSet | None:
        """The set without `key`; None if `key` is not a voter or is the last one (Kafka's `removeVoter`)."""
        node = self.voters.get(key.id)
        if node is None or node.key.directory_id != key.directory_id or len(self.voters) == 1:
            return None
        return VoterSet({i: n for i, n in self.voters.items() if i != key.id})

    def update_voter(self, node: VoterNode) -> VoterSet | None:
        """The set with the entry of `node`'s voter replaced (endpoints, kraft.version range); None if its
        ReplicaKey is not a voter (Kafka's `VoterSet.updateVoter`, used by UpdateRaftVoter)."""
        if not self.is_voter(node.key):
            return None
        return VoterSet({**self.voters, node.key.id: node})

    def is_voter(self, key: ReplicaKey) -> bool:
        node = self.voters.get(key.id)
        return node is not None and node.key.directory_id == key.directory_id

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
