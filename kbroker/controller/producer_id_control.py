"""Producer-id blocks on the controller: Kafka's `ProducerIdControlManager`.

Hands each requesting broker the next block of 1000 ids (Kafka's `ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE`)
as a `ProducerIdsRecord` whose `NextProducerId` is the first id of the block after it. The image keeps
only that next id, so a block once committed is never handed out again, across restarts.

Pure: reads the image it is given, returns a `ControllerResult`, writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from kbroker.controller.controller import ProducerIdsBlock
from kbroker.controller.result import ControllerResult
from kbroker.metadata.views import MetadataView
from kbroker.protocol.metadata_records import ProducerIdsRecord

PRODUCER_ID_BLOCK_SIZE = 1000


class ProducerIdControlManager:
    def __init__(self, view: Callable[[], MetadataView]) -> None:
        self._view = view

    def generate_next_producer_id(self, broker_id: int, broker_epoch: int) -> ControllerResult[ProducerIdsBlock]:
        first = max(0, self._view().next_producer_id)
        block = ProducerIdsBlock(broker_id, first, PRODUCER_ID_BLOCK_SIZE)
        record = ProducerIdsRecord(broker_id=broker_id, broker_epoch=broker_epoch,
                                   next_producer_id=block.next_block_first_id)
        return ControllerResult(block, [record])
