"""Writes one connection's response parts: bytes through the transport, file regions with sendfile.

A response is a list of parts (see `encode_response_frame`): bytes-like objects and `FileRegion`s
(anything with `.file`, `.position`, `.size`). Bytes go to `transport.writelines`. A region is sent
with `os.sendfile` straight from the page cache, or, when sendfile is disabled
(`kbroker.sendfile.enable=false`), read with `os.pread` and written through the transport.

Why writing to the socket behind the transport's back is safe (uvloop has no `loop.sendfile`):
- we only call `os.sendfile` once `transport.get_write_buffer_size()` is 0, i.e. neither the
  transport's own buffer nor libuv's write queue holds bytes, so nothing the transport accepted earlier
  can reach the wire after our bytes;
- while a region is being sent the connection writes nothing else through the transport (every later
  part and response waits in this writer / the connection's queue), so nothing can overtake it;
- uvloop and asyncio keep no per-socket write position: the kernel's socket buffer is the only order.
To wait for the drain we lower the transport's write-buffer limits to (0, 0): the transport then calls
`pause_writing` while anything is buffered and `resume_writing` exactly when the buffer is empty.
To wait for writability after EAGAIN we watch a `dup()` of the socket fd: both event loops refuse
`add_writer` on a fd owned by a transport, and a dup'd fd is a separate epoll registration of the same
socket. It is unregistered before it is closed (epoll keeps a registration while any fd of the
file description is open).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from collections import deque
from collections.abc import Callable, Iterable

from kbroker.protocol.regions import FileRegion
from kbroker.protocol.types import FramePart

log = logging.getLogger(__name__)

_BYTES_TYPES = (bytes, bytearray, memoryview)
# Chunk size of the read-and-write fallback: bounded memory per step for large regions.
FALLBACK_CHUNK = 1 << 20
# Normal write-buffer limits: above HIGH the connection stops reading new requests.
WRITE_HIGH_WATER = 1 << 20
WRITE_LOW_WATER = 256 << 10


def _noop() -> None:
    pass


def _noop_error(exc: BaseException) -> None:
    pass


class ResponseWriter:
    """Sends parts in order; `write` returns False when a region is still in progress."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        transport: asyncio.Transport,
        use_sendfile: bool,
        on_idle: Callable[[], None],
        on_error: Callable[[BaseException], None],
    ) -> None:
        self._loop = loop
        self._transport = transport
        self._use_sendfile = use_sendfile
        self._on_idle = on_idle
        self._on_error = on_error
        self._pending: deque[FramePart] = deque()
        self._region_pos = 0
        self._region_left = -1
        self._waiting_drain = False
        self._dup_fd = -1
        self._watching = False
        self._closed = False
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER, low=WRITE_LOW_WATER)

    @property
    def busy(self) -> bool:
        """True while a region (and what follows it) is still being written."""
        return bool(self._pending)

    @property
    def waiting_drain(self) -> bool:
        return self._waiting_drain

    def write(self, parts: Iterable[FramePart]) -> bool:
        """Write `parts`; False means a region is in progress and `on_idle` will be called when done."""
        if self._pending:
            self._pending.extend(parts)
            return False
        batch: list[bytes | bytearray | memoryview] = []
        it = iter(parts)
        for part in it:
            if isinstance(part, _BYTES_TYPES):
                batch.append(part)
                continue
            if batch:
                self._transport.writelines(batch)
                batch = []
            self._pending.append(part)
            self._pending.extend(it)
            self._continue(notify=False)
            return not self._pending
        if batch:
            self._transport.writelines(batch)
        return True

    # -- transport flow control, forwarded by the protocol --

    def resume_writing(self) -> None:
        """The transport buffer drained below the low-water mark (0 while we wait for a drain)."""
        if self._waiting_drain:
            self._waiting_drain = False
            self._transport.set_write_buffer_limits(high=WRITE_HIGH_WATER, low=WRITE_LOW_WATER)
            self._continue()

    def close(self) -> None:
        """Drop everything pending and the callbacks into the connection (no cycle outlives the close)."""
        self._closed = True
        self._pending.clear()
        self._on_idle = _noop
        self._on_error = _noop_error
        self._stop_watching()
        if self._dup_fd >= 0:
            os.close(self._dup_fd)
            self._dup_fd = -1

    # -- the state machine --

    def _continue(self, notify: bool = True) -> None:
        """Send pending parts; when all are sent and `notify`, tell the connection (async completion)."""
        try:
            while self._pending and not self._closed:
                part = self._pending[0]
                if isinstance(part, _BYTES_TYPES):
                    self._transport.write(part)
                    self._pending.popleft()
                    continue
                if self._region_left < 0:
                    self._region_pos = int(part.position)
                    self._region_left = int(part.size)
                if self._region_left > 0:
                    if self._transport.get_write_buffer_size() > 0:
                        self._wait_drain()
                        return
                    done = self._send_region(part) if self._use_sendfile else self._copy_region(part)
                    if not done:
                        return
                self._pending.popleft()
                self._region_left = -1
        except Exception as exc:  # a failed sendfile/pread: the connection cannot continue
            self._pending.clear()
            self._on_error(exc)
            return
        if notify and not self._closed:
            self._on_idle()

    def _wait_drain(self) -> None:
        self._waiting_drain = True
        # With limits (0, 0) the transport calls pause_writing now (something is buffered) and
        # resume_writing exactly when its buffer (and libuv's write queue) is empty.
        self._transport.set_write_buffer_limits(high=0, low=0)
        if self._transport.get_write_buffer_size() == 0 and self._waiting_drain:
            # Drained between the check and the call (no resume_writing will come): go on now.
            self._loop.call_soon(self.resume_writing)

    def _send_region(self, region: FileRegion) -> bool:
        if self._dup_fd < 0:
            sock = self._transport.get_extra_info("socket")
            self._dup_fd = os.dup(sock.fileno())
        in_fd = region.file.fileno()
        while self._region_left > 0:
            try:
                sent = os.sendfile(self._dup_fd, in_fd, self._region_pos, self._region_left)
            except (BlockingIOError, InterruptedError):
                self._watch_writable()
                return False
            except OSError as e:
                if e.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                    self._watch_writable()
                    return False
                raise
            if sent == 0:
                raise OSError(errno.EIO, f"file region {region!r} ends before its declared size")
            partial = sent < self._region_left
            self._region_pos += sent
            self._region_left -= sent
            if partial:
                # The socket buffer is full: the next call would only say EAGAIN. Wait for room
                # (level-triggered, so a spurious partial send costs one loop iteration at most).
                self._watch_writable()
                return False
        self._stop_watching()
        return True

    def _copy_region(self, region: FileRegion) -> bool:
        fd = region.file.fileno()
        while self._region_left > 0:
            if self._transport.get_write_buffer_size() >= WRITE_HIGH_WATER:
                self._wait_drain()
                return False
            n = min(self._region_left, FALLBACK_CHUNK)
            data = os.pread(fd, n, self._region_pos)
            if not data:
                raise OSError(errno.EIO, f"file region {region!r} ends before its declared size")
            self._transport.write(data)
            self._region_pos += len(data)
            self._region_left -= len(data)
        return True

    def _watch_writable(self) -> None:
        if not self._watching:
            self._watching = True
            self._loop.add_writer(self._dup_fd, self._on_writable)

    def _stop_watching(self) -> None:
        if self._watching:
            self._watching = False
            self._loop.remove_writer(self._dup_fd)

    def _on_writable(self) -> None:
        self._continue()
