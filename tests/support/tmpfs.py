"""A small tmpfs mounted for one test: a file system that really fills up (ENOSPC, and SIGBUS for a
store into an unallocated page of a memory mapping), which no monkeypatch can imitate.

    with small_tmpfs(tmp_path / "mnt", 2 * 1024 * 1024) as mnt:
        fill(mnt)            # leaves (almost) no free byte
        ...

Mounting needs root (CAP_SYS_ADMIN); the caller skips with the reason `tmpfs_unavailable_reason()`
gives. The mount is lazily unmounted on exit even if the test failed, so nothing is left behind.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def tmpfs_unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "mounting a small tmpfs to fill a disk needs root"
    return None


@contextmanager
def small_tmpfs(mountpoint: Path, size_bytes: int) -> Iterator[Path]:
    mountpoint.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(mountpoint)], check=True)
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)


def fill(directory: Path, leave_bytes: int = 0, name: str = "filler") -> Path:
    """Write a file until the file system is full (less ``leave_bytes``, freed again at the end)."""
    path = directory / name
    chunk = b"\xab" * 4096
    with open(path, "ab", buffering=0) as f:
        while True:
            try:
                f.write(chunk)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                break
        if leave_bytes:
            size = os.fstat(f.fileno()).st_size
            os.ftruncate(f.fileno(), max(0, size - leave_bytes))
    return path
