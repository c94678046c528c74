"""The partition leader's TransactionVerifier batches AddPartitionsToTxn per coordinator broker (Kafka's
AddPartitionsToTxnManager): produces of one event-loop turn share a request (one entry per
transactional id, partitions merged), what arrives while a request is in flight waits for the next one,
an older epoch of an id already queued is INVALID_PRODUCER_EPOCH, transactions-version-2 adds go as v5
`verify_only=false`, and the answers reach each produce mapped as Kafka maps them. The coordinator here
is a small asyncio server speaking Kafka's framing with kbroker's codecs."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from kbroker.coord.transaction_verifier import TransactionVerifier
from kbroker.protocol.errors import ErrorCode as E
from kbroker.protocol.frames import decode_request_frame, encode_response_frame
from kbroker.protocol.messages.add_partitions_to_txn import AddPartitionsToTxnResponse as R
from kbroker.protocol.messages.api_versions import ApiVersionsResponse


class FakeCoordinator:
    """Answers ApiVersions and AddPartitionsToTxn; holds each AddPartitionsToTxn until `release`."""

    def __init__(self) -> None:
        self.requests: list[tuple[int, Any]] = []
        self.release = asyncio.Event()
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                header, body = decode_request_frame(await reader.readexactly(size))
                if header.api_key == 18:
                    answer: Any = ApiVersionsResponse(error_code=0, throttle_time_ms=0, api_keys=[
                        ApiVersionsResponse.ApiVersion(api_key=24, min_version=0, max_version=5),
                        ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=4)])
                else:
                    self.requests.append((header.api_version, body))
                    await self.release.wait()
                    answer = R(throttle_time_ms=0, error_code=0, results_by_transaction=[
                        R.AddPartitionsToTxnResult(transactional_id=t.transactional_id, topic_results=[
                            R.AddPartitionsToTxnTopicResult(name=topic.name, results_by_partition=[
                                R.AddPartitionsToTxnPartitionResult(
                                    partition_index=p,
                                    partition_error_code=E.INVALID_TXN_STATE if t.transactional_id == "bad"
                                    else E.PRODUCER_FENCED if t.transactional_id == "fenced" else E.NONE)
                                for p in topic.partitions]) for topic in t.topics])
                        for t in body.transactions])
                for part in encode_response_frame(header.api_key, header.api_version, header.correlation_id, answer):
                    writer.write(bytes(part))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


def test_verifications_are_batched_per_coordinator() -> None:
    async def run() -> None:
        coordinator = FakeCoordinator()
        port = await coordinator.start()
        verifier = TransactionVerifier(1, lambda _broker: ("127.0.0.1", port))
        try:
            # One loop turn: three ids, one of them with two partitions of two produces.
            first = [verifier.verify(7, "a", 10, 0, "t", 0), verifier.verify(7, "a", 10, 0, "t", 1),
                     verifier.verify(7, "bad", 11, 0, "t", 0), verifier.verify(7, "fenced", 12, 0, "t", 0)]
            while not coordinator.requests:
                await asyncio.sleep(0.01)
            # While that request is in flight: an add (TV2) of "b", an older epoch of "c" after a newer one.
            second = [verifier.verify(7, "b", 13, 4, "u", 2, add_partition=True),
                      verifier.verify(7, "c", 14, 5, "u", 0), verifier.verify(7, "c", 14, 4, "u", 1)]
            await asyncio.sleep(0.1)
            assert len(coordinator.requests) == 1
            coordinator.release.set()
            results = await asyncio.gather(*first, *second)
            assert results == [E.NONE, E.NONE, E.INVALID_TXN_STATE, E.INVALID_PRODUCER_EPOCH,
                               E.NONE, E.NONE, E.INVALID_PRODUCER_EPOCH]
            assert verifier.requests_sent == 2 and len(coordinator.requests) == 2
            (v1, r1), (v2, r2) = coordinator.requests
            assert [(t.transactional_id, t.verify_only, [(x.name, x.partitions) for x in t.topics])
                    for t in r1.transactions] == [("a", True, [("t", [0, 1])]), ("bad", True, [("t", [0])]),
                                                  ("fenced", True, [("t", [0])])]
            assert v2 == 5 and [(t.transactional_id, t.producer_epoch, t.verify_only) for t in r2.transactions] == [
                ("b", 4, False), ("c", 5, True)]
        finally:
            verifier.close()
            assert coordinator.server is not None
            coordinator.server.close()
            await asyncio.sleep(0)

    asyncio.run(run())


def test_an_unreachable_coordinator_is_not_enough_replicas() -> None:
    async def run() -> None:
        verifier = TransactionVerifier(1, lambda _broker: ("127.0.0.1", 1), request_timeout_ms=2000)
        try:
            results = await asyncio.gather(verifier.verify(7, "a", 10, 0, "t", 0),
                                           verifier.verify(7, "b", 11, 0, "t", 0, add_partition=True))
            assert results == [E.NOT_ENOUGH_REPLICAS, E.NOT_ENOUGH_REPLICAS]
        finally:
            verifier.close()

    asyncio.run(run())
