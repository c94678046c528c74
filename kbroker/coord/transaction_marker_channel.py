"""Transaction markers to the partition leaders (Kafka's TransactionMarkerChannelManager and
TransactionMarkerRequestCompletionHandler).

Once PrepareCommit / PrepareAbort of a transaction is committed in `__transaction_state`, the
coordinator must write a COMMIT / ABORT marker to every partition of the transaction, on whichever
broker leads it now. A `PendingCompleteTxn` holds the partitions still to acknowledge; the
transaction completes (CompleteCommit / CompleteAbort is written) only when all of them did.

Routing (Kafka's `addTxnMarkersToBrokerQueue`): the leader comes from the metadata image at the time
of sending. A partition whose topic the image no longer knows is given up (the topic was deleted: no
marker can ever be written, and nothing reads it); a partition without a leader waits in the
unknown-broker queue and is routed again after `retry_backoff_ms`. A partition led here is written
in-process (what the WriteTxnMarkers handler does); others are queued per destination broker, and one
drain task per broker sends them in WriteTxnMarkers requests (several transactions per request) over a
`kbroker.client.NodeConnection`.

Answers, per partition (Kafka's completion handler):
- NONE: acknowledged;
- NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS(_AFTER_APPEND),
  REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR, a lost connection...: routed again after a back-off,
  with the leader re-resolved from the (newer) image;
- INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED: the transaction is abandoned here (a newer
  producer epoch or coordinator took over; it completes the transaction), nothing more is sent;
- UNSUPPORTED_FOR_MESSAGE_FORMAT / UNSUPPORTED_VERSION: that partition is given up.
When the coordinator loses its `__transaction_state` partition, its pending transactions are dropped
(`remove_markers_for_partition`): the new coordinator reloads PrepareX and sends the markers again
(markers are idempotent for the partition leaders: a repeated marker closes nothing new).

Must not import kbroker.net or kbroker.api.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from kbroker.client import ClientSecurity, ConnectionClosedError, NodeConnection, RequestTimeoutError
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.write_txn_markers import WriteTxnMarkersRequest, WriteTxnMarkersResponse

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
WRITE_TXN_MARKERS = 27

# The leader of a partition: a broker id, NO_LEADER while it has none, None for an unknown partition.
NO_LEADER = -1
LeaderOf = Callable[[str, int], "int | None"]
EndpointOf = Callable[[int], "tuple[str, int] | None"]

_RETRY = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NETWORK_EXCEPTION, ErrorCode.UNKNOWN_SERVER_ERROR,
})
_ABANDON = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED})


@dataclass(slots=True, eq=False)
class PendingCompleteTxn:
    """One transaction whose markers are on their way (Kafka's PendingCompleteTxn)."""

    coordinator_partition: int
    coordinator_epoch: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    remaining: set[TopicPartition] = field(default_factory=set)
    abandoned: bool = False
    # The client's transaction version: WriteTxnMarkers v2 carries it (KIP-1228), and a leader checks
    # a version-2 marker's epoch strictly (`ProducerStateManager.complete_txn`).
    transaction_version: int = 0


# Write one marker to a partition led here: an error code now, or a future of it (acks=all).
LocalWriter = Callable[[PendingCompleteTxn, str, int], "ErrorCode | asyncio.Future[ErrorCode]"]


class _BrokerQueue:
    """The markers waiting for one destination broker, and the task that sends them."""

    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.items: list[tuple[PendingCompleteTxn, TopicPartition]] = []
        self.wakeup = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.conn: NodeConnection | None = None
        self.address: tuple[str, int] | None = None


class TransactionMarkerChannelManager:
    def __init__(self, node_id: int, leader_of: LeaderOf, endpoint_of: EndpointOf, write_local: LocalWriter,
                 on_complete: Callable[[PendingCompleteTxn], None], *, request_timeout_ms: int = 30000,
                 retry_backoff_ms: int = 100, security: ClientSecurity | None = None) -> None:
        self.node_id = node_id
        self.security = security
        self._leader_of = leader_of
        self._endpoint_of = endpoint_of
        self._write_local = write_local
        self._on_complete = on_complete
        self.request_timeout_s = request_timeout_ms / 1000
        self.retry_backoff_s = retry_backoff_ms / 1000
        self._queues: dict[int, _BrokerQueue] = {}
        self._pending: set[PendingCompleteTxn] = set()
        self._closed = False

    # -- what the coordinator calls ------------------------------------------------------------------

    def add(self, txn: PendingCompleteTxn) -> None:
        """Send the markers of `txn` (its `remaining` partitions); `on_complete(txn)` once all are in."""
        if self._closed:
            return
        self._pending.add(txn)
        for tp in sorted(txn.remaining):
            self._route(txn, tp)
        self._maybe_complete(txn)

    def pending(self) -> list[PendingCompleteTxn]:
        return [t for t in self._pending if not t.abandoned]

    def remove_markers_for_partition(self, coordinator_partition: int) -> None:
        """The coordinator lost a `__transaction_state` partition: its transactions are dropped here."""
        for txn in list(self._pending):
            if txn.coordinator_partition == coordinator_partition:
                txn.abandoned = True
                self._pending.discard(txn)

    def close(self) -> None:
        self._closed = True
        for txn in self._pending:
            txn.abandoned = True
        self._pending.clear()
        for q in self._queues.values():
            if q.task is not None:
                q.task.cancel()
            if q.conn is not None:
                conn = q.conn
                with contextlib.suppress(RuntimeError):
                    asyncio.get_running_loop().create_task(conn.close())
        self._queues.clear()

    # -- routing -------------------------------------------------------------------------------------

    def _route(self, txn: PendingCompleteTxn, tp: TopicPartition) -> None:
        if txn.abandoned or self._closed or tp not in txn.remaining:
            return
        leader = self._leader_of(*tp)
        if leader is None:
            # Kafka: "the partition is likely to be deleted already": nothing to send, nothing to wait for.
            log.info("Skipping the %s marker of %s for %s-%d: the partition is unknown (deleted)",
                     "COMMIT" if txn.commit else "ABORT", txn.transactional_id, *tp)
            self._ack(txn, tp)
            return
        if leader == NO_LEADER or (leader != self.node_id and self._endpoint_of(leader) is None):
            self._retry_later(txn, tp)
            return
        if leader == self.node_id:
            result = self._write_local(txn, *tp)
            if isinstance(result, asyncio.Future):
                result.add_done_callback(lambda f: self._on_answer(txn, tp, _result_of(f)))
            else:
                self._on_answer(txn, tp, result)
            return
        q = self._queues.get(leader)
        if q is None:
            q = self._queues[leader] = _BrokerQueue(leader)
        q.items.append((txn, tp))
        q.wakeup.set()
        if q.task is None or q.task.done():
            q.task = asyncio.get_running_loop().create_task(self._drain(q))

    def _retry_later(self, txn: PendingCompleteTxn, tp: TopicPartition) -> None:
        asyncio.get_running_loop().call_later(self.retry_backoff_s, self._route, txn, tp)

    def _on_answer(self, txn: PendingCompleteTxn, tp: TopicPartition, error: ErrorCode) -> None:
        if txn.abandoned or tp not in txn.remaining:
            return
        if error == ErrorCode.NONE:
            self._ack(txn, tp)
        elif error in _ABANDON:
            log.info("Abandoning the markers of %s (producer %d epoch %d): %s at %s-%d",
                     txn.transactional_id, txn.producer_id, txn.producer_epoch, error.name, *tp)
            txn.abandoned = True
            self._pending.discard(txn)
        elif error in (ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, ErrorCode.UNSUPPORTED_VERSION):
            log.warning("Giving up the marker of %s at %s-%d: %s", txn.transactional_id, *tp, error.name)
            self._ack(txn, tp)
        else:
            if error not in _RETRY:
                log.warning("Unexpected %s writing the marker of %s at %s-%d; retrying",
                            error.name, txn.transactional_id, *tp)
            self._retry_later(txn, tp)

    def _ack(self, txn: PendingCompleteTxn, tp: TopicPartition) -> None:
        txn.remaining.discard(tp)
        self._maybe_complete(txn)

    def _maybe_complete(self, txn: PendingCompleteTxn) -> None:
        if txn.remaining or txn.abandoned or txn not in self._pending:
            return
        self._pending.discard(txn)
        self._on_complete(txn)

    # -- one destination broker ----------------------------------------------------------------------

    async def _drain(self, q: _BrokerQueue) -> None:
        while not self._closed:
            if not q.items:
                q.wakeup.clear()
                try:
                    await asyncio.wait_for(q.wakeup.wait(), 30.0)
                except TimeoutError:
                    if not q.items:  # idle: the task ends; the next marker starts another
                        if q.conn is not None:
                            await q.conn.close()
                            q.conn = None
                        return
                continue
            batch = [(t, tp) for t, tp in q.items if not t.abandoned and tp in t.remaining]
            q.items.clear()
            if not batch:
                continue
            leader_now = {(t, tp): self._leader_of(*tp) for t, tp in batch}
            # A partition whose leader moved since it was queued goes back through routing.
            moved = [(t, tp) for (t, tp), leader in leader_now.items() if leader != q.broker_id]
            for t, tp in moved:
                self._route(t, tp)
            batch = [(t, tp) for t, tp in batch if leader_now[(t, tp)] == q.broker_id]
            if not batch:
                continue
            errors = await self._send(q, batch)
            for (t, tp), error in zip(batch, errors, strict=True):
                self._on_answer(t, tp, error)

    async def _send(self, q: _BrokerQueue, batch: list[tuple[PendingCompleteTxn, TopicPartition]]
                    ) -> list[ErrorCode]:
        address = self._endpoint_of(q.broker_id)
        if address is None:
            return [ErrorCode.NOT_LEADER_OR_FOLLOWER] * len(batch)
        try:
            if q.conn is None or not q.conn.connected or q.address != address:
                if q.conn is not None:
                    await q.conn.close()
                q.conn = NodeConnection(address[0], address[1], client_id=f"broker-{self.node_id}-txn-marker-sender",
                                        connect_timeout_s=self.request_timeout_s,
                                        request_timeout_s=self.request_timeout_s, security=self.security)
                q.address = address
                await q.conn.connect()
            request = _request(batch)
            version = min(q.conn.version_for(WRITE_TXN_MARKERS), 2)
            response = await q.conn.request(WRITE_TXN_MARKERS, request, WriteTxnMarkersResponse, version=version)
        except (ConnectionClosedError, RequestTimeoutError, OSError, ValueError) as exc:
            log.info("WriteTxnMarkers to broker %d failed: %s", q.broker_id, exc)
            if q.conn is not None:
                await q.conn.close()
                q.conn = None
            return [ErrorCode.NETWORK_EXCEPTION] * len(batch)
        answers: dict[tuple[int, str, int], ErrorCode] = {}
        for m in response.markers:
            for t in m.topics:
                for p in t.partitions:
                    answers[(m.producer_id, t.name, p.partition_index)] = ErrorCode(p.error_code)
        return [answers.get((txn.producer_id, tp[0], tp[1]), ErrorCode.UNKNOWN_SERVER_ERROR) for txn, tp in batch]


def _request(batch: list[tuple[PendingCompleteTxn, TopicPartition]]) -> WriteTxnMarkersRequest:
    by_txn: dict[PendingCompleteTxn, dict[str, list[int]]] = {}
    for txn, (topic, p) in batch:
        by_txn.setdefault(txn, {}).setdefault(topic, []).append(p)
    Q = WriteTxnMarkersRequest
    return Q(markers=[Q.WritableTxnMarker(
        producer_id=txn.producer_id, producer_epoch=txn.producer_epoch, transaction_result=txn.commit,
        coordinator_epoch=txn.coordinator_epoch, transaction_version=txn.transaction_version,
        topics=[Q.WritableTxnMarkerTopic(name=topic, partition_indexes=sorted(ps)) for topic, ps in sorted(topics.items())])
        for txn, topics in by_txn.items()])


def _result_of(f: asyncio.Future[ErrorCode]) -> ErrorCode:
    if f.cancelled() or f.exception() is not None:
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return f.result()


__all__ = ["NO_LEADER", "PendingCompleteTxn", "TransactionMarkerChannelManager"]
