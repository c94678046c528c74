"""A ShareFetch waiting for records to acquire: Kafka's `DelayedShareFetch` (KIP-932).

A ShareFetch that acquires nothing at once waits up to its `MaxWaitMs` in the share-fetch purgatory
(`SharePartitionManager.delayed_share_fetch_purgatory`, Kafka's `delayedShareFetchPurgatory`) instead of
answering empty. It is watched under two kinds of key, as in Kafka:

- `(topic name, partition)` (Kafka's `DelayedShareFetchPartitionKey`): the replica manager's append and
  high-watermark events (records produced, a transaction's markers moving the last stable offset, the
  leadership moving away);
- `(group id, topic id, partition)` (Kafka's `DelayedShareFetchGroupKey`): the share-partition's own
  events, released records (RELEASE acknowledgements, a member leaving, a share session closing),
  expired acquisition locks and a moved start offset.

`try_complete` first checks `MinBytes` against the bytes a read would return from each share-partition's
next fetch offset (without acquiring, as Kafka's `isMinBytesSatisfied`), then acquires; it completes when
it acquired something. An acquisition lock expiring while the fetch waits is an event too: Kafka's
`AcquisitionLockTimerTask` releases the record and wakes the group key; here the operation arms a timer
at the earliest lock deadline of its share-partitions, and the lock expires when that timer touches the
share-partition. At the timeout the fetch acquires once more whatever is there (Kafka's `onComplete`)
and is answered, possibly empty.

Must not import kbroker.net or kbroker.api.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from kbroker.replica.purgatory import DelayedOperation

if TYPE_CHECKING:
    from kbroker.coord.share_partition_manager import ShareFetchOutcome, SharePartitionManager


class DelayedShareFetch(DelayedOperation["ShareFetchOutcome"]):
    """One waiting ShareFetch of `member_id` in `group_id`, answering `outcome` when it completes."""

    __slots__ = ("_manager", "outcome", "group_id", "member_id", "max_records", "record_limit_mode",
                 "min_bytes", "_trying", "_lock_timer", "_lock_deadline_ms")

    def __init__(self, delay_ms: int, manager: SharePartitionManager, outcome: ShareFetchOutcome, group_id: str,
                 member_id: str, max_records: int, record_limit_mode: bool, min_bytes: int,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(delay_ms, loop)
        self._manager = manager
        self.outcome = outcome
        self.group_id = group_id
        self.member_id = member_id
        self.max_records = max_records
        self.record_limit_mode = record_limit_mode
        self.min_bytes = max(1, min_bytes)
        self._trying = False
        self._lock_timer: asyncio.TimerHandle | None = None
        self._lock_deadline_ms = -1

    def _session_gone(self) -> bool:
        session = self.outcome.session
        return session is None or not self._manager.sessions.is_current(session)

    def try_complete(self) -> bool:
        if self.completed:
            return False
        if self._session_gone():
            return self.force_complete()  # replaced or closed meanwhile: answered as it is
        if self._trying:
            return False  # woken by its own acquisition (a lock it expired): the outer call decides
        self._trying = True
        try:
            if self.min_bytes > 1 and self._manager.acquirable_bytes(self.outcome, self.group_id) < self.min_bytes:
                self._arm_lock_timer()
                return False
            self._manager.acquire(self.outcome, self.group_id, self.member_id, self.max_records,
                                  self.record_limit_mode)
        finally:
            self._trying = False
        if self.outcome.acquired_any():
            return self.force_complete()
        self._arm_lock_timer()
        return False

    def on_complete(self) -> ShareFetchOutcome:
        if self._lock_timer is not None:
            self._lock_timer.cancel()
            self._lock_timer = None
        if self.expired and not self.outcome.acquired_any() and not self._session_gone():
            # Kafka's onComplete: whatever can be acquired now goes into the answer, MinBytes or not.
            self._manager.acquire(self.outcome, self.group_id, self.member_id, self.max_records,
                                  self.record_limit_mode)
        return self.outcome

    def _arm_lock_timer(self) -> None:
        """Look again when the earliest acquisition lock of the fetch's share-partitions expires."""
        deadline = self._manager.next_lock_deadline(self.outcome, self.group_id)
        if deadline is None or deadline == self._lock_deadline_ms:
            return
        if self._lock_timer is not None:
            self._lock_timer.cancel()
        self._lock_deadline_ms = deadline
        delay_s = max(0.0, (deadline - self._manager.time_ms()) / 1000.0) + 0.001
        self._lock_timer = self.future.get_loop().call_later(delay_s, self._on_lock_deadline)

    def _on_lock_deadline(self) -> None:
        self._lock_timer = None
        self._lock_deadline_ms = -1
        if not self.completed:
            self._manager.expire_and_wake(self.outcome, self.group_id)
            if not self.completed:
                self.try_complete()
