"""Tablet copy (Kudu's remote bootstrap), transfer half: move a consistent file image between servers.

The source opens a session: a provider (the tablet server) hard-links the files of a consistent image
into the session directory and hands over small blobs (metadata captured in memory), so compactions and
log GC on the source cannot disturb the copy. Sizes and CRC32C of every file are fixed at session start;
a file still growing (the active WAL segment) is served only up to its recorded size. The fetcher pulls
each file in chunks, checks every chunk's and every file's CRC32C, fsyncs, and removes what it wrote if
anything fails. This module knows nothing of tablets: consensus must not import them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import secrets
import shutil
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import crc32c

from kudu_async.common.errors import (
    KuduBadStatus,
    KuduCorruption,
    KuduInvalidArgument,
    KuduNotFound,
    KuduServiceUnavailable,
    KuduTimedOut,
)
from kudu_async.fs.io_util import fsync_dir
from kudu_async.rpc.client import RpcClient
from kudu_async.rpc.server import CallContext, RpcServer, require_map

log = logging.getLogger(__name__)

SERVICE = "TabletCopy"
READ_BLOCK = 1024 * 1024


@dataclass
class CopyManifest:
    files: dict[str, Path]  # relative destination name -> stable file on the source (e.g. linked into the session)
    blobs: dict[str, bytes]  # relative destination name -> bytes captured at session start
    meta: dict[str, Any]  # msgpack-able; handed to the fetcher verbatim


ManifestProvider = Callable[[str, dict[str, Any], Path], Awaitable[CopyManifest]]


def check_relative_name(name: Any) -> str:
    """A relative, normalised path inside the image: never absolute, never escaping with ``..``."""
    if not isinstance(name, str) or not name or len(name) > 512 or "\\" in name or "\0" in name:
        raise KuduInvalidArgument(f"bad file name in tablet copy: {name!r}")
    p = PurePosixPath(name)
    if p.is_absolute() or any(part in ("..", ".", "") for part in name.split("/")):
        raise KuduInvalidArgument(f"file name {name!r} in tablet copy must be relative and normalised")
    return name


def link_or_copy(src: Path, dst: Path) -> None:
    """Hard-link ``src`` at ``dst`` (same inode: later deletes of ``src`` do not matter), copying across devices."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _file_crc(path: Path, size: int) -> int:
    crc = 0
    with open(path, "rb") as f:
        left = size
        while left > 0:
            block = f.read(min(READ_BLOCK, left))
            if not block:
                raise KuduCorruption(f"{path} shrank below its recorded size {size}")
            crc = crc32c.crc32c(block, crc)
            left -= len(block)
    return crc


@dataclass
class _Session:
    id: str
    group: str
    dir: Path
    files: dict[str, tuple[Path, int, int]]  # name -> (path, size, crc)
    meta: dict[str, Any]
    last_access: float = field(default_factory=time.monotonic)
    bytes_sent: int = 0


