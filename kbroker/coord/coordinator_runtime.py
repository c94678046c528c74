"""A generic runtime for coordinators whose state lives in a log partition (Kafka's CoordinatorRuntime).

A coordinator is split in *shards*, one per partition of its state topic (`__consumer_offsets` for
groups; later `__transaction_state`, share-group state). The runtime owns, per partition, a
`CoordinatorContext`: the shard, its timers, its state (loading / active / closed) and the
bookkeeping of writes that are appended but not yet committed ("pending writes by offset").

What the runtime guarantees (acks=all semantics, as Kafka's `CoordinatorRuntime`):
- A *write operation* runs against the shard; the records it appends (`CoordinatorContext.append`,
  a synchronous append to the partition's local log through the injected `PartitionWriter`) move the
  partition's last written offset. Every response the operation produced, its own and the callbacks
  it answered for other waiting requests (`CoordinatorRuntime.defer`), is held until the partition's
  high watermark passes the last written offset, then released in offset order
  (`on_high_watermark_updated`). An operation that wrote nothing still waits for the writes before it
  (Kafka: "a read after a write must not see uncommitted state").
- A failed append changes nothing: the shard is told through the append's error code and undoes the
  operation's in-memory change (per-operation undo, the state follows only appends that succeeded;
  Kafka uses a timeline snapshot registry for the same effect) and answers with the mapped error.
- A write whose append succeeded but that never commits (the replica layer reports a timeout or the
  loss of leadership through `on_write_failed`) fails the responses waiting on it.
- *Read operations* answer from committed state: they run after every pending write of the partition
  committed (Kafka reads at the last committed offset from its snapshot registry; without snapshots
  we wait for the commit instead, which gives the same answer).
- Loading on becoming leader replays the partition's log into a new shard (`schedule_load` +
  `run_load`; the partition answers COORDINATOR_LOAD_IN_PROGRESS meanwhile) and then calls the shard's
  `on_loaded`. Unloading on losing the partition cancels its timers, fails every pending response with
  NOT_COORDINATOR and calls the shard's `on_unloaded` (which answers what still waits in the shard).
- Timers of a shard (`CoordinatorTimer`, keyed) run as write operations of its partition, so their
  records and answers follow the same rules, and die with the partition.

Sans-IO: no asyncio, no replica manager. The event-loop binding (`kbroker.coord.runtime`) supplies the
`PartitionWriter`, the `CoordinatorLoader`, the base keyed timers, and reports high-watermark moves.
Coordinator-specific logic (groups, offsets) stays out of this module.

Must not import asyncio, kbroker.net, kbroker.api or any coordinator.
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from kbroker.coord.config import Scheduler
from kbroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

Record = tuple[bytes, bytes | None]  # (key, value or None for a tombstone)
# The producer id and epoch of a transactional write (TxnOffsetCommit's records), else None.
TxnProducer = tuple[int, int]


class Append(Protocol):
    """A shard's way to append its records (optionally as a transactional batch of a producer)."""

    def __call__(self, records: list[Record], producer: TxnProducer | None = None) -> ErrorCode: ...


class CoordinatorShard(Protocol):
    """One partition's coordinator state machine (Kafka's CoordinatorShard)."""

    def replay(self, offset: int, key: bytes | memoryview | None, value: bytes | memoryview | None) -> None:
        """Apply one record read back from the partition's log while loading."""

    def on_loaded(self) -> None:
        """The partition is loaded: start what the loaded state implies (member sessions)."""

    def on_unloaded(self) -> None:
        """The partition is lost: answer what still waits in the shard with NOT_COORDINATOR."""

    def replay_transactional(self, producer_id: int, offset: int, key: bytes | memoryview | None,
                             value: bytes | memoryview | None) -> None:
        """A record of a transactional batch of `producer_id`, read back while loading."""

    def replay_end_txn(self, producer_id: int, commit: bool) -> None:
        """A COMMIT/ABORT marker of `producer_id`, read back while loading."""


S = TypeVar("S", bound=CoordinatorShard)


@dataclass(slots=True)
class AppendResult:
    error: ErrorCode
    next_offset: int = -1  # the partition's log end offset after the append (last offset + 1)


