"""ShareUpdate deltas on a real kbroker process (Kafka's share coordinator records): with
`share.coordinator.snapshot.update.records.per.snapshot=3`, the acknowledgements of a share consumer
write ShareUpdate records between ShareSnapshots on `__share_group_state` (read back with a
confluent-kafka consumer: the key's record type), the records before the latest snapshot are pruned
(the partition's log start offset moves), and after a kill -9 and restart the replayed state is exact:
accepted and rejected records are never delivered again, released and in-flight ones are, at their
second delivery."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from kbroker.coord.share_coordinator import partition_for
from kbroker.protocol.records import iter_batches
from tests.interop.test_share_fetch_delayed import Member, _produce_later, _setup
from tests.support.broker import KBroker

ACCEPT, RELEASE, REJECT = 1, 2, 3
STATE_TOPIC = "__share_group_state"


def _record_types(broker: KBroker, partition: int) -> tuple[int, int, list[int]]:
    """(low watermark, high watermark, the record type of each record) of a __share_group_state partition."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"dump-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False})
    try:
        tp = TopicPartition(STATE_TOPIC, partition)
        low, high = c.get_watermark_offsets(tp, timeout=10)
        c.assign([TopicPartition(STATE_TOPIC, partition, low)])
        types: list[int] = []
        deadline = time.monotonic() + 20
        while low + len(types) < high and time.monotonic() < deadline:
            for m in c.consume(100, 1.0):
                assert m.error() is None, m.error()
                key = m.key()
                assert key is not None
                types.append(int.from_bytes(key[:2], "big"))
        return low, high, types
    finally:
        c.close()


def _written_types(broker: KBroker, partition: int) -> list[int]:
    """The record type of every record in the partition's segment files (pruning moves the log start
    offset; the active segment keeps its bytes)."""
    out: list[int] = []
    for segment in sorted((broker.log_dir / f"{STATE_TOPIC}-{partition}").glob("*.log")):
        for batch in iter_batches(memoryview(segment.read_bytes())):
            for record in batch.iter_records():
                assert record.key is not None
                out.append(int.from_bytes(bytes(record.key[:2]), "big"))
    return out


def test_share_updates_between_snapshots_pruned_and_replayed_after_kill_9(tmp_path: Path) -> None:
    b = KBroker(tmp_path, {"share.coordinator.snapshot.update.records.per.snapshot": "3",
                           "share.coordinator.state.topic.prune.interval.ms": "300"})
    b.start()
    try:
        topic, (m,) = _setup(b, 1)
        group, tid = m.group, m.tid
        for _ in range(10):
            _produce_later(b, topic, 0).join()
        _elapsed, acquired = m.fetch(3000)
        deadline = time.monotonic() + 20
        while sum(last - first + 1 for first, last, _d in acquired) < 10 and time.monotonic() < deadline:
            acquired += m.fetch(1000)[1]
        offsets = sorted(o for first, last, _d in acquired for o in range(first, last + 1))
        assert len(offsets) == 10, acquired
        kinds = {offsets[0]: ACCEPT, offsets[1]: REJECT, offsets[2]: RELEASE, offsets[3]: ACCEPT,
                 offsets[4]: ACCEPT, offsets[5]: REJECT, offsets[6]: ACCEPT}
        for o, kind in kinds.items():  # one write each: updates, a snapshot every 4th
            m.acknowledge(o, o, kind)
        m.close()

        p = partition_for((group, tid, 0), 50)
        deadline = time.monotonic() + 20
        while True:
            low, high, types = _record_types(b, p)
            if low > 0 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert low > 0, (low, high, types)  # pruned up to the latest snapshot
        assert types and types[0] == 0, types  # what is left starts at that snapshot
        # Written: the initialization snapshot, the marker's ACCEPT and 7 acknowledgements (plus any
        # start move): a snapshot first, then 3 updates between snapshots.
        written = _written_types(b, p)
        assert len(written) == high >= 9, (written, high)
        assert written[:5] == [0, 1, 1, 1, 0], written
        for i, kind in enumerate(written):
            assert kind == (0 if i % 4 == 0 else 1), written

        b.kill()
        b.start()
        again = Member(b.bootstrap, group, topic, tid)
        try:
            got: list[tuple[int, int, int]] = []
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                again.epoch = 0  # a new session each time, until __share_group_state is loaded
                got = again.fetch(500)[1]
                if got:
                    break
            delivered = sorted((o, d) for first, last, d in got for o in range(first, last + 1))
            # Released (count 1 written) and never acknowledged (in flight at the crash): delivered again,
            # each at its second delivery; accepted and rejected ones never.
            expected = [(o, 2) for o in offsets if o not in kinds or kinds[o] == RELEASE]
            assert delivered == expected, (delivered, expected)
        finally:
            again.close()
    finally:
        b.stop()
