"""Running the ``kudu`` tool against a MiniCluster, and a small filled table to run it on (shared by the
integration tests of the tool and of ``cluster rebalance``)."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from typing import Any

import kudu_async as kudu
from kudu_async.testing import MiniCluster
from kudu_async.tools.cli import framework, main


def argv_with_masters(args: tuple[str, ...], masters: str) -> list[str]:
    """``args`` with ``masters`` as the <master_addresses> of a verb that takes them (after the verb's
    path, as Kudu's syntax has it)."""
    for n in range(len(args), 0, -1):
        v = framework.REGISTRY.verbs.get(tuple(args[:n]))
        if v is not None:
            return [*args[:n], masters, *args[n:]] if v.masters else list(args)
    return list(args)


def kudu_tool(
    cluster: MiniCluster, *args: str, ok: bool = True, timeout: float = 120, in_process: bool = False
) -> subprocess.CompletedProcess[str]:
    """``kudu <args>``, the cluster's masters inserted where the verb takes them: in a subprocess, as an
    operator runs it, or (``in_process``, for a synchronous test that runs many verbs) through the tool's
    ``main`` here, without a Python start-up per verb."""
    argv = argv_with_masters(args, cluster.master_addresses)
    if in_process:
        r = _run_here(argv)
    else:
        r = subprocess.run(
            [sys.executable, "-m", "kudu_async.tools.cli", *argv], capture_output=True, text=True, timeout=timeout
        )
    if ok:
        assert r.returncode == 0, f"kudu {' '.join(args)} -> {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


def _run_here(argv: list[str]) -> subprocess.CompletedProcess[str]:
    out, err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8"), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
        out.flush()
    assert isinstance(out.buffer, io.BytesIO)
    return subprocess.CompletedProcess(argv, status, out.buffer.getvalue().decode(), err.getvalue())


def kudu_json(cluster: MiniCluster, *args: str, in_process: bool = False) -> Any:
    """The JSON a verb prints with -format=json (ksck: -ksck_format=json_compact)."""
    fmt = "-ksck_format=json_compact" if args[:2] == ("cluster", "ksck") else "-format=json"
    return json.loads(kudu_tool(cluster, *args, fmt, in_process=in_process).stdout)


def create_kv_table(cluster: MiniCluster, name: str, buckets: int, rows: int) -> None:
    """A (key int64, v string) table hash-partitioned on key, 3 replicas, with keys 0..rows-1."""
    with kudu.connect(cluster.master_addresses.split(",")) as client:
        b = kudu.schema_builder()
        b.add_column("key").type(kudu.int64).nullable(False).primary_key()
        b.add_column("v", type_=kudu.string)
        t = client.create_table(
            name, b.build(), kudu.Partitioning().add_hash_partitions(["key"], buckets), n_replicas=3
        )
        s = client.new_session()
        for i in range(rows):
            s.apply(t.new_insert({"key": i, "v": f"v{i}"}))
        s.flush()
