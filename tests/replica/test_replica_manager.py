"""ReplicaManager without sockets: produce acks paths, errors, fetch long polling, KIP-74 limits."""

from __future__ import annotations

import asyncio
import uuid

from kbroker.metadata.delta import MetadataDelta
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.metadata_records import PartitionChangeRecord
from kbroker.protocol.records import SimpleRecord, build_batch
from kbroker.replica.delayed import FetchParams
from kbroker.replica.fetch_session import FetchPartitionRequest
from tests.replica.conftest import Env
from tests.support.sync import run_now

Z = uuid.UUID(int=0)


def batch(n: int = 1, size: int = 10, ts: int = -1) -> memoryview:
    return memoryview(build_batch([SimpleRecord(b"v" * size, b"k", ts) for _ in range(n)]))


def freq(topic: str, p: int, offset: int, max_bytes: int = 1 << 20) -> FetchPartitionRequest:
    return FetchPartitionRequest((topic, p), topic, Z, p, offset, max_bytes)


def test_acks_1_appends_and_advances_high_watermark(env: Env) -> None:
    env.create_topic("t")
    out = env.rm.append_records(1000, 1, False, {("t", 0): batch(3)})
    assert isinstance(out, dict)
    r = out[("t", 0)]
    assert r.error == ErrorCode.NONE and r.base_offset == 0 and r.log_start_offset == 0
    assert r.log_append_time_ms == -1  # CreateTime topic
    out = env.rm.append_records(1000, 1, False, {("t", 0): batch(2)})
    assert out[("t", 0)].base_offset == 3
    assert env.rm.get_partition("t", 0).high_watermark == 5


def test_acks_all_on_one_replica_answers_at_once(env: Env) -> None:
    env.create_topic("t")

    async def main() -> None:
        out = env.rm.append_records(1000, -1, False, {("t", 0): batch(1)})
        # Single replica: the high watermark is already past the batch, so no waiting.
        assert isinstance(out, dict)
        assert out[("t", 0)].error == ErrorCode.NONE
        assert len(env.rm.produce_purgatory) == 0

    asyncio.run(main())


def test_acks_all_waits_until_high_watermark_passes(env: Env) -> None:
    """The delayed-produce path replication will use: a second ISR member holds the HW back."""
    env.create_topic("t")
    part = env.rm.get_partition("t", 0)
    # A second replica in the ISR (as a PartitionChangeRecord would make it), at offset 0.
    part.make_leader(part.leader_epoch, part.partition_epoch + 1, (1, 2), (1, 2))
    part.update_follower_fetch_state(2, 0)

    async def main() -> None:
        out = env.rm.append_records(5000, -1, False, {("t", 0): batch(1)})
        assert isinstance(out, asyncio.Future) and not out.done()
        assert len(env.rm.produce_purgatory) == 1 and part.high_watermark == 0
        # acks=1 does not wait for the follower.
        out1 = env.rm.append_records(5000, 1, False, {("t", 0): batch(1)})
        assert isinstance(out1, dict) and out1[("t", 0)].base_offset == 1
        assert part.update_follower_fetch_state(2, 1)
        env.rm.on_high_watermark_moved(("t", 0))
        res = await asyncio.wait_for(out, 2)
        assert res[("t", 0)].error == ErrorCode.NONE and res[("t", 0)].base_offset == 0
        assert len(env.rm.produce_purgatory) == 0

    asyncio.run(main())


def test_acks_all_times_out_with_request_timed_out(env: Env) -> None:
    env.create_topic("t")
    part = env.rm.get_partition("t", 0)
    part.make_leader(part.leader_epoch, part.partition_epoch + 1, (1, 2), (1, 2))

    async def main() -> None:
        out = env.rm.append_records(20, -1, False, {("t", 0): batch(1)})
        res = await out
        assert res[("t", 0)].error == ErrorCode.REQUEST_TIMED_OUT and res[("t", 0)].base_offset == -1

    asyncio.run(main())


