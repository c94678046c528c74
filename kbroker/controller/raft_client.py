"""The seam between the quorum controller and the Raft layer: Kafka's `RaftClient` and its `Listener`.

The `QuorumController` does not own `__cluster_metadata`: KRaft replicates it (kbroker/raft, driven
by kbroker/server). This module names the little the controller needs of that layer, as two
Protocols, so either side can be written, faked and tested alone:

- `RaftClient` (what the controller calls, Kafka's `RaftClient.prepareAppend` +
  `schedulePreparedAppend` folded into one `append`): append one batch of records in the leader's
  epoch and learn the offset of its last record, the log end offset when leadership begins, and
  resign.
- `RaftClientListener` (what the Raft layer calls, Kafka's `RaftClient.Listener`): `handle_commit`
  with the batches the high watermark has passed, in offset order, every batch exactly once
  (the leader's own included; a control batch, such as the LeaderChangeMessage that opens an epoch,
  as a batch with no records, so the controller's committed offset passes it: without that, a write
  with no records issued right after a failover would wait for the next real commit);
  `handle_leader_change` when the leader or epoch changes; `handle_load_snapshot` with a snapshot's
  records when the committed state must be replaced whole (at start, or a follower that fell behind
  the leader's log start offset), after which commits continue from the snapshot's end.

Kafka's guarantees the controller relies on (KafkaRaftClient's): the listener is told it leads epoch
E only after it has been handed every batch committed before E began (so its committed state is the
whole log), an append with a stale epoch raises `NotLeaderError` and writes nothing, and batches of
one epoch commit in the order they were appended. A leader that loses its epoch never sees its
uncommitted batches committed (a new leader truncates them), which is why the controller reverts.

Imports only metadata/ (the decoded batch type) and the standard library: no asyncio, no raft/.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from kbroker.controller.result import MetadataRecord
from kbroker.metadata.loader import MetadataBatch


@dataclass(frozen=True, slots=True)
class LeaderAndEpoch:
    """Kafka's `LeaderAndEpoch`: the known leader of the quorum (None: unknown) and the epoch."""

    leader_id: int | None
    epoch: int

    def is_leader(self, node_id: int) -> bool:
        return self.leader_id == node_id


class NotLeaderError(Exception):
    """Kafka's `NotLeaderException`: an append in an epoch this node no longer leads; nothing written."""


class RaftClient(Protocol):
    """What the active controller asks of the Raft layer."""

    def append(self, epoch: int, records: Sequence[MetadataRecord]) -> int:
        """Append `records` as one batch in leader epoch `epoch` (Kafka's prepareAppend +
        schedulePreparedAppend); return the offset of its last record. Raises `NotLeaderError` when
        this node is not the leader of `epoch` (nothing is written then)."""
        ...

    def log_end_offset(self) -> int:
        """The offset the next appended record will get (read when leadership begins)."""
        ...

    def resign(self, epoch: int) -> None:
        """Give up leadership of `epoch` (Kafka's `RaftClient.resign`, after a fatal controller fault)."""
        ...


class RaftClientListener(Protocol):
    """What the Raft layer tells the controller (Kafka's `RaftClient.Listener`)."""

    def handle_commit(self, batches: Sequence[MetadataBatch]) -> None:
        """Batches the high watermark has passed, in order, each once (control batches with no records)."""
        ...

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        """The quorum's leader or epoch changed (this node may have become or stopped being leader)."""
        ...

    def handle_load_snapshot(self, records: Sequence[MetadataRecord], last_contained_offset: int, epoch: int,
                             last_contained_log_time_ms: int = -1) -> None:
        """Kafka's `handleLoadSnapshot`: replace the committed state by a snapshot's metadata records,
        which hold everything up to `last_contained_offset` (the snapshot id's end offset - 1)."""
        ...
