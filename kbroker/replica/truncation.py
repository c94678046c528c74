"""Where a follower truncates its log, by leader epoch (Kafka's `AbstractFetcherThread.getOffsetTruncationState`).

Why its own module: it is the rule that keeps every acknowledged record through leader changes, and
it is a pure function of two epoch caches, tested without a log or a socket.

KIP-101 (and KIP-279 for successive leader changes): a follower never truncates to its high
watermark -- its HW may lag the leader's, and truncating to it loses records the new leader still
has (and acknowledged). It asks the leader where its own last epoch ends: the leader answers
(epoch, end offset) = the largest epoch <= the asked one that it knows, and where that epoch ends in
the leader's log. Since Fetch v12 (KIP-595's truncation-on-fetch) the leader sends the same answer
as `diverging_epoch` in the fetch response; older leaders are asked with OffsetForLeaderEpoch.

Given that answer, the follower:
- when the leader knows no epoch at all (-1 end offset): keeps its log up to its HW (the one case
  Kafka truncates to the HW: a leader whose log has no epochs, message format < v2);
- when the leader answered an epoch the follower also has: truncates to the smaller of the two end
  offsets of that epoch (and never above its own LEO) -- done;
- when the follower does not have that epoch: truncates to the end of its own largest epoch below
  it (an intermediate point) and asks again with its new last epoch (KIP-279): not done yet.

Sans-IO: no asyncio, no log; the follower's epoch cache is passed as a lookup function.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


@dataclass(frozen=True, slots=True)
class OffsetTruncationState:
    """Truncate to `offset`; `truncation_completed` False: ask the leader again from there."""

    offset: int
    truncation_completed: bool


def offset_truncation_state(
    leader_epoch: int,
    leader_end_offset: int,
    follower_end_offset_for: Callable[[int], tuple[int, int] | None],
    follower_log_end_offset: int,
    follower_high_watermark: int,
) -> OffsetTruncationState:
    """The truncation point for the leader's answer (`leader_epoch`, `leader_end_offset`).

    `follower_end_offset_for(epoch)` is the follower's own `LeaderEpochFileCache.end_offset_for`:
    (largest epoch <= `epoch` it knows, where that epoch ends in its log), or None when it knows none.
    """
    if leader_end_offset == UNDEFINED_EPOCH_OFFSET:
        # The leader has no epoch information: the HW is all that is known to be safe.
        return OffsetTruncationState(min(follower_high_watermark, follower_log_end_offset), True)
    if leader_epoch == UNDEFINED_EPOCH:
        # An old leader answering only an offset.
        return OffsetTruncationState(min(leader_end_offset, follower_log_end_offset), True)
    found = follower_end_offset_for(leader_epoch)
    if found is None or found[0] == UNDEFINED_EPOCH:
        return OffsetTruncationState(min(leader_end_offset, follower_log_end_offset), True)
    follower_epoch, follower_end_offset = found
    if follower_epoch != leader_epoch:
        # We never saw the leader's epoch: cut back to the end of our largest older epoch, and ask
        # again with that epoch (the leader may have it ending elsewhere).
        return OffsetTruncationState(min(follower_end_offset, follower_log_end_offset), False)
    return OffsetTruncationState(min(follower_end_offset, leader_end_offset, follower_log_end_offset), True)


def diverging_epoch(last_fetched_epoch: int, fetch_offset: int,
                    leader_end_offset_for: Callable[[int], tuple[int, int]]) -> tuple[int, int] | None:
    """The leader's side (Kafka's `Partition.readFromLocalLog` divergence check, KIP-595): a
    follower that last fetched in `last_fetched_epoch` and now fetches at `fetch_offset` diverges
    if the leader's log ends that epoch earlier, or does not have it. Returns the leader's
    (epoch, end offset) to send back as `diverging_epoch`, or None to read normally; (-1, -1) when
    the leader cannot place the epoch (OFFSET_OUT_OF_RANGE)."""
    if last_fetched_epoch < 0:
        return None
    epoch, end_offset = leader_end_offset_for(last_fetched_epoch)
    if epoch == UNDEFINED_EPOCH or end_offset == UNDEFINED_EPOCH_OFFSET:
        # Kafka answers OFFSET_OUT_OF_RANGE ("could not determine the end offset of the last
        # fetched epoch"): the caller maps this pair to that error.
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    if epoch < last_fetched_epoch or end_offset < fetch_offset:
        return epoch, end_offset
    return None


__all__ = ["OffsetTruncationState", "UNDEFINED_EPOCH", "UNDEFINED_EPOCH_OFFSET", "diverging_epoch",
           "offset_truncation_state"]
