"""Stub of the optional C extension kbroker/protocol/_speedups.c (see record_format.walk_batch_records and
log.validator's compiled paths)."""

from collections.abc import Callable, Sequence

from kbroker.protocol.record_format import BatchHeader

_Buffer = bytes | bytearray | memoryview

def walk_uncompressed(buf: _Buffer, pos: int, count: int, /) -> tuple[int, int, int, int, int, int] | None: ...
def check_plain(records: _Buffer, max_message_bytes: int, lo_ts: int, hi_ts: int, now_ms: int, compacted: bool,
                log_append_time: bool, crc32c: Callable[[_Buffer], int], /) -> list[tuple[int, int, int]] | None: ...
def needs_worker(records: _Buffer, target_codec: int, max_bytes: int, max_records: int, /) -> bool: ...
def assign_plain(records: bytearray | memoryview, checked: Sequence[tuple[int, int, bytearray | None, int, bool]],
                 next_offset: int, leader_epoch: int, header_type: type[BatchHeader], crc32c: Callable[[_Buffer], int],
                 /) -> tuple[list[BatchHeader], int, int, int, int, int] | None: ...
def check_assign_plain(records: bytearray | memoryview, max_message_bytes: int, lo_ts: int, hi_ts: int, now_ms: int,
                       compacted: bool, log_append_time: bool, next_offset: int, leader_epoch: int,
                       header_type: type[BatchHeader], crc32c: Callable[[_Buffer], int], /
                       ) -> tuple[list[BatchHeader], list[tuple[int, int, int]], int, int, int, int, int] | None: ...
