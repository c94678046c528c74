"""KafkaRaftClient on a fake clock: state transitions, vote granting, replication, snapshots, resigning."""

from __future__ import annotations

import random

import pytest

from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import ApiKey
from kbroker.protocol.messages.begin_quorum_epoch import BeginQuorumEpochRequest
from kbroker.protocol.messages.describe_quorum import DescribeQuorumRequest, DescribeQuorumResponse
from kbroker.protocol.messages.end_quorum_epoch import EndQuorumEpochRequest
from kbroker.protocol.messages.fetch import FetchRequest, FetchResponse
from kbroker.protocol.messages.vote import VoteRequest, VoteResponse
from kbroker.protocol.records import CorruptRecordError, RecordBatch, SimpleRecord, build_batch
from kbroker.raft.client import KafkaRaftClient, PlantedBugs
from kbroker.raft.control_records import leader_change_of
from kbroker.raft.messages import (
    NotLeaderError,
    OutboundRequest,
    OutboundResponse,
    RaftOutbound,
    request_for_version,
)
from kbroker.raft.quorum_state import (
    CandidateState,
    FollowerState,
    LeaderState,
    ProspectiveState,
    ResignedState,
    UnattachedState,
)
from kbroker.raft.quorum_state_store import ElectionState, MemoryQuorumStateStore
from kbroker.raft.raft_log import MemoryRaftLog
from tests.raft.harness import LocalCluster, RecordingListener, quorum_config


def make_client(node: int = 1, voters: int = 3, *, stored: ElectionState | None = None,
                log: MemoryRaftLog | None = None, now: int = 0, planted: PlantedBugs | None = None,
                ) -> tuple[KafkaRaftClient, MemoryRaftLog, MemoryQuorumStateStore, RecordingListener]:
    log = log or MemoryRaftLog()
    store = MemoryQuorumStateStore(stored)
    listener = RecordingListener()
    client = KafkaRaftClient(node, quorum_config(voters), log, store, listener, random.Random(0), now,
                             cluster_id="test", planted=planted)
    return client, log, store, listener


def log_with(epochs: list[int]) -> MemoryRaftLog:
    """A log with one single-record batch per entry of `epochs` (the batch's Raft epoch)."""
    log = MemoryRaftLog()
    for i, e in enumerate(epochs):
        log.append(bytes(build_batch([SimpleRecord(value=f"r{i}".encode())], base_offset=i,
                                     partition_leader_epoch=e, now_ms=0)))
    log.flush()
    return log


def vote_request(candidate: int, epoch: int, last_epoch: int, last_offset: int, *, pre_vote: bool = False,
                 cluster_id: str = "test") -> VoteRequest:
    return VoteRequest(cluster_id=cluster_id, voter_id=1, topics=[VoteRequest.TopicData(
        topic_name="__cluster_metadata", partitions=[VoteRequest.PartitionData(
            replica_epoch=epoch, replica_id=candidate, last_offset_epoch=last_epoch, last_offset=last_offset,
            pre_vote=pre_vote)])])


def responses(out: list[RaftOutbound]) -> list[OutboundResponse]:
    return [o for o in out if isinstance(o, OutboundResponse)]


def requests(out: list[RaftOutbound], api_key: int) -> list[OutboundRequest]:
    return [o for o in out if isinstance(o, OutboundRequest) and o.api_key == api_key]


def vote_partition(resp: OutboundResponse) -> VoteResponse.PartitionData:
    assert isinstance(resp.body, VoteResponse)
    return resp.body.topics[0].partitions[0]


# --- start-up -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("stored", "log_epochs", "state", "epoch"), [
    (None, [], UnattachedState, 0),
    (ElectionState(4, leader_id=1, voted_id=1), [], ResignedState, 4),
    (ElectionState(4, leader_id=2, voted_id=-1), [], FollowerState, 4),
    (ElectionState(4, voted_id=3), [], UnattachedState, 4),
    (ElectionState(2), [1, 5], UnattachedState, 5),  # the log is in a later epoch than the store
])
def test_start_state(stored: ElectionState | None, log_epochs: list[int], state: type, epoch: int) -> None:
    client, *_ = make_client(stored=stored, log=log_with(log_epochs))
    assert isinstance(client.state, state) and client.epoch == epoch


def test_restart_keeps_the_vote_of_the_epoch() -> None:
    client, _, _, _ = make_client(stored=ElectionState(4, voted_id=3))
    client.handle_request(ApiKey.VOTE, vote_request(2, 4, 0, 0), 1, 0)
    out = client.poll(0)
    assert vote_partition(responses(out)[0]).vote_granted is False


