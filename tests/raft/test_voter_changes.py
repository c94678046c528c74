"""KIP-853 membership changes on the sans-IO Raft client (fake clock, perfect network: tests/raft/harness.py).

AddRaftVoter / RemoveRaftVoter as Kafka 4.3's AddVoterHandler / RemoveVoterHandler answer them, every
replica following the latest VotersRecord in its log, a removed leader resigning, an observer that
knows no voter finding the leader through controller.quorum.bootstrap.servers, and a truncation
reverting an uncommitted voter set.
"""

from __future__ import annotations

import dataclasses
import uuid

from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import ApiKey
from kbroker.protocol.messages.add_raft_voter import AddRaftVoterRequest, AddRaftVoterResponse
from kbroker.protocol.messages.remove_raft_voter import RemoveRaftVoterRequest, RemoveRaftVoterResponse
from kbroker.protocol.record_format import ControlRecordType, parse_control_record_type
from kbroker.protocol.records import RecordBatch, iter_whole_batches
from kbroker.raft.config import Endpoint, QuorumConfig
from kbroker.raft.partition_state import KRaftControlRecordStateMachine, build_voters_batch
from kbroker.raft.raft_log import MemoryRaftLog
from kbroker.raft.voter_set import ReplicaKey, VoterNode, VoterSet
from tests.raft.harness import LocalCluster


def dir_id(n: int) -> uuid.UUID:
    return uuid.UUID(int=(n << 64) | 7)


def standalone(observers: tuple[int, ...] = (2, 3), *, kraft_version: int = 1) -> LocalCluster:
    """Node 1 formatted --standalone (kraft.version 1); the others only know it as a bootstrap server."""
    voters = {1: Endpoint("node1", 9093)}
    config = QuorumConfig(voters=voters, voter_directory_ids={1: dir_id(1)} if kraft_version else {},
                          kraft_version_level=kraft_version)
    observer_config = QuorumConfig(voters={}, kraft_version_level=kraft_version,
                                   bootstrap_servers={-2: Endpoint("node1", 9093)})
    ids = {n: dir_id(n) for n in (1, *observers)} if kraft_version else {}
    return LocalCluster(config=config, observers=observers, directory_ids=ids, aliases={-2: 1},
                        configs={n: observer_config for n in observers})


def add(cluster: LocalCluster, leader: int, node: int, *, listener: str = "CONTROLLER",
        directory: uuid.UUID | None = None) -> AddRaftVoterResponse:
    rid = cluster.admin(leader, ApiKey.ADD_RAFT_VOTER, AddRaftVoterRequest(
        cluster_id="test", timeout_ms=30000, voter_id=node, voter_directory_id=directory or dir_id(node),
        listeners=[AddRaftVoterRequest.Listener(name=listener, host=f"node{node}", port=9093)]))
    cluster.run_until(lambda: rid in cluster.admin_responses)
    body = cluster.admin_responses[rid]
    assert isinstance(body, AddRaftVoterResponse)
    return body


def remove(cluster: LocalCluster, leader: int, node: int, directory: uuid.UUID | None = None
           ) -> RemoveRaftVoterResponse:
    rid = cluster.admin(leader, ApiKey.REMOVE_RAFT_VOTER, RemoveRaftVoterRequest(
        cluster_id="test", voter_id=node, voter_directory_id=directory or dir_id(node)))
    cluster.run_until(lambda: rid in cluster.admin_responses)
    body = cluster.admin_responses[rid]
    assert isinstance(body, RemoveRaftVoterResponse)
    return body


def caught_up(cluster: LocalCluster, leader: int, *nodes: int) -> None:
    """Run until the leader saw each node fetch at its log end (Kafka's isReplicaCaughtUp)."""
    def seen() -> bool:
        s = cluster.clients[leader].state
        states = getattr(s, "observer_states", {})
        return all(n in states and states[n].last_caught_up_ms > 0 for n in nodes)
    cluster.run_until(seen)


def voters_of(cluster: LocalCluster, node: int) -> list[int]:
    return sorted(cluster.clients[node].config.voters)


def control_types(batch: RecordBatch) -> list[int]:
    return [parse_control_record_type(r.key) for r in batch.iter_records()]


