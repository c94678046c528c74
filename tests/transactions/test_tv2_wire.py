"""Transactions version 2 (KIP-890 part 2) on the wire: the scripted sequence of `tv2_scenario.py` against
a kbroker process (what every step must answer, from Kafka's TransactionCoordinator rules), and the same
sequence against Apache Kafka 4.3.1 (marker `reference`): both traces must be equal."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbroker.protocol.errors import ErrorCode as E
from tests.support.broker import KBroker
from tests.support.reference_kafka import reference_unavailable_reason, start_reference_kafka
from tests.transactions import tv2_scenario

pytestmark = [pytest.mark.interop]


def test_tv2_sequence_on_kbroker(kbroker: KBroker) -> None:
    out = tv2_scenario.run(kbroker.bootstrap)
    assert out["finalized transaction.version"] == [(2, 2)]
    assert out["init"] == (E.NONE, 0)
    assert out["produce v12 implicit add"] == E.NONE
    assert out["state after the produce"] == ("Ongoing", [(tv2_scenario.TOPIC, 0)])
    assert out["end v5 commit"] == (E.NONE, 0, 1)  # the epoch is bumped
    assert out["state after commit"] == "CompleteCommit"
    assert out["end v5 commit retry"] == (E.NONE, 0, 1)
    assert out["end v5 abort retry of a commit"] == (E.INVALID_TXN_STATE, -1, -1)
    assert out["late produce old epoch"] == E.INVALID_PRODUCER_EPOCH
    assert out["produce v12 seq 3 after the marker"] == E.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert out["produce v12 seq 3 on a new partition"] == E.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert out["produce v12 next txn"] == E.NONE
    assert out["marker v2 TV2 at the open transaction's epoch"] == E.INVALID_PRODUCER_EPOCH
    assert out["produce v12 plain batch in the open transaction"] == E.INVALID_TXN_STATE
    assert out["end v5 abort"] == (E.NONE, 0, 2)
    assert out["end v5 commit on CompleteAbort"] == (E.INVALID_TXN_STATE, -1, -1)
    assert out["end v5 empty abort"] == (E.NONE, 0, 3)
    assert out["end v5 stale epoch"] == (E.PRODUCER_FENCED, -1, -1)
    assert out["end v5 unknown producer id"] == (E.INVALID_PRODUCER_ID_MAPPING, -1, -1)
    assert out["produce v11 not added"] == E.TRANSACTION_ABORTABLE
    assert out["txn offset commit v5"] == [E.NONE]
    assert out["offset pending"] == (E.UNSTABLE_OFFSET_COMMIT, -1)
    assert out["end v5 commit with offsets"] == (E.NONE, 0, 4)
    assert out["offset committed"] == (E.NONE, 42)
    assert out["txn offset commit v5 fenced"] == [E.INVALID_PRODUCER_EPOCH]
    assert out["init again"] == (E.NONE, 0, 5)
    assert out["describe"] == (E.NONE, "Empty", 0, 5)
    assert out["marker v2 TV2 at the epoch, nothing open"] == E.NONE
    assert out["marker v1 at the epoch, nothing open"] == E.NONE
    assert out["marker v2 TV2 at an older epoch"] == E.INVALID_PRODUCER_EPOCH


@pytest.mark.reference
@pytest.mark.java
def test_tv2_sequence_matches_kafka(tmp_path: Path, kbroker: KBroker) -> None:
    reason = reference_unavailable_reason()
    if reason:
        pytest.skip(reason)
    ours = tv2_scenario.run(kbroker.bootstrap)
    kbroker.stop()
    bootstrap, stop = start_reference_kafka(tmp_path, overrides={"transaction.state.log.replication.factor": "1",
                                                                 "transaction.state.log.min.isr": "1"})
    try:
        kafka = tv2_scenario.run(bootstrap)
    finally:
        stop()
    assert ours == kafka