class PartitionWriter(Protocol):
    """Appends coordinator records to the leader's local log (synchronously; the commit, the high
    watermark passing `next_offset`, is reported later through `on_high_watermark_updated`)."""

    def append(self, partition: int, records: list[Record], producer: TxnProducer | None = None) -> AppendResult: ...


Replay = Callable[[int, bytes | memoryview | None, bytes | memoryview | None], None]
ReplayTransactional = Callable[[int, int, bytes | memoryview | None, bytes | memoryview | None], None]
ReplayEndTxn = Callable[[int, bool], None]


class CoordinatorLoader(Protocol):
    """Replays every record of a partition's log; returns the log end offset it loaded up to (all of
    it committed: only a leader with its high watermark at the end loads). Records of transactional
    batches go to `replay_txn`, transaction markers to `replay_end_txn`."""

    def load(self, partition: int, replay: Replay, replay_txn: ReplayTransactional | None = None,
             replay_end_txn: ReplayEndTxn | None = None) -> int: ...


class CoordinatorState(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"
    FAILED = "failed"
    CLOSED = "closed"


@dataclass(slots=True)
class Deferred:
    """A response held until its write commits: `send` then, or `fail(error)` if it never does."""

    send: Callable[[], None]
    fail: Callable[[ErrorCode], None]


@dataclass(slots=True)
class CoordinatorContext(Generic[S]):
    partition: int
    state: CoordinatorState
    shard: S | None = None
    timer: CoordinatorTimer | None = None
    last_written_offset: int = 0
    last_committed_offset: int = 0
    # (offset the high watermark must reach, the responses held until then), in offset order.
    pending: deque[tuple[int, list[Deferred]]] = field(default_factory=deque)

    def append(self, writer: PartitionWriter, records: list[Record], producer: TxnProducer | None = None) -> ErrorCode:
        if self.state != CoordinatorState.ACTIVE and self.state != CoordinatorState.LOADING:
            return ErrorCode.NOT_COORDINATOR
        if not records:
            return ErrorCode.NONE
        result = writer.append(self.partition, records, producer)
        if result.error == ErrorCode.NONE:
            self.last_written_offset = max(self.last_written_offset, result.next_offset)
        return result.error


class CoordinatorTimer:
    """Keyed one-shot timers of one shard (Kafka's CoordinatorTimer): scheduling a key replaces its
    timer; a timer runs as a write operation of the partition; all die with the partition."""

    def __init__(self, run: Callable[[int, str, Callable[[], None]], None], partition: int, base: Scheduler) -> None:
        self._run = run
        self._partition = partition
        self._base = base
        self._keys: set[str] = set()

    def _key(self, key: str) -> str:
        return f"{self._partition}/{key}"

    def schedule(self, key: str, delay_ms: int, fn: Callable[[], None]) -> None:
        self._keys.add(key)

        def run() -> None:
            self._keys.discard(key)
            self._run(self._partition, key, fn)

        self._base.schedule(self._key(key), delay_ms, run)

    def cancel(self, key: str) -> None:
        if key in self._keys:
            self._keys.discard(key)
            self._base.cancel(self._key(key))

    def cancel_all(self) -> None:
        for key in list(self._keys):
            self._base.cancel(self._key(key))
        self._keys.clear()

    def __len__(self) -> int:
        return len(self._keys)


ShardFactory = Callable[[int, CoordinatorTimer, Append], S]


class CoordinatorRuntime(Generic[S]):
    """The contexts of every partition this broker coordinates, and the operations run against them."""

    def __init__(self, writer: PartitionWriter, loader: CoordinatorLoader, shard_factory: ShardFactory[S],
                 scheduler: Scheduler) -> None:
        self._writer = writer
        self._loader = loader
        self._shard_factory = shard_factory
        self._scheduler = scheduler
        self._contexts: dict[int, CoordinatorContext[S]] = {}
        # The responses of the operation now running (None outside an operation).
        self._current: list[Deferred] | None = None

    # -- partitions ----------------------------------------------------------------------------------

    def partitions(self) -> list[int]:
        return sorted(self._contexts)

    def context(self, partition: int) -> CoordinatorContext[S] | None:
        return self._contexts.get(partition)

    def status(self, partition: int) -> ErrorCode:
        ctx = self._contexts.get(partition)
        if ctx is None or ctx.state in (CoordinatorState.CLOSED, CoordinatorState.FAILED):
            return ErrorCode.NOT_COORDINATOR
        if ctx.state == CoordinatorState.LOADING:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NONE

    def is_loading(self) -> bool:
        return any(c.state == CoordinatorState.LOADING for c in self._contexts.values())

    def active_shards(self) -> list[tuple[int, S]]:
        return [(p, c.shard) for p, c in sorted(self._contexts.items())
                if c.state == CoordinatorState.ACTIVE and c.shard is not None]

    def schedule_load(self, partition: int) -> bool:
        """The broker became leader of `partition`: it answers COORDINATOR_LOAD_IN_PROGRESS until
        `run_load`. False when it is already loaded or loading."""
        ctx = self._contexts.get(partition)
        if ctx is not None and ctx.state in (CoordinatorState.LOADING, CoordinatorState.ACTIVE):
            return False
        self._contexts[partition] = CoordinatorContext(partition, CoordinatorState.LOADING)
        return True

    def run_load(self, partition: int) -> None:
        """Build the shard and replay the partition's log into it; then it is active."""
        ctx = self._contexts.get(partition)
        if ctx is None or ctx.state != CoordinatorState.LOADING:
            return
        timer = CoordinatorTimer(self.run_timer, partition, self._scheduler)
        ctx.timer = timer
        def append(records: list[Record], producer: TxnProducer | None = None) -> ErrorCode:
            return ctx.append(self._writer, records, producer)

        shard = self._shard_factory(partition, timer, append)
        ctx.shard = shard
        try:
            end = self._loader.load(partition, shard.replay, shard.replay_transactional, shard.replay_end_txn)
        except Exception:
            log.exception("Failed to load coordinator partition %d", partition)
            timer.cancel_all()
            ctx.state = CoordinatorState.FAILED
            return
        ctx.last_written_offset = ctx.last_committed_offset = end
        ctx.state = CoordinatorState.ACTIVE
        self._run(ctx, shard.on_loaded)

    def unload(self, partition: int) -> None:
        """The broker lost `partition`: timers stop, held responses fail with NOT_COORDINATOR and the
        shard answers what still waits in it."""
        ctx = self._contexts.pop(partition, None)
        if ctx is None:
            return
        ctx.state = CoordinatorState.CLOSED
        if ctx.timer is not None:
            ctx.timer.cancel_all()
        while ctx.pending:
            _, deferred = ctx.pending.popleft()
            for d in deferred:
                _safe(d.fail, ErrorCode.NOT_COORDINATOR)
        if ctx.shard is not None:
            try:
                ctx.shard.on_unloaded()
            except Exception:
                log.exception("Failed to unload coordinator partition %d", partition)

    def close(self) -> None:
        for partition in list(self._contexts):
            self.unload(partition)

    # -- operations ----------------------------------------------------------------------------------

    def write(self, partition: int, op: Callable[[S], object], complete: Callable[[object], None],
              fail: Callable[[ErrorCode], None]) -> None:
        """Run `op` on the partition's shard; `complete(result)` once the writes it (and those before
        it) made are committed, `fail(error)` when the partition is not served here or the writes
        never commit."""
        ctx = self._contexts.get(partition)
        error = self.status(partition)
        if ctx is None or ctx.shard is None or error != ErrorCode.NONE:
            fail(error)
            return
        shard = ctx.shard
        box: list[object] = []
        failed = self._run(ctx, lambda: box.append(op(shard)), fail)
        if failed:
            return
        result = box[0]
        self._hold(ctx, [Deferred(lambda: complete(result), fail)])

    def read(self, partition: int, op: Callable[[S], object], complete: Callable[[object], None],
             fail: Callable[[ErrorCode], None]) -> None:
        """Answer from committed state: `op` runs once every pending write of the partition committed."""
        ctx = self._contexts.get(partition)
        error = self.status(partition)
        if ctx is None or ctx.shard is None or error != ErrorCode.NONE:
            fail(error)
            return
        shard = ctx.shard

        def send() -> None:
            try:
                result = op(shard)
            except Exception:
                log.exception("Read operation on coordinator partition %d failed", partition)
                fail(ErrorCode.UNKNOWN_SERVER_ERROR)
                return
            complete(result)

        self._hold(ctx, [Deferred(send, fail)])

    def defer(self, send: Callable[[], None], fail: Callable[[ErrorCode], None]) -> None:
        """Send a response produced inside the running operation once its writes commit (outside an
        operation, e.g. while unloading: now)."""
        if self._current is None:
            send()
        else:
            self._current.append(Deferred(send, fail))

    def run_timer(self, partition: int, key: str, fn: Callable[[], None]) -> None:
        ctx = self._contexts.get(partition)
        if ctx is None or ctx.state != CoordinatorState.ACTIVE:
            return
        self._run(ctx, fn, None, f"timer {key}")

    def _run(self, ctx: CoordinatorContext[S], fn: Callable[[], None],
             fail: Callable[[ErrorCode], None] | None = None, what: str = "operation") -> bool:
        """Run `fn` as an operation of the partition; its deferred responses are held until its writes
        commit. True when `fn` raised (answered with UNKNOWN_SERVER_ERROR)."""
        outer, self._current = self._current, []
        raised = False
        try:
            fn()
        except Exception:
            log.exception("Coordinator %s on partition %d failed", what, ctx.partition)
            raised = True
            if fail is not None:
                _safe(fail, ErrorCode.UNKNOWN_SERVER_ERROR)
        finally:
            produced, self._current = self._current, outer
        if produced:
            self._hold(ctx, produced)
        return raised

    def _hold(self, ctx: CoordinatorContext[S], deferred: list[Deferred]) -> None:
        if self._current is not None and self._contexts.get(ctx.partition) is ctx:
            # Nested inside another operation of this runtime: released with the outer one.
            self._current.extend(deferred)
            return
        if ctx.last_committed_offset >= ctx.last_written_offset and not ctx.pending:
            for d in deferred:
                _safe(d.send)
            return
        if ctx.pending and ctx.pending[-1][0] == ctx.last_written_offset:
            ctx.pending[-1][1].extend(deferred)
        else:
            ctx.pending.append((ctx.last_written_offset, deferred))

    # -- the replica layer's reports -----------------------------------------------------------------

    def on_high_watermark_updated(self, partition: int, high_watermark: int) -> None:
        """Release every response whose writes the high watermark now passes, in offset order."""
        ctx = self._contexts.get(partition)
        if ctx is None:
            return
        ctx.last_committed_offset = max(ctx.last_committed_offset, high_watermark)
        while ctx.pending and ctx.pending[0][0] <= ctx.last_committed_offset:
            _, deferred = ctx.pending.popleft()
            for d in deferred:
                _safe(d.send)

    def on_write_failed(self, partition: int, next_offset: int, error: ErrorCode) -> None:
        """The write ending at `next_offset` was appended but will not commit (timeout, leadership
        lost): what waits on it, or on anything after it, fails with `error`."""
        ctx = self._contexts.get(partition)
        if ctx is None:
            return
        kept: deque[tuple[int, list[Deferred]]] = deque()
        for offset, deferred in ctx.pending:
            if offset >= next_offset:
                for d in deferred:
                    _safe(d.fail, error)
            else:
                kept.append((offset, deferred))
        ctx.pending = kept


def _safe(fn: Callable[[ErrorCode], None] | Callable[[], None], *args: ErrorCode) -> None:
    try:
        fn(*args)  # type: ignore[call-arg]
    except Exception:
        log.exception("Coordinator response callback failed")


__all__ = ["Append", "AppendResult", "TxnProducer", "CoordinatorContext", "CoordinatorLoader", "CoordinatorRuntime", "CoordinatorShard",
           "CoordinatorState", "CoordinatorTimer", "Deferred", "PartitionWriter", "Record"]
