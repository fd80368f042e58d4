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
import errno
import logging
import os
import secrets
import shutil
import stat
import time
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

import crc32c

from kudu_async.common.errors import (
    KuduBadStatus,
    KuduCorruption,
    KuduIllegalState,
    KuduInvalidArgument,
    KuduIOError,
    KuduNotFound,
    KuduRemoteError,
    KuduServiceUnavailable,
)
from kudu_async.common.retry import TRANSIENT, Backoff, BackoffPolicy, Deadline
from kudu_async.consensus import copy_messages as tm
from kudu_async.fs.io_util import fsync_dir
from kudu_async.rpc import codec
from kudu_async.rpc.client import RpcClient
from kudu_async.rpc.messages import Method, ServiceTable, serve
from kudu_async.rpc.server import CallContext, RpcServer

log = logging.getLogger(__name__)

SERVICE = "TabletCopy"
READ_BLOCK = 1024 * 1024
BLOBS_DIR = ".blobs"  # inside a session dir: where blobs are written; providers must not use this name
MAX_NAME_LEN = 512

_T = TypeVar("_T")

# os.link failures that mean "no hard link possible here", not "something is wrong": copy instead.
_LINK_FALLBACK_ERRNOS = frozenset({errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP})


@dataclass
class CopyManifest:
    files: dict[str, Path]  # relative destination name -> stable file on the source (e.g. linked into the session)
    blobs: dict[str, bytes]  # relative destination name -> bytes captured at session start
    meta: dict[str, Any]  # msgpack-able; handed to the fetcher verbatim


ManifestProvider = Callable[[str, dict[str, Any], Path], Awaitable[CopyManifest]]


def check_relative_name(name: Any) -> str:
    """A relative, normalised path inside the image: never absolute, never escaping with ``..``."""
    if not isinstance(name, str) or not name or len(name) > MAX_NAME_LEN or "\\" in name or "\0" in name:
        raise KuduInvalidArgument(f"bad file name in tablet copy: {name!r:.600}")
    p = PurePosixPath(name)
    if p.is_absolute() or any(part in ("..", ".", "") for part in name.split("/")):
        raise KuduInvalidArgument(f"file name {name!r} in tablet copy must be relative and normalised")
    return name


def check_names(names: Iterable[Any]) -> list[str]:
    """Every name valid, none twice, none a directory of another (``a`` and ``a/b`` cannot both be files)."""
    out = [check_relative_name(n) for n in names]
    seen = set(out)
    if len(seen) != len(out):
        raise KuduInvalidArgument("tablet copy file list names a file twice")
    for n in out:
        for parent in PurePosixPath(n).parents:
            if str(parent) in seen:
                raise KuduInvalidArgument(f"tablet copy file list has both {str(parent)!r} and {n!r}")
    return out


def link_or_copy(src: Path, dst: Path) -> None:
    """Hard-link ``src`` at ``dst`` (same inode: later deletes of ``src`` do not matter), copying across devices.

    Only "cannot link here" errors fall back to a copy; a missing ``src`` or an existing ``dst`` raise.
    """
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError as e:
        if e.errno not in _LINK_FALLBACK_ERRNOS:
            raise
        if dst.exists():
            raise FileExistsError(errno.EEXIST, "tablet copy will not overwrite", str(dst)) from e
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


