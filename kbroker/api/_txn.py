"""Shared pieces of the transaction API handlers (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
EndTxn, TxnOffsetCommit, WriteTxnMarkers)."""

from __future__ import annotations

from kbroker.protocol.errors import ErrorCode

# The first version of each request that knows PRODUCER_FENCED (KIP-588); older versions get
# INVALID_PRODUCER_EPOCH instead, as Kafka's handlers map it.
PRODUCER_FENCED_SINCE = {"InitProducerId": 4, "AddPartitionsToTxn": 2, "AddOffsetsToTxn": 2, "EndTxn": 2,
                         "TxnOffsetCommit": 3}


def fenced_for(api: str, version: int, error: ErrorCode) -> ErrorCode:
    if error == ErrorCode.PRODUCER_FENCED and version < PRODUCER_FENCED_SINCE[api]:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error
