"""Request frame buffers: what a complete request is read into, and reusing them (issue 17).

A frame is read into one buffer of exactly its announced size (kbroker.net.connection). What that buffer
costs depends on how it is allocated, and on this project's (virtualised) machines the difference is
large:

- ``bytearray(n)`` zero-fills: every page is written (and made resident) as soon as the size prefix
  arrives, so a client that announces 100 MB and sends 10 bytes would cost 100 MB.
- A fresh anonymous ``mmap`` is resident only as bytes arrive, but every page of every frame is then a
  fresh page fault: about 1.4 ms per MiB here, where filling memory already resident costs 30 us per
  MiB. A stream of 1 MiB requests paid more for its page faults than for its bytes.
- malloc's memory, not zero-filled (``_speedups.frame_buffer``), is resident only as written too, but
  whether the next frame gets the same, already resident memory back is glibc's choice: its trim and
  mmap thresholds move with what was freed, and a test saw three page faults per page received.

So frames of ``POOLED_FRAME_BYTES`` or more are taken from a small broker-wide set of buffers that
were handed out before: the first one long enough that nothing uses any more (no memoryview of it is
alive, ``_speedups.buffer_exported``) is reused, already resident, without being cleared (a frame is
read only after the socket has filled every byte of it). Otherwise a new uninitialised one is allocated
and remembered. The set keeps at most ``MAX_POOLED_BUFFERS`` buffers and ``MAX_POOLED_BYTES`` bytes,
dropping the least recently taken (a dropped buffer still in use lives on until its last view goes):
that is what the broker keeps resident for frames after a burst, whatever the number of connections.

Smaller frames are uninitialised bytearrays, which CPython's and glibc's small-object reuse already
serves from resident memory. Without the compiled module (it is optional), frames are what they were
before: bytearrays below ``MMAP_FRAME_THRESHOLD``, anonymous mmaps from it on, never pooled.

Must not import anything outside kbroker.protocol's compiled module.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable

__all__ = ["MAX_POOLED_BUFFERS", "MAX_POOLED_BYTES", "MMAP_FRAME_THRESHOLD", "POOLED_FRAME_BYTES", "FrameBuffers"]

# Without the compiled module: frames at least this large are anonymous mmaps, not zero-filled bytearrays.
MMAP_FRAME_THRESHOLD = 512 * 1024
# Frames at least this large are taken from the pool.
POOLED_FRAME_BYTES = 64 * 1024
MAX_POOLED_BUFFERS = 16
MAX_POOLED_BYTES = 16 * 1024 * 1024

_uninitialised: Callable[[int], bytearray] | None
_exported: Callable[[bytearray], bool] | None
try:
    from kbroker.protocol._speedups import buffer_exported as _exported
    from kbroker.protocol._speedups import frame_buffer as _uninitialised
except ImportError:  # pragma: no cover - the compiled module is optional
    _uninitialised = _exported = None

FrameBuffer = bytearray | mmap.mmap


class FrameBuffers:
    """The broker-wide buffers frames are read into; one per server (its event loop's thread only)."""

    __slots__ = ("_pooled", "_pooled_bytes", "reused", "allocated")

    def __init__(self) -> None:
        self._pooled: list[bytearray] = []  # least recently taken first
        self._pooled_bytes = 0
        self.reused = 0  # frames read into a buffer taken back from the pool
        self.allocated = 0  # pooled-size frames that needed a new buffer

    def take(self, size: int) -> tuple[FrameBuffer, memoryview]:
        """A buffer for a frame of ``size`` bytes and a writable view of exactly ``size`` bytes of it."""
        if _uninitialised is None or _exported is None:
            if size >= MMAP_FRAME_THRESHOLD:
                m = mmap.mmap(-1, size)
                return m, memoryview(m)
            b = bytearray(size)
            return b, memoryview(b)
        if size < POOLED_FRAME_BYTES:
            b = _uninitialised(size)
            return b, memoryview(b)
        pooled = self._pooled
        for i, b in enumerate(pooled):
            if len(b) >= size and not _exported(b):
                del pooled[i]
                pooled.append(b)
                self.reused += 1
                return b, memoryview(b)[:size]
        b = _uninitialised(size)
        self.allocated += 1
        if size <= MAX_POOLED_BYTES:
            pooled.append(b)
            self._pooled_bytes += size
            while len(pooled) > MAX_POOLED_BUFFERS or self._pooled_bytes > MAX_POOLED_BYTES:
                self._pooled_bytes -= len(pooled.pop(0))
        return b, memoryview(b)

    @property
    def pooled_bytes(self) -> int:
        """The bytes of the buffers kept for reuse (in use or not)."""
        return self._pooled_bytes

    def clear(self) -> None:
        """Forget every pooled buffer (the server is stopping); buffers still in use live on until freed."""
        self._pooled.clear()
        self._pooled_bytes = 0
