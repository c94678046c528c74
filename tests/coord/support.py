"""Test doubles for the group coordinator: a manual clock + keyed timers, an in-memory record log."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from kbroker.coord.config import CoordinatorConfig
from kbroker.coord.group import JoinResult, SyncResult
from kbroker.coord.shard import GroupCoordinatorShard
from kbroker.protocol.errors import ErrorCode


class FakeScheduler:
    """Keyed timers driven by `advance(ms)`; also the coordinator's clock (`time_ms`)."""

    def __init__(self) -> None:
        self.now = 1_000_000
        self._seq = 0
        self.timers: dict[str, tuple[int, int, Callable[[], None]]] = {}

    def time_ms(self) -> int:
        return self.now

    def schedule(self, key: str, delay_ms: int, fn: Callable[[], None]) -> None:
        self._seq += 1
        self.timers[key] = (self.now + delay_ms, self._seq, fn)

    def cancel(self, key: str) -> None:
        self.timers.pop(key, None)

    def advance(self, ms: int) -> None:
        target = self.now + ms
        while True:
            due = [(d, s, k) for k, (d, s, _) in self.timers.items() if d <= target]
            if not due:
                break
            deadline, _, key = min(due)
            _, _, fn = self.timers.pop(key)
            self.now = max(self.now, deadline)
            fn()
        self.now = target


class MemoryLog:
    """The writer: records every (group, key, value) appended; `fail_with` makes appends fail."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes, bytes | None]] = []
        self.fail_with: ErrorCode | None = None

    def __call__(self, group_id: str, records: list[tuple[bytes, bytes | None]]) -> ErrorCode:
        if self.fail_with is not None:
            return self.fail_with
        self.records.extend((group_id, k, v) for k, v in records)
        return ErrorCode.NONE


class Box:
    """Captures what a JoinGroup/SyncGroup callback was answered with."""

    def __init__(self) -> None:
        self.results: list[Any] = []

    def __call__(self, result: Any) -> None:
        self.results.append(result)

    @property
    def done(self) -> bool:
        return bool(self.results)

    @property
    def result(self) -> Any:
        assert len(self.results) == 1, f"expected one answer, got {self.results}"
        return self.results[0]


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0 (version, topics, user data null)."""
    out = bytearray(struct.pack(">hi", 0, len(topics)))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    out += struct.pack(">i", -1)
    return bytes(out)


PROTOCOLS = [("range", subscription("t")), ("roundrobin", subscription("t"))]


class Harness:
    def __init__(self, **config: Any) -> None:
        self.sched = FakeScheduler()
        self.log = MemoryLog()
        self.status: dict[str, ErrorCode] = {}
        cfg = CoordinatorConfig(**{"initial_rebalance_delay_ms": 3000, **config})
        self.coord = GroupCoordinatorShard(cfg, self.sched, self.log, self.sched.time_ms,
                                      lambda g: self.status.get(g, ErrorCode.NONE))

    def join(self, group: str = "g", member_id: str = "", *, instance_id: str | None = None,
             protocols: list[tuple[str, bytes]] | None = None, protocol_type: str = "consumer",
             session_timeout_ms: int = 10000, rebalance_timeout_ms: int = 30000, require_known: bool = True,
             skip_assignment: bool = False, client_id: str = "client") -> Box:
        box = Box()
        self.coord.join_group(group, member_id, instance_id, protocol_type, protocols or PROTOCOLS,
                              session_timeout_ms, rebalance_timeout_ms, client_id, "/127.0.0.1",
                              require_known, box, supports_skip_assignment=skip_assignment)
        return box

    def join_new(self, group: str = "g", **kw: Any) -> Box:
        """The KIP-394 two-step join of a dynamic member: returns the box of the second JoinGroup."""
        first = self.join(group, **kw).result
        assert first.error == ErrorCode.MEMBER_ID_REQUIRED
        return self.join(group, first.member_id, **kw)

    def sync(self, group: str, generation: int, member_id: str, assignments: dict[str, bytes] | None = None,
             instance_id: str | None = None, protocol_type: str | None = None,
             protocol_name: str | None = None) -> Box:
        box = Box()
        self.coord.sync_group(group, generation, member_id, instance_id, protocol_type, protocol_name,
                              assignments or {}, box)
        return box

    def stable_group(self, n: int, group: str = "g", **kw: Any) -> list[JoinResult]:
        """n dynamic members joined and synced; returns their join results."""
        boxes = [self.join_new(group, **kw) for _ in range(n)]
        self.sched.advance(self.coord.config.initial_rebalance_delay_ms)
        results = [b.result for b in boxes]
        leader = next(r for r in results if r.member_id == r.leader)
        assignment = {r.member_id: r.member_id.encode() for r in results}
        syncs = [self.sync(group, r.generation_id, r.member_id, assignment if r is leader else None) for r in results]
        for s in syncs:
            assert s.result.error == ErrorCode.NONE
        return results


def sync_ok(box: Box) -> SyncResult:
    result: SyncResult = box.result
    assert result.error == ErrorCode.NONE, result
    return result
