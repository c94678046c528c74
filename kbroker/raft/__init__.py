"""KRaft, sans-IO: the Raft state machine that replicates `__cluster_metadata` (Kafka's `raft` module).

Owns: the quorum state (unattached, prospective, candidate, leader, follower, resigned) and its
`quorum-state` file, the Vote / BeginQuorumEpoch / EndQuorumEpoch / Fetch / FetchSnapshot logic for
voters and observers, the high watermark, the voter set. It is driven by messages and a clock handed
in, and answers with messages to send: the asyncio driver that owns sockets lives in `kbroker/server/`.

Must not import asyncio (checked by import-linter's sans-IO contract), nor any package above it
(controller/, server/, api/, net/); it may use `kbroker.log` for its on-disk log and `kbroker.protocol`.
"""

from kbroker.raft.client import KafkaRaftClient
from kbroker.raft.config import Endpoint, QuorumConfig, parse_voters
from kbroker.raft.messages import (
    LeaderAndEpoch,
    NotLeaderError,
    OutboundRequest,
    OutboundResponse,
    RaftBatch,
    RaftListener,
    RaftOutbound,
    request_for_version,
)
from kbroker.raft.metadata_log import KafkaMetadataLog
from kbroker.raft.quorum_state_store import ElectionState, FileQuorumStateStore, QuorumStateStore
from kbroker.raft.raft_log import MemoryRaftLog, OffsetAndEpoch, RaftLog

__all__ = [
    "ElectionState", "Endpoint", "FileQuorumStateStore", "KafkaMetadataLog", "KafkaRaftClient", "LeaderAndEpoch",
    "MemoryRaftLog", "NotLeaderError", "OffsetAndEpoch", "OutboundRequest", "OutboundResponse", "QuorumConfig",
    "QuorumStateStore", "RaftBatch", "RaftListener", "RaftLog", "RaftOutbound", "parse_voters", "request_for_version",
]