# --- elections ------------------------------------------------------------------------------------

def test_election_timeout_starts_a_pre_vote_at_the_current_epoch() -> None:
    client, *_ = make_client()
    assert client.poll(0) == []
    deadline = client.next_deadline_ms()
    assert 1000 <= deadline < 2000  # controller.quorum.election.timeout.ms, randomized up to 2x
    assert not requests(client.poll(deadline - 1), ApiKey.VOTE)
    out = client.poll(deadline)
    votes = requests(out, ApiKey.VOTE)
    assert isinstance(client.state, ProspectiveState)
    assert sorted(v.destination for v in votes) == [2, 3]
    p = votes[0].body.topics[0].partitions[0]  # type: ignore[union-attr]
    assert p.pre_vote is True and p.replica_epoch == 0


def test_pre_vote_majority_then_vote_majority_makes_a_leader() -> None:
    client, log, store, listener = make_client()
    t = client.next_deadline_ms()
    pre = requests(client.poll(t), ApiKey.VOTE)[0]
    granted = VoteResponse(topics=[VoteResponse.TopicData(partitions=[VoteResponse.PartitionData(
        leader_id=-1, leader_epoch=0, vote_granted=True)])])
    client.handle_response(pre.destination, ApiKey.VOTE, pre.correlation_id, granted, t + 1)
    assert isinstance(client.state, CandidateState) and client.epoch == 1
    assert store.state == ElectionState(1, leader_id=-1, voted_id=1)  # durable before asking
    votes = requests(client.poll(t + 1), ApiKey.VOTE)
    assert votes and all(v.body.topics[0].partitions[0].pre_vote is False for v in votes)  # type: ignore[union-attr]
    granted.topics[0].partitions[0].leader_epoch = 1
    client.handle_response(votes[0].destination, ApiKey.VOTE, votes[0].correlation_id, granted, t + 2)
    assert isinstance(client.state, LeaderState)
    out = client.poll(t + 2)
    assert sorted(r.destination for r in requests(out, ApiKey.BEGIN_QUORUM_EPOCH)) == [2, 3]
    first = RecordBatch(memoryview(log.read(0, 1 << 20)))
    change = leader_change_of(first)
    assert first.is_control and first.partition_leader_epoch == 1 and change is not None
    assert change.leader_id == 1 and [v.voter_id for v in change.voters] == [1, 2, 3]
    assert store.state == ElectionState(1, leader_id=1, voted_id=1)
    assert listener.leaders[-1] == (1, 1)


# (state of the voter, request epoch, candidate last epoch, candidate end offset, pre-vote) -> granted
VOTE_TABLE = [
    # an unattached voter at epoch 2 with a log ending at offset 3 in epoch 2
    ("unattached", 3, 2, 3, False, True),    # same log: granted
    ("unattached", 3, 2, 2, False, False),   # shorter log in the same epoch: rejected
    ("unattached", 3, 1, 10, False, False),  # longer but older last epoch: rejected
    ("unattached", 4, 3, 1, False, True),    # newer last epoch wins over length
    ("unattached", 3, 3, 1, False, False),   # a candidate's log cannot end in its own epoch: invalid
    ("follower", 4, 2, 3, True, True),       # a pre-vote from a newer epoch: Kafka moves to it, grants
    ("unattached", 1, 2, 3, False, False),   # stale candidate epoch
    ("unattached", 2, 2, 3, True, True),     # pre-vote with a good log
    ("unattached", 2, 1, 9, True, False),    # pre-vote with a worse log
    ("follower", 2, 2, 3, True, False),      # a follower hearing its leader rejects pre-votes
    ("follower", 2, 2, 3, False, False),     # and votes in its leader's epoch
    ("follower", 3, 2, 3, False, True),      # a higher epoch: new election, granted
]


@pytest.mark.parametrize(("state", "epoch", "last_epoch", "last_offset", "pre_vote", "granted"), VOTE_TABLE)
def test_vote_granting(state: str, epoch: int, last_epoch: int, last_offset: int, pre_vote: bool,
                       granted: bool) -> None:
    stored = ElectionState(2, leader_id=3) if state == "follower" else ElectionState(2)
    client, _, store, _ = make_client(stored=stored, log=log_with([1, 2, 2]))
    if state == "follower":
        s = client.state
        assert isinstance(s, FollowerState)
        s.last_fetch_success_ms = 0
    client.handle_request(ApiKey.VOTE, vote_request(2, epoch, last_epoch, last_offset, pre_vote=pre_vote), 9, 10)
    (resp,) = responses(client.poll(10))
    assert resp.request_id == 9 and vote_partition(resp).vote_granted is granted
    if granted and not pre_vote:
        assert store.state is not None and store.state.voted_id == 2 and store.state.epoch == epoch
    if pre_vote:
        assert client.epoch == max(2, epoch) and store.state is not None and store.state.voted_id == -1


