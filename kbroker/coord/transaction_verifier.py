"""KIP-890 part 1 across brokers: a partition leader asks the transaction coordinator on another broker
whether a partition is in the producer's transaction (Kafka's AddPartitionsToTxnManager).

Before appending a transactional batch for a producer whose coordinator is elsewhere, the leader sends
AddPartitionsToTxn (v4+, broker-to-broker) with `verify_only=true` to the broker leading the id's
`__transaction_state` partition (transactions version 2: v5 with `verify_only=false`, which adds the
partition). As Kafka's AddPartitionsToTxnManager, the verifications of many produces are batched per
coordinator broker: one request in flight per broker, and what arrives meanwhile (or in the same
event-loop turn) goes into the next one, one entry per transactional id with its partitions merged.

The coordinator's answers map to the produce errors of Kafka's AddPartitionsToTxnManager:
- NONE: the batch may be appended;
- NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, a lost connection or a
  timeout: NOT_ENOUGH_REPLICAS (retriable: the producer retries, and the coordinator is found again);
- PRODUCER_FENCED: INVALID_PRODUCER_EPOCH (what a produce may answer);
- CONCURRENT_TRANSACTIONS (the transaction is completing: the batch belongs to no open transaction):
  INVALID_TXN_STATE, as the coordinator-local check answers;
- anything else (INVALID_PRODUCER_ID_MAPPING, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE,
  CONCURRENT_TRANSACTIONS...) as it is.

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
from kbroker.protocol.messages.add_partitions_to_txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
)

log = logging.getLogger(__name__)

ADD_PARTITIONS_TO_TXN = 24
# The first version of the broker-to-broker (batched, `verify_only`) form.
VERIFY_MIN_VERSION = 4
# The first version a coordinator reads as a transactions-version-2 implicit add (`verify_only=false`
# from a partition leader, KIP-890 part 2).
ADD_PARTITION_MIN_VERSION = 5

_UNAVAILABLE = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                          ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NETWORK_EXCEPTION,
                          ErrorCode.REQUEST_TIMED_OUT})


def produce_error(coordinator_error: ErrorCode) -> ErrorCode:
    """What a produce answers for the coordinator's verification answer."""
    if coordinator_error in _UNAVAILABLE:
        return ErrorCode.NOT_ENOUGH_REPLICAS
    if coordinator_error == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if coordinator_error == ErrorCode.CONCURRENT_TRANSACTIONS:
        return ErrorCode.INVALID_TXN_STATE
    return coordinator_error


def add_partition_error(coordinator_error: ErrorCode) -> ErrorCode:
    """What a produce (or TxnOffsetCommit) answers for the coordinator's answer to an implicit add
    (Kafka's AddPartitionsToTxnManager + ReplicaManager): unavailable coordinators and a transaction
    still completing are NOT_ENOUGH_REPLICAS (retriable), PRODUCER_FENCED is INVALID_PRODUCER_EPOCH."""
    if coordinator_error in (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NOT_COORDINATOR,
                             ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                             ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NETWORK_EXCEPTION):
        return ErrorCode.NOT_ENOUGH_REPLICAS
    if coordinator_error == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return coordinator_error


@dataclass(slots=True)
class _PendingTransaction:
    """The partitions one transactional id waits to have verified / added on a coordinator broker, and
    who waits for each."""

    producer_id: int
    producer_epoch: int
    add_partition: bool
    waiters: dict[tuple[str, int], list[asyncio.Future[ErrorCode]]] = field(default_factory=dict)

    def finish(self, error_of: Callable[[str, int], ErrorCode]) -> None:
        for (topic, partition), futures in self.waiters.items():
            error = error_of(topic, partition)
            for f in futures:
                if not f.done():
                    f.set_result(error)


@dataclass(slots=True)
class _CoordinatorQueue:
    """Kafka's AddPartitionsToTxnManager per coordinator broker: what waits for the next request, and
    whether one is in flight (one at a time: what arrives meanwhile goes into the next)."""

    pending: dict[str, _PendingTransaction] = field(default_factory=dict)
    in_flight: bool = False
    scheduled: bool = False


