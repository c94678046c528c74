"""`ProducerIdManager`: producer ids for InitProducerId, from blocks the controller hands out (Kafka's
`RPCProducerIdManager`).

Ids are handed out from the current block; when it runs out the next block is requested from the
controller (AllocateProducerIds; here a direct call to the `Controller`), whose `ProducerIdsRecord`
makes the block durable before any id of it is used, so no id is ever handed out twice, across
restarts. Kafka prefetches the next block at 90% of the current one; with a local controller the
request completes at once, so the manager asks only when it needs one.
"""

from __future__ import annotations

from kbroker.controller.controller import Controller, ProducerIdsBlock


class ProducerIdManager:
    def __init__(self, controller: Controller, broker_id: int) -> None:
        self.controller = controller
        self.broker_id = broker_id
        self.broker_epoch = -1
        self._block: ProducerIdsBlock | None = None
        self._next = 0

    async def generate_producer_id(self) -> int:
        block = self._block
        if block is None or self._next >= block.next_block_first_id:
            block = self._block = await self.controller.allocate_producer_ids(self.broker_id, self.broker_epoch)
            self._next = block.first_producer_id
        pid = self._next
        self._next += 1
        return pid