def test_planted_bug_grants_any_log() -> None:
    client, *_ = make_client(stored=ElectionState(2), log=log_with([1, 2, 2]),
                             planted=PlantedBugs(grant_vote_without_log_check=True))
    client.handle_request(ApiKey.VOTE, vote_request(2, 3, 1, 0), 1, 0)
    assert vote_partition(responses(client.poll(0))[0]).vote_granted is True


def test_one_vote_per_epoch() -> None:
    client, *_ = make_client(stored=ElectionState(2))
    client.handle_request(ApiKey.VOTE, vote_request(2, 3, 0, 0), 1, 0)
    client.handle_request(ApiKey.VOTE, vote_request(3, 3, 0, 0), 2, 0)
    client.handle_request(ApiKey.VOTE, vote_request(2, 3, 0, 0), 3, 0)  # a retry of the granted request
    got = [vote_partition(r).vote_granted for r in responses(client.poll(0))]
    assert got == [True, False, True]


@pytest.mark.parametrize("body", [
    vote_request(2, 3, 0, 0, cluster_id="other"),
    VoteRequest(cluster_id="test", topics=[]),
    vote_request(7, 3, 0, 0),  # not a voter
])
def test_bad_vote_requests_are_answered_with_errors(body: VoteRequest) -> None:
    client, *_ = make_client(stored=ElectionState(2))
    client.handle_request(ApiKey.VOTE, body, 1, 0)
    (resp,) = responses(client.poll(0))
    assert isinstance(resp.body, VoteResponse)
    errors = {resp.body.error_code} | {p.error_code for t in resp.body.topics for p in t.partitions}
    assert errors - {0}
    assert client.epoch == 2


def test_a_single_voter_elects_itself_and_commits_after_the_flush() -> None:
    client, log, _, listener = make_client(voters=1)
    assert client.is_leader and client.epoch == 1
    client.poll(0)  # the LeaderChangeMessage is flushed at once
    assert client.high_watermark() == 1
    offset = client.append([b"x", b"y"], 5)
    assert offset == 2 and client.high_watermark() == 1  # not durable yet: not committed
    client.poll(29)
    assert client.high_watermark() == 1 and client.next_deadline_ms() == 30  # controller.quorum.append.linger.ms
    client.poll(30)
    assert log.flushed_end_offset() == 3 and client.high_watermark() == 3
    assert listener.values() == [b"x", b"y"]


def test_append_on_a_follower_raises() -> None:
    client, *_ = make_client(stored=ElectionState(2, leader_id=3))
    with pytest.raises(NotLeaderError):
        client.append([b"x"], 0)


# --- a cluster on the perfect network ---------------------------------------------------------------

def test_replication_commits_on_every_replica_and_the_observer() -> None:
    c = LocalCluster(3, observers=(100,))
    leader = c.elect()
    assert c.now < 4000
    last = c.clients[leader].append([b"a", b"b", b"c"], c.now)
    c.run_until(lambda: all(cl.high_watermark() > last for cl in c.clients.values()))
    for n in c.clients:
        assert c.listeners[n].values() == [b"a", b"b", b"c"]
    assert c.clients[100].state.__class__ is FollowerState
    described = c.clients[leader].describe_quorum(c.now)
    p = described.topics[0].partitions[0]
    assert p.leader_id == leader and p.high_watermark == last + 1
    assert [r.replica_id for r in p.current_voters] == [1, 2, 3] and [r.replica_id for r in p.observers] == [100]


def test_the_high_watermark_waits_for_an_entry_of_the_leaders_epoch() -> None:
    """Raft §5.4.2 (Figure 8): old-epoch entries count only once the leader's own epoch commits."""
    for planted, expect_hw in ((PlantedBugs(), -1), (PlantedBugs(count_old_epoch_entries=True), 2)):
        client, log, _, _ = make_client(stored=ElectionState(3, voted_id=1), log=log_with([1, 2]), planted=planted)
        s = client.state
        client.quorum.state = CandidateState(3, 10_000, {1, 2})
        client._become_leader(0)
        leader = client.state
        assert isinstance(leader, LeaderState) and leader.epoch_start_offset == 2 and s is not leader
        client.poll(0)
        # Voter 2 holds the two old entries and fetches at the epoch start offset, not past it yet.
        fetch = FetchRequest(cluster_id="test", replica_state=FetchRequest.ReplicaState(replica_id=2),
                             topics=[FetchRequest.FetchTopic(partitions=[FetchRequest.FetchPartition(
                                 current_leader_epoch=leader.epoch, fetch_offset=2, last_fetched_epoch=2,
                                 partition_max_bytes=1 << 20)])])
        client.handle_request(ApiKey.FETCH, fetch, 1, 1)
        client.poll(1)
        assert leader.high_watermark == expect_hw


