"""KIP-890 part 1 across brokers: a partition leader asks the transaction coordinator on another broker
whether a partition is in the producer's transaction (Kafka's AddPartitionsToTxnManager).

Before appending a transactional batch for a producer whose coordinator is elsewhere, the leader sends
AddPartitionsToTxn (v4+, broker-to-broker) with `verify_only=true` to the broker leading the id's
`__transaction_state` partition. Kafka batches the verifications of many produces per coordinator
broker; here each produce sends its own request on the connection kept per coordinator broker (requests
are pipelined by `NodeConnection`), which keeps the mapping of answers trivial.

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

from kbroker.client import ConnectionClosedError, NodeConnection, RequestTimeoutError
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


class TransactionVerifier:
    def __init__(self, node_id: int, endpoint_of: Callable[[int], tuple[str, int] | None], *,
                 request_timeout_ms: int = 30000) -> None:
        self.node_id = node_id
        self._endpoint_of = endpoint_of
        self.request_timeout_s = request_timeout_ms / 1000
        self._conns: dict[int, tuple[tuple[str, int], asyncio.Future[NodeConnection]]] = {}

    def verify(self, coordinator_id: int, transactional_id: str, producer_id: int, producer_epoch: int,
               topic: str, partition: int, add_partition: bool = False) -> asyncio.Future[ErrorCode]:
        """Ask the coordinator on `coordinator_id`; with `add_partition` (transactions version 2) the
        partition is added (AddPartitionsToTxn v5, `verify_only=false`) rather than only checked."""
        loop = asyncio.get_running_loop()
        out: asyncio.Future[ErrorCode] = loop.create_future()
        task = loop.create_task(self._verify(coordinator_id, transactional_id, producer_id, producer_epoch,
                                             topic, partition, add_partition))

        def done(t: asyncio.Task[ErrorCode]) -> None:
            if out.done():
                return
            if t.cancelled() or t.exception() is not None:
                out.set_result(ErrorCode.NOT_ENOUGH_REPLICAS)
            else:
                out.set_result(t.result())

        task.add_done_callback(done)
        return out

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
                              connect_timeout_s=self.request_timeout_s, request_timeout_s=self.request_timeout_s)
        try:
            await conn.connect()
        except BaseException as exc:
            self._conns.pop(broker_id, None)
            fut.set_exception(exc if isinstance(exc, Exception) else ConnectionClosedError(str(exc)))
            fut.exception()  # retrieved: no "never retrieved" warning
            raise
        fut.set_result(conn)
        return conn

    async def _verify(self, coordinator_id: int, transactional_id: str, producer_id: int, producer_epoch: int,
                      topic: str, partition: int, add_partition: bool = False) -> ErrorCode:
        Q = AddPartitionsToTxnRequest
        request = Q(transactions=[Q.AddPartitionsToTxnTransaction(
            transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
            verify_only=not add_partition, topics=[Q.AddPartitionsToTxnTopic(name=topic, partitions=[partition])])])
        to_produce_error = add_partition_error if add_partition else produce_error
        try:
            conn = await self._connection(coordinator_id)
            version = conn.version_for(ADD_PARTITIONS_TO_TXN)
            if version < (ADD_PARTITION_MIN_VERSION if add_partition else VERIFY_MIN_VERSION):
                return ErrorCode.NOT_ENOUGH_REPLICAS
            response = await conn.request(ADD_PARTITIONS_TO_TXN, request, AddPartitionsToTxnResponse,
                                          version=min(version, 5))
        except (ConnectionClosedError, RequestTimeoutError, OSError, ValueError) as exc:
            log.info("Verifying %s with broker %d failed: %s", transactional_id, coordinator_id, exc)
            return ErrorCode.NOT_ENOUGH_REPLICAS
        if response.error_code != ErrorCode.NONE:
            return to_produce_error(ErrorCode(response.error_code))
        for result in response.results_by_transaction or []:
            if result.transactional_id != transactional_id:
                continue
            for t in result.topic_results:
                for p in t.results_by_partition:
                    if t.name == topic and p.partition_index == partition:
                        return to_produce_error(ErrorCode(p.partition_error_code))
        return ErrorCode.NOT_ENOUGH_REPLICAS

    def close(self) -> None:
        conns, self._conns = self._conns, {}
        for _address, fut in conns.values():
            if fut.done() and fut.exception() is None:
                conn = fut.result()
                with contextlib.suppress(RuntimeError):
                    asyncio.get_running_loop().create_task(conn.close())


__all__ = ["TransactionVerifier", "add_partition_error", "produce_error"]
