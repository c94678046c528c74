"""The follower's side of KIP-227 fetch sessions (Kafka's FetchSessionHandler)."""

from __future__ import annotations

from kbroker.protocol.errors import ErrorCode
from kbroker.replica.fetch_session_handler import FetchSessionHandler, SessionPartition


def sp(offset: int, epoch: int = 0) -> SessionPartition:
    return SessionPartition(offset, epoch, epoch, 0)


def test_full_then_incremental_then_forget() -> None:
    h = FetchSessionHandler()
    data = h.build({("a", 0): sp(0), ("a", 1): sp(5)})
    assert (data.session_id, data.session_epoch, data.full, data.to_send) == (0, 0, True, (("a", 0), ("a", 1)))
    assert h.handle_response(ErrorCode.NONE, 77)
    assert (h.session_id, h.next_epoch) == (77, 1)
    # Only what changed is sent; a partition no longer wanted is forgotten.
    data = h.build({("a", 0): sp(3), ("a", 1): sp(5), ("b", 0): sp(0)})
    assert (data.session_id, data.session_epoch, data.full) == (77, 1, False)
    assert data.to_send == (("a", 0), ("b", 0)) and data.to_forget == ()
    assert h.handle_response(ErrorCode.NONE, 77)
    data = h.build({("a", 0): sp(3), ("b", 0): sp(0, epoch=1)})
    assert data.session_epoch == 2 and data.to_send == (("b", 0),) and data.to_forget == (("a", 1),)
    assert h.handle_response(ErrorCode.NONE, 77) and set(h.partitions) == {("a", 0), ("b", 0)}


def test_errors_restart_the_session() -> None:
    h = FetchSessionHandler()
    h.build({("a", 0): sp(0)})
    h.handle_response(ErrorCode.NONE, 9)
    h.build({("a", 0): sp(1)})
    assert not h.handle_response(ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0)
    data = h.build({("a", 0): sp(1)})  # close and reopen: same id, epoch 0, full
    assert (data.session_id, data.session_epoch, data.full) == (9, 0, True)
    assert not h.handle_response(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0)
    data = h.build({("a", 0): sp(1)})
    assert (data.session_id, data.session_epoch, data.full) == (0, 0, True)
    # The leader has no slot: every request stays full.
    assert h.handle_response(ErrorCode.NONE, 0)
    assert h.build({("a", 0): sp(2)}).full
    # Sessionless (Fetch < v7): epoch -1, always full.
    h.enabled = False
    data = h.build({("a", 0): sp(2)})
    assert (data.session_id, data.session_epoch, data.full) == (0, -1, True)
