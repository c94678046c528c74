"""FindCoordinator v5-v6 through real frames: the versions KIP-890 (v5) and KIP-932 (v6) added."""

from __future__ import annotations

from pathlib import Path

from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.find_coordinator import FindCoordinatorRequest
from tests.coord.stack import Stack, run_on_stack

E = ErrorCode


run = run_on_stack


def test_v5_and_v6_group_keys_are_answered_like_v4(tmp_path: Path) -> None:
    async def body(s: Stack) -> None:
        for version in (5, 6):
            r = await s.call(10, version, FindCoordinatorRequest(key_type=0, coordinator_keys=["a", "b"]))
            assert [(c.key, c.error_code, c.node_id, c.host, c.port) for c in r.coordinators] == [
                ("a", 0, 1, "127.0.0.1", 9092), ("b", 0, 1, "127.0.0.1", 9092)]
        assert s.metadata.topic("__consumer_offsets") is not None

    run(tmp_path, body)


def test_share_key_type_refused_below_v6_and_unavailable_from_v6(tmp_path: Path) -> None:
    # Kafka 4.3 (KafkaApis.getCoordinator): the SHARE key type is an INVALID_REQUEST before v6; from v6
    # a broker without a running share coordinator (this stack starts none) answers
    # COORDINATOR_NOT_AVAILABLE per key. With one, the answer is the leader of the key's
    # __share_group_state partition: tests/differential/test_share_coordinator_rpcs_vs_kafka.py.
    async def body(s: Stack) -> None:
        key = "g:AAAAAAAAAAAAAAAAAAAAAA:0"
        r5 = await s.call(10, 5, FindCoordinatorRequest(key_type=2, coordinator_keys=[key]))
        assert [(c.key, c.error_code, c.node_id) for c in r5.coordinators] == [(key, E.INVALID_REQUEST, -1)]
        r6 = await s.call(10, 6, FindCoordinatorRequest(key_type=2, coordinator_keys=[key]))
        assert [(c.key, c.error_code, c.node_id) for c in r6.coordinators] == [
            (key, E.COORDINATOR_NOT_AVAILABLE, -1)]
        tx = await s.call(10, 6, FindCoordinatorRequest(key_type=1, coordinator_keys=["t"]))
        assert (tx.coordinators[0].error_code, tx.coordinators[0].node_id) == (E.NONE, 1)  # the transaction coordinator
        bad = await s.call(10, 6, FindCoordinatorRequest(key_type=3, coordinator_keys=["x"]))
        assert bad.coordinators[0].error_code == E.INVALID_REQUEST

    run(tmp_path, body)
