"""Half-sent frames and slow senders (issue 19, finding 3), over a real socket on both event loops.

A frame still arriving holds memory (`queued.max.request.bytes`) but no request slot
(`queued.max.requests`); it must fully arrive within `kbroker.request.receive.timeout.ms` of its first
byte; and its bytes are not activity for `connections.max.idle.ms`.
"""

from __future__ import annotations

import struct
import time


def _wait_for(server, predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.call(predicate):
            return True
        time.sleep(0.02)
    return False


def test_partial_frames_do_not_hold_request_slots(start_server, h) -> None:
    server = start_server(**{"queued.max.requests": "5"})
    stalled = []
    try:
        for _ in range(100):  # twenty times the request bound, each with a frame begun and abandoned
            s = server.connect()
            s.sendall(h.request(1, b"echo:never")[:7])
            stalled.append(s)
        assert _wait_for(server, lambda: server.server.memory_pool.used > 0)
        assert server.call(lambda: server.server.request_bound.requests) == 0
        # Complete requests from others are answered at once, many of them.
        with server.connect(timeout=2) as ok:
            for i in range(50):
                ok.sendall(h.request(i, b"echo:%d" % i))
                assert h.read_test_response(ok) == (i, b"%d" % i)
        assert h.api_versions_ok(server)
    finally:
        for s in stalled:
            s.close()
    assert _wait_for(server, lambda: server.server.memory_pool.used == 0)


def test_a_complete_request_waits_for_a_slot_then_is_answered_in_order(start_server, h) -> None:
    server = start_server(**{"queued.max.requests": "1"})
    bound = server.server.request_bound
    # Occupy the only slot, as a request being handled would (handlers here return at once, so the
    # full queue is set up directly).
    assert server.call(bound.try_acquire)
    with server.connect() as b:
        b.sendall(b"".join(h.request(i, b"echo:%d" % i) for i in range(3)))
        b.settimeout(0.4)
        try:
            early = b.recv(100)
        except TimeoutError:
            early = b""
        assert early == b""  # complete, but the request queue is full: B waits (reading paused)
        assert server.call(lambda: bound.waiting) == 1
        server.call(bound.release)  # the slot passes to B
        b.settimeout(10)
        for i in range(3):
            assert h.read_test_response(b) == (i, b"%d" % i)
    assert server.call(lambda: (bound.requests, bound.waiting, server.server.memory_pool.used)) == (0, 0, 0)


def test_slow_senders_are_closed_after_the_receive_deadline(start_server, h) -> None:
    server = start_server(**{"kbroker.request.receive.timeout.ms": "500"})
    frame = h.request(1, b"echo:" + b"x" * 1000)
    with (
        server.connect() as prefix_only,
        server.connect() as stalled,
        server.connect() as trickle,
        server.connect() as good,
    ):
        started = time.monotonic()
        prefix_only.sendall(frame[:2])  # half a size prefix
        stalled.sendall(frame[:10])  # a size prefix and a few bytes
        good_answers = 0
        trickle_closed_at = None
        pos = 0
        while time.monotonic() - started < 1.5:
            # The trickler sends a byte every 50 ms: active, yet its frame never completes in time.
            if trickle_closed_at is None:
                try:
                    trickle.sendall(frame[pos : pos + 1])
                    pos += 1
                except OSError:
                    trickle_closed_at = time.monotonic() - started
            good.sendall(h.request(good_answers, b"echo:ok"))
            assert h.read_test_response(good) == (good_answers, b"ok")
            good_answers += 1
            time.sleep(0.05)
        assert h.is_closed(prefix_only, timeout=2)
        assert h.is_closed(stalled, timeout=2)
        assert h.is_closed(trickle, timeout=2)
        closed_after = time.monotonic() - started
        assert good_answers >= 15
        assert pos < len(frame)
        # Not before the deadline: one more check shows the stalled ones were open at 0.4 s (the
        # trickler's sends succeeded for at least that long).
        assert trickle_closed_at is None or trickle_closed_at >= 0.45, trickle_closed_at
        assert closed_after < 3.0
    assert h.api_versions_ok(server)


def test_a_frame_that_arrives_in_time_is_not_cut(start_server, h) -> None:
    server = start_server(**{"kbroker.request.receive.timeout.ms": "1000"})
    body = b"y" * 5000
    frame = h.request(1, b"echo:" + body)
    with server.connect() as s:
        for i in range(0, len(frame), 1000):  # five pieces over ~0.6 s: slow but within the deadline
            s.sendall(frame[i : i + 1000])
            time.sleep(0.12)
        assert h.read_test_response(s) == (1, body)
        # A second slow frame gets a deadline of its own.
        frame = h.request(2, b"echo:again")
        s.sendall(frame[:6])
        time.sleep(0.6)
        s.sendall(frame[6:])
        assert h.read_test_response(s) == (2, b"again")


def test_idle_expiry_closes_a_connection_that_only_sent_a_partial_frame(start_server, h) -> None:
    # The receive deadline is off here: connections.max.idle.ms alone must close it.
    server = start_server(**{"connections.max.idle.ms": "400", "kbroker.request.receive.timeout.ms": "0"})
    with server.connect() as partial, server.connect() as announced:
        partial.sendall(h.request(1, b"echo:never")[:9])
        announced.sendall(struct.pack(">i", 4 * 1024 * 1024) + b"\x00" * 100)  # an mmap frame, begun
        started = time.monotonic()
        assert h.is_closed(partial, timeout=5)
        assert h.is_closed(announced, timeout=5)
        assert time.monotonic() - started >= 0.3
    assert _wait_for(server, lambda: server.server.memory_pool.used == 0)


def test_paused_by_the_broker_is_not_slow(start_server, h) -> None:
    # B's complete request waits for the memory pool that A's stalled frame holds. When the
    # receive deadline passes for both, A (the slow sender) is closed; B, whose reading the broker
    # paused, is not: it gets the memory A held and is answered.
    server = start_server(**{"queued.max.request.bytes": "10", "kbroker.request.receive.timeout.ms": "60000"})
    with server.connect() as a, server.connect() as b:
        a.sendall(h.request(1, b"echo:a")[:9])
        assert _wait_for(server, lambda: server.server.memory_pool.used > 0)
        b.sendall(h.request(2, b"echo:b"))
        assert _wait_for(server, lambda: server.server.memory_pool.waiting == 1)
        server.call(lambda: server.server.check_connections(time.monotonic() + 120))
        assert h.is_closed(a, timeout=5)
        b.settimeout(5)
        assert h.read_test_response(b) == (2, b"b")
    assert _wait_for(server, lambda: server.server.memory_pool.used == 0)


def test_limits_hold_under_many_half_open_connections(start_server, h) -> None:
    # The bound and the deadline together: 300 stalled connections with the default request bound
    # lowered to 10 are all closed by the deadline while another client is served throughout.
    server = start_server(**{"queued.max.requests": "10", "kbroker.request.receive.timeout.ms": "700"})
    stalled = []
    try:
        for _ in range(300):
            s = server.connect()
            s.sendall(struct.pack(">i", 50) + b"\x00\x12")
            stalled.append(s)
        with server.connect(timeout=2) as ok:
            for i in range(20):
                ok.sendall(h.request(i, b"echo:%d" % i))
                assert h.read_test_response(ok) == (i, b"%d" % i)
        for s in stalled:
            assert h.is_closed(s, timeout=5)
    finally:
        for s in stalled:
            try:
                s.close()
            except OSError:
                pass
    assert _wait_for(
        server, lambda: (len(server.server.connections), server.server.memory_pool.used) == (0, 0)
    )


def test_memory_of_partial_frames_is_bounded_across_connections(start_server, h) -> None:
    # queued.max.request.bytes bounds what frames still arriving hold, all connections together: the
    # pool is granted while anything is left (overshoot: one frame), the others wait with reading
    # paused, and as the deadline closes the stalled holders the waiters get the memory in turn.
    server = start_server(**{"queued.max.request.bytes": "1000", "kbroker.request.receive.timeout.ms": "500"})
    pool = server.server.memory_pool
    stalled = []
    try:
        for _ in range(40):
            s = server.connect()
            s.sendall(struct.pack(">i", 100) + b"\x00\x12")
            stalled.append(s)
        assert _wait_for(server, lambda: pool.waiting + pool.used // 100 == 40)
        used, waiting = server.call(lambda: (pool.used, pool.waiting))
        assert 1000 <= used <= 1000 + 100 and waiting == 40 - used // 100, (used, waiting)
        for s in stalled:  # wave after wave: each holder closed at the deadline, the next one granted
            assert h.is_closed(s, timeout=15)
    finally:
        for s in stalled:
            s.close()
    assert _wait_for(server, lambda: (len(server.server.connections), pool.used, pool.waiting) == (0, 0, 0))
    assert h.api_versions_ok(server)