def test_first_leader_writes_the_bootstrap_voters_and_observers_learn_them() -> None:
    c = standalone()
    assert c.elect() == 1
    first = next(iter(iter_whole_batches(c.logs[1].read(0, 1 << 20))))
    assert first.is_control
    assert control_types(first) == [ControlRecordType.LEADER_CHANGE, ControlRecordType.KRAFT_VERSION,
                                    ControlRecordType.KRAFT_VOTERS]
    # The observers knew no voter: they found the leader through the bootstrap server and read the set.
    c.run_until(lambda: voters_of(c, 2) == [1] and voters_of(c, 3) == [1])
    assert not c.clients[2].quorum.is_voter


def test_add_two_voters_then_kill_the_leader() -> None:
    c = standalone()
    c.elect()
    caught_up(c, 1, 2)
    assert add(c, 1, 2).error_code == ErrorCode.NONE
    assert voters_of(c, 1) == [1, 2]
    c.run_until(lambda: voters_of(c, 2) == [1, 2] and c.clients[2].quorum.is_voter)
    caught_up(c, 1, 3)
    assert add(c, 1, 3).error_code == ErrorCode.NONE
    c.run_until(lambda: all(voters_of(c, n) == [1, 2, 3] for n in (1, 2, 3)))
    before = c.clients[1].high_watermark()
    c.clients[1].append([b"x"], c.now)
    c.run_until(lambda: c.clients[1].high_watermark() > before)
    c.down.add(1)
    c.run_until(lambda: c.leader() in (2, 3))  # two of three voters elect without node 1
    new = c.leader()
    offset = c.clients[new].append([b"after"], c.now)
    c.run_until(lambda: c.clients[new].high_watermark() > offset)


def test_add_voter_errors_in_kafkas_order() -> None:
    c = standalone(observers=(2, 3, 4))
    c.elect()
    caught_up(c, 1, 2)
    # Not the leader.
    assert add(c, 2, 3).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    # Already a voter.
    assert add(c, 1, 1).error_code == ErrorCode.DUPLICATE_VOTER
    # No endpoint on the default listener.
    assert add(c, 1, 2, listener="OTHER").error_code == ErrorCode.INVALID_REQUEST
    # An observer of another directory (its disk was re-formatted) is not the replica asked for.
    assert add(c, 1, 2, directory=dir_id(99)).error_code == ErrorCode.REQUEST_TIMED_OUT
    # An id the leader never heard fetching.
    r = add(c, 1, 7)
    assert r.error_code == ErrorCode.REQUEST_TIMED_OUT and "catch up" in (r.error_message or "")
    # One change at a time: a request while the previous one is not answered yet (same poll).
    caught_up(c, 1, 3, 4)
    first = c.admin(1, ApiKey.ADD_RAFT_VOTER, AddRaftVoterRequest(
        cluster_id="test", timeout_ms=30000, voter_id=3, voter_directory_id=dir_id(3),
        listeners=[AddRaftVoterRequest.Listener(name="CONTROLLER", host="node3", port=9093)]))
    second = add(c, 1, 4)
    assert second.error_code == ErrorCode.REQUEST_TIMED_OUT, second
    assert "previous voter operation" in (second.error_message or "")
    c.run_until(lambda: first in c.admin_responses)
    assert c.admin_responses[first].error_code == ErrorCode.NONE


def test_add_voter_needs_kraft_version_1() -> None:
    c = standalone(kraft_version=0)
    c.elect()
    r = add(c, 1, 2)
    assert r.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert "kraft.version feature is 0" in (r.error_message or "")
    assert remove(c, 1, 1, uuid.UUID(int=0)).error_code == ErrorCode.UNSUPPORTED_VERSION


def test_the_new_voter_set_counts_at_once() -> None:
    """Voters {1, 2} with node 2 down: adding node 3 commits through nodes 1 and 3, a majority of the
    new set {1, 2, 3} (the latest VotersRecord counts before it commits: single-server change)."""
    c = standalone(observers=(2, 3))
    c.elect()
    caught_up(c, 1, 2, 3)
    assert add(c, 1, 2).error_code == ErrorCode.NONE
    c.down.add(2)
    assert add(c, 1, 3).error_code == ErrorCode.NONE
    assert voters_of(c, 1) == [1, 2, 3]


