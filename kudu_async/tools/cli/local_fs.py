"""What the offline verbs (``local_replica``, ``fs``) share: Kudu's ``-fs_wal_dir``/``-fs_data_dirs``/
``-fs_metadata_dir`` flags naming a stopped node's directory, and opening it under the node's lock.

A kudu_async node keeps its WALs, metadata and blocks under one ``--data-dir``, so the three flags name that
one directory: any of them may be given, and when several are they must agree.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from kudu_async.tools.cli.framework import UsageError, csv_list, flag
from kudu_async.tserver.local_replicas import LocalDataDir

_T = TypeVar("_T")
_FS_FLAGS = ("fs_wal_dir", "fs_data_dirs", "fs_metadata_dir")


def add_fs_flags(p: argparse.ArgumentParser) -> None:
    flag(p, "fs_wal_dir", metavar="DIR", help="the node's --data-dir (it holds the WALs)")
    flag(p, "fs_data_dirs", metavar="DIR", help="the node's --data-dir (it holds the blocks); one directory")
    flag(p, "fs_metadata_dir", metavar="DIR", help="the node's --data-dir (it holds the metadata)")


def data_dir(a: argparse.Namespace) -> Path:
    """The one directory the -fs_* flags name; UsageError when none is given or they disagree."""
    given: dict[str, Path] = {}
    for name in _FS_FLAGS:
        value = getattr(a, name)
        if value is None:
            continue
        dirs = csv_list(value, f"-{name}") or []
        if len(dirs) != 1:
            raise UsageError(f"-{name}: a kudu_async node has one data directory, got {len(dirs)}: {value!r}")
        given[name] = Path(dirs[0]).resolve()
    if not given:
        raise UsageError("-fs_wal_dir is required: the stopped node's --data-dir")
    if len(set(given.values())) > 1:
        named = ", ".join(f"-{k}={v}" for k, v in given.items())
        raise UsageError(f"a kudu_async node keeps WALs, metadata and blocks in one --data-dir; these differ: {named}")
    return next(iter(given.values()))


async def with_dir(a: argparse.Namespace, tool: str, work: Callable[[LocalDataDir], _T], *, lock: bool = True) -> _T:
    """Run ``work`` on the opened directory in a worker thread, the directory's lock held throughout."""
    root = data_dir(a)

    def run() -> _T:
        with LocalDataDir.open(root, tool, lock=lock) as d:
            return work(d)

    return await asyncio.to_thread(run)
