"""``kudu cluster rebalance`` against a real cluster (one 1-master cluster for the module, tests in
order): a 6-tablet x 3-replica table with rows is created on 3 tablet servers and a 4th is added; bad
names are refused; a dry run plans moves onto the new server and changes nothing; the rebalance moves
replicas until every server holds 4 or 5, ksck is healthy and every row is still there; leaders piled on
one server are spread again by ``-leaders_only``; a second run finds nothing to do; with a tablet server
down it refuses to start."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

import kudu_async as kudu
from kudu_async.client.aio import AsyncClient, master_addresses
from kudu_async.client.core import ClientCore
from kudu_async.common import rebalance
from kudu_async.testing import MiniCluster
from kudu_async.testing.waits import wait_for
from kudu_async.tools import ksck, rebalancer_tool, replica_util
from tests.integration.kudu_cli import create_kv_table
from tests.integration.kudu_cli import kudu_json as _admin_json
from tests.integration.kudu_cli import kudu_tool as _admin

pytestmark = pytest.mark.integration

ROWS = 3000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MiniCluster]:
    c = MiniCluster(num_masters=1, num_tservers=3, base_dir=tmp_path_factory.mktemp("rebalance"))
    c.start()
    try:
        create_kv_table(c, "rebal", 6, ROWS)
        c.add_tserver()
        wait_for(
            lambda: sum(1 for d in _admin_json(c, "tserver", "list") if d["live"]) == 4,
            30,
            "the new tablet server to register",
        )
        yield c
    finally:
        c.shutdown()


def _view(cluster: MiniCluster) -> rebalancer_tool.ClusterView:
    """The placement as the rebalancer sees it (fresh from the replicas' own reports)."""

    async def go() -> rebalancer_tool.ClusterView:
        client = AsyncClient(ClientCore(master_addresses(cluster.master_addresses.split(","), None)))
        try:
            return rebalancer_tool.view_from_snapshot(await ksck.collect(client, ["rebal"]))
        finally:
            await client.close()

    return asyncio.run(go())


def _row_count(cluster: MiniCluster) -> int:
    with kudu.connect(cluster.master_addresses.split(",")) as client:
        keys = [
            r[0] for r in client.table("rebal").scanner().set_projected_column_names(["key"]).open().read_all_tuples()
        ]
    assert len(keys) == len(set(keys))
    return len(keys)


def test_bad_names_are_refused(cluster: MiniCluster) -> None:
    r = _admin(cluster, "cluster", "rebalance", "-tables", "rebal,nope", ok=False)
    assert r.returncode == 1 and "-tables: no table named 'nope'" in r.stderr
    r = _admin(cluster, "cluster", "rebalance", "-ignored_tservers", "f" * 32, ok=False)
    assert r.returncode == 1 and f"knows no tablet server {'f' * 32}" in r.stderr
    # Bad usage: Kudu's tool exits 1 with "Invalid argument".
    r = _admin(cluster, "cluster", "rebalance", "-max_moves_per_server", "0", ok=False)
    assert r.returncode == 1 and "Invalid argument: -max_moves_per_server must be >= 1" in r.stderr


def test_dry_run_plans_moves_to_the_new_server_and_changes_nothing(cluster: MiniCluster) -> None:
    before = _view(cluster)
    new = cluster.tservers[3].uuid
    assert rebalance.replica_counts(before.placement)[1][new] == 0
    plan = _admin_json(cluster, "cluster", "rebalance", "-report_only")
    assert plan["dry_run"] and plan["ok"] and not plan["already_balanced"]
    assert len(plan["replica_moves"]) == 4 and {m["to"] for m in plan["replica_moves"]} == {new}
    assert all(m["status"] == "planned" for m in plan["replica_moves"] + plan["leader_transfers"])
    assert sorted(plan["after"]["replicas"].values()) == [4, 4, 5, 5]
    text = _admin(cluster, "cluster", "rebalance", "-report_only").stdout
    assert "nothing was changed" in text and "PLANNED" in text
    assert _view(cluster).placement == before.placement


def test_rebalance_moves_replicas_onto_the_new_server(cluster: MiniCluster) -> None:
    # A writer keeps inserting while replicas move and leaderships change hands: nothing may be lost.
    stop = threading.Event()
    written: list[int] = []
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            with kudu.connect(cluster.master_addresses.split(",")) as client:
                t = client.table("rebal")
                s = client.new_session(timeout_ms=20_000)
                key = ROWS
                while not stop.is_set():
                    for k in range(key, key + 50):
                        s.apply(t.new_insert({"key": k, "v": f"w{k}"}))
                    s.flush()
                    written.extend(range(key, key + 50))
                    key += 50
                    time.sleep(0.05)
        except BaseException as e:  # reported by the test thread below
            errors.append(e)

    th = threading.Thread(target=writer, daemon=True)
    th.start()
    t0 = time.monotonic()
    try:
        rep = _admin_json(cluster, "cluster", "rebalance", "-max_moves_per_server", "2")
    finally:
        took = time.monotonic() - t0
        stop.set()
        th.join(30)
    assert not errors, errors
    assert len(written) >= 50
    assert rep["ok"] and rep["balanced"], rep
    done = [m for m in rep["replica_moves"] if m["status"] == "done"]
    assert len(done) >= 4 and {m["to"] for m in done} == {cluster.tservers[3].uuid}
    view = _view(cluster)
    assert not view.problems
    counts = rebalance.replica_counts(view.placement)[1]
    assert sorted(counts.values()) == [4, 4, 5, 5], counts
    assert rebalance.spread(rebalance.leader_counts(view.placement)[1]) <= 1
    report = _admin_json(cluster, "cluster", "ksck", "-checksum_scan", "-tables", "rebal")
    assert report["ok"], report["errors"]
    assert report["tables"][0]["checksum"]["rows"] == ROWS + len(written)
    assert _row_count(cluster) == ROWS + len(written)
    print(f"\nrebalance onto a new server: {len(done)} moves in {took:.1f} s, {len(written)} rows written meanwhile")


def test_leaders_piled_on_one_server_are_spread(cluster: MiniCluster) -> None:
    view = _view(cluster)
    # The server holding the most replicas gets every leadership it can take.
    pile = max(view.placement.servers, key=lambda u: (rebalance.replica_counts(view.placement)[1][u], u))

    async def pile_up() -> None:
        client = AsyncClient(ClientCore(master_addresses(cluster.master_addresses.split(","), None)))
        try:
            for t in view.placement.tablets:
                if pile in t.voters and t.leader != pile:
                    assert t.leader is not None
                    await replica_util.transfer_leadership(
                        client.rpc, view.addresses[t.leader], t.tablet_id, pile, view.addresses[pile], 10.0
                    )
        finally:
            await client.close()

    asyncio.run(pile_up())
    piled = wait_for(lambda: v if not (v := _view(cluster)).problems else None, 20, "a settled cluster")
    leaders = rebalance.leader_counts(piled.placement)[1]
    assert leaders[pile] >= 4 and rebalance.spread(leaders) >= 3, leaders

    rep = _admin_json(cluster, "cluster", "rebalance", "-leaders_only")
    assert rep["ok"] and rep["balanced"] and not rep["replica_moves"], rep
    assert all(x["from"] == pile for x in rep["leader_transfers"] if x["status"] == "done")
    after = _view(cluster)
    assert rebalance.spread(rebalance.leader_counts(after.placement)[1]) <= 1
    assert rebalance.replica_counts(after.placement)[1] == rebalance.replica_counts(piled.placement)[1]

    again = _admin(cluster, "cluster", "rebalance")
    assert "already balanced" in again.stdout


def test_refuses_to_start_on_an_unhealthy_cluster(cluster: MiniCluster) -> None:
    """Last: it stops a tablet server."""

    def voters() -> dict[str, frozenset[str]]:
        return {t.tablet_id: t.voters for t in _view(cluster).placement.tablets}

    before = voters()
    victim = cluster.tservers[0]
    cluster.stop_node(victim)
    r = _admin(cluster, "cluster", "rebalance", ok=False)
    assert r.returncode == 1 and r.stdout.startswith("refusing to rebalance")
    assert "UNDER_REPLICATED" in r.stdout and victim.uuid in r.stdout
    assert voters() == before  # nothing was moved
