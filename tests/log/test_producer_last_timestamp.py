"""A producer's last timestamp (Kafka's ProducerStateEntry.lastTimestamp): the max timestamp of its last
data batch or end-transaction marker. Kafka's appendEndTxnMarker sets it from the marker, so
DescribeProducers, producer-id expiry and `kafka-transactions find-hanging` see the marker's time; it
survives a clean restart (the snapshot's timestamp field) and a replay of the log."""

from __future__ import annotations

from pathlib import Path

from kbroker.log.config import LogConfig
from kbroker.log.unified_log import UnifiedLog
from kbroker.protocol.records import SimpleRecord, build_batch

PID = 7


def _open(d: Path, now: int, clean: bool = True) -> UnifiedLog:
    return UnifiedLog(d / "t-0", LogConfig(), time_ms=lambda: now, had_clean_shutdown=clean)


def test_marker_sets_the_last_timestamp_and_it_survives_restarts(tmp_path: Path) -> None:
    log = _open(tmp_path, 5_000)
    batch = build_batch([SimpleRecord(b"v", None, 1_000)], producer_id=PID, producer_epoch=0, base_sequence=0,
                        is_transactional=True, now_ms=1_000)
    log.append_as_leader(memoryview(batch), 0)
    assert log.producer_state.producers[PID].last_timestamp == 1_000
    log.append_txn_marker(PID, 0, 3, commit=False, leader_epoch=0)  # the marker's timestamp is the log's now
    assert log.producer_state.producers[PID].last_timestamp == 5_000
    log.close()
    again = _open(tmp_path, 9_000)  # from the snapshot
    assert again.producer_state.producers[PID].last_timestamp == 5_000
    again.close()
    for snap in (tmp_path / "t-0").glob("*.snapshot"):
        snap.unlink()
    third = _open(tmp_path, 9_000, clean=False)  # a replay of the log
    assert third.producer_state.producers[PID].last_timestamp == 5_000
    third.close()