async def _offload(executor: Executor | None, fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` in the executor. If we are cancelled meanwhile, the worker still runs to its end: wait for
    it before re-raising, so that the cleanup that follows never races a write or mkdir still in progress."""
    fut = asyncio.get_running_loop().run_in_executor(executor, fn, *args)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        await asyncio.wait([fut])
        if not fut.cancelled() and fut.exception() is not None:
            log.debug("executor work finished with an error after cancellation", exc_info=fut.exception())
        raise


@dataclass
class _Session:
    id: str
    group: str
    dir: Path
    files: dict[str, tuple[Path, int, int]]  # name -> (path, size, crc)
    meta: dict[str, Any]
    last_access: float = field(default_factory=time.monotonic)
    bytes_sent: int = 0
    reading: int = 0  # FetchData reads in flight: the reaper leaves such a session alone


class TabletCopySource:
    """Serves copy sessions: ``TabletCopy/BeginSession``, ``FetchData``, ``EndSession``."""

    def __init__(
        self,
        staging_root: Path,
        provider: ManifestProvider,
        executor: Executor | None = None,
        *,
        session_idle_timeout_s: float = 60.0,
        max_sessions: int = 8,
        max_chunk_bytes: int = 4 * 1024 * 1024,
    ) -> None:
        if session_idle_timeout_s <= 0 or max_sessions <= 0 or max_chunk_bytes <= 0:
            raise KuduInvalidArgument("tablet copy source limits must be positive")
        self.staging_root = staging_root
        self.provider = provider
        self.executor = executor
        self.session_idle_timeout_s = session_idle_timeout_s
        self.max_sessions = max_sessions
        self.max_chunk_bytes = max_chunk_bytes
        self.sessions: dict[str, _Session] = {}
        self._starting = 0
        self._stopped = False
        self._orphans: set[Path] = set()  # session dirs whose removal failed; the reaper retries them
        self._task: asyncio.Task[None] | None = None

    def methods(self) -> ServiceTable:
        """The ``TabletCopy`` protocol: each method with its request and response messages."""
        return {
            "BeginSession": Method(
                tm.BeginSessionRequest, tm.BeginSessionResponse, self._rpc_begin, requires="service"
            ),
            "FetchData": Method(tm.FetchDataRequest, tm.FetchDataResponse, self._rpc_fetch, requires="service"),
            "EndSession": Method(tm.EndSessionRequest, tm.EndSessionResponse, self._rpc_end, requires="service"),
        }

    def register_rpc(self, server: RpcServer) -> None:
        serve(server, SERVICE, self.methods())

    async def start(self) -> None:
        """Wipe sessions left by a previous process (their clients are gone) and start the idle reaper."""
        if self._task is not None:
            return
        self._stopped = False
        await self._run(_rmtree, self.staging_root)
        self._task = asyncio.get_running_loop().create_task(self._reap(), name="tablet-copy-reaper")

    async def stop(self) -> None:
        """End every session and refuse new ones; a BeginSession still running removes its own dir."""
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        for sid in list(self.sessions):
            await self._end(sid)
        for d in list(self._orphans):
            await self._remove_dir(d)

    def status(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        return [
            {
                "id": s.id,
                "session_id": s.id,
                "group": s.group,
                "files": len(s.files),
                "bytes": sum(f[1] for f in s.files.values()),
                "bytes_sent": s.bytes_sent,
                "idle_s": round(now - s.last_access, 3),
            }
            for s in self.sessions.values()
        ]

    async def _run(self, fn: Callable[..., _T], *args: Any) -> _T:
        return await _offload(self.executor, fn, *args)

    async def _rpc_begin(self, request: tm.BeginSessionRequest, ctx: CallContext) -> tm.BeginSessionResponse:
        group = request.group
        extra = request.extra or {}
        if self._stopped:
            raise KuduServiceUnavailable("tablet copy source is stopped", {"retryable": True})
        if len(self.sessions) + self._starting >= self.max_sessions:
            raise KuduServiceUnavailable(
                f"{self.max_sessions} tablet copy sessions already open; retry later", {"retryable": True}
            )
        sid = secrets.token_hex(12)
        sdir = self.staging_root / sid
        self._starting += 1
        try:
            # Shielded: a provider cancelled half-way could leave links behind after our cleanup.
            prep = asyncio.get_running_loop().create_task(self._prepare(group, extra, sdir))
            try:
                files, meta = await asyncio.shield(prep)
            except asyncio.CancelledError:
                await asyncio.wait([prep])
                if not prep.cancelled() and prep.exception() is None:
                    await self._remove_dir(sdir)
                raise
        finally:
            self._starting -= 1
        if self._stopped:  # stop() ran while the provider worked: nobody will end this session
            await self._remove_dir(sdir)
            raise KuduServiceUnavailable(
                "tablet copy source stopped while the session was being set up", {"retryable": True}
            )
        session = _Session(sid, group, sdir, files, meta)
        self.sessions[sid] = session
        log.info(
            "tablet copy session started",
            extra={"session": sid, "group": group, "files": len(files), "bytes": sum(f[1] for f in files.values())},
        )
        return tm.BeginSessionResponse(
            session_id=sid,
            meta=meta,
            files=[tm.CopyFile(name=n, size=f[1], crc32c=f[2]) for n, f in sorted(files.items())],
        )

    async def _prepare(
        self, group: str, extra: dict[str, Any], sdir: Path
    ) -> tuple[dict[str, tuple[Path, int, int]], dict[str, Any]]:
        """Session dir, manifest, then sizes and CRCs frozen; on any failure the dir is gone again."""
        await self._run(lambda: sdir.mkdir(parents=True, exist_ok=False))
        try:
            manifest = await self.provider(group, extra, sdir)
            if not isinstance(manifest, CopyManifest) or not isinstance(manifest.meta, dict):
                raise KuduIllegalState(f"tablet copy provider returned {type(manifest).__name__}, not a CopyManifest")
            try:
                codec.encode_msgpack(manifest.meta)
            except (TypeError, ValueError, OverflowError) as e:
                raise KuduInvalidArgument(f"tablet copy meta for {group} is not msgpack-able: {e}") from None
            try:
                files = await self._run(self._freeze, manifest, sdir)
            except OSError as e:
                raise KuduIOError(f"tablet copy session for {group}: {e}") from e
            return files, dict(manifest.meta)
        except BaseException:
            await self._remove_dir(sdir)
            raise

    @staticmethod
    def _freeze(manifest: CopyManifest, sdir: Path) -> dict[str, tuple[Path, int, int]]:
        """Write the blobs and fix every file's size and CRC32C (runs in the executor)."""
        check_names([*manifest.blobs, *manifest.files])
        out: dict[str, tuple[Path, int, int]] = {}
        for name, data in manifest.blobs.items():
            if not isinstance(data, bytes | bytearray):
                raise KuduInvalidArgument(f"tablet copy blob {name!r} is {type(data).__name__}, not bytes")
            path = sdir / BLOBS_DIR / name
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "xb") as f:
                f.write(data)
            out[name] = (path, len(data), crc32c.crc32c(data))
        for name, src in manifest.files.items():
            path = Path(src)
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode):
                raise KuduInvalidArgument(f"tablet copy file {name!r} ({path}) is not a regular file")
            out[name] = (path, st.st_size, _file_crc(path, st.st_size))
        return out

    def _session(self, sid: str | None) -> _Session:
        s = self.sessions.get(sid) if sid is not None else None
        if s is None:
            raise KuduNotFound(
                f"tablet copy session {sid!r:.40} not found (ended or expired after "
                f"{self.session_idle_timeout_s:g}s idle)"
            )
        s.last_access = time.monotonic()
        return s

    async def _rpc_fetch(self, request: tm.FetchDataRequest, ctx: CallContext) -> tm.FetchDataResponse:
        s = self._session(request.session_id)
        name = check_relative_name(request.name)
        f = s.files.get(name)
        if f is None:
            raise KuduInvalidArgument(f"session {s.id} has no file {name!r}")
        offset = request.offset
        if offset > f[1]:
            raise KuduInvalidArgument(f"'offset' must be 0..{f[1]} for {name!r}, got {offset!r:.40}")
        max_bytes = self.max_chunk_bytes if request.max_bytes is None else request.max_bytes
        n = min(max_bytes, self.max_chunk_bytes, f[1] - offset)
        s.reading += 1
        try:
            data, crc = await self._run(self._read, f[0], offset, n)
        except OSError as e:
            if s.id not in self.sessions:  # EndSession removed the dir under our read
                raise KuduNotFound(f"tablet copy session {s.id} ended while {name!r} was being read") from e
            raise KuduIOError(f"tablet copy session {s.id}: reading {name!r} at {offset}: {e}") from e
        finally:
            s.reading -= 1
        s.bytes_sent += len(data)
        s.last_access = time.monotonic()
        return tm.FetchDataResponse(data=self._chunk_hook(data), crc32c=crc, eof=offset + len(data) >= f[1])

    @staticmethod
    def _read(path: Path, offset: int, n: int) -> tuple[bytes, int]:
        """``n`` bytes at ``offset`` and their CRC32C (runs in the executor)."""
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read(n)
        if len(data) != n:
            raise KuduCorruption(f"{path}: short read at offset {offset}: {len(data)} of {n} bytes")
        return data, crc32c.crc32c(data)

    def _chunk_hook(self, data: bytes) -> bytes:
        """Identity; tests override it to damage a chunk after its CRC is taken (damage in flight)."""
        return data

    async def _rpc_end(self, request: tm.EndSessionRequest, ctx: CallContext) -> tm.EndSessionResponse:
        if request.session_id is not None:
            await self._end(request.session_id)
        return tm.EndSessionResponse()

    async def _end(self, sid: str) -> None:
        s = self.sessions.pop(sid, None)
        if s is not None:
            await self._remove_dir(s.dir)

    async def _remove_dir(self, d: Path) -> None:
        """Remove a session dir; a failure is logged and retried by the reaper rather than raised."""
        try:
            await self._run(_rmtree, d)
        except OSError:
            log.exception("removing tablet copy session dir %s failed; will retry", d)
            self._orphans.add(d)
        else:
            self._orphans.discard(d)

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(min(5.0, max(0.05, self.session_idle_timeout_s / 4)))
            now = time.monotonic()
            for s in [
                s
                for s in self.sessions.values()
                if s.reading == 0 and now - s.last_access > self.session_idle_timeout_s
            ]:
                log.warning(
                    "tablet copy session expired",
                    extra={"session": s.id, "group": s.group, "idle_s": round(now - s.last_access, 1)},
                )
                await self._end(s.id)
            for d in list(self._orphans):
                await self._remove_dir(d)


# A chunk is retried on TRANSIENT failures only (the copy reads one source's files): anything else (NOT_FOUND
# for an expired session, a bad request, corruption, the source's disk failing) will not get better by asking
# again. Chunks are large, so retries start slower than a client's.
CHUNK_BACKOFF = BackoffPolicy(initial_s=0.05, max_s=2.0)


async def fetch_tablet_copy(
    rpc_client: RpcClient,
    source_address: str,
    group: str,
    dest_dir: Path,
    *,
    chunk_bytes: int = 1024 * 1024,
    timeout_s: float = 300.0,
    executor: Executor | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Copy ``group``'s image from ``source_address`` into ``dest_dir``; returns the source's meta.

    ``dest_dir`` must not exist or be empty. On any failure (cancellation included) ``dest_dir`` is removed
    and the error raised; on success every file and directory under it is fsynced. One chunk is in memory
    at a time. The session is always ended (best effort: an unreachable source expires it).
    """
    if chunk_bytes <= 0 or timeout_s <= 0:
        raise KuduInvalidArgument("chunk_bytes and timeout_s must be positive")
    deadline = Deadline(timeout_s, f"tablet copy of {group} from {source_address}")

    def _prepare() -> None:
        if dest_dir.exists() and (not dest_dir.is_dir() or any(dest_dir.iterdir())):
            raise KuduInvalidArgument(f"tablet copy destination {dest_dir} is not an empty directory")
        dest_dir.mkdir(parents=True, exist_ok=True)

    await _offload(executor, _prepare)
    session_id: str | None = None
    try:
        begin = await rpc_client.call(
            source_address,
            SERVICE,
            "BeginSession",
            {"group": group},
            timeout_s=min(deadline.left(), 60.0),
        )
        if isinstance(begin, dict) and isinstance(begin.get("session_id"), str):
            session_id = begin["session_id"]  # known before anything else is checked: it is ended below
        files, meta = _parse_begin(begin, group, source_address)
        total = sum(size for _, size, _ in files)
        done = 0
        for name, size, want_crc in files:
            assert session_id is not None
            fh = await _offload(executor, _open_for_write, dest_dir / name)
            try:
                offset, crc = 0, 0
                while offset < size:
                    chunk = await _fetch_chunk(
                        rpc_client,
                        source_address,
                        session_id,
                        name,
                        offset,
                        min(chunk_bytes, size - offset),
                        deadline,
                        group,
                    )
                    crc = await _offload(executor, _write, fh, chunk, crc)
                    offset += len(chunk)
                    done += len(chunk)
                    del chunk  # bounded memory: at most one chunk alive
                    if progress is not None:
                        progress(done, total)
                if crc != want_crc:
                    raise KuduCorruption(
                        f"tablet copy of {group}: {name} ({size} bytes) has CRC32C {crc:#010x}, "
                        f"the source said {want_crc:#010x}"
                    )
                await _offload(executor, _sync_close, fh)
            except BaseException:
                await _offload(executor, _close_quietly, fh)
                raise
        await _offload(executor, _fsync_tree, dest_dir)
        return meta
    except BaseException:
        try:
            await _offload(executor, _rmtree, dest_dir)
        except OSError:
            log.exception("removing the failed tablet copy at %s failed", dest_dir)
        raise
    finally:
        if session_id is not None:
            try:
                await rpc_client.call(source_address, SERVICE, "EndSession", {"session_id": session_id}, timeout_s=5.0)
            except KuduBadStatus as e:
                log.info("ending a tablet copy session failed (it will expire)", extra={"error": str(e)})


def _parse_begin(begin: Any, group: str, source: str) -> tuple[list[tuple[str, int, int]], dict[str, Any]]:
    """The source's file list, checked before a byte is written: a malicious or broken source must not
    be able to write outside the destination, nor make us loop on nonsense sizes."""
    if not isinstance(begin, dict) or not isinstance(begin.get("session_id"), str):
        raise KuduRemoteError(f"tablet copy of {group}: {source} answered BeginSession without a session id")
    raw, meta = begin.get("files"), begin.get("meta")
    if not isinstance(raw, list) or not isinstance(meta, dict | None):
        raise KuduRemoteError(f"tablet copy of {group}: {source} sent a malformed file list or meta")
    files: list[tuple[str, int, int]] = []
    for f in raw:
        size, crc = (f.get("size"), f.get("crc32c")) if isinstance(f, dict) else (None, None)
        if (
            isinstance(size, bool)
            or not isinstance(size, int)
            or size < 0
            or isinstance(crc, bool)
            or not isinstance(crc, int)
            or not 0 <= crc < 1 << 32
        ):
            raise KuduRemoteError(f"tablet copy of {group}: {source} sent a bad file entry {f!r:.200}")
        files.append((f.get("name"), size, crc))
    check_names(name for name, _, _ in files)
    return files, dict(meta or {})


async def _fetch_chunk(
    rpc: RpcClient, address: str, session_id: str, name: str, offset: int, want: int, deadline: Deadline, group: str
) -> bytes:
    """Up to ``want`` bytes of ``name`` at ``offset``: transient failures retried with jittered exponential
    backoff inside the deadline; a chunk failing its CRC32C is refetched once (damage in flight)."""
    backoff = Backoff(CHUNK_BACKOFF)
    damaged = 0
    last: BaseException | None = None
    while True:
        call_timeout = min(deadline.left(last), 30.0)
        try:
            reply = await rpc.call(
                address,
                SERVICE,
                "FetchData",
                {"session_id": session_id, "name": name, "offset": offset, "max_bytes": want},
                timeout_s=call_timeout,
            )
        except TRANSIENT as e:
            last = e
            log.info(
                "tablet copy chunk failed; retrying",
                extra={"group": group, "file": name, "offset": offset, "error": str(e)},
            )
            await backoff.sleep(deadline, e)
            continue
        data = reply.get("data") if isinstance(reply, dict) else None
        crc = reply.get("crc32c") if isinstance(reply, dict) else None
        if not isinstance(data, bytes) or not 0 < len(data) <= want:
            shown = len(data) if isinstance(data, bytes) else type(data).__name__
            raise KuduCorruption(
                f"tablet copy of {group}: chunk of {name} at offset {offset} has {shown} bytes, expected 1..{want}"
            )
        if crc32c.crc32c(data) == crc:
            return data
        damaged += 1
        if damaged > 1:
            raise KuduCorruption(
                f"tablet copy of {group}: chunk of {name} at offset {offset} failed its CRC32C check twice"
            )
        log.warning(
            "tablet copy chunk failed its CRC32C check; refetching",
            extra={"group": group, "file": name, "offset": offset},
        )


def _open_for_write(path: Path) -> Any:
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "xb")  # exclusive: never through a name that already exists


def _write(fh: Any, data: bytes, crc: int) -> int:
    """Append ``data``; returns the file's running CRC32C (both off the loop)."""
    fh.write(data)
    return crc32c.crc32c(data, crc)


def _sync_close(fh: Any) -> None:
    fh.flush()
    os.fsync(fh.fileno())
    fh.close()


def _close_quietly(fh: Any) -> None:
    """Close on a failure path: an error here must not hide the one being raised."""
    try:
        fh.close()
    except OSError:
        log.warning("closing a failed tablet copy file failed", exc_info=True)


def _fsync_tree(root: Path) -> None:
    for d, _, _ in os.walk(root):
        fsync_dir(d)
    fsync_dir(str(root.parent))


def _rmtree(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path)
