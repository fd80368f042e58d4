"""Authorization on a real cluster: coarse ACLs per RPC method, the table privilege policy on DDL, the audit
log, the admin pages behind a password, and a fuzz pass over every method as callers without the right.

One cluster (1 master, 1 tablet server) serves the whole module: ``--user-acl alice,bob,carol``,
``--superuser-acl admin``, a policy where alice holds ALL on ``default.*``, bob SELECT and INSERT only and
carol SELECT of the ``key`` column only; the tablet server enforces the authz tokens the master signs.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Iterator
from typing import Any

import bcrypt
import numpy as np
import pyarrow as pa
import pytest

import kudu_async
from kudu_async.client.schema_builder import Partitioning
from kudu_async.client.sync import Client
from kudu_async.common.errors import KuduBadStatus, KuduNotAuthorized
from kudu_async.rpc.client import RpcClient
from kudu_async.schema import SchemaBuilder
from kudu_async.testing import MiniCluster
from tests.integration.test_rpc_fuzz import WRONG

pytestmark = pytest.mark.integration

POLICY = {
    "groups": {"writers": ["bob"]},
    "grant": [
        {"users": ["alice"], "tables": ["default.*"], "privileges": ["ALL"]},
        {"groups": ["writers"], "tables": ["default.*"], "privileges": ["SELECT", "INSERT"]},
        {"users": ["carol"], "tables": ["default.*"], "privileges": ["SELECT"], "columns": ["key"]},
    ],
}
ADMIN_PASSWORD = "admin-pw"
ROWS = 200


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MiniCluster]:
    base = tmp_path_factory.mktemp("authz")
    pw = base / "htpasswd"
    lines = [
        f"{u}:" + bcrypt.hashpw(p.encode(), bcrypt.gensalt(4)).decode()
        for u, p in (("admin", ADMIN_PASSWORD), ("bob", "bob-pw"))
    ]
    pw.write_text("\n".join(lines) + "\n")
    c = MiniCluster(
        num_masters=1,
        num_tservers=1,
        base_dir=base / "cluster",
        extra_flags=[
            "--user-acl=alice,bob,carol",
            "--superuser-acl=admin",
            f"--webserver-password-file={pw}",
            "--enable-fault-injection=true",
        ],
        tserver_flags=["--tserver-enforce-access-control=true"],
        authz_policy=POLICY,
    )
    c.http_auth = ("admin", ADMIN_PASSWORD)
    c.start()
    try:
        yield c
    finally:
        c.shutdown()


def _client(cluster: MiniCluster, user: str) -> Client:
    client = kudu_async.connect(cluster.master_addresses.split(","))
    client._async.core.rpc.set_credentials(user, None)
    return client


@pytest.fixture
async def rpc() -> AsyncIterator[RpcClient]:
    client = RpcClient("authz-test")
    yield client
    await client.close()


def _audit(cluster: MiniCluster, node_index: int = 0) -> list[dict[str, Any]]:
    path = cluster.masters[node_index].log_path.parent / "audit.log"  # beside --log-file
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


async def _wait_audit(cluster: MiniCluster, pred: Any, what: str) -> dict[str, Any]:
    for _ in range(100):
        for line in _audit(cluster):
            if pred(line):
                return line
        await asyncio.sleep(0.05)
    raise AssertionError(f"no audit line for {what}: {_audit(cluster)[-5:]}")


def _make_table(client: Client, name: str) -> Any:
    b = SchemaBuilder()
    b.add_column("key").type("int64").nullable(False).primary_key()
    b.add_column("v").type("string")
    return client.create_table(name, b.build(), Partitioning().add_hash_partitions(["key"], 2), n_replicas=1)


async def test_allowed_users_work_and_the_policy_and_acls_refuse_the_rest(cluster: MiniCluster, rpc: RpcClient) -> None:
    alice = _client(cluster, "alice")
    bob = _client(cluster, "bob")
    try:
        table = _make_table(alice, "t")
        alice.new_session().apply_arrow(
            table, pa.table({"key": np.arange(ROWS), "v": [str(i) for i in range(ROWS)]}), "insert"
        )
        assert len(alice.table("t").scanner().open().read_all_tuples()) == ROWS
        await _wait_audit(
            cluster,
            lambda x: x["user"] == "alice" and x["method"] == "Master/CreateTable" and x["allowed"],
            "alice's CreateTable",
        )
        # Bob may read but not drop.
        assert len(bob.table("t").scanner().open().read_all_tuples()) == ROWS
        with pytest.raises(KuduNotAuthorized, match=r"bob \(unauthenticated\) is not authorized to drop table t"):
            bob.delete_table("t")
        line = await _wait_audit(
            cluster, lambda x: x["user"] == "bob" and x["method"] == "Master/DeleteTable", "bob's DeleteTable"
        )
        assert line["allowed"] is False and line["object"] == "t" and "DROP" in line["reason"]
        assert "t" in alice.list_tables()
        # Eve is not in --user-acl: not even the table list.
        eve = _client(cluster, "eve")
        try:
            with pytest.raises(KuduNotAuthorized, match=r"eve \(unauthenticated\) is not authorized to call Master/"):
                eve.list_tables()
        finally:
            eve.close()
        # Raft configuration, flags (fault rules) and tablet copy: not for users.
        ts = cluster.tservers[0].rpc_address
        rpc.set_credentials("bob", None)
        for service, method, body in (
            ("Consensus", "ChangeConfig", {"group": "x", "change": "ADD_PEER"}),
            ("Consensus", "StepDown", {"group": "x"}),
            ("TabletServer", "StartTabletCopy", {}),
            ("Generic", "SetFaults", {"rules": []}),
        ):
            with pytest.raises(
                KuduNotAuthorized, match=rf"bob \(unauthenticated\) is not authorized to call {service}/{method}"
            ):
                await rpc.call(ts, service, method, body, timeout_s=5)
        # The superuser may.
        rpc.set_credentials("admin", None)
        assert (await rpc.call(ts, "Generic", "SetFaults", {"rules": []}, timeout_s=5))["rules"] == []
        alice.delete_table("t")
        await _wait_audit(
            cluster, lambda x: x["user"] == "alice" and x["method"] == "Master/DeleteTable" and x["allowed"], "drop"
        )
    finally:
        alice.close()
        bob.close()


def test_tablet_servers_check_the_authz_token_of_every_write_and_scan(cluster: MiniCluster) -> None:
    """Kudu's fine-grained model on the data path: the master signs each user's privileges on the table,
    the tablet server refuses what they do not cover, naming the user, the operation and the object."""
    alice = _client(cluster, "alice")
    bob = _client(cluster, "bob")
    carol = _client(cluster, "carol")
    try:
        table = _make_table(alice, "data")
        assert table.authz_token is not None
        # Bob: SELECT and INSERT.
        s = bob.new_session()
        s.apply(bob.table("data").new_insert({"key": 1, "v": "one"}))
        s.flush()
        s.apply(bob.table("data").new_delete({"key": 1}))
        with pytest.raises(KuduBadStatus, match=r"bob is not authorized to DELETE on table data"):
            s.flush()
        assert bob.table("data").scanner().open().read_all_tuples() == [(1, "one")]
        # Carol: SELECT of `key` only; no writes.
        ct = carol.table("data")
        assert ct.scanner().set_projected_column_names(["key"]).open().read_all_tuples() == [(1,)]
        with pytest.raises(KuduNotAuthorized, match=r"carol is not authorized to SELECT .*column v"):
            ct.scanner().open().read_all_tuples()
        s = carol.new_session()
        s.apply(ct.new_insert({"key": 2, "v": "two"}))
        with pytest.raises(KuduBadStatus, match=r"carol is not authorized to INSERT on table data"):
            s.flush()
        # A call without the token is refused outright.
        with pytest.raises(KuduNotAuthorized, match="no authz token"):
            ct.authz_token = None
            ct.scanner().set_projected_column_names(["key"]).open().read_all_tuples()
        assert len(alice.table("data").scanner().open().read_all_tuples()) == 1
        alice.delete_table("data")
    finally:
        alice.close()
        bob.close()
        carol.close()


def test_admin_pages_need_the_password_and_state_changes_a_superuser(cluster: MiniCluster) -> None:
    import base64
    import urllib.error
    import urllib.request

    url = cluster.masters[0].http_url

    def get(path: str, user: str | None, password: str = "", method: str = "GET") -> int:
        req = urllib.request.Request(url + path, method=method)
        if user is not None:
            req.add_header("authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as e:
            return int(e.code)

    assert get("/healthz", None) == 200
    assert get("/api/v1/status", None) == 401
    assert get("/api/v1/status", "bob", "wrong") == 401
    assert get("/api/v1/status", "bob", "bob-pw") == 200
    assert get("/api/v1/status", "bob", "bob-pw", method="POST") == 403
    # A superuser passes the authorization; the page itself has no POST (405).
    assert get("/api/v1/status", "admin", ADMIN_PASSWORD, method="POST") == 405


async def test_fuzz_every_method_as_unauthenticated_and_unprivileged_callers(
    cluster: MiniCluster, rpc: RpcClient
) -> None:
    """Junk to every method of the master and the tablet server from a caller that names no one and from
    one outside the ACLs: each refused with NOT_AUTHORIZED (open methods: a clear answer), no node error,
    tables, tablets and flags as before."""

    def state() -> Any:
        replicas = cluster.http_json(cluster.tservers[0], "/api/v1/raft")["replicas"]
        return (
            cluster.http_json(cluster.masters[0], "/api/v1/catalog/tables"),
            [cluster.http_json(n, "/api/v1/varz") for n in cluster.nodes],
            sorted(
                (r["group"], r["state"], [(p["uuid"], p["member_type"]) for p in r.get("peers", [])]) for r in replicas
            ),
        )

    alice = _client(cluster, "alice")
    try:
        table = _make_table(alice, "fuzzed")
        alice.new_session().apply_arrow(table, pa.table({"key": np.arange(10), "v": ["x"] * 10}), "insert")
        tablet_id = table.scan_token_builder().build()[0].tablet().id()
    finally:
        alice.close()
    before = state()
    rng = random.Random(29)
    real = {"tablet_id": tablet_id, "table_id": table.id, "name": "fuzzed", "group": tablet_id}
    bodies: list[Any] = [
        *rng.sample(WRONG, 8),
        real,
        {**real, "rows": b"\xff"},
        {"name": "fuzzed", "reserve_seconds": 0},
    ]
    refused = 0
    wrong: list[str] = []
    methods = 0
    for node in cluster.nodes:
        requirements: dict[str, str] = cluster.http_json(node, "/rpcz")["requirements"]
        for full, requires in requirements.items():
            methods += 1
            service, method = full.split("/")
            for user in (None, "eve"):
                rpc.set_credentials(user, None)
                for body in bodies:
                    try:
                        await rpc.call(node.rpc_address, service, method, body, timeout_s=5)
                        if requires != "any":
                            wrong.append(f"{node.name} {full} as {user}: accepted {body!r:.80}")
                    except KuduBadStatus as e:
                        if requires == "any":
                            if e.code not in ("INVALID_ARGUMENT", "INVALID_REQUEST"):
                                wrong.append(f"{node.name} {full} (open) as {user}: {e.code} {e}")
                        elif e.code != "NOT_AUTHORIZED":
                            wrong.append(f"{node.name} {full} as {user}: {e.code} {e}")
                        else:
                            refused += 1
    assert methods >= 30, methods
    assert not wrong, "\n".join(wrong[:20])
    assert state() == before
    for node in cluster.nodes:
        assert node.proc is not None and node.proc.poll() is None, f"{node.name} stopped"
        errors = [line for line in node.log_path.read_text().splitlines() if '"level": "ERROR"' in line]
        assert not errors, f"{node.name} logged errors: {errors[:3]}"
    # Every refusal is in the node's audit log (the master's here; the tablet server keeps its own).
    denials = [x for x in _audit(cluster) if not x["allowed"] and x["user"] in ("", "eve")]
    assert len(denials) >= 10
