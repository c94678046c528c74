"""A share-partition whose state write was fenced leaves the share-partition manager (Kafka's
`SharePartitionManager.fencedSharePartitionHandler`, KIP-932).

A write of a share-partition's state can answer that another leader took over: FENCED_LEADER_EPOCH
(a newer leader epoch read the state), FENCED_STATE_EPOCH (AlterShareGroupOffsets or the group
coordinator initialized it again), NOT_LEADER_OR_FOLLOWER, GROUP_ID_NOT_FOUND or UNKNOWN_TOPIC_OR_PARTITION
(the group or topic is gone). The in-memory share-partition is then stale for good: every later write
fails the same way, and its records would be handed out from a state the share coordinator no longer
has. Kafka removes it from its cache (and completes the fetches waiting on it); the next fetch reads the
state again. Kafka does so on the acknowledgement and release (member leave, share session close) paths;
kbroker does it on every write path, acquisition-lock expiry included (Kafka 4.3.1 only logs a failed
write there, and the share-partition fails at its next acknowledgement instead).

The manager's writes are synchronous for the in-process share coordinator (the error is known at once)
and asynchronous for the network persister (`write_completion`, a future): `watch_write` calls back when
either says fenced. Must not import kbroker.net or kbroker.api.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from kbroker.protocol.errors import ErrorCode

FENCED_ERRORS = frozenset({ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.FENCED_STATE_EPOCH,
                           ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.GROUP_ID_NOT_FOUND,
                           ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})


def is_fenced(error: ErrorCode) -> bool:
    return error in FENCED_ERRORS


def watch_write(error: ErrorCode, pending: Awaitable[ErrorCode] | None,
                on_fenced: Callable[[ErrorCode], None]) -> None:
    """`on_fenced(error)` now when the write answered fenced, or when its pending future completes so."""
    if is_fenced(error):
        on_fenced(error)
        return
    if error != ErrorCode.NONE or not isinstance(pending, asyncio.Future):
        return

    def done(fut: asyncio.Future[ErrorCode]) -> None:
        if not fut.cancelled() and fut.exception() is None and is_fenced(fut.result()):
            on_fenced(fut.result())

    pending.add_done_callback(done)
