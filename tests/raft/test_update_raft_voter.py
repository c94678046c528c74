"""UpdateRaftVoter (API 82, KIP-853) at kraft.version 1 on the sans-IO Raft client (fake clock, tests/raft/harness.py).

A voter whose entry in the voter set differs from its own listeners (it restarted on another port) sends
UpdateRaftVoter to the leader once per three fetch timeouts (Kafka's FollowerState.updateVoterPeriodTimer);
the leader checks it as Kafka's UpdateVoterHandler does, appends a VotersRecord with the new entry and
answers at once; every replica then reaches the voter at its new endpoint.
"""

from __future__ import annotations

import random
import uuid

from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import ApiKey
from kbroker.protocol.messages.remove_raft_voter import RemoveRaftVoterRequest
from kbroker.protocol.messages.update_raft_voter import UpdateRaftVoterRequest
from kbroker.raft.client import KafkaRaftClient
from kbroker.raft.config import Endpoint
from kbroker.raft.quorum_state import UPDATE_VOTER_PERIOD_FACTOR
from tests.raft.harness import RecordingListener
from tests.raft.test_client import requests
from tests.raft.test_voter_changes import dir_id, standalone
from tests.raft.test_voter_set import DIRS, _answer, _elected, _update, v1_config


def test_the_leader_appends_a_voters_record_for_a_moved_voter() -> None:
    c, leader = _elected(v1_config())
    client = c.clients[leader]
    other = next(n for n in c.clients if n != leader)
    end = client.log.end_offset()
    same = _update(client.epoch, other, f"node{other}", 9093, directory=DIRS[other])
    assert _answer(client, same).error_code == ErrorCode.NONE
    assert client.log.end_offset() == end  # nothing changed: no VotersRecord
    moved = _update(client.epoch, other, "elsewhere", 9999, directory=DIRS[other])
    ok = _answer(client, moved)
    assert ok.error_code == ErrorCode.NONE and ok.current_leader.leader_id == leader
    entry = client.partition_state.last_voter_set_entry()
    assert entry.offset >= end and entry.voters.voters[other].endpoints == {"CONTROLLER": ("elsewhere", 9999)}
    assert client.config.voters[other] == Endpoint("elsewhere", 9999)  # the leader reaches it there at once
    # The change is not committed yet: the next voter change waits (Kafka's REQUEST_TIMED_OUT).
    assert _answer(client, same).error_code == ErrorCode.REQUEST_TIMED_OUT
    c.run_for(1000)
    for n, cl in c.clients.items():
        assert cl.config.voters[other] == Endpoint("elsewhere", 9999), n
    wrong_dir = _update(client.epoch, other, f"node{other}", 9093, directory=uuid.UUID(int=0x99))
    assert _answer(client, wrong_dir).error_code == ErrorCode.VOTER_NOT_FOUND
    assert _answer(client, _update(client.epoch, other, "h", 1, directory=uuid.UUID(int=0))
                   ).error_code == ErrorCode.INVALID_REQUEST  # kraft.version 1 needs the directory id
    assert _answer(client, _update(client.epoch, other, "h", 1, lo=2, hi=1, directory=DIRS[other])
                   ).error_code == ErrorCode.INVALID_REQUEST
    assert _answer(client, _update(client.epoch, other, "h", 1, lo=0, hi=0, directory=DIRS[other])
                   ).error_code == ErrorCode.INVALID_REQUEST  # does not support the finalized kraft.version 1
    assert _answer(client, _update(client.epoch, other, "h", 1, listener="OTHER", directory=DIRS[other])
                   ).error_code == ErrorCode.INVALID_REQUEST


def test_an_update_waits_while_a_voter_removal_is_in_flight() -> None:
    c, leader = _elected(v1_config())
    client = c.clients[leader]
    other, third = (n for n in c.clients if n != leader)
    client.handle_request(ApiKey.REMOVE_RAFT_VOTER, RemoveRaftVoterRequest(
        cluster_id="test", voter_id=third, voter_directory_id=DIRS[third]), 50, c.now)
    client.poll(c.now)
    assert client._voter_change is not None  # answered once its VotersRecord commits
    moved = _update(client.epoch, other, "elsewhere", 9999, directory=DIRS[other])
    assert _answer(client, moved).error_code == ErrorCode.REQUEST_TIMED_OUT


