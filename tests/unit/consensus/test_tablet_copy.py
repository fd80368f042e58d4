"""Tablet copy transfer over real RPC on 127.0.0.1: round trips, stability of a session's image,
damaged chunks, expiry, limits and path safety."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import crc32c
import pytest

from kudu_async.common.errors import (
    KuduCorruption,
    KuduInvalidArgument,
    KuduNetworkError,
    KuduNotFound,
    KuduServiceUnavailable,
    KuduTimedOut,
)
from kudu_async.common.metrics import MetricEntity
from kudu_async.consensus.tablet_copy import (
    CopyManifest,
    TabletCopySource,
    check_names,
    check_relative_name,
    fetch_tablet_copy,
    link_or_copy,
)
from kudu_async.rpc import CallContext, RpcClient, RpcServer


class Images:
    """A provider over a source directory: links every file of ``src/<group>`` into the session.

    Like the tablet server's, it does its linking in an executor thread, which a cancellation of the
    BeginSession call cannot stop half-way.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.names: dict[str, str] | None = None  # override: name -> source relative path
        self.gate: threading.Event | None = None  # set: the linking thread waits for it (a slow provider)

    async def __call__(self, group: str, extra: dict, session_dir: Path) -> CopyManifest:
        src = self.root / group
        if not src.exists():
            raise KuduNotFound(f"no tablet {group}")
        files = await asyncio.get_running_loop().run_in_executor(None, self._link_all, src, session_dir)
        if self.names is not None:
            files = {n: src / r for n, r in self.names.items()}
        return CopyManifest(files=files, blobs={"meta/cmeta": b"blob-bytes"}, meta={"group": group, "n": len(files)})

    def _link_all(self, src: Path, session_dir: Path) -> dict[str, Path]:
        if self.gate is not None:
            assert self.gate.wait(10.0)
        files = {}
        for p in sorted(src.rglob("*")):
            if p.is_file():
                rel = p.relative_to(src).as_posix()
                dst = session_dir / "files" / rel
                link_or_copy(p, dst)
                files[rel] = dst
        return files


class Damaging(TabletCopySource):
    def __init__(self, *a, **k) -> None:
        super().__init__(*a, **k)
        self.damage = 0

    def _chunk_hook(self, data: bytes) -> bytes:
        if self.damage:
            self.damage -= 1
            return bytes([data[0] ^ 0xFF]) + data[1:]
        return data


class HookedClient(RpcClient):
    """Awaits ``before_fetch(n)`` before its n-th FetchData call (from 0): stalls, failures, edits on the source."""

    def __init__(self, before_fetch: Callable[[int], Awaitable[None]]) -> None:
        super().__init__("dst")
        self.before_fetch = before_fetch
        self.fetches = 0

    async def call(self, addr: str, service: str, method: str, request: Any = None, timeout_s: float = 10.0) -> Any:
        if method == "FetchData":
            self.fetches += 1
            await self.before_fetch(self.fetches - 1)
        return await super().call(addr, service, method, request, timeout_s)


class EvilSource:
    """A TabletCopy service that serves whatever file list and chunk it is given."""

    def __init__(self, files: list[dict[str, Any]], chunk: bytes) -> None:
        self.files = files
        self.chunk = chunk
        self.ended = 0

    def serve(self, server: RpcServer) -> None:
        for name in ("BeginSession", "FetchData", "EndSession"):
            server.register("TabletCopy", name, getattr(self, name), requires="service")

    async def BeginSession(self, req: Any, ctx: CallContext) -> dict[str, Any]:
        return {"session_id": "evil", "files": self.files, "meta": {}}

    async def FetchData(self, req: Any, ctx: CallContext) -> dict[str, Any]:
        return {"data": self.chunk, "crc32c": crc32c.crc32c(self.chunk), "eof": True}

    async def EndSession(self, req: Any, ctx: CallContext) -> dict[str, Any]:
        self.ended += 1
        return {}


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[tuple[RpcServer, TabletCopySource, RpcClient, Images, Path]]:
    images = Images(tmp_path / "src")
    source = Damaging(
        tmp_path / "sessions", images, max_chunk_bytes=64 * 1024, session_idle_timeout_s=0.5, max_sessions=2
    )
    server = RpcServer(MetricEntity("server", "s"), node_name="src")
    source.register_rpc(server)
    await server.start("127.0.0.1", 0)
    await source.start()
    client = RpcClient("dst")
    yield server, source, client, images, tmp_path
    await client.close()
    await source.stop()
    await server.stop(1.0)


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def _overwrite(path: Path, data: bytes) -> None:
    """Write over the start of ``path`` in place (same inode, unlike an atomic replace)."""
    with open(path, "r+b") as f:
        f.write(data)