def test_a_change_without_a_majority_is_not_acknowledged() -> None:
    c = standalone(observers=(2, 3, 4))
    c.elect()
    caught_up(c, 1, 2, 3, 4)
    assert add(c, 1, 2).error_code == ErrorCode.NONE
    caught_up(c, 1, 3, 4)
    assert add(c, 1, 3).error_code == ErrorCode.NONE
    caught_up(c, 1, 4)
    c.down.update({2, 3})
    # {1, 2, 3, 4} needs three: only 1 and 4 are up. The leader resigns on check-quorum (or the change
    # times out): never NONE.
    rid = c.admin(1, ApiKey.ADD_RAFT_VOTER, AddRaftVoterRequest(
        cluster_id="test", timeout_ms=30000, voter_id=4, voter_directory_id=dir_id(4),
        listeners=[AddRaftVoterRequest.Listener(name="CONTROLLER", host="node4", port=9093)]))
    c.run_until(lambda: rid in c.admin_responses, max_ms=60_000)
    assert c.admin_responses[rid].error_code in (ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                                             ErrorCode.REQUEST_TIMED_OUT)


def test_remove_voter_and_remove_the_leader() -> None:
    c = standalone(observers=(2, 3))
    c.elect()
    caught_up(c, 1, 2, 3)
    for n in (2, 3):
        assert add(c, 1, n).error_code == ErrorCode.NONE
    assert remove(c, 1, 9).error_code == ErrorCode.VOTER_NOT_FOUND
    assert remove(c, 1, 3, dir_id(42)).error_code == ErrorCode.VOTER_NOT_FOUND  # another directory
    assert remove(c, 1, 3).error_code == ErrorCode.NONE
    c.run_until(lambda: all(voters_of(c, n) == [1, 2] for n in (1, 2, 3)))
    assert not c.clients[3].quorum.is_voter
    # The leader removes itself: it answers after the commit, then resigns; node 2 leads alone.
    assert remove(c, 1, 1).error_code == ErrorCode.NONE
    c.run_until(lambda: c.leader() == 2)
    assert voters_of(c, 2) == [2]
    c.run_until(lambda: not c.clients[1].quorum.is_voter and not c.clients[1].is_leader)
    offset = c.clients[2].append([b"alone"], c.now)
    c.run_until(lambda: c.clients[2].high_watermark() > offset and c.logs[1].end_offset() > offset)
    # The last voter cannot be removed.
    assert remove(c, 2, 2).error_code == ErrorCode.VOTER_NOT_FOUND


def test_truncation_reverts_an_uncommitted_voter_set() -> None:
    """Kafka's partitionState: the latest VotersRecord in the log counts, committed or not, and a
    truncation below it brings the previous set back."""
    base = VoterSet({1: VoterNode(ReplicaKey(1, dir_id(1)), {"CONTROLLER": ("node1", 9093)})})
    log = MemoryRaftLog()
    ps = KRaftControlRecordStateMachine(base, 1)
    log.append(bytes(build_voters_batch(base, base_offset=0, epoch=1, now_ms=0, kraft_version=1)))
    assert ps.sync(log) is True and ps.has_voters_in_log()
    two = base.add_voter(VoterNode(ReplicaKey(2, dir_id(2)), {"CONTROLLER": ("node2", 9093)}))
    assert two is not None
    log.append(bytes(build_voters_batch(two, base_offset=2, epoch=1, now_ms=0)))
    assert ps.sync(log) is True
    assert sorted(ps.last_voter_set().voters) == [1, 2]
    assert ps.last_voter_set_entry().offset == 2
    assert sorted(ps.voter_set_at(1).voters) == [1]
    log.truncate_to(2)
    assert ps.sync(log) is True
    assert sorted(ps.last_voter_set().voters) == [1]


def test_describe_quorum_lists_added_voters_and_observers() -> None:
    c = standalone(observers=(2, 3))
    c.elect()
    caught_up(c, 1, 2)
    assert add(c, 1, 2).error_code == ErrorCode.NONE
    caught_up(c, 1, 3)
    d = c.clients[1].describe_quorum(c.now)
    p = d.topics[0].partitions[0]
    assert [v.replica_id for v in p.current_voters] == [1, 2]
    assert [v.replica_directory_id for v in p.current_voters] == [dir_id(1), dir_id(2)]
    assert [(o.replica_id, o.replica_directory_id) for o in p.observers] == [(3, dir_id(3))]
    assert sorted(n.node_id for n in d.nodes) == [1, 2]


def test_snapshot_header_carries_the_voters() -> None:
    c = standalone(observers=(2,))
    c.elect()
    caught_up(c, 1, 2)
    assert add(c, 1, 2).error_code == ErrorCode.NONE
    level, voters = c.clients[1].voters_record_at(c.clients[1].high_watermark() - 1)
    assert level == 1 and voters is not None and sorted(voters.voters) == [1, 2]
    assert dataclasses.replace(c.config).kraft_version == 1