class TransactionVerifier:
    """Batches the verifications (and TV2 implicit adds) of many produces per coordinator broker into
    one AddPartitionsToTxn request at a time, as Kafka's AddPartitionsToTxnManager does: the produces
    of one event-loop turn, and those arriving while a request is in flight, share the next request
    (one entry per transactional id, its partitions merged). A second verification of the same id
    with another producer id or epoch: the older epoch's waiters get INVALID_PRODUCER_EPOCH and the
    newer one is sent (Kafka's addOrVerifyTransaction)."""

    def __init__(self, node_id: int, endpoint_of: Callable[[int], tuple[str, int] | None], *,
                 request_timeout_ms: int = 30000, security: ClientSecurity | None = None) -> None:
        self.node_id = node_id
        self.security = security
        self._endpoint_of = endpoint_of
        self.request_timeout_s = request_timeout_ms / 1000
        self._conns: dict[int, tuple[tuple[str, int], asyncio.Future[NodeConnection]]] = {}
        self._queues: dict[int, _CoordinatorQueue] = {}
        self.requests_sent = 0  # AddPartitionsToTxn requests sent (the batching's effect, for tests)

    def verify(self, coordinator_id: int, transactional_id: str, producer_id: int, producer_epoch: int,
               topic: str, partition: int, add_partition: bool = False) -> asyncio.Future[ErrorCode]:
        """Ask the coordinator on `coordinator_id`; with `add_partition` (transactions version 2) the
        partition is added (AddPartitionsToTxn v5, `verify_only=false`) rather than only checked."""
        loop = asyncio.get_running_loop()
        out: asyncio.Future[ErrorCode] = loop.create_future()
        queue = self._queues.setdefault(coordinator_id, _CoordinatorQueue())
        txn = queue.pending.get(transactional_id)
        if txn is not None and (txn.producer_id, txn.producer_epoch, txn.add_partition) != (
                producer_id, producer_epoch, add_partition):
            if producer_epoch < txn.producer_epoch and producer_id == txn.producer_id:
                out.set_result(ErrorCode.INVALID_PRODUCER_EPOCH)
                return out
            txn.finish(lambda _t, _p: ErrorCode.INVALID_PRODUCER_EPOCH)
            txn = None
        if txn is None:
            txn = queue.pending[transactional_id] = _PendingTransaction(producer_id, producer_epoch, add_partition)
        txn.waiters.setdefault((topic, partition), []).append(out)
        if not queue.in_flight and not queue.scheduled:
            queue.scheduled = True
            loop.call_soon(self._drain, coordinator_id)
        return out

    def _drain(self, coordinator_id: int) -> None:
        queue = self._queues.get(coordinator_id)
        if queue is None:
            return
        queue.scheduled = False
        if queue.in_flight or not queue.pending:
            return
        batch, queue.pending = queue.pending, {}
        queue.in_flight = True
        task = asyncio.get_running_loop().create_task(self._send(coordinator_id, batch))

        def done(t: asyncio.Task[None]) -> None:
            queue.in_flight = False
            if t.cancelled() or t.exception() is not None:
                for txn in batch.values():
                    txn.finish(lambda _t, _p: ErrorCode.NOT_ENOUGH_REPLICAS)
            if queue.pending:
                self._drain(coordinator_id)

        task.add_done_callback(done)

    async def _connection(self, broker_id: int) -> NodeConnection:
        address = self._endpoint_of(broker_id)
        if address is None:
            raise ConnectionClosedError(f"no endpoint for broker {broker_id}")
        known = self._conns.get(broker_id)
        if known is not None and known[0] == address:
            fut = known[1]
            if not fut.done():
                return await asyncio.shield(fut)
            if fut.exception() is None and fut.result().connected:
                return fut.result()
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._conns[broker_id] = (address, fut)
        conn = NodeConnection(address[0], address[1], client_id=f"broker-{self.node_id}-txn-verifier",
                              connect_timeout_s=self.request_timeout_s, request_timeout_s=self.request_timeout_s,
                              security=self.security)
        try:
            await conn.connect()
        except BaseException as exc:
            self._conns.pop(broker_id, None)
            fut.set_exception(exc if isinstance(exc, Exception) else ConnectionClosedError(str(exc)))
            fut.exception()  # retrieved: no "never retrieved" warning
            raise
        fut.set_result(conn)
        return conn

    async def _send(self, coordinator_id: int, batch: dict[str, _PendingTransaction]) -> None:
        Q = AddPartitionsToTxnRequest
        transactions = []
        for tid, txn in batch.items():
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(txn.waiters):
                by_topic.setdefault(topic, []).append(partition)
            transactions.append(Q.AddPartitionsToTxnTransaction(
                transactional_id=tid, producer_id=txn.producer_id, producer_epoch=txn.producer_epoch,
                verify_only=not txn.add_partition,
                topics=[Q.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in by_topic.items()]))
        adding = any(txn.add_partition for txn in batch.values())
        try:
            conn = await self._connection(coordinator_id)
            version = conn.version_for(ADD_PARTITIONS_TO_TXN)
            if version < (ADD_PARTITION_MIN_VERSION if adding else VERIFY_MIN_VERSION):
                raise ConnectionClosedError(f"broker {coordinator_id} has AddPartitionsToTxn v{version} only")
            self.requests_sent += 1
            response = await conn.request(ADD_PARTITIONS_TO_TXN, Q(transactions=transactions),
                                          AddPartitionsToTxnResponse, version=min(version, 5))
        except (ConnectionClosedError, RequestTimeoutError, OSError, ValueError) as exc:
            log.info("Verifying %d transactions with broker %d failed: %s", len(batch), coordinator_id, exc)
            for txn in batch.values():
                txn.finish(lambda _t, _p: ErrorCode.NOT_ENOUGH_REPLICAS)
            return
        results: dict[tuple[str, str, int], ErrorCode] = {}
        for result in response.results_by_transaction or []:
            for t in result.topic_results:
                for p in t.results_by_partition:
                    results[(result.transactional_id, t.name, p.partition_index)] = ErrorCode(p.partition_error_code)
        top = ErrorCode(response.error_code)
        for tid, txn in batch.items():
            to_produce_error = add_partition_error if txn.add_partition else produce_error

            def error_of(topic: str, partition: int, tid: str = tid,
                         convert: Callable[[ErrorCode], ErrorCode] = to_produce_error) -> ErrorCode:
                if top != ErrorCode.NONE:
                    return convert(top)
                found = results.get((tid, topic, partition))
                return ErrorCode.NOT_ENOUGH_REPLICAS if found is None else convert(found)

            txn.finish(error_of)

    def close(self) -> None:
        conns, self._conns = self._conns, {}
        for _address, fut in conns.values():
            if fut.done() and fut.exception() is None:
                conn = fut.result()
                with contextlib.suppress(RuntimeError):
                    asyncio.get_running_loop().create_task(conn.close())


__all__ = ["TransactionVerifier", "add_partition_error", "produce_error"]
