"""AlterPartitionManager: batching, one request in flight, one queued proposal per partition, retries
of undelivered requests and retriable top-level errors (Kafka's DefaultAlterPartitionManager)."""

from __future__ import annotations

import asyncio
import uuid

from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.alter_partition import AlterPartitionRequest, AlterPartitionResponse
from kbroker.replica.alter_partition_manager import AlterPartitionManager
from kbroker.replica.partition import AlterPartitionItem, IsrChange

TID = uuid.UUID(int=3)


def item(partition: int, isr: tuple[int, ...] = (1, 2)) -> AlterPartitionItem:
    return AlterPartitionItem("t", partition, TID, 1, 4, 7, isr, tuple((b, 10 + b) for b in isr), IsrChange.SHRINK)


def answer(request: AlterPartitionRequest, error: ErrorCode = ErrorCode.NONE) -> AlterPartitionResponse:
    return AlterPartitionResponse(error_code=ErrorCode.NONE, topics=[AlterPartitionResponse.TopicData(
        topic_id=t.topic_id, partitions=[AlterPartitionResponse.PartitionData(
            partition_index=p.partition_index, error_code=error, leader_id=1, leader_epoch=p.leader_epoch,
            isr=[s.broker_id for s in p.new_isr_with_epochs], partition_epoch=p.partition_epoch + 1)
            for p in t.partitions]) for t in request.topics])


def test_batches_and_answers_each_partition() -> None:
    sent: list[AlterPartitionRequest] = []
    gate = asyncio.Event()

    async def send(request: AlterPartitionRequest) -> AlterPartitionResponse:
        sent.append(request)
        await gate.wait()
        return answer(request)

    async def main() -> None:
        m = AlterPartitionManager(1, lambda: 42, send, retry_backoff_ms=1)
        f0 = m.submit(item(0))
        await asyncio.sleep(0)
        # While the first request is in flight, the next two are queued together.
        f1, f2 = m.submit(item(1)), m.submit(item(2, (1,)))
        dup = m.submit(item(1, (1,)))  # a second proposal for a queued partition
        assert (await dup).error == ErrorCode.OPERATION_NOT_ATTEMPTED
        assert len(sent) == 1
        gate.set()
        r0, r1, r2 = await asyncio.gather(f0, f1, f2)
        assert (r0.error, r0.isr, r0.partition_epoch) == (ErrorCode.NONE, (1, 2), 8)
        assert r2.isr == (1,)
        assert len(sent) == 2 and [p.partition_index for p in sent[1].topics[0].partitions] == [1, 2]
        req = sent[0]
        assert (req.broker_id, req.broker_epoch) == (1, 42)
        p = req.topics[0].partitions[0]
        assert (p.leader_epoch, p.partition_epoch, p.new_isr) == (4, 7, [1, 2])
        assert [(s.broker_id, s.broker_epoch) for s in p.new_isr_with_epochs] == [(1, 11), (2, 12)]

    asyncio.run(main())


def test_retries_undelivered_and_retriable_top_level_errors() -> None:
    calls: list[str] = []

    async def send(request: AlterPartitionRequest) -> AlterPartitionResponse:
        calls.append("x")
        if len(calls) == 1:
            raise ConnectionError("controller unreachable")
        if len(calls) == 2:
            return AlterPartitionResponse(error_code=ErrorCode.NOT_CONTROLLER, topics=[])
        return answer(request, ErrorCode.FENCED_LEADER_EPOCH)

    async def main() -> None:
        m = AlterPartitionManager(1, lambda: 42, send, retry_backoff_ms=1)
        result = await asyncio.wait_for(m.submit(item(0)), 5)
        assert len(calls) == 3 and result.error == ErrorCode.FENCED_LEADER_EPOCH
        # A non-retriable top-level error fails the items with it.
        calls.clear()

        async def refuse(request: AlterPartitionRequest) -> AlterPartitionResponse:
            return AlterPartitionResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, topics=[])

        m.send_alter_partition = refuse
        assert (await m.submit(item(0))).error == ErrorCode.CLUSTER_AUTHORIZATION_FAILED

    asyncio.run(main())