def test_a_diverging_follower_truncates_and_converges() -> None:
    c = LocalCluster(3)
    old = c.elect()
    c.run_until(lambda: all(cl.high_watermark() >= 1 for cl in c.clients.values()))
    # The old leader is cut off and appends entries nobody else sees, then comes back as a follower.
    c.down.add(old)
    c.clients[old].append([b"lost-1"], c.now)
    c.clients[old].append([b"lost-2"], c.now)
    new = c.elect()
    last = c.clients[new].append([b"good"], c.now)
    c.run_until(lambda: c.clients[new].high_watermark() > last)
    c.start(old)  # same log and quorum-state: it resigns, then follows the new leader
    c.run_until(lambda: c.clients[old].high_watermark() > last)
    assert c.listeners[old].values() == [b"good"]
    assert c.logs[old].read(0, 1 << 20) == c.logs[new].read(0, 1 << 20)


def test_a_follower_below_the_log_start_fetches_the_snapshot() -> None:
    c = LocalCluster(3, config=quorum_config(3, max_fetch_snapshot_bytes=4))  # several FetchSnapshot chunks
    leader = c.elect()
    lagging = next(n for n in c.clients if n != leader)
    c.down.add(lagging)
    for i in range(5):
        c.clients[leader].append([f"r{i}".encode()], c.now)
        c.run_for(50)
    hw = c.clients[leader].high_watermark()
    snapshot_id = c.clients[leader].create_snapshot(hw, b"state-at-%d" % hw)
    assert c.logs[leader].start_offset() == hw
    c.start(lagging, log=MemoryRaftLog())  # it lost its disk
    c.run_until(lambda: c.clients[lagging].high_watermark() >= hw, max_ms=10_000)
    assert c.listeners[lagging].snapshots == [(snapshot_id, b"state-at-%d" % hw)]
    assert c.logs[lagging].start_offset() == hw


def test_check_quorum_resigns_a_leader_that_lost_its_majority() -> None:
    c = LocalCluster(3)
    leader = c.elect()
    others = [n for n in c.clients if n != leader]
    c.down.update(others)
    start = c.now
    c.run_until(lambda: not c.clients[leader].is_leader)
    assert isinstance(c.clients[leader].state, ResignedState | ProspectiveState)
    elapsed = c.now - start
    assert 2000 < elapsed <= 3000 + 1  # 1.5 x controller.quorum.fetch.timeout.ms


def test_fetch_timeout_starts_an_election_and_a_new_leader_takes_over() -> None:
    c = LocalCluster(3)
    old = c.elect()
    c.down.add(old)
    c.run_until(lambda: any(cl.is_leader for n, cl in c.clients.items() if n != old))
    new = next(n for n, cl in c.clients.items() if n != old and cl.is_leader)
    assert c.clients[new].epoch == c.clients[old].epoch + 1


def test_graceful_resign_sends_end_quorum_epoch_and_the_successor_elects_fast() -> None:
    c = LocalCluster(3)
    old = c.elect()
    c.run_for(600)
    c.clients[old].resign(c.now)
    out = c.clients[old].poll(c.now)
    ends = requests(out, ApiKey.END_QUORUM_EPOCH)
    assert sorted(e.destination for e in ends) == sorted(n for n in c.clients if n != old)
    body = ends[0].body
    assert isinstance(body, EndQuorumEpochRequest)
    assert body.topics[0].partitions[0].preferred_candidates
    c.enqueue(old, out)  # the same requests, now on the wire
    c.run_for(5)
    start = c.now
    c.down.add(old)
    c.run_until(lambda: c.leader() not in (-1, old))
    assert c.now - start < 1000  # well under the 2000 ms fetch timeout


def test_describe_quorum_on_a_non_leader() -> None:
    client, *_ = make_client(stored=ElectionState(2, leader_id=3))
    client.handle_request(ApiKey.DESCRIBE_QUORUM, DescribeQuorumRequest(), 4, 0)
    (resp,) = responses(client.poll(0))
    assert isinstance(resp.body, DescribeQuorumResponse)
    p = resp.body.topics[0].partitions[0]
    assert p.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and p.leader_id == 3 and p.leader_epoch == 2


