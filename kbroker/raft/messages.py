"""The seam between the Raft state machine and whoever moves its bytes, and the one above it.

Below (the asyncio driver in `kbroker/server/`): the client takes inbound requests and responses as
the generated wire classes of `kbroker.protocol.messages` and returns what to send the same way,
so a driver only frames, encodes and decodes:

- `OutboundRequest(destination, api_key, correlation_id, body)`: send `body` to voter/leader
  `destination`; hand its answer back with `KafkaRaftClient.handle_response(destination, api_key,
  correlation_id, body, now_ms)`, or `handle_failure(destination, correlation_id, now_ms)` when the
  connection fails (an unanswered request also fails by itself after `controller.quorum.request.timeout.ms`).
- `OutboundResponse(request_id, api_key, body)`: the answer to the inbound request the driver
  handed in as `handle_request(api_key, body, request_id, now_ms)`; write it on that request's
  connection. A Fetch may be answered later (the leader parks a caught-up follower's Fetch).

Above (the quorum controller): `RaftListener` receives committed batches, snapshots to load and
leader changes; `RaftBatch` is one committed batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Protocol

from kbroker.protocol.messages.add_raft_voter import AddRaftVoterRequest, AddRaftVoterResponse
from kbroker.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kbroker.protocol.messages.begin_quorum_epoch import BeginQuorumEpochRequest, BeginQuorumEpochResponse
from kbroker.protocol.messages.describe_quorum import DescribeQuorumRequest, DescribeQuorumResponse
from kbroker.protocol.messages.end_quorum_epoch import EndQuorumEpochRequest, EndQuorumEpochResponse
from kbroker.protocol.messages.fetch import FetchRequest, FetchResponse
from kbroker.protocol.messages.fetch_snapshot import FetchSnapshotRequest, FetchSnapshotResponse
from kbroker.protocol.messages.remove_raft_voter import RemoveRaftVoterRequest, RemoveRaftVoterResponse
from kbroker.protocol.messages.update_raft_voter import UpdateRaftVoterRequest, UpdateRaftVoterResponse
from kbroker.protocol.messages.vote import VoteRequest, VoteResponse
from kbroker.protocol.records import RecordBatch
from kbroker.raft.raft_log import OffsetAndEpoch

RaftRequestBody = (VoteRequest | BeginQuorumEpochRequest | EndQuorumEpochRequest | FetchRequest
                   | FetchSnapshotRequest | DescribeQuorumRequest | UpdateRaftVoterRequest | AddRaftVoterRequest
                   | RemoveRaftVoterRequest | ApiVersionsRequest)
RaftResponseBody = (VoteResponse | BeginQuorumEpochResponse | EndQuorumEpochResponse | FetchResponse
                    | FetchSnapshotResponse | DescribeQuorumResponse | UpdateRaftVoterResponse | AddRaftVoterResponse
                    | RemoveRaftVoterResponse | ApiVersionsResponse)


@dataclass(frozen=True)
class OutboundRequest:
    destination: int
    api_key: int
    correlation_id: int
    body: RaftRequestBody


@dataclass(frozen=True)
class OutboundResponse:
    request_id: int
    api_key: int
    body: RaftResponseBody


RaftOutbound = OutboundRequest | OutboundResponse


class LeaderAndEpoch(NamedTuple):
    """Kafka's LeaderAndEpoch: leader_id -1 while no leader is known in `epoch`."""

    leader_id: int
    epoch: int


@dataclass(frozen=True)
class RaftBatch:
    """One committed batch (Kafka's `Batch`): offsets, Raft epoch, append time and its record batch bytes."""

    base_offset: int
    last_offset: int
    epoch: int
    append_timestamp_ms: int
    data: bytes
    is_control: bool

    @classmethod
    def of(cls, data: bytes) -> RaftBatch:
        b = RecordBatch(memoryview(data))
        return cls(b.base_offset, b.last_offset, b.partition_leader_epoch, b.max_timestamp, bytes(data), b.is_control)

    def values(self) -> list[bytes | None]:
        """The records' values (a data batch: one metadata record each)."""
        return [None if r.value is None else bytes(r.value) for r in RecordBatch(memoryview(self.data)).iter_records()]


class RaftListener(Protocol):
    """Kafka's RaftClient.Listener: the state machine above Raft (the quorum controller, a broker's loader)."""

    def handle_commit(self, batches: list[RaftBatch]) -> None:
        """Batches below the high watermark, in order, each once (again from the start after a restart)."""
        ...

    def handle_load_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        """Replace the state with this snapshot; commits continue from `snapshot_id.offset`."""
        ...

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None: ...


def request_for_version(body: RaftRequestBody, version: int) -> RaftRequestBody:
    """The client builds requests in their latest shape; a peer that negotiated an older version gets
    the fields that version has (Fetch < v15 carries the replica id at the top level, EndQuorumEpoch v0
    names `preferred_successors`). Returns `body` itself when nothing changes."""
    if isinstance(body, FetchRequest) and version < 15 and body.replica_id < 0:
        body.replica_id = body.replica_state.replica_id
        body.replica_state = FetchRequest.ReplicaState()
    elif isinstance(body, EndQuorumEpochRequest) and version == 0:
        for t in body.topics:
            for p in t.partitions:
                p.preferred_successors = [c.candidate_id for c in p.preferred_candidates]
                p.preferred_candidates = []
    return body


class NotLeaderError(Exception):
    """`append` on a node that is not the leader of the current epoch (Kafka's NotLeaderException)."""
