"""kraft.version 1 (KIP-853) in the Raft client: the voter set from a bootstrap VotersRecord, ReplicaKeys
(id + directory id) in Vote, BeginQuorumEpoch and DescribeQuorum, quorum-state v1's votedDirectoryId,
INVALID_VOTER_KEY for a vote meant for another directory."""

from __future__ import annotations

import dataclasses
import random
import uuid
from pathlib import Path

import pytest

from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import ApiKey
from kbroker.protocol.messages.begin_quorum_epoch import BeginQuorumEpochRequest
from kbroker.protocol.messages.update_raft_voter import UpdateRaftVoterRequest, UpdateRaftVoterResponse
from kbroker.protocol.messages.vote import VoteRequest
from kbroker.raft.client import KafkaRaftClient
from kbroker.raft.config import QuorumConfig
from kbroker.raft.quorum_state import LeaderState
from kbroker.raft.quorum_state_store import ElectionState, MemoryQuorumStateStore
from kbroker.raft.raft_log import MemoryRaftLog
from kbroker.raft.voter_set import (
    BOOTSTRAP_CHECKPOINT,
    CLUSTER_METADATA_DIR,
    NoBootstrapVotersError,
    VoterSet,
    bootstrap_voters,
    read_bootstrap_voter_set,
)
from kbroker.snapshot import OffsetAndEpoch, build_snapshot
from kbroker.storage_tool import DynamicVoter, parse_initial_controllers, voters_record
from tests.raft.harness import LocalCluster, RecordingListener, quorum_config
from tests.raft.test_client import requests, responses, vote_partition

ZERO_DIR = uuid.UUID(int=0)
DIRS = {1: uuid.UUID(int=0x11), 2: uuid.UUID(int=0x22), 3: uuid.UUID(int=0x33)}


def v1_config(voters: int = 3) -> QuorumConfig:
    return dataclasses.replace(quorum_config(voters), voter_directory_ids={i: DIRS[i] for i in range(1, voters + 1)})


def _initial(voters: dict[int, DynamicVoter]) -> bytes:
    return build_snapshot([], OffsetAndEpoch(0, 0), last_contained_log_timestamp=0, now_ms=0, kraft_version=1,
                          voters=voters_record(voters, "CONTROLLER"))


def test_bootstrap_voter_set_from_the_checkpoint(tmp_path: Path) -> None:
    initial = parse_initial_controllers(
        "1@a.example:9093:AAAAAAAAAAAAAAAAAAAAEQ,2@b.example:9094:AAAAAAAAAAAAAAAAAAAAIg,3@[::1]:9095:AAAAAAAAAAAAAAAAAAAAMw")
    part = tmp_path / CLUSTER_METADATA_DIR
    part.mkdir()
    (part / BOOTSTRAP_CHECKPOINT).write_bytes(_initial(initial))
    vs = read_bootstrap_voter_set(tmp_path)
    assert vs is not None
    assert {i: v.key.directory_id for i, v in vs.voters.items()} == DIRS
    assert vs.voters[2].endpoints == {"CONTROLLER": ("b.example", 9094)}
    assert bootstrap_voters(tmp_path, "CONTROLLER") == "1@a.example:9093,2@b.example:9094,3@[::1]:9095"
    with pytest.raises(NoBootstrapVotersError, match="no endpoint for listener OTHER"):
        bootstrap_voters(tmp_path, "OTHER")
    # A static quorum's dir (no checkpoint, or one without voters) has none.
    assert read_bootstrap_voter_set(tmp_path / "none") is None
    with pytest.raises(NoBootstrapVotersError, match="no bootstrap VotersRecord"):
        bootstrap_voters(tmp_path / "none", "CONTROLLER")
    assert VoterSet.from_record(voters_record(initial, "CONTROLLER")) == vs
    assert QuorumConfig().kraft_version == 0 and v1_config().kraft_version == 1


class V1Cluster(LocalCluster):
    def start(self, node: int, log: object = None, store: object = None) -> KafkaRaftClient:  # type: ignore[override]
        client = super().start(node, log, store)  # type: ignore[arg-type]
        client.directory_id = DIRS[node]
        return client


def test_a_kraft_v1_quorum_elects_and_names_replica_keys() -> None:
    c = V1Cluster(config=v1_config(), seed=3)
    c.run_until(lambda: any(isinstance(cl.quorum.state, LeaderState) for cl in c.clients.values()))
    leader = next(n for n, cl in c.clients.items() if isinstance(cl.quorum.state, LeaderState))
    c.run_for(2000)
    # Every vote cast for the leader names its directory id (quorum-state v1 votedDirectoryId).
    for n, store in c.stores.items():
        assert isinstance(store, MemoryQuorumStateStore) and store.state is not None
        if store.state.voted_id >= 0:
            assert store.state.voted_directory_id == DIRS[store.state.voted_id], (n, store.state)
    # DescribeQuorum: each voter's directory id.
    desc = c.clients[leader].describe_quorum(c.now)
    voters = desc.topics[0].partitions[0].current_voters
    assert {v.replica_id: v.replica_directory_id for v in voters} == DIRS


def _v1_client(node: int = 1) -> KafkaRaftClient:
    client = KafkaRaftClient(node, v1_config(), MemoryRaftLog(), MemoryQuorumStateStore(ElectionState(2)),
                             RecordingListener(), random.Random(0), 0, cluster_id="test", directory_id=DIRS[node])
    return client