def test_partial_failure_and_error_codes(env: Env) -> None:
    env.create_topic("good")
    env.create_topic("__consumer_offsets", 1)
    env.create_topic("small", 1, {"max.message.bytes": "200"})
    corrupt = bytearray(batch(1))
    corrupt[-1] ^= 0xFF  # breaks the CRC
    out = env.rm.append_records(
        1000, 1, False,
        {
            ("good", 0): batch(1),
            ("missing", 0): batch(1),
            ("good", 7): batch(1),
            ("__consumer_offsets", 0): batch(1),
            ("small", 0): batch(1, size=500),
            ("good", 0 + 0): batch(1),
        } | {("corrupt", 0): memoryview(corrupt)},
    )
    assert out[("good", 0)].error == ErrorCode.NONE
    assert out[("missing", 0)].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert out[("good", 7)].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # past the partition count
    assert out[("__consumer_offsets", 0)].error == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert out[("small", 0)].error == ErrorCode.MESSAGE_TOO_LARGE
    assert out[("corrupt", 0)].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    env.create_topic("corrupt")
    out = env.rm.append_records(1000, 1, False, {("corrupt", 0): memoryview(corrupt)})
    assert out[("corrupt", 0)].error == ErrorCode.CORRUPT_MESSAGE
    # The internal topic is writable by the admin path (Kafka's "__admin_client").
    out = env.rm.append_records(1000, 1, True, {("__consumer_offsets", 0): batch(1)})
    assert out[("__consumer_offsets", 0)].error == ErrorCode.NONE


def test_invalid_acks(env: Env) -> None:
    env.create_topic("t")
    out = env.rm.append_records(1000, 2, False, {("t", 0): batch(1)})
    assert out[("t", 0)].error == ErrorCode.INVALID_REQUIRED_ACKS


def test_min_insync_replicas_above_the_replica_count(env: Env) -> None:
    """Kafka 4.3's effective min ISR is min(min.insync.replicas, replicas): a single-replica topic with
    min.insync.replicas=2 takes acks=all (refusals below min ISR: tests/replica/test_replication_logic.py)."""
    env.create_topic("t", 1, {"min.insync.replicas": "2"})
    out = env.rm.append_records(1000, -1, False, {("t", 0): batch(1)})
    assert out[("t", 0)].error == ErrorCode.NONE
    out = env.rm.append_records(1000, 1, False, {("t", 0): batch(1)})
    assert out[("t", 0)].error == ErrorCode.NONE
    part = env.rm.get_partition("t", 0)
    assert part is not None and part.effective_min_isr == 1 and part.high_watermark == 2


def test_log_append_time_is_returned(env: Env) -> None:
    env.create_topic("t", 1, {"message.timestamp.type": "LogAppendTime"})
    out = env.rm.append_records(1000, 1, False, {("t", 0): batch(1, ts=5)})
    assert out[("t", 0)].log_append_time_ms > 1_600_000_000_000


def test_fetch_reads_up_to_high_watermark_and_reports_out_of_range(env: Env) -> None:
    env.create_topic("t")
    env.rm.append_records(1000, 1, False, {("t", 0): batch(2)})
    res, total = env.rm.read_from_local_log(FetchParams(), [freq("t", 0, 0)])
    r = res[("t", 0)]
    assert r.error == ErrorCode.NONE and r.high_watermark == 2 and r.records_size == total > 0
    res, _ = env.rm.read_from_local_log(FetchParams(), [freq("t", 0, 99)])
    r = res[("t", 0)]
    assert r.error == ErrorCode.OFFSET_OUT_OF_RANGE and r.log_start_offset == -1 and r.high_watermark == -1
    res, _ = env.rm.read_from_local_log(FetchParams(), [freq("nope", 0, 0)])
    assert res[("nope", 0)].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # At the end of the log: no records, no error.
    res, _ = env.rm.read_from_local_log(FetchParams(), [freq("t", 0, 2)])
    assert res[("t", 0)].error == ErrorCode.NONE and res[("t", 0)].records is None


def test_kip74_first_batch_exceeds_limits_only_for_first_partition(env: Env) -> None:
    env.create_topic("t", 2)
    env.rm.append_records(1000, 1, False, {("t", 0): batch(1, size=5000), ("t", 1): batch(1, size=5000)})
    params = FetchParams(max_bytes=100)
    res, total = env.rm.read_from_local_log(params, [freq("t", 0, 0, 100), freq("t", 1, 0, 100)])
    assert res[("t", 0)].records_size > 5000  # whole first batch despite both limits
    assert res[("t", 1)].records_size == 0  # the response limit is used up
    assert total == res[("t", 0)].records_size


def test_partition_max_bytes_limits_each_partition(env: Env) -> None:
    env.create_topic("t", 1)
    for _ in range(10):
        env.rm.append_records(1000, 1, False, {("t", 0): batch(1, size=1000)})
    res, _ = env.rm.read_from_local_log(FetchParams(), [freq("t", 0, 0, 2500)])
    size = res[("t", 0)].records_size
    assert 1000 < size <= 2500