class TabletCopySource:
    """Serves copy sessions: ``TabletCopy/BeginSession``, ``FetchData``, ``EndSession``."""

    def __init__(self, staging_root: Path, provider: ManifestProvider, executor: Executor | None = None, *,
                 session_idle_timeout_s: float = 60.0, max_sessions: int = 8,
                 max_chunk_bytes: int = 4 * 1024 * 1024) -> None:
        self.staging_root = staging_root
        self.provider = provider
        self.executor = executor
        self.session_idle_timeout_s = session_idle_timeout_s
        self.max_sessions = max_sessions
        self.max_chunk_bytes = max_chunk_bytes
        self.sessions: dict[str, _Session] = {}
        self._starting = 0
        self._task: asyncio.Task[None] | None = None

    def register_rpc(self, server: RpcServer) -> None:
        server.register(SERVICE, "BeginSession", self._rpc_begin)
        server.register(SERVICE, "FetchData", self._rpc_fetch)
        server.register(SERVICE, "EndSession", self._rpc_end)

    async def start(self) -> None:
        await self._run(_rmtree, self.staging_root)  # sessions of a previous process are gone with it
        self._task = asyncio.get_running_loop().create_task(self._reap(), name="tablet-copy-reaper")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        for sid in list(self.sessions):
            await self._end(sid)

    def status(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        return [{"session_id": s.id, "group": s.group, "files": len(s.files),
                 "bytes": sum(f[1] for f in s.files.values()), "bytes_sent": s.bytes_sent,
                 "idle_s": round(now - s.last_access, 3)} for s in self.sessions.values()]

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    async def _rpc_begin(self, request: Any, ctx: CallContext) -> dict[str, Any]:
        req = require_map(request)
        group = req.get("group")
        if not isinstance(group, str) or not group:
            raise KuduInvalidArgument("'group' must be a non-empty string")
        extra = req.get("extra") or {}
        if not isinstance(extra, dict):
            raise KuduInvalidArgument("'extra' must be a map")
        if len(self.sessions) + self._starting >= self.max_sessions:
            raise KuduServiceUnavailable(f"{self.max_sessions} tablet copy sessions already open; retry later",
                                         {"retryable": True})
        sid = secrets.token_hex(12)
        sdir = self.staging_root / sid
        self._starting += 1
        try:
            await self._run(lambda: sdir.mkdir(parents=True, exist_ok=False))
            try:
                manifest = await self.provider(group, extra, sdir)
                files = await self._run(self._freeze, manifest, sdir)
            except BaseException:
                await self._run(_rmtree, sdir)
                raise
        finally:
            self._starting -= 1
        session = _Session(sid, group, sdir, files, dict(manifest.meta))
        self.sessions[sid] = session
        log.info("tablet copy session started", extra={"session": sid, "group": group, "files": len(files),
                                                       "bytes": sum(f[1] for f in files.values())})
        return {"session_id": sid, "meta": session.meta,
                "files": [{"name": n, "size": f[1], "crc32c": f[2]} for n, f in sorted(files.items())]}

    @staticmethod
    def _freeze(manifest: CopyManifest, sdir: Path) -> dict[str, tuple[Path, int, int]]:
        out: dict[str, tuple[Path, int, int]] = {}
        for name, data in manifest.blobs.items():
            check_relative_name(name)
            path = sdir / "blobs" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            out[name] = (path, len(data), crc32c.crc32c(data))
        for name, path in manifest.files.items():
            check_relative_name(name)
            if name in out:
                raise KuduInvalidArgument(f"tablet copy manifest names {name!r} twice")
            size = os.path.getsize(path)
            out[name] = (Path(path), size, _file_crc(Path(path), size))
        return out

    def _session(self, req: dict[str, Any]) -> _Session:
        sid = req.get("session_id")
        s = self.sessions.get(sid) if isinstance(sid, str) else None
        if s is None:
            raise KuduNotFound(f"tablet copy session {sid!r} not found (ended or expired after "
                               f"{self.session_idle_timeout_s:.0f}s idle)")
        s.last_access = time.monotonic()
        return s

    async def _rpc_fetch(self, request: Any, ctx: CallContext) -> dict[str, Any]:
        req = require_map(request)
        s = self._session(req)
        name = check_relative_name(req.get("name"))
        f = s.files.get(name)
        if f is None:
            raise KuduInvalidArgument(f"session {s.id} has no file {name!r}")
        offset, max_bytes = req.get("offset"), req.get("max_bytes", self.max_chunk_bytes)
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= f[1]:
            raise KuduInvalidArgument(f"'offset' must be 0..{f[1]} for {name!r}")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
            raise KuduInvalidArgument("'max_bytes' must be a positive integer")
        n = min(max_bytes, self.max_chunk_bytes, f[1] - offset)
        data = await self._run(self._read, f[0], offset, n)
        s.bytes_sent += len(data)
        s.last_access = time.monotonic()
        crc = crc32c.crc32c(data)
        return {"data": self._chunk_hook(data), "crc32c": crc, "eof": offset + len(data) >= f[1]}

    def _read(self, path: Path, offset: int, n: int) -> bytes:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read(n)
        if len(data) != n:
            raise KuduCorruption(f"{path}: short read at {offset}")
        return data

    def _chunk_hook(self, data: bytes) -> bytes:
        """Identity; tests override it to damage a chunk after its CRC is taken (damage in flight)."""
        return data

    async def _rpc_end(self, request: Any, ctx: CallContext) -> dict[str, Any]:
        sid = require_map(request).get("session_id")
        if isinstance(sid, str):
            await self._end(sid)
        return {}

    async def _end(self, sid: str) -> None:
        s = self.sessions.pop(sid, None)
        if s is not None:
            await self._run(_rmtree, s.dir)

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(min(5.0, max(0.05, self.session_idle_timeout_s / 4)))
            now = time.monotonic()
            for s in [s for s in self.sessions.values() if now - s.last_access > self.session_idle_timeout_s]:
                log.warning("tablet copy session expired", extra={"session": s.id, "group": s.group})
                try:
                    await self._end(s.id)
                except OSError:
                    log.exception("removing an expired copy session failed; retrying later")


async def fetch_tablet_copy(rpc_client: RpcClient, source_address: str, group: str, dest_dir: Path, *,
                            extra: dict[str, Any] | None = None, chunk_bytes: int = 1024 * 1024,
                            timeout_s: float = 300.0, executor: Executor | None = None,
                            progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Copy ``group``'s image from ``source_address`` into ``dest_dir``; returns the source's meta.

    On any failure ``dest_dir`` is removed and the error raised. Every file and directory is fsynced.
    """
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + timeout_s

    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise KuduTimedOut(f"tablet copy of {group} from {source_address} did not finish in {timeout_s:.0f}s")
        return remaining

    def _prepare() -> None:
        if dest_dir.exists() and any(dest_dir.iterdir()):
            raise KuduInvalidArgument(f"tablet copy destination {dest_dir} is not empty")
        dest_dir.mkdir(parents=True, exist_ok=True)

    await loop.run_in_executor(executor, _prepare)
    session_id: str | None = None
    try:
        begin = await rpc_client.call(source_address, SERVICE, "BeginSession", {"group": group, "extra": extra or {}},
                                      timeout_s=min(left(), 60.0))
        session_id = begin["session_id"]
        files = begin["files"]
        total = sum(int(f["size"]) for f in files)
        done = 0
        for f in files:
            name = check_relative_name(f["name"])
            size, want_crc = int(f["size"]), int(f["crc32c"])
            path = dest_dir / name
            fh = await loop.run_in_executor(executor, _open_for_write, path)
            try:
                offset, crc = 0, 0
                while offset < size:
                    chunk = await _fetch_chunk(rpc_client, source_address, session_id, name, offset,
                                               chunk_bytes, left, group)
                    await loop.run_in_executor(executor, fh.write, chunk)
                    crc = crc32c.crc32c(chunk, crc)
                    offset += len(chunk)
                    done += len(chunk)
                    if progress is not None:
                        progress(done, total)
                if offset != size or crc != want_crc:
                    raise KuduCorruption(f"tablet copy of {group}: {name} has {offset} bytes with CRC32C {crc:#x}, "
                                         f"the source said {size} bytes with {want_crc:#x}")
                await loop.run_in_executor(executor, _sync_close, fh)
            except BaseException:
                await loop.run_in_executor(executor, fh.close)
                raise
        await loop.run_in_executor(executor, _fsync_tree, dest_dir)
        meta: dict[str, Any] = dict(begin.get("meta") or {})
        return meta
    except BaseException:
        await loop.run_in_executor(executor, _rmtree, dest_dir)
        raise
    finally:
        if session_id is not None:
            try:
                await rpc_client.call(source_address, SERVICE, "EndSession", {"session_id": session_id},
                                      timeout_s=5.0)
            except KuduBadStatus as e:
                log.info("ending a tablet copy session failed (it will expire)", extra={"error": str(e)})


async def _fetch_chunk(rpc: RpcClient, address: str, session_id: str, name: str, offset: int, chunk_bytes: int,
                       left: Callable[[], float], group: str) -> bytes:
    """One chunk, retried with jittered backoff on transient errors; a damaged chunk is refetched once."""
    delay = 0.05
    damaged = 0
    while True:
        try:
            reply = await rpc.call(address, SERVICE, "FetchData", {"session_id": session_id, "name": name,
                                                                   "offset": offset, "max_bytes": chunk_bytes},
                                   timeout_s=min(left(), 30.0))
            data = reply["data"]
            if not isinstance(data, bytes) or not data or crc32c.crc32c(data) != reply["crc32c"]:
                damaged += 1
                if damaged > 1:
                    raise KuduCorruption(f"tablet copy of {group}: chunk of {name} at offset {offset} failed its "
                                         "CRC32C check twice")
                continue
            return data
        except (KuduNotFound, KuduInvalidArgument, KuduCorruption):
            raise
        except KuduBadStatus as e:
            remaining = left()
            log.info("tablet copy chunk failed; retrying", extra={"group": group, "file": name, "error": str(e)})
            await asyncio.sleep(min(remaining, delay * random.uniform(0.5, 1.0)))
            delay = min(2.0, delay * 2)


def _open_for_write(path: Path) -> Any:
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "xb")


def _sync_close(fh: Any) -> None:
    fh.flush()
    os.fsync(fh.fileno())
    fh.close()


def _fsync_tree(root: Path) -> None:
    for d, _, _ in os.walk(root):
        fsync_dir(d)
    fsync_dir(str(root.parent))


def _rmtree(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path)
