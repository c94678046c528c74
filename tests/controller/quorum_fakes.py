"""Fakes for the quorum controller's tests: a fake clock and an in-memory Raft log.

`InMemoryRaftLog` is the trivial `RaftClient` the controller's tests drive by hand: appends are
kept uncommitted until `commit()` hands them to the listener (each batch once, in order), and
`elect(node, epoch)` moves leadership, dropping whatever the old leader had not committed (as a new
KRaft leader truncates it). A control batch (LeaderChangeMessage, delivered with no records) takes
one offset at each epoch's start, as in KRaft, so broker epochs (registration offsets) are not simply
record counts.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from kbroker.cluster.configs import ConfigHelper
from kbroker.config import KafkaConfig
from kbroker.controller.quorum_controller import QuorumController, QuorumControllerConfig
from kbroker.controller.raft_client import LeaderAndEpoch, NotLeaderError
from kbroker.controller.replica_placer import StripedReplicaPlacer
from kbroker.controller.result import MetadataRecord
from kbroker.metadata.cache import MetadataCache
from kbroker.metadata.loader import MetadataBatch
from kbroker.protocol.messages.broker_heartbeat import BrokerHeartbeatRequest
from kbroker.protocol.messages.broker_registration import BrokerRegistrationRequest

CLUSTER_ID = "q1AbCdEfGhIjKlMnOpQrSt"


class FakeClock:
    def __init__(self, now_ms: int = 1_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


@dataclass
class InMemoryRaftLog:
    """A replicated log that commits when told to."""

    leader_id: int | None = None
    epoch: int = 0
    batches: list[MetadataBatch] = field(default_factory=list)
    committed_upto: int = -1  # index into `batches` of the last committed batch
    end_offset: int = 0
    listener: QuorumController | None = None
    appends: int = 0

    def append(self, epoch: int, records: Sequence[MetadataRecord]) -> int:
        if epoch != self.epoch or self.leader_id is None:
            raise NotLeaderError(f"not the leader of epoch {epoch} (current {self.epoch})")
        batch = MetadataBatch(self.end_offset, epoch, 0, list(records))
        self.batches.append(batch)
        self.end_offset += len(records)
        self.appends += 1
        return batch.last_offset

    def log_end_offset(self) -> int:
        return self.end_offset

    def resign(self, epoch: int) -> None:
        if epoch == self.epoch:
            self.leader_id = None

    # -- test controls ---------------------------------------------------------------------------------

    def uncommitted(self) -> list[MetadataBatch]:
        return self.batches[self.committed_upto + 1:]

    def commit(self) -> None:
        """The high watermark passes every batch appended so far."""
        new = self.uncommitted()
        self.committed_upto = len(self.batches) - 1
        if new and self.listener is not None:
            self.listener.handle_commit(new)

    def elect(self, node_id: int, epoch: int | None = None) -> None:
        """A new leader: uncommitted batches are truncated, a control record opens the epoch."""
        del self.batches[self.committed_upto + 1:]
        self.end_offset = self.batches[-1].last_offset + 1 if self.batches else 0
        self.epoch = self.epoch + 1 if epoch is None else epoch
        self.batches.append(MetadataBatch(self.end_offset, self.epoch, 0, []))  # LeaderChangeMessage
        self.end_offset += 1
        self.leader_id = node_id
        if self.listener is not None:
            self.listener.handle_leader_change(LeaderAndEpoch(node_id, self.epoch))

    def committed_records(self) -> list[MetadataRecord]:
        return [r for b in self.batches[: self.committed_upto + 1] for r in b.records]


def config_helper(node_id: int = 3000) -> ConfigHelper:
    return ConfigHelper(KafkaConfig({"node.id": str(node_id), "log.dirs": "/nonexistent"}), MetadataCache(node_id))


def new_controller(clock: FakeClock, *, node_id: int = 3000, seed: int = 7, leader: bool = True,
                   raft: InMemoryRaftLog | None = None, **settings: object
                   ) -> tuple[QuorumController, InMemoryRaftLog]:
    """A controller over `raft` (a new log by default), made leader of a new epoch unless `leader` is
    False; a controller on a shared log does not become its listener."""
    shared = raft is not None
    raft = raft if raft is not None else InMemoryRaftLog()
    config = QuorumControllerConfig(node_id=node_id, cluster_id=CLUSTER_ID, **settings)  # type: ignore[arg-type]
    controller = QuorumController(config, raft, config_helper(node_id), clock=clock,
                                  placer=StripedReplicaPlacer(__import__("random").Random(seed)))
    if not shared:
        raft.listener = controller
    if leader:
        raft.elect(node_id)
        raft.commit()  # the bootstrap records
    return controller, raft


def registration(broker_id: int, *, rack: str | None = None, incarnation: uuid.UUID | None = None,
                 log_dirs: list[uuid.UUID] | None = None, cluster_id: str = CLUSTER_ID,
                 mv_range: tuple[int, int] = (7, 30)) -> BrokerRegistrationRequest:
    return BrokerRegistrationRequest(
        broker_id=broker_id, cluster_id=cluster_id,
        incarnation_id=incarnation or uuid.UUID(int=0xB0 + broker_id),
        listeners=[BrokerRegistrationRequest.Listener(name="PLAINTEXT", host="localhost", port=9090 + broker_id,
                                                      security_protocol=0)],
        features=[BrokerRegistrationRequest.Feature(name="metadata.version", min_supported_version=mv_range[0],
                                                    max_supported_version=mv_range[1]),
                  BrokerRegistrationRequest.Feature(name="group.version", min_supported_version=0,
                                                    max_supported_version=1)],
        rack=rack,
        log_dirs=log_dirs if log_dirs is not None else [uuid.UUID(int=0xD1500 + broker_id)],
    )


def heartbeat(broker_id: int, epoch: int, offset: int, *, want_fence: bool = False,
              want_shut_down: bool = False) -> BrokerHeartbeatRequest:
    return BrokerHeartbeatRequest(broker_id=broker_id, broker_epoch=epoch, current_metadata_offset=offset,
                                  want_fence=want_fence, want_shut_down=want_shut_down)


def join(controller: QuorumController, raft: InMemoryRaftLog, broker_id: int, rack: str | None = None) -> int:
    """Register a broker and heartbeat it unfenced (caught up to the log); its broker epoch."""
    op = controller.register_broker_request(registration(broker_id, rack=rack))
    raft.commit()
    epoch = op.result().epoch
    hb = controller.broker_heartbeat(heartbeat(broker_id, epoch, raft.end_offset))
    raft.commit()
    assert not hb.result().is_fenced, hb.result()
    return epoch
