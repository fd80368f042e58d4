"""A replicated key-value state machine and its RPC service ``TestKV``, hosted only with ``--enable-test-kv``.

It drives the consensus layer end to end in real processes without tablets: puts go through Raft as
tablet writes do, and every replica's map can be dumped and compared (the consensus integration tests,
the RPC fuzz test and ``scripts/bench/consensus.py``). It keeps no files of its own (``durable_index``
is 0), so its replicas retain and replay their whole log on restart.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgpack

from kudu_async.common.errors import KuduInvalidArgument, KuduNotFound
from kudu_async.consensus.raft_manager import RaftManager, check_group_id
from kudu_async.consensus.replica import RaftReplica
from kudu_async.rpc.server import CallContext, RpcServer

KIND = "test_kv"
MAX_KEY_BYTES = 1024
MAX_VALUE_BYTES = 64 * 1024
MAX_BATCH = 1000


class KVStateMachine:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.applied_index = 0

    async def apply(self, index: int, term: int, payload: bytes) -> Any:
        op = msgpack.unpackb(payload, raw=False)
        self.applied_index = index
        if op[0] == "put":
            self.data[op[1]] = op[2]
        elif op[0] == "delete":
            self.data.pop(op[1], None)
        return {"index": index}

    def durable_index(self) -> int:
        return 0

    def recall(self, entries: list[tuple[int, bytes]]) -> None:
        """Nothing to recall: it keeps no files, so its whole log is applied again."""

    def digest(self) -> str:
        h = hashlib.sha256()
        for k in sorted(self.data):
            h.update(k.encode() + b"\0" + self.data[k] + b"\0")
        return h.hexdigest()


class ReplicatedKVService:
    """RPC service ``TestKV``: CreateGroup, Put, PutBatch, Get, Dump."""

    def __init__(self, raft: RaftManager) -> None:
        self.raft = raft
        self.machines: dict[str, KVStateMachine] = {}
        raft.register_kind(KIND, self._make)

    async def _make(self, group: str, extra: dict[str, Any]) -> KVStateMachine:
        sm = self.machines[group] = KVStateMachine()
        return sm

    def register_rpc(self, server: RpcServer) -> None:
        # Creating a Raft group is an operator's act; the data calls are a user's, as a table's are.
        server.register("TestKV", "CreateGroup", self._rpc_creategroup, requires="superuser")
        for name in ("Put", "PutBatch", "Get", "Dump"):
            server.register("TestKV", name, getattr(self, f"_rpc_{name.lower()}"), requires="user")

    async def _rpc_creategroup(self, request: Any, ctx: CallContext) -> dict[str, Any]:
        group = check_group_id(_get(request, "group"))
        peers = _get(request, "peers")
        if not isinstance(peers, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in peers.items()):
            raise KuduInvalidArgument("'peers' must map replica uuid -> RPC address")
        await self.raft.create_replica(group, KIND, peers)
        return {"group": group}

    def _replica(self, request: Any) -> RaftReplica:
        """The replica of a TestKV group: other groups on the node (tablets, the catalog) are not this
        service's to write or read."""
        group = _get(request, "group")
        replica = self.raft.get(group)
        if group not in self.machines:
            raise KuduNotFound(f"{group} is not a TestKV group")
        return replica

    async def _rpc_put(self, request: Any, ctx: CallContext) -> dict[str, Any]:
        replica = self._replica(request)
        entry = _put_entry(_get(request, "key"), _get(request, "value"))
        result: dict[str, Any] = await replica.replicate(entry, ctx.time_left())
        return result

    async def _rpc_putbatch(self, request: Any, ctx: CallContext) -> dict[str, Any]:
        """Many puts in one call, proposed together: the client-side batching Kudu's writes use."""
        replica = self._replica(request)
        items = _get(request, "items")
        if not isinstance(items, list) or not 1 <= len(items) <= MAX_BATCH:
            raise KuduInvalidArgument(f"'items' must be a list of 1-{MAX_BATCH} [key, value] pairs")
        entries = []
        for i, item in enumerate(items):
            if not isinstance(item, list | tuple) or len(item) != 2:
                raise KuduInvalidArgument(f"items[{i}]: expected [key, value]")
            entries.append(_put_entry(item[0], item[1]))
        results = await replica.replicate_many(entries, ctx.time_left())
        return {"first_index": results[0]["index"], "last_index": results[-1]["index"]}

    async def _rpc_get(self, request: Any, ctx: CallContext) -> dict[str, Any]:
        replica = self._replica(request)
        sm = self.machines[replica.group]
        if request.get("linearizable", False):
            index = await replica.read_index()
            await replica.wait_for(lambda r: sm.applied_index >= index, 10.0)
        value = sm.data.get(_get(request, "key"))
        return {"value": value, "found": value is not None}

    async def _rpc_dump(self, request: Any, ctx: CallContext) -> dict[str, Any]:
        sm = self.machines[self._replica(request).group]
        out: dict[str, Any] = {"applied_index": sm.applied_index, "count": len(sm.data), "digest": sm.digest()}
        if request.get("with_data", False):
            out["data"] = sm.data
        return out


def _put_entry(key: Any, value: Any) -> bytes:
    if not isinstance(key, str) or len(key.encode()) > MAX_KEY_BYTES:
        raise KuduInvalidArgument(f"'key' must be a string of at most {MAX_KEY_BYTES} bytes")
    if isinstance(value, str):
        value = value.encode()
    if not isinstance(value, bytes) or len(value) > MAX_VALUE_BYTES:
        raise KuduInvalidArgument(f"'value' must be bytes or a string of at most {MAX_VALUE_BYTES} bytes")
    packed: bytes = msgpack.packb(["put", key, value])  # msgpack ships no type hints
    return packed


def _get(request: Any, name: str) -> Any:
    if not isinstance(request, dict) or name not in request:
        raise KuduInvalidArgument(f"request must be a map with {name!r}")
    return request[name]
