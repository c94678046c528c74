"""kbroker.net.frames: the buffers request frames are read into, and their reuse (issue 17)."""

from __future__ import annotations

import mmap
import resource

import pytest

from kbroker.net import frames
from kbroker.net.frames import MAX_POOLED_BUFFERS, MAX_POOLED_BYTES, POOLED_FRAME_BYTES, FrameBuffers

pytestmark = pytest.mark.skipif(frames._uninitialised is None, reason="the compiled module is not built")


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _fill(view: memoryview, byte: int) -> None:
    view[:] = bytes([byte]) * len(view)


def test_small_frames_get_their_own_exact_buffer() -> None:
    buffers = FrameBuffers()
    a, va = buffers.take(100)
    b, vb = buffers.take(100)
    assert a is not b and len(va) == len(vb) == 100
    assert (buffers.allocated, buffers.reused, buffers.pooled_bytes) == (0, 0, 0)


def test_a_free_buffer_is_taken_again_with_its_pages_resident() -> None:
    buffers = FrameBuffers()
    first, view = buffers.take(1 << 20)
    _fill(view, 1)
    del view
    before = _minor_faults()
    again, view = buffers.take(1 << 20)
    _fill(view, 2)
    faults = _minor_faults() - before
    assert again is first and (buffers.allocated, buffers.reused) == (1, 1)
    assert faults < 16, f"{faults} page faults filling a reused 1 MiB buffer (256 pages)"


def test_a_buffer_still_viewed_is_not_taken() -> None:
    # A request keeps memoryviews of its frame (a produce's records) while it waits (acks=all): any
    # view, or a view of a slice of one, keeps the buffer from being reused.
    buffers = FrameBuffers()
    first, view = buffers.take(POOLED_FRAME_BYTES)
    records = view[10:20]
    del view
    second, view2 = buffers.take(POOLED_FRAME_BYTES)
    assert second is not first
    del records, view2
    third, _ = buffers.take(POOLED_FRAME_BYTES)
    assert third is first


def test_a_longer_buffer_serves_a_shorter_frame_through_an_exact_view() -> None:
    buffers = FrameBuffers()
    first, view = buffers.take(300_000)
    del view
    again, view = buffers.take(200_000)
    assert again is first and len(view) == 200_000
    del view
    longer, view = buffers.take(400_000)
    assert longer is not first and len(view) == 400_000


def test_the_pool_keeps_a_bounded_number_of_bytes_and_buffers() -> None:
    buffers = FrameBuffers()
    views = [buffers.take(1 << 20)[1] for _ in range(3 * MAX_POOLED_BYTES // (1 << 20))]
    assert buffers.pooled_bytes <= MAX_POOLED_BYTES
    views += [buffers.take(POOLED_FRAME_BYTES)[1] for _ in range(3 * MAX_POOLED_BUFFERS)]
    assert len(buffers._pooled) <= MAX_POOLED_BUFFERS and buffers.pooled_bytes <= MAX_POOLED_BYTES
    huge, view = buffers.take(MAX_POOLED_BYTES + 1)
    assert len(view) == MAX_POOLED_BYTES + 1 and all(b is not huge for b in buffers._pooled)
    del views, view
    buffers.clear()
    assert buffers.pooled_bytes == 0


def test_without_the_compiled_module_frames_are_zeroed_bytearrays_or_mmaps(monkeypatch) -> None:
    monkeypatch.setattr(frames, "_uninitialised", None)
    buffers = FrameBuffers()
    small, view = buffers.take(1000)
    assert isinstance(small, bytearray) and bytes(view) == bytes(1000)
    large, view = buffers.take(frames.MMAP_FRAME_THRESHOLD)
    assert isinstance(large, mmap.mmap) and len(view) == frames.MMAP_FRAME_THRESHOLD
    assert (buffers.allocated, buffers.reused) == (0, 0)
