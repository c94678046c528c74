"""The `quorum-state` file in Kafka 4.3's JSON (QuorumStateData v0 and v1), written atomically."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from kbroker.protocol.types import ZERO_UUID
from kbroker.raft.quorum_state_store import (
    ElectionState,
    FileQuorumStateStore,
    QuorumStateFormatError,
    decode_quorum_state,
    encode_quorum_state,
    uuid_from_kafka_string,
    uuid_to_kafka_string,
)


def test_version_0_is_kafkas_static_quorum_format() -> None:
    text = encode_quorum_state(ElectionState(5, leader_id=2, voted_id=2), 0, voters=[3, 1, 2])
    assert text == ('{"clusterId":"","leaderId":2,"leaderEpoch":5,"votedId":2,"appliedOffset":0,'
                    '"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}')


def test_version_1_carries_the_voted_directory_id() -> None:
    d = uuid.UUID("5f1a2b3c-4d5e-6f70-8192-a3b4c5d6e7f8")
    text = encode_quorum_state(ElectionState(7, leader_id=-1, voted_id=3, voted_directory_id=d), 1)
    assert json.loads(text) == {"leaderId": -1, "leaderEpoch": 7, "votedId": 3,
                                "votedDirectoryId": uuid_to_kafka_string(d), "data_version": 1}
    assert decode_quorum_state(text) == ElectionState(7, -1, 3, d)
    assert uuid_to_kafka_string(ZERO_UUID) == "AAAAAAAAAAAAAAAAAAAAAA"  # Kafka's Uuid.ZERO_UUID.toString()
    assert uuid_from_kafka_string("AAAAAAAAAAAAAAAAAAAAAQ") == uuid.UUID(int=1)  # Uuid(0, 1): the metadata topic id


def test_reads_what_kafka_writes() -> None:
    kafka = ('{"clusterId":"","leaderId":1,"leaderEpoch":12,"votedId":1,"appliedOffset":0,'
             '"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}')
    assert decode_quorum_state(kafka) == ElectionState(12, 1, 1)
    kafka1 = '{"leaderId":-1,"leaderEpoch":3,"votedId":-1,"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA","data_version":1}'
    assert decode_quorum_state(kafka1) == ElectionState(3)


@pytest.mark.parametrize("bad", ["", "nope", "[]", '{"data_version":2,"leaderEpoch":1}', '{"leaderEpoch":1}',
                                 '{"leaderEpoch":"x","data_version":0}',
                                 '{"leaderEpoch":1,"votedDirectoryId":"!!","data_version":1}'])
def test_malformed_files_raise_a_format_error(bad: str) -> None:
    with pytest.raises(QuorumStateFormatError):
        decode_quorum_state(bad)


def test_file_store_round_trip_is_atomic(tmp_path: Path) -> None:
    store = FileQuorumStateStore(tmp_path / "__cluster_metadata-0", version=0, voters=[1, 2, 3])
    assert store.read() is None
    store.write(ElectionState(1, voted_id=2))
    store.write(ElectionState(2, leader_id=3, voted_id=-1))
    assert store.read() == ElectionState(2, 3, -1)
    assert sorted(p.name for p in (tmp_path / "__cluster_metadata-0").iterdir()) == ["quorum-state"]
    (tmp_path / "__cluster_metadata-0" / "quorum-state").write_text("")
    with pytest.raises(QuorumStateFormatError):
        store.read()
