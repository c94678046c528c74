"""`ControllerResult`: the records an operation produced and what to answer once they commit.

Kafka's `ControllerResult<T>`: control managers are pure functions of the current image and the
request; they never write. The controller appends `records` and, when they are durable and applied,
answers with `response`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeAlias, TypeVar

# Any generated metadata record (kbroker.protocol.metadata_records): the generated classes share no
# base class; the serde finds each one's spec by its type.
MetadataRecord: TypeAlias = object

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ControllerResult(Generic[T]):
    response: T
    records: list[MetadataRecord] = field(default_factory=list)
