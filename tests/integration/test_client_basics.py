"""The kudu-python-style client against a real cluster: DDL, every write op with per-row errors and
metrics, predicates and pruning, snapshot reads, scan tokens in another process, alter with an old
table handle, the async API, and a leader kill under a stream of session writes."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import textwrap
import time
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

import kudu_async as kudu
import kudu_async.aio
from kudu_async.client.authn import os_user
from kudu_async.testing import MiniCluster

pytestmark = pytest.mark.integration
POINT_READ_PATHS = ("point_reads_in_memory", "point_reads_handed_off")  # where tservers answered point lookups


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    c = MiniCluster(num_masters=1, num_tservers=3, base_dir=tmp_path_factory.mktemp("client"))
    c.start()
    yield c
    c.shutdown()


@pytest.fixture(scope="module")
def client(cluster: MiniCluster):
    with kudu.connect(cluster.master_addresses.split(",")) as c:
        yield c


def _schema() -> kudu.Schema:
    b = kudu.schema_builder()
    b.add_column("key").type(kudu.int64).nullable(False).primary_key()
    b.add_column("val", type_=kudu.string)
    b.add_column("n", type_=kudu.int32, default=7)
    return b.build()


def test_ddl_writes_errors_metrics_and_scans(client: kudu.Client) -> None:
    part = kudu.Partitioning().add_hash_partitions(["key"], 3)
    t = client.create_table("basics", _schema(), part, n_replicas=3)
    assert client.table_exists("basics") and not client.table_exists("nope")
    assert "basics" in client.list_tables("basic") and client.list_tables("zzz") == []
    s = client.new_session()
    for i in range(100):
        s.apply(t.new_insert({"key": i, "val": f"v{i}"}))
    s.flush()
    s.apply(t.new_insert({"key": 1, "val": "dup"}))
    with pytest.raises(kudu.KuduBadStatus, match="ALREADY_PRESENT"):
        s.flush()
    errors, overflowed = s.get_pending_errors()
    assert len(errors) == 1 and not overflowed and errors[0].failed_op().cells == {"key": 1, "val": "dup"}
    s.apply(t.new_update({"key": 2, "val": "upd"}))
    s.apply(t.new_delete({"key": 3}))
    s.apply(t.new_insert_ignore({"key": 4}))
    s.apply(t.new_delete_ignore({"key": 5000}))
    s.apply(t.new_upsert((5, "ups")))
    s.flush()
    m = s.get_write_op_metrics()
    assert (
        m["successful_inserts"],
        m["successful_updates"],
        m["successful_deletes"],
        m["successful_upserts"],
        m["insert_ignore_errors"],
        m["delete_ignore_errors"],
    ) == (100, 1, 1, 1, 1, 1)
    assert s.apply_arrow(t, pa.table({"key": pa.array(range(1000, 3000), pa.int64())}), "upsert") == 2000
    rows = sorted(t.scanner().add_predicate(t["key"] < 6).open().read_all_tuples())
    assert rows == [(0, "v0", 7), (1, "v1", 7), (2, "upd", 7), (4, "v4", 7), (5, "ups", 7)]
    sc = t.scanner().add_predicates([t["key"].in_list([1, 1500, 99999]), t["val"].is_null()])
    assert sorted(sc.open().read_all_tuples()) == [(1500, None, 7)]
    one = t.scanner().add_predicate(t["key"] == 2)
    one.open()
    assert len(one._inner._tablets) == 1  # pruned to the key's hash bucket
    assert t.scanner().set_limit(10).open().to_arrow().num_rows == 10
    assert t.scanner().set_fault_tolerant().open().to_arrow().num_rows == 2099
    df = t.scanner().set_projected_column_names(["key"]).open().to_pandas()
    assert list(df.columns) == ["key"] and len(df) == 2099
    with pytest.raises(kudu.KuduInvalidArgument, match="no != predicate"):
        t["key"] != 3  # noqa: B015


def test_snapshot_reads_and_read_your_writes(client: kudu.Client) -> None:
    t = client.create_table("snap", _schema(), kudu.Partitioning().add_hash_partitions(["key"], 2), n_replicas=3)
    s = client.new_session(flush_mode=kudu.FLUSH_AUTO_SYNC)
    s.apply(t.new_insert({"key": 1, "val": "a"}))
    before = dt.datetime.now(dt.UTC)
    time.sleep(0.05)
    s.apply(t.new_insert({"key": 2, "val": "b"}))
    with pytest.raises(kudu.KuduBadStatus, match="ALREADY_PRESENT"):
        s.apply(t.new_insert({"key": 2, "val": "again"}))  # AUTO_FLUSH_SYNC raises at apply
    past = t.scanner().set_snapshot(before).open().read_all_tuples()
    assert [r[0] for r in past] == [1]
    ryw = t.scanner().set_read_mode(kudu.READ_YOUR_WRITES).open().read_all_tuples()
    assert sorted(r[0] for r in ryw) == [1, 2]


def test_scan_tokens_work_in_another_process(client: kudu.Client, cluster: MiniCluster) -> None:
    t = client.create_table("tokens", _schema(), kudu.Partitioning().add_hash_partitions(["key"], 3), n_replicas=3)
    client.new_session().apply_arrow(t, pa.table({"key": pa.array(range(3000), pa.int64())}), "insert")
    tokens = t.scan_token_builder().add_predicate(t["key"] >= 1000).build()
    assert len(tokens) == 3
    code = textwrap.dedent(f"""
        import sys, kudu_async as kudu
        c = kudu.connect({cluster.master_addresses.split(",")!r})
        n = 0
        for line in sys.stdin.read().split():
            n += c.deserialize_token_into_scanner(bytes.fromhex(line)).open().to_arrow().num_rows
        print(n)
        c.close()
    """)
    out = subprocess.run(
        [sys.executable, "-c", code],
        input="\n".join(tok.serialize().hex() for tok in tokens),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert int(out.stdout.strip()) == 2000
    with pytest.raises(kudu.KuduInvalidArgument, match="not a scan token"):
        client.deserialize_token_into_scanner(b"garbage")


def test_alter_table_and_a_write_built_on_the_old_schema(client: kudu.Client) -> None:
    b = kudu.schema_builder()
    b.add_column("day", kudu.date, nullable=False).primary_key()
    b.add_column("amount", kudu.decimal, precision=10, scale=2)
    part = (
        kudu.Partitioning()
        .set_range_partition_columns(["day"])
        .add_range_partition({"day": dt.date(2026, 1, 1)}, {"day": dt.date(2026, 2, 1)})
    )
    t = client.create_table("alter_me", b.build(), part, n_replicas=3)
    s = client.new_session()
    s.apply(t.new_insert({"day": dt.date(2026, 1, 5), "amount": Decimal("1.25")}))
    s.flush()
    with pytest.raises(kudu.KuduBadStatus, match="no tablet"):
        s.apply(t.new_insert({"day": dt.date(2026, 3, 5), "amount": Decimal("2")}))
        s.flush()
    s.get_pending_errors()
    alt = client.new_table_alterer(t)
    alt.add_column("note", kudu.string, default="none")
    alt.alter_column("amount", rename_to="total")
    alt.add_range_partition({"day": dt.date(2026, 3, 1)}, {"day": dt.date(2026, 4, 1)})
    t2 = alt.alter()
    assert t2.schema.names == ["day", "total", "note"]
    s.apply(t.new_upsert({"day": dt.date(2026, 3, 5), "amount": Decimal("2.50")}))  # old handle, old names
    s.flush()
    got = sorted(t2.scanner().open().read_all_tuples())
    assert got == [(dt.date(2026, 1, 5), Decimal("1.25"), "none"), (dt.date(2026, 3, 5), Decimal("2.50"), "none")]
    t3 = client.new_table_alterer(t2).rename("altered").alter()
    assert t3.name == "altered" and not client.table_exists("alter_me")
    client.delete_table("altered")
    assert not client.table_exists("altered")


async def test_async_client(cluster: MiniCluster) -> None:
    async with await kudu_async.aio.connect(cluster.master_addresses.split(",")) as c:
        t = await c.create_table(
            "async_t", _schema(), kudu.Partitioning().add_hash_partitions(["key"], 2), n_replicas=3
        )
        s = c.new_session(flush_mode=kudu.FLUSH_AUTO_BACKGROUND)
        for i in range(500):
            await s.apply(t.new_upsert({"key": i, "val": str(i)}))
        await s.flush()
        assert (await t.scanner().open()).has_more_rows()
        assert (await (await t.scanner().open()).to_arrow()).num_rows == 500
        await c.delete_table("async_t")
        assert not await c.table_exists("async_t")


async def test_point_reads_stay_linearizable_while_rows_move_from_memory_to_files(cluster: MiniCluster) -> None:
    """Point reads that memory can answer (a MemRowSet, or rowset files in the block cache) are answered on
    the tserver's event loop, others in workers: with inserts, updates and flushes of every replica running
    meanwhile, a READ_LATEST lookup returns every write acknowledged before it started, and the latest
    value of each key it knows of."""
    before = cluster.tserver_metric_totals(["block_cache_inserts"], "server")
    await _check_point_reads_linearizable(cluster, both_paths=False)
    after = cluster.tserver_metric_totals(["block_cache_inserts"], "server")
    assert after["block_cache_inserts"] > before["block_cache_inserts"]  # flushed files were read from memory


async def test_point_reads_stay_linearizable_without_a_block_cache(tmp_path) -> None:
    """The same with every rowset file memory-mapped: lookups of flushed rows go to workers."""
    with MiniCluster(
        num_masters=1, num_tservers=3, base_dir=tmp_path / "c", tserver_flags=["--block-cache-capacity-mb", "0"]
    ) as c:
        await _check_point_reads_linearizable(c, both_paths=True)
        assert c.tserver_metric_totals(["block_cache_usage"], "server") == {"block_cache_usage": 0}


async def _check_point_reads_linearizable(cluster: MiniCluster, both_paths: bool) -> None:
    import asyncio
    import random

    from kudu_async.rpc.client import RpcClient

    async with await kudu_async.aio.connect(cluster.master_addresses.split(",")) as c:
        t = await c.create_table(
            "moving_rows", _schema(), kudu.Partitioning().add_hash_partitions(["key"], 2), n_replicas=3
        )
        tablets = [tok.tablet().id() for tok in await t.scan_token_builder().build()]
        inserted: set[int] = set()
        updated: set[int] = set()
        s = c.new_session()
        for i in range(300):
            await s.apply(t.new_insert({"key": i, "val": f"v{i}"}))
        await s.flush()
        inserted.update(range(300))
        stop = asyncio.Event()
        reads = 0

        async def writer() -> None:
            for lo in range(300, 1200, 100):
                for i in range(lo, lo + 100):
                    await s.apply(t.new_insert({"key": i, "val": f"v{i}"}))
                for i in range(lo - 300, lo - 250):
                    await s.apply(t.new_update({"key": i, "val": f"u{i}"}))
                await s.flush()
                inserted.update(range(lo, lo + 100))
                updated.update(range(lo - 300, lo - 250))
            stop.set()

        async def flusher() -> None:
            rpc = RpcClient("test")
            try:
                while not stop.is_set():
                    for ts in cluster.tservers:
                        for tablet in tablets:
                            await rpc.call(ts.rpc_address, "TabletServer", "FlushTablet", {"tablet_id": tablet})
                    await asyncio.sleep(0.05)
            finally:
                await rpc.close()

        async def reader(seed: int) -> None:
            nonlocal reads
            rng = random.Random(seed)
            # Past the writer's end too, until 100 reads are checked: a fast writer must not leave the
            # check with too few reads (the writes, updates and flushes overlap the first reads anyway).
            while not stop.is_set() or reads < 100:
                k = rng.randrange(1200)
                known, fresh = k in inserted, k in updated
                got = (await t.scanner().add_predicate(t["key"] == k).to_arrow()).to_pylist()
                reads += 1
                if known:
                    assert len(got) == 1, f"key {k} acknowledged but not read"
                    assert got[0]["val"] == (f"u{k}" if fresh else got[0]["val"]), f"key {k}: stale {got}"
                    assert got[0]["val"] in (f"v{k}", f"u{k}")
                else:
                    assert got == [] or got[0]["val"] == f"v{k}"

        before = cluster.tserver_metric_totals(POINT_READ_PATHS)
        await asyncio.wait_for(asyncio.gather(writer(), flusher(), *(reader(i) for i in range(6))), 120)
        assert reads >= 100
        after = cluster.tserver_metric_totals(POINT_READ_PATHS)
        assert after["point_reads_in_memory"] > before["point_reads_in_memory"], (before, after)
        if both_paths:  # the event loop's and the workers'
            assert after["point_reads_handed_off"] > before["point_reads_handed_off"], (before, after)
        await c.delete_table("moving_rows")


def test_session_survives_a_tablet_leader_kill(tmp_path) -> None:
    with (
        MiniCluster(num_masters=1, num_tservers=3, base_dir=tmp_path / "c") as c,
        kudu.connect(c.master_addresses.split(",")) as client,
    ):
        # one tablet, so the kill hits the leader of every write
        t = client.create_table(
            "failover", _schema(), kudu.Partitioning().set_range_partition_columns([]), n_replicas=3
        )
        s = client.new_session(timeout_ms=30_000)
        acked = 0
        for batch in range(20):
            if batch == 5:
                probe = t.scanner().set_read_mode(kudu.READ_LATEST).open()
                probe.next_batch_arrow()
                leader = probe.get_current_server()
                node = next(n for n in c.tservers if n.rpc_address == leader)
                c.kill_node(node)
            rows = pa.table({"key": pa.array(range(batch * 500, (batch + 1) * 500), pa.int64())})
            s.apply_arrow(t, rows, "upsert")
            acked = (batch + 1) * 500
        got = t.scanner().open().to_arrow().column("key").to_pylist()
        assert sorted(got) == list(range(acked))


def test_owner_and_comment_are_kept_and_altered(client: kudu.Client) -> None:
    t = client.create_table(
        "owned",
        _schema(),
        kudu.Partitioning().add_hash_partitions(["key"], 2),
        n_replicas=1,
        owner="alice",
        comment="first",
    )
    assert (t.owner, t.comment) == ("alice", "first")
    t = client.new_table_alterer(t).set_owner("bob").set_comment("second").alter()
    assert (t.owner, t.comment) == ("bob", "second")
    again = client.table("owned")
    assert (again.owner, again.comment) == ("bob", "second")
    t = client.new_table_alterer(again).set_comment("").alter()  # "" clears it, as in Kudu
    assert t.comment is None and t.owner == "bob"
    with pytest.raises(kudu.KuduInvalidArgument, match="'comment' must be a string of at most 256"):
        client.new_table_alterer(t).set_comment("x" * 257).alter()
    with pytest.raises(kudu.KuduInvalidArgument, match="'owner' must be a string of at most 128"):
        client.create_table(
            "owned2", _schema(), kudu.Partitioning().add_hash_partitions(["key"], 2), n_replicas=1, owner="o" * 129
        )
    client.delete_table("owned")
    # without an owner the table is its creator's, as in Kudu
    t = client.create_table("owned3", _schema(), kudu.Partitioning().add_hash_partitions(["key"], 2), n_replicas=1)
    assert t.owner == os_user() and client.table("owned3").owner == os_user()
    client.delete_table("owned3")


def test_a_program_exiting_with_unflushed_operations_is_told(cluster: MiniCluster, client: kudu.Client) -> None:
    """A script that leaves its client and a FLUSH_AUTO_BACKGROUND session open and exits within the flush
    interval: as Kudu's client does, the buffered rows are dropped, but with a warning naming them, and no
    flusher task is left for the interpreter to destroy. One that flushes exits quietly with its rows."""
    name = "exit_unflushed"
    client.create_table(name, _schema(), kudu.Partitioning().add_hash_partitions(["key"], 2), n_replicas=1)
    script = textwrap.dedent(f"""
        import kudu_async as kudu
        c = kudu.connect({cluster.master_addresses.split(",")!r})
        t = c.table({name!r})
        s = c.new_session(flush_mode=kudu.FLUSH_AUTO_BACKGROUND)
        for k in range(@START@, @START@ + 10):
            s.apply(t.new_insert({{"key": k, "val": "x"}}))
        @FLUSH@
    """)
    env = {"PYTHONPATH": str(Path(kudu.__file__).resolve().parents[1]), "PATH": "/usr/bin:/bin"}
    left = subprocess.run(
        [sys.executable, "-c", script.replace("@START@", "0").replace("@FLUSH@", "")],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert left.returncode == 0, left.stderr
    assert "10 operation(s) buffered in a session that was never flushed or closed: they are dropped" in left.stderr
    assert "Task was destroyed" not in left.stderr
    done = subprocess.run(
        [sys.executable, "-c", script.replace("@START@", "100").replace("@FLUSH@", "s.flush()")],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    keys = sorted(r[0] for r in client.table(name).scanner().open().read_all_tuples())
    assert keys == list(range(100, 110))
    client.delete_table(name)
