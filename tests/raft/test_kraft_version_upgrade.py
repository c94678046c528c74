"""kraft.version 0 -> 1 (KIP-853, `kafka-features upgrade --feature kraft.version=1`) on the sans-IO Raft
client, fake clock (tests/raft/harness.py).

A static quorum (controller.quorum.voters, kraft.version 0) has no voter set in its log. Its leader keeps
a volatile one in memory (Kafka's `KRaftVersionUpgrade.Voters`): the static voters with range 0-0 and no
directory id, each filled in by the voter's UpdateRaftVoter (every follower sends one per leader at
kraft.version 0). `upgrade_kraft_version` refuses until every voter supports the new version and has a
directory id, then appends KRaftVersionRecord + VotersRecord in one control batch; once that commits the
formerly static quorum takes AddRaftVoter / RemoveRaftVoter.
"""

from __future__ import annotations

import uuid

import pytest

from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import ApiKey
from kbroker.protocol.messages.remove_raft_voter import RemoveRaftVoterRequest, RemoveRaftVoterResponse
from kbroker.raft.client import KafkaRaftClient, KRaftVersionUpgradeError
from kbroker.raft.quorum_state import FollowerState, LeaderState
from tests.raft.harness import LocalCluster, quorum_config
from tests.raft.test_voter_changes import add, caught_up, dir_id, standalone, voters_of

DIRS = {1: uuid.UUID(int=0x11), 2: uuid.UUID(int=0x22), 3: uuid.UUID(int=0x33)}


def _static_cluster(*, listeners: bool = True) -> LocalCluster:
    c = LocalCluster(config=quorum_config(3), seed=11, directory_ids=dict(DIRS))
    if listeners:
        for n, client in c.clients.items():
            client.local_listeners = {"CONTROLLER": (f"node{n}", 9093)}
    return c


def _leader(c: LocalCluster) -> KafkaRaftClient:
    c.run_until(lambda: any(isinstance(cl.quorum.state, LeaderState) for cl in c.clients.values()))
    c.run_for(1000)
    return next(cl for cl in c.clients.values() if isinstance(cl.quorum.state, LeaderState))


def test_followers_send_update_raft_voter_once_per_leader_at_kraft_version_0() -> None:
    c = _static_cluster()
    leader = _leader(c)
    assert leader.kraft_version() == 0 and leader.volatile_voters is not None
    for n, node in leader.volatile_voters.voters.items():
        assert node.key.directory_id == DIRS[n]
        assert (node.min_kraft_version, node.max_kraft_version) == (0, 1)
        assert node.endpoints == {"CONTROLLER": (f"node{n}", 9093)}
    for client in c.clients.values():
        if client is not leader:
            assert isinstance(client.quorum.state, FollowerState) and client.quorum.state.has_updated_leader


def test_the_upgrade_waits_for_every_voter_then_writes_kraft_version_and_voters() -> None:
    c = _static_cluster()
    leader = _leader(c)
    epoch = leader.epoch
    # A voter that has not told the leader its range (static: 0-0, no directory id) blocks the upgrade.
    assert leader.volatile_voters is not None
    silent = next(n for n in leader.volatile_voters.voters if n != leader.node_id)
    saved = leader.volatile_voters
    leader.volatile_voters = leader._static_voters_with_local()
    with pytest.raises(KRaftVersionUpgradeError) as refused:
        leader.upgrade_kraft_version(epoch, 1, False, c.now)
    assert refused.value.error == ErrorCode.INVALID_UPDATE_VERSION
    assert refused.value.message == "Invalid upgrade of kraft.version to 1 because not all of the voters support it"
    assert silent in leader.volatile_voters.voters
    leader.volatile_voters = saved
    with pytest.raises(KRaftVersionUpgradeError) as stale:
        leader.upgrade_kraft_version(epoch - 1, 1, False, c.now)
    assert stale.value.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    end = leader.log.end_offset()
    assert leader.upgrade_kraft_version(epoch, 1, True, c.now) is False  # validate only: nothing written
    assert leader.log.end_offset() == end
    assert leader.upgrade_kraft_version(epoch, 0, False, c.now) is False  # already there
    assert leader.upgrade_kraft_version(epoch, 1, False, c.now) is True
    assert leader.kraft_version() == 1 and leader.config.kraft_version == 1
    assert leader.upgrade_kraft_version(epoch, 1, False, c.now) is False  # idempotent
    entry = leader.partition_state.last_voter_set_entry()
    assert entry.offset >= end
    assert {n: v.key.directory_id for n, v in entry.voters.voters.items()} == DIRS
    with pytest.raises(KRaftVersionUpgradeError) as down:
        leader.upgrade_kraft_version(epoch, 0, False, c.now)
    assert down.value.message == ("Invalid upgrade of kraft.version from version 1 to 0 because the new "
                                  "version is a downgrade")
    c.run_for(1000)
    for n, client in c.clients.items():
        assert client.kraft_version() == 1, n
        assert client.config.voter_directory_ids == DIRS, n
    # The formerly static quorum now takes voter changes (KIP-853): remove a follower.
    other = next(n for n in c.clients if n != leader.node_id)
    c.admin_pending.add(77)
    leader.handle_request(ApiKey.REMOVE_RAFT_VOTER, RemoveRaftVoterRequest(
        cluster_id="test", voter_id=other, voter_directory_id=DIRS[other]), 77, c.now)
    assert leader._voter_change is not None  # answered once its VotersRecord commits
    c.drive(leader.node_id)
    c.run_until(lambda: 77 in c.admin_responses)
    answer = c.admin_responses[77]
    assert isinstance(answer, RemoveRaftVoterResponse) and answer.error_code == ErrorCode.NONE
    assert other not in leader.config.voters