def test_fetch_to_a_non_leader_names_the_leader() -> None:
    client, *_ = make_client(stored=ElectionState(2, leader_id=3))
    fetch = FetchRequest(cluster_id="test", replica_state=FetchRequest.ReplicaState(replica_id=100), topics=[
        FetchRequest.FetchTopic(partitions=[FetchRequest.FetchPartition(current_leader_epoch=0, fetch_offset=0,
                                                                         last_fetched_epoch=0)])])
    client.handle_request(ApiKey.FETCH, fetch, 4, 0)
    (resp,) = responses(client.poll(0))
    assert isinstance(resp.body, FetchResponse)
    p = resp.body.responses[0].partitions[0]
    assert p.error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (3, 2)
    assert resp.body.node_endpoints[0].host == "node3"


def test_begin_quorum_epoch_makes_a_follower_and_stale_ones_are_fenced() -> None:
    client, _, store, _ = make_client(stored=ElectionState(2))
    def begin(epoch: int) -> BeginQuorumEpochRequest:
        return BeginQuorumEpochRequest(cluster_id="test", topics=[BeginQuorumEpochRequest.TopicData(partitions=[
            BeginQuorumEpochRequest.PartitionData(leader_id=2, leader_epoch=epoch)])])
    client.handle_request(ApiKey.BEGIN_QUORUM_EPOCH, begin(3), 1, 0)
    client.handle_request(ApiKey.BEGIN_QUORUM_EPOCH, begin(1), 2, 0)
    errors = [r.body.topics[0].partitions[0].error_code for r in responses(client.poll(0))]  # type: ignore[union-attr]
    assert errors == [ErrorCode.NONE, ErrorCode.FENCED_LEADER_EPOCH]
    assert isinstance(client.state, FollowerState) and client.leader_and_epoch() == (2, 3)
    assert store.state == ElectionState(3, leader_id=2)


def test_an_observer_never_votes_and_finds_the_leader() -> None:
    c = LocalCluster(3, observers=(100,))
    leader = c.elect()
    c.run_until(lambda: isinstance(c.clients[100].state, FollowerState))
    assert c.clients[100].leader_and_epoch() == (leader, c.clients[leader].epoch)
    client = c.clients[100]
    client.handle_request(ApiKey.VOTE, vote_request(2, 9, 9, 9), 1, c.now)
    (resp,) = responses(client.poll(c.now))
    assert vote_partition(resp).vote_granted is False and client.epoch != 9


def test_request_for_version_moves_fields_for_older_peers() -> None:
    client, *_ = make_client(stored=ElectionState(2, leader_id=3))
    (fetch,) = requests(client.poll(0), ApiKey.FETCH)
    assert isinstance(fetch.body, FetchRequest) and fetch.body.replica_id == -1
    old = request_for_version(fetch.body, 14)
    assert isinstance(old, FetchRequest) and old.replica_id == 1 and old.replica_state.replica_id == -1


@pytest.mark.parametrize("records", [b"\x00" * 20, b"\xff" * 70, b"garbage"])
def test_corrupt_records_in_a_fetch_response_do_not_crash_the_follower(records: bytes) -> None:
    client, log, *_ = make_client(stored=ElectionState(2, leader_id=3))
    (fetch,) = requests(client.poll(0), ApiKey.FETCH)
    response = FetchResponse(responses=[FetchResponse.FetchableTopicResponse(partitions=[
        FetchResponse.PartitionData(high_watermark=0, current_leader=FetchResponse.LeaderIdAndEpoch(
            leader_id=3, leader_epoch=2), records=records)])])
    client.handle_response(3, ApiKey.FETCH, fetch.correlation_id, response, 1)
    client.poll(1)
    assert log.end_offset() == 0 and isinstance(client.state, FollowerState)


def test_append_batch_stamps_offsets_and_epoch_and_rejects_garbage() -> None:
    client, log, _, listener = make_client(voters=1)
    client.poll(0)
    built = build_batch([SimpleRecord(value=b"p"), SimpleRecord(value=b"q")], base_offset=77, now_ms=3)
    assert client.append_batch(built, 3) == 2
    b = RecordBatch(memoryview(log.read(1, 1 << 20)))
    assert (b.base_offset, b.partition_leader_epoch, b.is_valid()) == (1, 1, True)
    client.poll(100)
    assert listener.values() == [b"p", b"q"]
    with pytest.raises(CorruptRecordError):
        client.append_batch(b"nonsense", 100)
    built[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        client.append_batch(built, 100)
