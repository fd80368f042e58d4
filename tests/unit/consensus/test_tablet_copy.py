"""Tablet copy transfer over real RPC on 127.0.0.1: round trips, stability of a session's image,
damaged chunks, expiry, limits and path safety."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kudu_async.common.errors import KuduCorruption, KuduInvalidArgument, KuduNotFound, KuduServiceUnavailable
from kudu_async.common.metrics import MetricEntity
from kudu_async.consensus.tablet_copy import (
    CopyManifest,
    TabletCopySource,
    check_relative_name,
    fetch_tablet_copy,
    link_or_copy,
)
from kudu_async.rpc import RpcClient, RpcServer


class Images:
    """A provider over a source directory: links every file of ``src/<group>`` into the session."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.names: dict[str, str] | None = None  # override: name -> source relative path

    async def __call__(self, group: str, extra: dict, session_dir: Path) -> CopyManifest:
        src = self.root / group
        if not src.exists():
            raise KuduNotFound(f"no tablet {group}")
        files = {}
        for p in sorted(src.rglob("*")):
            if p.is_file():
                rel = p.relative_to(src).as_posix()
                dst = session_dir / "files" / rel
                link_or_copy(p, dst)
                files[rel] = dst
        if self.names is not None:
            files = {n: src / r for n, r in self.names.items()}
        return CopyManifest(files=files, blobs={"meta/cmeta": b"blob-bytes"}, meta={"group": group, "n": len(files)})


class Damaging(TabletCopySource):
    def __init__(self, *a, **k) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*a, **k)
        self.damage = 0

    def _chunk_hook(self, data: bytes) -> bytes:
        if self.damage:
            self.damage -= 1
            return bytes([data[0] ^ 0xFF]) + data[1:]
        return data


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[tuple[RpcServer, TabletCopySource, RpcClient, Images, Path]]:
    images = Images(tmp_path / "src")
    source = Damaging(tmp_path / "sessions", images, max_chunk_bytes=64 * 1024, session_idle_timeout_s=0.5,
                      max_sessions=2)
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


def _make(root: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


async def test_round_trip_files_and_blobs(env) -> None:  # type: ignore[no-untyped-def]
    server, source, client, _images, tmp = env
    content = {"empty": b"", "small": b"abc", "nested/deep/big": bytes(range(256)) * 1000}  # 256 KB: 4 chunks
    _make(tmp / "src" / "t1", content)
    seen: list[tuple[int, int]] = []
    meta = await fetch_tablet_copy(client, server.address, "t1", tmp / "dst", chunk_bytes=100_000,
                                   progress=lambda d, t: seen.append((d, t)))
    assert meta == {"group": "t1", "n": 3}
    for name, data in content.items():
        assert (tmp / "dst" / name).read_bytes() == data
    assert (tmp / "dst" / "meta" / "cmeta").read_bytes() == b"blob-bytes"
    assert seen[-1][0] == seen[-1][1] == 256_003 + len(b"blob-bytes")
    await asyncio.sleep(0)
    assert source.status() == []  # the fetcher ended its session
    assert not any((tmp / "sessions").iterdir())


async def test_session_image_survives_deletes_and_appends(env) -> None:  # type: ignore[no-untyped-def]
    server, _source, client, _images, tmp = env
    _make(tmp / "src" / "t2", {"seg": b"x" * 1000, "gone": b"y" * 500})
    begin = await client.call(server.address, "TabletCopy", "BeginSession", {"group": "t2"})
    (tmp / "src" / "t2" / "gone").unlink()
    _append(tmp / "src" / "t2" / "seg", b"z" * 300)  # appended after the session began: not served
    sizes = {f["name"]: f["size"] for f in begin["files"]}
    assert sizes["seg"] == 1000 and sizes["gone"] == 500
    chunk = await client.call(server.address, "TabletCopy", "FetchData",
                              {"session_id": begin["session_id"], "name": "seg", "offset": 0, "max_bytes": 5000})
    assert chunk["data"] == b"x" * 1000 and chunk["eof"]
    gone = await client.call(server.address, "TabletCopy", "FetchData",
                             {"session_id": begin["session_id"], "name": "gone", "offset": 0, "max_bytes": 5000})
    assert gone["data"] == b"y" * 500
    with pytest.raises(KuduInvalidArgument):
        await client.call(server.address, "TabletCopy", "FetchData",
                          {"session_id": begin["session_id"], "name": "seg", "offset": 1001})
    await client.call(server.address, "TabletCopy", "EndSession", {"session_id": begin["session_id"]})
    await client.call(server.address, "TabletCopy", "EndSession", {"session_id": begin["session_id"]})  # idempotent


async def test_damaged_chunks_are_refetched_once_then_fail(env) -> None:  # type: ignore[no-untyped-def]
    server, source, client, _images, tmp = env
    _make(tmp / "src" / "t3", {"f": b"q" * 200_000})
    source.damage = 1  # one bad chunk: refetched, copy succeeds
    await fetch_tablet_copy(client, server.address, "t3", tmp / "ok")
    assert (tmp / "ok" / "f").read_bytes() == b"q" * 200_000
    source.damage = 2  # the same chunk twice: corruption, nothing left behind
    with pytest.raises(KuduCorruption, match="CRC32C"):
        await fetch_tablet_copy(client, server.address, "t3", tmp / "bad")
    assert not (tmp / "bad").exists()


async def test_unknown_group_expiry_and_session_limit(env) -> None:  # type: ignore[no-untyped-def]
    server, source, client, _images, tmp = env
    with pytest.raises(KuduNotFound):
        await fetch_tablet_copy(client, server.address, "nope", tmp / "x")
    assert not (tmp / "x").exists()
    _make(tmp / "src" / "t4", {"f": b"1"})
    a = await client.call(server.address, "TabletCopy", "BeginSession", {"group": "t4"})
    await client.call(server.address, "TabletCopy", "BeginSession", {"group": "t4"})
    with pytest.raises(KuduServiceUnavailable):
        await client.call(server.address, "TabletCopy", "BeginSession", {"group": "t4"})
    await asyncio.sleep(1.5)  # idle timeout 0.5 s, reaper every 0.125 s
    assert source.status() == []
    with pytest.raises(KuduNotFound, match="expired"):
        await client.call(server.address, "TabletCopy", "FetchData",
                          {"session_id": a["session_id"], "name": "f", "offset": 0})


async def test_path_traversal_is_refused_both_sides(env) -> None:  # type: ignore[no-untyped-def]
    server, _source, client, images, tmp = env
    for bad in ("../x", "/etc/passwd", "a/../b", "a//b", "", "./a"):
        with pytest.raises(KuduInvalidArgument):
            check_relative_name(bad)
    _make(tmp / "src" / "t5", {"f": b"1"})
    images.names = {"../escape": "f"}
    with pytest.raises(KuduInvalidArgument):
        await fetch_tablet_copy(client, server.address, "t5", tmp / "d5")
    assert not (tmp / "escape").exists() and not (tmp / "d5").exists()


async def test_stop_removes_sessions(env) -> None:  # type: ignore[no-untyped-def]
    server, source, client, _images, tmp = env
    _make(tmp / "src" / "t6", {"f": b"1"})
    await client.call(server.address, "TabletCopy", "BeginSession", {"group": "t6"})
    assert any((tmp / "sessions").iterdir())
    await source.stop()
    assert not any((tmp / "sessions").iterdir())
