"""Crash-safe file primitives: a file is either absent, or complete and durable under its final name.

Every durable file is written to a temporary name, fsynced, renamed over the final name and then the
directory is fsynced so the rename itself survives a power cut (POSIX gives no guarantee otherwise).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import BinaryIO

TMP_SUFFIX = ".tmp"


StrPath = str | os.PathLike[str]


def fsync_dir(path: StrPath) -> None:
    """Make the directory entry changes (create, rename, unlink) under ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: StrPath, data: bytes, *, sync: bool = True) -> None:
    """Replace ``path`` by ``data`` atomically: readers and crashes see the old or the new bytes only."""
    atomic_write_with(path, lambda f: f.write(data), sync=sync)


def atomic_write_with(path: StrPath, writer: Callable[[BinaryIO], object], *, sync: bool = True) -> None:
    """Write ``path`` through ``writer(file)`` to a temp file, fsync, rename, fsync the directory."""
    path = os.fspath(path)
    tmp = path + TMP_SUFFIX
    try:
        with open(tmp, "wb") as f:
            writer(f)
            f.flush()
            if sync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if sync:
        fsync_dir(os.path.dirname(os.path.abspath(path)))


def remove_stale_temp_files(directory: str) -> list[str]:
    """Delete temp files left by a crash mid-write; returns the names removed."""
    removed = []
    for name in os.listdir(directory):
        if name.endswith(TMP_SUFFIX):
            os.unlink(os.path.join(directory, name))
            removed.append(name)
    return removed
