"""A prospective voter that knew the leader of its epoch and lost its pre-vote follows that leader again
(Kafka's `KafkaRaftClient.prospectiveTransitionAfterElectionLoss`).

Found by tests/cluster/test_kbroker_quorum_snapshot.py: a controller restarted knowing leader 1 of
epoch 2 from `quorum-state`, its process took longer than the fetch timeout to start serving, so its
first Fetch never succeeded in time; it became prospective, the two healthy voters rejected its
pre-votes (they hear from their leader), and since the leader it already knew in this epoch was never
followed again, it stayed prospective for good.
"""

from __future__ import annotations

from kbroker.protocol.messages import ApiKey
from kbroker.protocol.messages.vote import VoteResponse
from kbroker.raft.quorum_state import FollowerState, ProspectiveState
from kbroker.raft.quorum_state_store import ElectionState
from tests.raft.test_client import make_client, requests


def _rejected(leader: int, epoch: int) -> VoteResponse:
    return VoteResponse(topics=[VoteResponse.TopicData(partitions=[VoteResponse.PartitionData(
        leader_id=leader, leader_epoch=epoch, vote_granted=False)])])


def test_a_restarted_follower_whose_pre_vote_is_rejected_follows_its_leader_again() -> None:
    client, *_ = make_client(1, stored=ElectionState(2, leader_id=2, voted_id=-1))
    assert isinstance(client.state, FollowerState) and client.state.leader_id == 2
    assert requests(client.poll(0), ApiKey.FETCH)  # sent, never answered
    t = client.state.fetch_deadline_ms  # the fetch timeout: no successful Fetch since the start
    out = client.poll(t)
    assert isinstance(client.state, ProspectiveState) and client.state.leader_id == 2
    votes = requests(out, ApiKey.VOTE)
    assert sorted(v.destination for v in votes) == [2, 3]
    for v in votes:
        client.handle_response(v.destination, ApiKey.VOTE, v.correlation_id, _rejected(2, 2), t + 1)
    assert isinstance(client.state, FollowerState)
    assert (client.state.leader_id, client.epoch) == (2, 2)
    sent = []
    now = t + 1
    while not sent and now < t + 5000:  # as soon as the one fetch in flight is answered or times out
        sent = requests(client.poll(now), ApiKey.FETCH)
        now = max(now + 1, client.next_deadline_ms())
    assert [f.destination for f in sent] == [2]
    assert isinstance(client.state, FollowerState)


def test_a_prospective_without_a_known_leader_backs_off_instead() -> None:
    client, *_ = make_client(1, stored=ElectionState(2, leader_id=-1, voted_id=-1))
    t = client.next_deadline_ms()
    votes = requests(client.poll(t), ApiKey.VOTE)
    assert isinstance(client.state, ProspectiveState) and client.state.leader_id == -1
    for v in votes:
        client.handle_response(v.destination, ApiKey.VOTE, v.correlation_id, _rejected(-1, 2), t + 1)
    assert isinstance(client.state, ProspectiveState) and client.state.backoff_until_ms > t
