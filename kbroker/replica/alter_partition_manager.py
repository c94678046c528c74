"""Sends the leader's ISR changes to the controller (Kafka's `DefaultAlterPartitionManager`).

Why its own module: the ISR of a partition changes only through the controller (KIP-497), and the
leader must batch those changes, keep at most one proposal per partition queued, have one
AlterPartition request in flight at a time, and retry what the controller did not answer.

Does not know how to reach the controller: it takes a callable `send_alter_partition(request) ->
Awaitable[AlterPartitionResponse]` from the wiring (server/ owns the broker-to-controller channel;
replica/ must not import it). The callable picks the request version and raises (any exception) when
the request could not be delivered; the manager then retries the whole batch after
`retry_backoff_ms`. Top-level errors: NOT_CONTROLLER, STALE_BROKER_EPOCH, UNKNOWN_SERVER_ERROR and
request failures are retried; anything else fails every item with that error (Kafka's
`handleAlterPartitionResponse`). Per-partition answers complete each item's future with an
`AlterPartitionResult`, which `Partition.handle_alter_partition_response` applies.

A second proposal for a partition whose first is still queued is refused at once with
OPERATION_NOT_ATTEMPTED (Kafka: "already has a pending AlterPartition"); the partition keeps its
committed ISR and proposes again later.

Must not import net/, api/ or server/.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable

from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.alter_partition import AlterPartitionRequest, AlterPartitionResponse
from kbroker.replica.partition import AlterPartitionItem, AlterPartitionResult

log = logging.getLogger(__name__)

SendAlterPartition = Callable[[AlterPartitionRequest], Awaitable[AlterPartitionResponse]]

_RETRIED_TOP_LEVEL = frozenset({ErrorCode.NOT_CONTROLLER, ErrorCode.STALE_BROKER_EPOCH,
                                ErrorCode.UNKNOWN_SERVER_ERROR, ErrorCode.REQUEST_TIMED_OUT})


def build_request(broker_id: int, broker_epoch: int, items: list[AlterPartitionItem]) -> AlterPartitionRequest:
    """One AlterPartition request for `items` (topics by id, v2+; both ISR forms filled, the codec
    writes the one the version has: `new_isr` below v3, `new_isr_with_epochs` from v3, KIP-903)."""
    by_topic: dict[uuid.UUID, list[AlterPartitionRequest.PartitionData]] = {}
    for item in items:
        by_topic.setdefault(item.topic_id, []).append(AlterPartitionRequest.PartitionData(
            partition_index=item.partition,
            leader_epoch=item.leader_epoch,
            new_isr=list(item.new_isr),
            new_isr_with_epochs=[AlterPartitionRequest.BrokerState(broker_id=b, broker_epoch=e)
                                 for b, e in item.new_isr_with_epochs],
            leader_recovery_state=item.leader_recovery_state,
            partition_epoch=item.partition_epoch,
        ))
    return AlterPartitionRequest(
        broker_id=broker_id, broker_epoch=broker_epoch,
        topics=[AlterPartitionRequest.TopicData(topic_id=tid, partitions=parts) for tid, parts in by_topic.items()])


class AlterPartitionManager:
    """Queues ISR proposals and sends them in batches, one request in flight."""

    def __init__(self, broker_id: int, broker_epoch: Callable[[], int],
                 send_alter_partition: SendAlterPartition | None = None, *, retry_backoff_ms: int = 100) -> None:
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.send_alter_partition = send_alter_partition
        self.retry_backoff_ms = retry_backoff_ms
        self._unsent: dict[tuple[uuid.UUID, int], tuple[AlterPartitionItem, asyncio.Future[AlterPartitionResult]]] = {}
        self._inflight = False
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def pending(self) -> int:
        return len(self._unsent)

    def submit(self, item: AlterPartitionItem) -> asyncio.Future[AlterPartitionResult]:
        """Queue `item`; the future completes with the controller's answer for it."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[AlterPartitionResult] = loop.create_future()
        key = (item.topic_id, item.partition)
        if self._closed:
            fut.set_result(AlterPartitionResult(ErrorCode.OPERATION_NOT_ATTEMPTED))
            return fut
        if key in self._unsent:
            fut.set_result(AlterPartitionResult(ErrorCode.OPERATION_NOT_ATTEMPTED))
            return fut
        self._unsent[key] = (item, fut)
        self._maybe_send(loop)
        return fut

    def _maybe_send(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._inflight or not self._unsent or self._closed:
            return
        self._inflight = True
        self._task = loop.create_task(self._send_batch())

    async def _send_batch(self) -> None:
        batch = dict(self._unsent)
        self._unsent.clear()
        retry: dict[tuple[uuid.UUID, int], tuple[AlterPartitionItem, asyncio.Future[AlterPartitionResult]]] = {}
        try:
            if self.send_alter_partition is None:
                log.warning("No channel to the controller: %d ISR change(s) wait", len(batch))
                retry = batch
            else:
                request = build_request(self.broker_id, self.broker_epoch(), [i for i, _ in batch.values()])
                try:
                    response = await self.send_alter_partition(request)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - any delivery failure is retried
                    log.info("AlterPartition request failed (%s); retrying", exc)
                    retry = batch
                else:
                    retry = self._handle_response(response, batch)
        finally:
            self._inflight = False
        if retry and not self._closed:
            await asyncio.sleep(self.retry_backoff_ms / 1000)
            for key, entry in retry.items():
                # A newer proposal queued meanwhile replaces the retried one: the retried one's
                # partition state is superseded (the partition only applies answers to its current one).
                if key in self._unsent:
                    entry[1].set_result(AlterPartitionResult(ErrorCode.OPERATION_NOT_ATTEMPTED))
                else:
                    self._unsent[key] = entry
        self._maybe_send(asyncio.get_running_loop())

    def _handle_response(
        self, response: AlterPartitionResponse,
        batch: dict[tuple[uuid.UUID, int], tuple[AlterPartitionItem, asyncio.Future[AlterPartitionResult]]],
    ) -> dict[tuple[uuid.UUID, int], tuple[AlterPartitionItem, asyncio.Future[AlterPartitionResult]]]:
        top = ErrorCode(response.error_code)
        if top in _RETRIED_TOP_LEVEL:
            log.debug("AlterPartition answered %s; retrying", top.name)
            return batch
        if top != ErrorCode.NONE:
            for _, fut in batch.values():
                if not fut.done():
                    fut.set_result(AlterPartitionResult(top))
            return {}
        for t in response.topics:
            for p in t.partitions:
                entry = batch.pop((t.topic_id, p.partition_index), None)
                if entry is None:
                    log.warning("The controller answered for %s-%d, which was not asked", t.topic_id, p.partition_index)
                    continue
                result = AlterPartitionResult(ErrorCode(p.error_code), p.leader_id, p.leader_epoch, tuple(p.isr),
                                              p.partition_epoch, p.leader_recovery_state)
                if not entry[1].done():
                    entry[1].set_result(result)
        for item, fut in batch.values():
            log.warning("The controller did not answer for %s-%d", item.topic, item.partition)
            if not fut.done():
                fut.set_result(AlterPartitionResult(ErrorCode.UNKNOWN_SERVER_ERROR))
        return {}

    def shutdown(self) -> None:
        self._closed = True
        if self._task is not None and not self._task.done():
            self._task.cancel()
        for _, fut in self._unsent.values():
            if not fut.done():
                fut.set_result(AlterPartitionResult(ErrorCode.OPERATION_NOT_ATTEMPTED))
        self._unsent.clear()


__all__ = ["AlterPartitionManager", "SendAlterPartition", "build_request"]