def _make(root: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


async def test_round_trip_files_and_blobs(env) -> None:
    server, source, client, _images, tmp = env
    content = {"empty": b"", "small": b"abc", "nested/deep/big": bytes(range(256)) * 1000}  # 256 KB: 4 chunks
    _make(tmp / "src" / "t1", content)
    seen: list[tuple[int, int]] = []
    meta = await fetch_tablet_copy(
        client, server.address, "t1", tmp / "dst", chunk_bytes=100_000, progress=lambda d, t: seen.append((d, t))
    )
    assert meta == {"group": "t1", "n": 3}
    for name, data in content.items():
        assert (tmp / "dst" / name).read_bytes() == data
    assert (tmp / "dst" / "meta" / "cmeta").read_bytes() == b"blob-bytes"
    assert seen[-1][0] == seen[-1][1] == 256_003 + len(b"blob-bytes")
    await asyncio.sleep(0)
    assert source.status() == []  # the fetcher ended its session
    assert not any((tmp / "sessions").iterdir())


async def test_session_image_survives_deletes_and_appends(env) -> None:
    server, _source, client, _images, tmp = env
    _make(tmp / "src" / "t2", {"seg": b"x" * 1000, "gone": b"y" * 500, "moved": b"m" * 10})
    begin = await client.call(server.address, "TabletCopy", "BeginSession", {"group": "t2"})
    (tmp / "src" / "t2" / "gone").unlink()
    (tmp / "src" / "t2" / "moved").rename(tmp / "src" / "moved-elsewhere")
    _append(tmp / "src" / "t2" / "seg", b"z" * 300)  # appended after the session began: not served
    sizes = {f["name"]: f["size"] for f in begin["files"]}
    assert sizes["seg"] == 1000 and sizes["gone"] == 500
    chunk = await client.call(
        server.address,
        "TabletCopy",
        "FetchData",
        {"session_id": begin["session_id"], "name": "seg", "offset": 0, "max_bytes": 5000},
    )
    assert chunk["data"] == b"x" * 1000 and chunk["eof"]
    gone = await client.call(
        server.address,
        "TabletCopy",
        "FetchData",
        {"session_id": begin["session_id"], "name": "gone", "offset": 0, "max_bytes": 5000},
    )
    assert gone["data"] == b"y" * 500
    moved = await client.call(
        server.address, "TabletCopy", "FetchData", {"session_id": begin["session_id"], "name": "moved", "offset": 0}
    )
    assert moved["data"] == b"m" * 10
    with pytest.raises(KuduInvalidArgument):
        await client.call(
            server.address,
            "TabletCopy",
            "FetchData",
            {"session_id": begin["session_id"], "name": "seg", "offset": 1001},
        )
    await client.call(server.address, "TabletCopy", "EndSession", {"session_id": begin["session_id"]})
    await client.call(server.address, "TabletCopy", "EndSession", {"session_id": begin["session_id"]})  # idempotent


async def test_damaged_chunks_are_refetched_once_then_fail(env) -> None:
    server, source, client, _images, tmp = env
    _make(tmp / "src" / "t3", {"f": b"q" * 200_000})
    source.damage = 1  # one bad chunk: refetched, copy succeeds
    await fetch_tablet_copy(client, server.address, "t3", tmp / "ok")
    assert (tmp / "ok" / "f").read_bytes() == b"q" * 200_000
    source.damage = 2  # the same chunk twice: corruption, nothing left behind
    with pytest.raises(KuduCorruption, match="CRC32C"):
        await fetch_tablet_copy(client, server.address, "t3", tmp / "bad")
    assert not (tmp / "bad").exists()
    assert source.status() == []  # ended by the failing fetcher, not left to expire


async def test_unknown_group_expiry_and_session_limit(env) -> None:
    server, source, client, _images, tmp = env
    with pytest.raises(KuduNotFound):
        await fetch_tablet_copy(client, server.address, "nope", tmp / "x")
    assert not (tmp / "x").exists()
    assert not any((tmp / "sessions").iterdir())  # the provider's failure left no session dir
    _make(tmp / "src" / "t4", {"f": b"1"})
    a = await client.call(server.address, "TabletCopy", "BeginSession", {"group": "t4"})
    await client.call(server.address, "TabletCopy", "BeginSession", {"group": "t4"})
    with pytest.raises(KuduServiceUnavailable):
        await client.call(server.address, "TabletCopy", "BeginSession", {"group": "t4"})
    await asyncio.sleep(1.5)  # idle timeout 0.5 s, reaper every 0.125 s
    assert source.status() == []
    with pytest.raises(KuduNotFound, match="expired"):
        await client.call(
            server.address, "TabletCopy", "FetchData", {"session_id": a["session_id"], "name": "f", "offset": 0}
        )


async def test_path_traversal_is_refused_both_sides(env) -> None:
    server, _source, client, images, tmp = env
    for bad in ("../x", "/etc/passwd", "a/../b", "a//b", "", "./a"):
        with pytest.raises(KuduInvalidArgument):
            check_relative_name(bad)
    _make(tmp / "src" / "t5", {"f": b"1"})
    images.names = {"../escape": "f"}
    with pytest.raises(KuduInvalidArgument):
        await fetch_tablet_copy(client, server.address, "t5", tmp / "d5")
    assert not (tmp / "escape").exists() and not (tmp / "d5").exists()


async def test_stop_removes_sessions(env) -> None:
    server, source, client, _images, tmp = env
    _make(tmp / "src" / "t6", {"f": b"1"})
    await client.call(server.address, "TabletCopy", "BeginSession", {"group": "t6"})
    assert any((tmp / "sessions").iterdir())
    await source.stop()
    assert not any((tmp / "sessions").iterdir())


async def test_stopped_source_refuses_sessions_until_started_again(env) -> None:
    server, source, client, _images, tmp = env
    _make(tmp / "src" / "t7", {"f": b"1"})
    await source.stop()
    with pytest.raises(KuduServiceUnavailable, match="stopped"):
        await client.call(server.address, "TabletCopy", "BeginSession", {"group": "t7"})
    await source.start()
    await fetch_tablet_copy(client, server.address, "t7", tmp / "d7")
    assert (tmp / "d7" / "f").read_bytes() == b"1"


async def test_start_wipes_sessions_of_a_previous_process(tmp_path: Path) -> None:
    stale = tmp_path / "sessions" / "0123abcd"
    _make(stale, {"files/seg": b"old"})
    source = TabletCopySource(tmp_path / "sessions", Images(tmp_path / "src"))
    await source.start()
    try:
        assert not stale.exists()
    finally:
        await source.stop()


async def test_begin_cut_off_by_its_deadline_leaves_no_session(env) -> None:
    server, source, client, images, tmp = env
    _make(tmp / "src" / "t8", {"f": b"1" * 100})
    images.gate = threading.Event()
    with pytest.raises(KuduTimedOut):
        await client.call(server.address, "TabletCopy", "BeginSession", {"group": "t8"}, timeout_s=0.3)
    await asyncio.sleep(0.3)  # well past the server's own deadline: the handler has been cancelled
    images.gate.set()  # the provider's thread links after its caller gave up: the links must not stay behind
    for _ in range(100):
        if not any((tmp / "sessions").iterdir()):
            break
        await asyncio.sleep(0.02)
    assert not any((tmp / "sessions").iterdir())
    assert source.status() == []


async def test_bad_manifests_are_refused_and_cleaned_up(env) -> None:
    server, source, client, images, tmp = env
    _make(tmp / "src" / "t9", {"a": b"1", "d/x": b"2"})
    for names in (
        {"a": "a", "a/b": "a"},  # "a" both a file and a directory
        {"d": "d"},
    ):  # a directory is not a file to serve
        images.names = names
        with pytest.raises(KuduInvalidArgument):
            await client.call(server.address, "TabletCopy", "BeginSession", {"group": "t9"})
        assert not any((tmp / "sessions").iterdir()) and source.status() == []


def test_check_names_refuses_duplicates_and_file_directory_clashes() -> None:
    assert check_names(["a/b", "a/c", "b"]) == ["a/b", "a/c", "b"]
    for bad in (["a", "a"], ["a", "a/b"], ["x/y", "x/y/z"], ["ok", "../no"]):
        with pytest.raises(KuduInvalidArgument):
            check_names(bad)


def test_link_or_copy_links_and_copies_only_when_linking_is_impossible(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "src"
    src.write_bytes(b"data")
    link_or_copy(src, tmp_path / "linked" / "deep" / "f")
    assert os.stat(tmp_path / "linked" / "deep" / "f").st_ino == os.stat(src).st_ino
    with pytest.raises(FileExistsError):  # never overwrites
        link_or_copy(src, tmp_path / "linked" / "deep" / "f")
    with pytest.raises(FileNotFoundError):
        link_or_copy(tmp_path / "missing", tmp_path / "m")

    def cross_device(a: object, b: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", cross_device)
    link_or_copy(src, tmp_path / "copied")
    assert (tmp_path / "copied").read_bytes() == b"data"
    assert os.stat(tmp_path / "copied").st_ino != os.stat(src).st_ino


async def test_malicious_source_cannot_write_outside_dest(tmp_path: Path) -> None:
    evil_server = RpcServer(node_name="evil")
    await evil_server.start("127.0.0.1", 0)
    client = RpcClient("dst")
    try:
        for name in ("../escape", "/tmp/escape-abs", "a/../../escape"):
            evil = EvilSource([{"name": name, "size": 4, "crc32c": crc32c.crc32c(b"evil")}], b"evil")
            server = RpcServer(node_name="evil")
            evil.serve(server)
            await server.start("127.0.0.1", 0)
            try:
                with pytest.raises(KuduInvalidArgument):
                    await fetch_tablet_copy(client, server.address, "t", tmp_path / "dest" / "d")
            finally:
                await server.stop(1.0)
            assert not (tmp_path / "dest" / "d").exists()
            assert not (tmp_path / "dest" / "escape").exists() and not (tmp_path / "escape").exists()
            assert evil.ended == 1  # the session is ended even when its file list is refused
    finally:
        await client.close()
        await evil_server.stop(1.0)


async def test_source_sending_more_than_asked_is_corruption(tmp_path: Path) -> None:
    evil = EvilSource([{"name": "f", "size": 4, "crc32c": crc32c.crc32c(b"abcd")}], b"abcd-and-more")
    server = RpcServer(node_name="evil")
    evil.serve(server)
    await server.start("127.0.0.1", 0)
    client = RpcClient("dst")
    try:
        with pytest.raises(KuduCorruption, match="offset 0"):
            await fetch_tablet_copy(client, server.address, "t", tmp_path / "d")
        assert not (tmp_path / "d").exists() and evil.ended == 1
    finally:
        await client.close()
        await server.stop(1.0)


async def test_session_expiring_mid_copy_fails_the_fetch_cleanly(env) -> None:
    server, source, _client, _images, tmp = env
    _make(tmp / "src" / "e1", {"f": b"e" * 200_000})

    async def stall(n: int) -> None:
        if n == 1:  # after the first chunk the fetcher goes quiet past the 0.5 s idle timeout
            await asyncio.sleep(1.5)

    client = HookedClient(stall)
    try:
        with pytest.raises(KuduNotFound, match="expired"):
            await fetch_tablet_copy(client, server.address, "e1", tmp / "d", chunk_bytes=64 * 1024)
    finally:
        await client.close()
    assert not (tmp / "d").exists()
    assert source.status() == [] and not any((tmp / "sessions").iterdir())


async def test_transient_chunk_failures_are_retried(env) -> None:
    server, source, _client, _images, tmp = env
    _make(tmp / "src" / "r1", {"f": bytes(range(256)) * 500})

    async def flaky(n: int) -> None:
        if n in (0, 1, 3):
            raise KuduNetworkError("connection reset (test)")

    client = HookedClient(flaky)
    try:
        await fetch_tablet_copy(client, server.address, "r1", tmp / "d", chunk_bytes=50_000)
    finally:
        await client.close()
    assert (tmp / "d" / "f").read_bytes() == bytes(range(256)) * 500
    assert client.fetches == 3 + 1 + 3  # 3 chunks of f, 1 of the blob, 3 failed attempts
    assert source.status() == []


async def test_chunk_failing_until_the_deadline_times_out(env) -> None:
    server, source, _client, _images, tmp = env
    _make(tmp / "src" / "r2", {"f": b"1" * 10})

    async def down(n: int) -> None:
        raise KuduNetworkError("connection refused (test)")

    client = HookedClient(down)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    try:
        with pytest.raises(KuduTimedOut, match="connection refused"):
            await fetch_tablet_copy(client, server.address, "r2", tmp / "d", timeout_s=0.6)
    finally:
        await client.close()
    assert loop.time() - t0 < 3.0
    assert client.fetches > 2  # backed off and retried, not hammering and not giving up at once
    assert not (tmp / "d").exists() and source.status() == []


async def test_file_changed_in_place_after_begin_fails_the_whole_file_check(env) -> None:
    server, _source, _client, _images, tmp = env
    _make(tmp / "src" / "w1", {"f": b"a" * 100_000})

    async def scribble(n: int) -> None:
        if n == 1:  # the session holds a hard link: an in-place write reaches it; only the file CRC can tell
            _overwrite(tmp / "src" / "w1" / "f", b"b" * 100_000)

    client = HookedClient(scribble)
    try:
        with pytest.raises(KuduCorruption, match=r"f \(100000 bytes\) has CRC32C"):
            await fetch_tablet_copy(client, server.address, "w1", tmp / "d", chunk_bytes=40_000)
    finally:
        await client.close()
    assert not (tmp / "d").exists()


async def test_cancelled_fetch_removes_dest_and_ends_session(env) -> None:
    server, source, _client, _images, tmp = env
    _make(tmp / "src" / "c1", {"f": b"c" * 100_000})
    stalled = asyncio.Event()

    async def hang(n: int) -> None:
        if n == 1:
            stalled.set()
            await asyncio.sleep(60)

    client = HookedClient(hang)
    try:
        task = asyncio.create_task(fetch_tablet_copy(client, server.address, "c1", tmp / "d", chunk_bytes=40_000))
        await asyncio.wait_for(stalled.wait(), 5)
        assert (tmp / "d" / "f").exists()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        await client.close()
    assert not (tmp / "d").exists() and source.status() == []


async def test_non_empty_destination_is_refused_and_left_alone(env) -> None:
    server, source, client, _images, tmp = env
    _make(tmp / "src" / "n1", {"f": b"1"})
    _make(tmp / "d", {"precious": b"keep"})
    with pytest.raises(KuduInvalidArgument, match="not an empty directory"):
        await fetch_tablet_copy(client, server.address, "n1", tmp / "d")
    assert (tmp / "d" / "precious").read_bytes() == b"keep"
    (tmp / "d" / "precious").unlink()
    await fetch_tablet_copy(client, server.address, "n1", tmp / "d")  # an existing empty dir is fine
    assert (tmp / "d" / "f").read_bytes() == b"1" and source.status() == []
