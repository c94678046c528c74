"""Results of log operations handed to the API layer: ``LogAppendInfo``, ``FetchDataInfo``.

Owns the shapes the Produce, Fetch and ListOffsets handlers read, and ListOffsets' special
timestamps (Kafka's ``ListOffsetsRequest`` constants).
"""

from __future__ import annotations

from kbroker.protocol.regions import FileRegion

__all__ = ["FetchDataInfo", "LogAppendInfo", "EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "MAX_TIMESTAMP",
           "EARLIEST_LOCAL_TIMESTAMP", "LATEST_TIERED_TIMESTAMP"]

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5


class LogAppendInfo:
    __slots__ = ("first_offset", "last_offset", "max_timestamp", "offset_of_max_timestamp", "log_append_time",
                 "log_start_offset", "num_messages", "valid_bytes", "duplicate", "leader_epoch")

    def __init__(self, first_offset: int = -1, last_offset: int = -1, max_timestamp: int = -1,
                 offset_of_max_timestamp: int = -1, log_append_time: int = -1, log_start_offset: int = 0,
                 num_messages: int = 0, valid_bytes: int = 0, duplicate: bool = False, leader_epoch: int = -1) -> None:
        self.first_offset, self.last_offset = first_offset, last_offset
        self.max_timestamp, self.offset_of_max_timestamp = max_timestamp, offset_of_max_timestamp
        self.log_append_time, self.log_start_offset = log_append_time, log_start_offset
        self.num_messages, self.valid_bytes, self.duplicate = num_messages, valid_bytes, duplicate
        self.leader_epoch = leader_epoch

    def __repr__(self) -> str:
        return (f"LogAppendInfo(first_offset={self.first_offset}, last_offset={self.last_offset}, "
                f"max_timestamp={self.max_timestamp}, log_append_time={self.log_append_time}, "
                f"num_messages={self.num_messages}, duplicate={self.duplicate})")


class FetchDataInfo:
    """The result of a read: a region of one segment file (None when there is nothing to return)."""

    __slots__ = ("fetch_offset", "region", "first_entry_incomplete", "segment_base_offset")

    def __init__(self, fetch_offset: int, region: FileRegion | None = None, first_entry_incomplete: bool = False,
                 segment_base_offset: int = -1) -> None:
        self.fetch_offset = fetch_offset
        self.region = region
        # True when max_bytes cut the first batch (only possible without min_one_message).
        self.first_entry_incomplete = first_entry_incomplete
        self.segment_base_offset = segment_base_offset

    @property
    def size(self) -> int:
        return self.region.size if self.region is not None else 0

    def __repr__(self) -> str:
        return f"FetchDataInfo(fetch_offset={self.fetch_offset}, region={self.region!r})"