def _vote(candidate: int, voter_dir: uuid.UUID, candidate_dir: uuid.UUID) -> VoteRequest:
    return VoteRequest(cluster_id="test", voter_id=1, topics=[VoteRequest.TopicData(
        topic_name="__cluster_metadata", partitions=[VoteRequest.PartitionData(
            replica_epoch=3, replica_id=candidate, replica_directory_id=candidate_dir, voter_directory_id=voter_dir,
            last_offset_epoch=0, last_offset=0)])])


@pytest.mark.parametrize(("voter_dir", "candidate_dir", "granted", "error"), [
    (DIRS[1], DIRS[2], True, ErrorCode.NONE),
    (uuid.UUID(int=0), uuid.UUID(int=0), True, ErrorCode.NONE),  # a request without directory ids
    (uuid.UUID(int=0x99), DIRS[2], False, ErrorCode.INVALID_VOTER_KEY),  # meant for another disk of node 1
    (DIRS[1], uuid.UUID(int=0x99), False, ErrorCode.INCONSISTENT_VOTER_SET),  # not the voter 2 we know
])
def test_vote_checks_replica_keys(voter_dir: uuid.UUID, candidate_dir: uuid.UUID, granted: bool,
                                  error: ErrorCode) -> None:
    client = _v1_client()
    client.handle_request(ApiKey.VOTE, _vote(2, voter_dir, candidate_dir), 1, 0)
    p = vote_partition(responses(client.poll(0))[0])
    assert (p.vote_granted, p.error_code) == (granted, error)


def test_requests_name_the_destination_voters_directory() -> None:
    c = V1Cluster(config=v1_config(), seed=5)
    c.run_until(lambda: any(isinstance(cl.quorum.state, LeaderState) for cl in c.clients.values()))
    leader = next(n for n, cl in c.clients.items() if isinstance(cl.quorum.state, LeaderState))
    client = c.clients[leader]
    state = client.quorum.state
    assert isinstance(state, LeaderState)
    for dest in (n for n in DIRS if n != leader):
        begin = client._build_begin_quorum_epoch(state, dest)
        assert isinstance(begin, BeginQuorumEpochRequest)
        assert begin.topics[0].partitions[0].voter_directory_id == DIRS[dest]
        vote = client._build_vote_request(dest, state.epoch + 1, pre_vote=True)
        assert vote.topics[0].partitions[0].voter_directory_id == DIRS[dest]
        assert vote.topics[0].partitions[0].replica_directory_id == DIRS[leader]
    assert requests([], ApiKey.VOTE) == []


def _update(epoch: int, voter: int, host: str, port: int, *, listener: str = "CONTROLLER", lo: int = 0, hi: int = 1,
            directory: uuid.UUID = ZERO_DIR) -> UpdateRaftVoterRequest:
    return UpdateRaftVoterRequest(
        cluster_id="test", current_leader_epoch=epoch, voter_id=voter, voter_directory_id=directory,
        listeners=[UpdateRaftVoterRequest.Listener(name=listener, host=host, port=port)],
        kraft_version_feature=UpdateRaftVoterRequest.KRaftVersionFeature(min_supported_version=lo,
                                                                         max_supported_version=hi))


def _elected(config: QuorumConfig) -> tuple[LocalCluster, int]:
    c = V1Cluster(config=config, seed=7) if config.kraft_version else LocalCluster(config=config, seed=7)
    c.run_until(lambda: any(isinstance(cl.quorum.state, LeaderState) for cl in c.clients.values()))
    c.run_for(1000)  # the epoch's LeaderChange commits: a high watermark
    leader = next(n for n, cl in c.clients.items() if isinstance(cl.quorum.state, LeaderState))
    return c, leader


def _answer(client: KafkaRaftClient, body: UpdateRaftVoterRequest) -> UpdateRaftVoterResponse:
    client.handle_request(ApiKey.UPDATE_RAFT_VOTER, body, 99, 0)
    out = [r for r in responses(client.poll(0)) if r.request_id == 99]
    assert len(out) == 1 and isinstance(out[0].body, UpdateRaftVoterResponse)
    return out[0].body


def test_update_raft_voter_kraft_version_0_follows_kafkas_rules() -> None:
    c, leader = _elected(quorum_config())
    client = c.clients[leader]
    epoch = client.epoch
    other = next(n for n in c.clients if n != leader)
    ok = _answer(client, _update(epoch, other, f"node{other}", 9093))
    assert ok.error_code == ErrorCode.NONE
    assert (ok.current_leader.leader_id, ok.current_leader.leader_epoch) == (leader, epoch)
    assert client.updated_voter_endpoints[other] == {"CONTROLLER": (f"node{other}", 9093)}
    assert _answer(client, _update(epoch - 1, other, "h", 1)).error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert _answer(client, _update(epoch + 1, other, "h", 1)).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert _answer(client, _update(epoch, other, "h", 1, lo=1, hi=1)).error_code == ErrorCode.INVALID_REQUEST
    assert _answer(client, _update(epoch, other, "h", 1, listener="OTHER")).error_code == ErrorCode.INVALID_REQUEST
    assert _answer(client, _update(epoch, 9, "h", 1)).error_code == ErrorCode.VOTER_NOT_FOUND
    follower = c.clients[other]
    answer = _answer(follower, _update(epoch, leader, "h", 1))
    assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and answer.current_leader.leader_id == leader