def test_a_voter_with_new_listeners_sends_update_raft_voter_and_everyone_follows() -> None:
    c, leader = _elected(v1_config())
    other = next(n for n in c.clients if n != leader)
    follower = c.clients[other]
    # The follower "restarted" on another port: its own listeners are no longer its voter entry.
    follower.local_listeners = {"CONTROLLER": ("moved-host", 19999)}
    assert follower.local_voter_needs_update()
    sent: list[UpdateRaftVoterRequest] = []
    original = follower.poll

    def spy(now_ms: int) -> list:  # type: ignore[type-arg]
        out = original(now_ms)
        sent.extend(r.body for r in requests(out, ApiKey.UPDATE_RAFT_VOTER) if isinstance(r.body, UpdateRaftVoterRequest))
        return out
    follower.poll = spy  # type: ignore[method-assign]
    period = UPDATE_VOTER_PERIOD_FACTOR * follower.config.fetch_timeout_ms
    c.run_for(period + 2000)
    assert len(sent) == 1, sent  # once: the next period finds its entry up to date
    req = sent[0]
    assert (req.voter_id, req.voter_directory_id) == (other, DIRS[other])
    assert [(x.name, x.host, x.port) for x in req.listeners] == [("CONTROLLER", "moved-host", 19999)]
    assert (req.kraft_version_feature.min_supported_version, req.kraft_version_feature.max_supported_version) == (0, 1)
    for n, cl in c.clients.items():
        assert cl.config.voters[other] == Endpoint("moved-host", 19999), n
        assert cl.high_watermark() > cl.partition_state.last_voter_set_entry().offset, n  # committed
    assert not follower.local_voter_needs_update()
    c.run_for(2 * period)
    assert len(sent) == 1
    desc = c.clients[leader].describe_quorum(c.now)
    nodes = {n.node_id: [(x.name, x.host, x.port) for x in n.listeners] for n in desc.nodes}
    assert nodes[other] == [("CONTROLLER", "moved-host", 19999)]


def test_a_voter_whose_entry_is_current_sends_nothing() -> None:
    c, leader = _elected(v1_config())
    other = next(n for n in c.clients if n != leader)
    follower = c.clients[other]
    follower.local_listeners = {"CONTROLLER": (f"node{other}", 9093)}
    assert not follower.local_voter_needs_update()
    end = c.clients[leader].log.end_offset()
    c.run_for(3 * UPDATE_VOTER_PERIOD_FACTOR * follower.config.fetch_timeout_ms)
    assert c.clients[leader].partition_state.last_voter_set_entry().offset < end


def test_a_leader_with_a_stale_entry_writes_its_new_endpoint_at_the_start_of_its_epoch() -> None:
    """Kafka's LeaderState.appendStartOfEpochControlRecords: a leader whose own listeners changed (it
    restarted on another port) writes, after its LeaderChange, a VotersRecord with its entry updated."""
    c = standalone(observers=())
    c.elect()
    c.run_for(1000)
    c.down.add(1)
    client = KafkaRaftClient(1, c.config, c.logs[1], c.stores[1], RecordingListener(), random.Random(3), c.now,
                             cluster_id="test", directory_id=dir_id(1),
                             local_listeners={"CONTROLLER": ("moved-leader", 29999)})
    assert client.is_leader  # a quorum of one leads at once
    entry = client.partition_state.last_voter_set_entry()
    assert entry.offset >= 1 and entry.voters.voters[1].endpoints == {"CONTROLLER": ("moved-leader", 29999)}
    assert client.config.voters[1] == Endpoint("moved-leader", 29999)
    assert not client.local_voter_needs_update()
