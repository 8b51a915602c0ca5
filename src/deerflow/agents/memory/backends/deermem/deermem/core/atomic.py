"""Crash-safe file writes: a reader sees the old bytes or the new bytes, never a mix."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

__all__ = ["append_line", "atomic_write", "create_file", "fsync_dir", "truncate_torn_tail"]


def fsync_dir(path: Path) -> None:
    """Make the directory entries of `path` (creations, renames, deletions) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, sync_dir: bool = True) -> None:
    """Replace `path` with `data`: temp file in the same directory, fsync, rename.

    With `sync_dir=False` the caller fsyncs the directory itself, once for several files.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(temp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fdatasync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    if sync_dir:
        fsync_dir(path.parent)


def create_file(path: Path, data: bytes) -> None:
    """Create `path` (which must not exist) holding `data`, synced; the directory is not synced.

    Written in place, without a temp file and a rename: only for a commit whose journal can
    delete a file left half-written by a crash, and whose readers hold the user's lock.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fdatasync(fd)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    finally:
        os.close(fd)


def append_line(path: Path, line: bytes) -> None:
    """Append one newline-terminated record and fsync it."""
    with open(path, "ab") as handle:
        handle.write(line if line.endswith(b"\n") else line + b"\n")
        handle.flush()
        os.fdatasync(handle.fileno())


def truncate_torn_tail(path: Path) -> None:
    """Cut a last line that a crash left without its newline, so the next append starts clean."""
    if not path.exists():
        return
    with open(path, "rb+") as handle:
        data = handle.read()
        if not data or data.endswith(b"\n"):
            return
        handle.truncate(data.rfind(b"\n") + 1)
        handle.flush()
        os.fsync(handle.fileno())