def test_long_poll_waits_and_is_woken_by_append(env: Env) -> None:
    env.create_topic("t")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        params = FetchParams(max_wait_ms=5000, min_bytes=1)
        out = env.rm.fetch_messages(params, [freq("t", 0, 0)])
        assert isinstance(out, asyncio.Future) and not out.done()
        start = loop.time()
        loop.call_later(0.05, lambda: env.rm.append_records(1000, 1, False, {("t", 0): batch(1)}))
        res = await out
        assert loop.time() - start < 2.0
        assert res[("t", 0)].records_size > 0

    asyncio.run(main())


def test_long_poll_times_out_empty(env: Env) -> None:
    env.create_topic("t")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        out = env.rm.fetch_messages(FetchParams(max_wait_ms=50, min_bytes=1), [freq("t", 0, 0)])
        res = await out
        assert 0.04 <= loop.time() - start < 2.0
        assert res[("t", 0)].error == ErrorCode.NONE and res[("t", 0)].records_size == 0

    asyncio.run(main())


def test_min_bytes_accumulates_across_appends(env: Env) -> None:
    env.create_topic("t")

    async def main() -> None:
        out = env.rm.fetch_messages(FetchParams(max_wait_ms=5000, min_bytes=3000), [freq("t", 0, 0)])
        env.rm.append_records(1000, 1, False, {("t", 0): batch(1, size=1000)})
        assert not out.done()
        env.rm.append_records(1000, 1, False, {("t", 0): batch(1, size=2500)})
        res = await asyncio.wait_for(out, 2)
        assert res[("t", 0)].records_size >= 3000

    asyncio.run(main())


def test_error_in_a_partition_answers_at_once(env: Env) -> None:
    env.create_topic("t")
    out = env.rm.fetch_messages(FetchParams(max_wait_ms=5000, min_bytes=1), [freq("t", 0, 0), freq("x", 0, 0)])
    assert isinstance(out, dict) and out[("x", 0)].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_remove_topic_completes_waiting_fetch(env: Env) -> None:
    env.create_topic("t")

    async def main() -> None:
        out = env.rm.fetch_messages(FetchParams(max_wait_ms=5000, min_bytes=1), [freq("t", 0, 0)])
        run_now(env.services.controller.delete_topic("t"))
        res = await asyncio.wait_for(out, 2)
        assert res[("t", 0)].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    asyncio.run(main())


def test_list_offsets_lookups(env: Env) -> None:
    env.create_topic("t")
    for ts in (1000, 2000, 3000):
        env.rm.append_records(1000, 1, False, {("t", 0): batch(1, ts=ts)})
    part = env.rm.get_partition("t", 0)
    assert part.fetch_offset_for_timestamp(-2, 0) == (0, -1, 0)
    assert part.fetch_offset_for_timestamp(-1, 0)[:2] == (3, -1)
    assert part.fetch_offset_for_timestamp(1500, 0)[:2] == (1, 2000)
    assert part.fetch_offset_for_timestamp(9999, 0) is None
    assert part.fetch_offset_for_timestamp(-3, 0)[:2] == (2, 3000)
    assert part.fetch_offset_for_timestamp(-5, 0) == (-1, -1, -1)


def test_restart_keeps_partitions(env: Env) -> None:
    env.create_topic("t", 2)
    env.rm.append_records(1000, 1, False, {("t", 1): batch(4)})
    env.close()
    again = Env(env.root, env.props)
    try:
        part = again.rm.get_partition("t", 1)
        assert part is not None and part.log_end_offset == 4
        assert again.rm.get_partition("t", 0) is not None
    finally:
        again.close()


def test_high_watermark_recomputed_when_partition_is_hosted_again(env: Env) -> None:
    """After a crash the checkpointed high watermark can lag the log: becoming leader fixes it."""
    env.create_topic("t")
    env.rm.append_records(1000, 1, False, {("t", 0): batch(3)})
    log = env.rm.get_partition("t", 0).log
    log.high_watermark = 0  # what a stale replication-offset-checkpoint gives after kill -9
    info = env.metadata.topic("t")
    assert info is not None
    # Re-state the partition (an unchanged PartitionChangeRecord): the replica manager hosts it anew.
    image = env.metadata.image
    delta = MetadataDelta(image)
    delta.replay(PartitionChangeRecord(topic_id=info.topic_id, partition_id=0))
    env.rm._partitions.clear()
    env.rm.apply_delta(delta, delta.apply(image.provenance))
    assert env.rm.get_partition("t", 0).high_watermark == 3