def test_without_update_raft_voter_the_directory_ids_are_unknown() -> None:
    c = _static_cluster(listeners=False)  # nobody publishes its listeners: nothing is sent
    leader = _leader(c)
    with pytest.raises(KRaftVersionUpgradeError) as refused:
        leader.upgrade_kraft_version(leader.epoch, 1, False, c.now)
    assert refused.value.error == ErrorCode.INVALID_UPDATE_VERSION
    assert leader.kraft_version() == 0
    follower = next(cl for cl in c.clients.values() if cl is not leader)
    with pytest.raises(KRaftVersionUpgradeError) as not_leader:
        follower.upgrade_kraft_version(follower.epoch, 1, False, c.now)
    assert not_leader.value.error == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_add_voter_reads_the_new_voters_kraft_version_range_from_its_api_versions() -> None:
    """Kafka's AddVoterHandler: ApiVersions to the new voter first; a range without the finalized
    kraft.version is INVALID_REQUEST, else the VotersRecord carries the range it reported."""
    c = standalone()
    c.elect()
    caught_up(c, 1, 2, 3)
    c.clients[2].local_kraft_versions = (0, 0)  # a voter that cannot run a dynamic quorum
    refused = add(c, 1, 2)
    assert refused.error_code == ErrorCode.INVALID_REQUEST
    assert refused.error_message is not None and refused.error_message.endswith(
        "since the kraft.version range (min: 0, max: 0) doesn't support the finalized version 1")
    assert voters_of(c, 1) == [1]
    c.clients[3].local_kraft_versions = (1, 1)
    assert add(c, 1, 3).error_code == ErrorCode.NONE
    entry = c.clients[1].partition_state.last_voter_set().voters[3]
    assert (entry.min_kraft_version, entry.max_kraft_version) == (1, 1)
    assert entry.key.directory_id == dir_id(3)


def test_an_unanswered_kraft_version_0_update_raft_voter_is_retried_per_period_not_per_backoff() -> None:
    """A voter whose leader is gone (its connections refused: `handle_failure` at once) used to resend
    UpdateRaftVoter every `controller.quorum.retry.backoff.ms` (hundreds of sends and log lines a minute,
    seen on `kbroker serve --nodes 3` stopping). Kafka gates it by the update-voter period (three fetch
    timeouts): the first goes at once, a retry only when that period ends."""
    c = _static_cluster()
    leader = _leader(c)
    follower = next(cl for cl in c.clients.values() if cl is not leader)
    s = follower.quorum.state
    assert isinstance(s, FollowerState)
    # A fresh leader relationship in which nothing has been sent yet, and a leader that refuses every connection.
    s.has_updated_leader = False
    s.update_voter_sent = False
    s.fetch_deadline_ms = c.now + 60_000  # keep it a follower for the whole check
    sent = 0
    now = c.now
    period = 3 * follower.config.fetch_timeout_ms
    for _ in range(2 * period // 10):
        now += 10
        for item in follower.poll(now):
            if getattr(item, "api_key", None) == ApiKey.UPDATE_RAFT_VOTER:
                sent += 1
                follower.handle_failure(item.destination, item.correlation_id, now)  # connection refused
            elif getattr(item, "api_key", None) is not None and hasattr(item, "correlation_id"):
                follower.handle_failure(item.destination, item.correlation_id, now)
    # Two periods of 10 ms polls: the first send plus at most two retries (one per period), not ~600.
    assert 1 <= sent <= 3, sent
