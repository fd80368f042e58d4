"""AddMaster, RemoveMaster and StartCatalogCopy on in-process masters over real RPC: what each refuses, with
the reason, before anything changes; and what a master tells of its catalog and its members."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from kudu_async.common.errors import KuduIllegalState, KuduInvalidArgument, KuduNotFound
from kudu_async.fs.fs_manager import FsManager
from kudu_async.master.master import Master
from kudu_async.rpc import RpcClient
from kudu_async.server.config import load_config


async def _wait(pred: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def _lone_master(root: Path) -> Master:
    config = load_config(
        ["--role", "master", "--data-dir", str(root), "--rpc-bind", "127.0.0.1:0", "--http-bind", "127.0.0.1:0"], {}
    )
    fs = FsManager(config.data_dir, "master")
    fs.open_or_create()
    node = Master(config, fs)
    await node.start()
    await _wait(node.is_catalog_leader, "a lone master leading its catalog")
    return node


@pytest.fixture
async def masters(tmp_path: Path) -> AsyncIterator[tuple[Master, Master]]:
    one, two = await asyncio.gather(_lone_master(tmp_path / "m1"), _lone_master(tmp_path / "m2"))
    yield one, two
    await asyncio.gather(one.stop(), two.stop())


@pytest.fixture
async def rpc() -> AsyncIterator[RpcClient]:
    c = RpcClient("test")
    yield c
    await c.close()


async def test_refusals_name_the_reason_and_change_nothing(masters: tuple[Master, Master], rpc: RpcClient) -> None:
    m, other = masters
    addr = m.rpc_address

    async def call(method: str, req: dict[str, object]) -> dict[str, object]:
        out: dict[str, object] = await rpc.call(addr, "Master", method, req, timeout_s=10.0)
        return out

    with pytest.raises(KuduInvalidArgument, match="single master configuration"):
        await call("RemoveMaster", {"rpc_address": addr})
    with pytest.raises(KuduNotFound, match="not found"):
        await call("RemoveMaster", {"rpc_address": "127.0.0.1:1"})
    with pytest.raises(KuduInvalidArgument, match="'rpc_address'"):
        await call("RemoveMaster", {"rpc_address": "no-port"})
    with pytest.raises(KuduIllegalState, match=r"does not answer at 127\.0\.0\.1:1"):
        await call("AddMaster", {"rpc_address": "127.0.0.1:1"})
    with pytest.raises(KuduIllegalState, match="runs a catalog of its own"):
        await call("AddMaster", {"rpc_address": other.rpc_address})
    with pytest.raises(KuduIllegalState, match="leads the catalog"):
        await call(
            "StartCatalogCopy", {"source_uuid": other.uuid, "source_address": other.rpc_address, "caller_term": 9}
        )
    same = await call("AddMaster", {"rpc_address": addr})  # a member already: said so, nothing done
    assert same["already_present"] is True and same["uuid"] == m.uuid and same["member_type"] == "VOTER"
    replica = m.catalog_replica()
    assert replica is not None and replica.raft is not None
    assert replica.raft.config.voters == frozenset({m.uuid}) and not replica.raft.config.learners


async def test_members_and_catalog_are_told(masters: tuple[Master, Master], rpc: RpcClient) -> None:
    m, _ = masters
    listed = await rpc.call(m.rpc_address, "Master", "ConnectToMaster", {}, timeout_s=5.0)
    assert listed["masters"] == [
        {"uuid": m.uuid, "rpc_address": m.rpc_address, "role": "LEADER", "member_type": "VOTER"}
    ]
    st = await rpc.call(m.rpc_address, "Generic", "GetStatus", {}, timeout_s=5.0)
    assert st["catalog"]["voters"] == [m.uuid] and st["catalog"]["role"] == "LEADER"
    assert st["removed_from_cluster"] is False and st["catalog_copying"] is False
