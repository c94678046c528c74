"""Rack-aware replica placement for new partitions: Kafka's `StripedReplicaPlacer`.

The usable brokers (registered and not in controlled shutdown; fenced ones only fill replicas that
unfenced ones cannot) are grouped by rack. Each partition's first replica (its preferred leader)
is always an unfenced broker; the others stripe across the racks, one per rack in turn, so a
partition's replicas land on as many racks as there are replicas (when there are enough racks).
Successive partitions shift the starting rack and the starting broker within each rack, so leaders
spread evenly; after a full round over the unfenced brokers the racks and brokers are reshuffled
(Kafka's "epoch"). Randomness comes from an injected `random.Random`, so tests are reproducible.

Errors are Kafka 4.3's INVALID_REPLICATION_FACTOR messages ("... cannot be reached because only N
broker(s) are registered or some brokers have all their log directories cordoned.", "All brokers are
currently fenced, or have all their log directories cordoned."); `ReplicationControlManager` prefixes
them with "Unable to replicate the partition N time(s): ".

Sans-IO; the standard library only.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


class InvalidReplicationFactorError(ValueError):
    """Kafka's InvalidReplicationFactorException from the placer (message only)."""


@dataclass(frozen=True, slots=True)
class UsableBroker:
    id: int
    rack: str | None
    fenced: bool


@dataclass(slots=True)
class _BrokerList:
    brokers: list[int] = field(default_factory=list)
    index: int = 0
    offset: int = 0
    epoch: int = 0

    def initialize(self, rnd: random.Random) -> None:
        if self.brokers:
            self.brokers.sort()
            self.offset = rnd.randrange(len(self.brokers))

    def next(self, epoch: int) -> int:
        if not self.brokers:
            return -1
        if self.epoch != epoch:
            self.epoch = epoch
            self.index = 0
            self.offset = (self.offset + 1) % len(self.brokers)
        if self.index >= len(self.brokers):
            return -1
        broker = self.brokers[(self.index + self.offset) % len(self.brokers)]
        self.index += 1
        return broker


@dataclass(slots=True)
class _Rack:
    fenced: _BrokerList = field(default_factory=_BrokerList)
    unfenced: _BrokerList = field(default_factory=_BrokerList)

    def next(self, epoch: int) -> int:
        result = self.unfenced.next(epoch)
        return result if result >= 0 else self.fenced.next(epoch)


def _rack_key(name: str | None) -> tuple[int, str]:
    return (0, "") if name is None else (1, name)  # Kafka's OptionalStringComparator: empty first


class _RackList:
    def __init__(self, rnd: random.Random, brokers: list[UsableBroker]) -> None:
        self.random = rnd
        self.racks: dict[str | None, _Rack] = {}
        self.rack_names: list[str | None] = []
        self.num_total = 0
        self.num_unfenced = 0
        for b in brokers:
            rack = self.racks.get(b.rack)
            if rack is None:
                self.rack_names.append(b.rack)
                rack = self.racks[b.rack] = _Rack()
            (rack.fenced if b.fenced else rack.unfenced).brokers.append(b.id)
            self.num_total += 1
            self.num_unfenced += 0 if b.fenced else 1
        for rack in self.racks.values():
            rack.fenced.initialize(rnd)
            rack.unfenced.initialize(rnd)
        self.rack_names.sort(key=_rack_key)
        self.epoch = 0
        self.offset = rnd.randrange(len(self.rack_names)) if self.rack_names else 0

    def _shuffle(self) -> None:
        self.random.shuffle(self.rack_names)
        for rack in self.racks.values():
            self.random.shuffle(rack.fenced.brokers)
            self.random.shuffle(rack.unfenced.brokers)

    def place(self, replication_factor: int) -> list[int]:
        if self.epoch == self.num_unfenced and self.num_unfenced > 1:
            self._shuffle()
            self.epoch = 0
        if self.offset == len(self.rack_names):
            self.offset = 0
        brokers: list[int] = []
        first = self.offset
        while True:  # the first replica: an unfenced broker, from the first rack that has one left
            result = self.racks[self.rack_names[first]].unfenced.next(self.epoch)
            if result >= 0:
                brokers.append(result)
                break
            first = (first + 1) % len(self.rack_names)
        rack_index = self.offset
        for _ in range(1, replication_factor):
            result = -1
            while result < 0:
                if rack_index == first:
                    first = -1
                else:
                    result = self.racks[self.rack_names[rack_index]].next(self.epoch)
                rack_index = (rack_index + 1) % len(self.rack_names)
            brokers.append(result)
        self.epoch += 1
        self.offset += 1
        return brokers


class StripedReplicaPlacer:
    def __init__(self, rnd: random.Random | None = None) -> None:
        self.random = rnd if rnd is not None else random.Random()

    def place(self, num_partitions: int, replication_factor: int, brokers: list[UsableBroker]) -> list[list[int]]:
        """Replicas of `num_partitions` new partitions; raises `InvalidReplicationFactorError`."""
        racks = _RackList(self.random, brokers)
        if replication_factor <= 0:
            raise InvalidReplicationFactorError(
                f"Invalid replication factor {replication_factor}: the replication factor must be positive.")
        if racks.num_unfenced == 0:
            raise InvalidReplicationFactorError(
                "All brokers are currently fenced, or have all their log directories cordoned.")
        if replication_factor > racks.num_total:
            raise InvalidReplicationFactorError(
                f"The target replication factor of {replication_factor} cannot be reached because only "
                f"{racks.num_total} broker(s) are registered or some brokers have all their log "
                "directories cordoned.")
        return [racks.place(replication_factor) for _ in range(num_partitions)]
