"""``kudu local_replica ...``: the tablet replicas in a STOPPED node's data directory (``-fs_wal_dir``).

Every verb takes the directory's lock first, so it refuses a directory a running node holds (naming the
node's pid) and the node cannot start while a verb edits it. Kudu's verbs here: ``list``, ``delete``,
``data_size``, ``copy_from_remote``, ``cmeta print_replica_uuids|set_term``, and the ``dump`` verbs that map
onto kudu_async's storage: ``block_ids``, ``data_dirs``, ``meta`` (the tablet metadata and consensus
metadata as stored), ``rowset`` (rows as they are now, deltas applied) and ``wals`` (every WAL segment, as
``kudu wal dump``).
"""

from __future__ import annotations

import argparse
import asyncio
import fnmatch
import json
from collections.abc import Iterator
from typing import Any

from kudu_async.common.errors import KuduBadStatus, KuduCorruption, KuduIllegalState, KuduInvalidArgument, KuduNotFound
from kudu_async.consensus.log import SegmentReader, wal_segment_paths
from kudu_async.consensus.tablet_copy import fetch_tablet_copy
from kudu_async.fs.tablet_metadata import METADATA_FILE, TabletMetadata
from kudu_async.tablet.offline import rowset_rows, tablet_info
from kudu_async.tools.cli.framework import (
    Context,
    Result,
    UsageError,
    add_format_flag,
    csv_list,
    flag,
    group,
    progress,
    rows_result,
    verb,
)
from kudu_async.tools.cli.local_fs import add_fs_flags, data_dir, with_dir
from kudu_async.tools.cli.remote_replica import tserver_address
from kudu_async.tools.cli.wal import add_print_flags, dump_segment, print_lines, print_mode
from kudu_async.tserver.local_replicas import LocalDataDir, LocalReplica, partition_text

group("local_replica", help="Operate on local tablet replicas via the local filesystem")
group("local_replica", "dump", help="Dump a Kudu filesystem")
group("local_replica", "cmeta", help="Operate on a local tablet replica's consensus metadata file")

TOOL = "kudu local_replica"


def _tablet_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("tablet_id", help="tablet identifier")
    add_fs_flags(p)


def _needs_meta(r: LocalReplica) -> TabletMetadata:
    if r.meta is not None:
        return r.meta
    if r.tombstoned:
        raise KuduNotFound(f"tablet {r.tablet_id} is tombstoned: its storage is gone")
    if (r.tablet_dir / METADATA_FILE).exists():
        raise KuduCorruption(f"tablet {r.tablet_id}: {r.meta_error}")
    raise KuduNotFound(f"tablet {r.tablet_id} has no tablet metadata: {r.meta_error}")


# --- list, data_size ----------------------------------------------------------------------------------------


def _list_args(p: argparse.ArgumentParser) -> None:
    add_fs_flags(p)
    flag(p, "list_detail", type=bool, help="print each replica's table, partition, state and Raft term")
    add_format_flag(p)


def replica_row(r: LocalReplica) -> dict[str, Any]:
    c = r.cmeta
    return {
        "tablet_id": r.tablet_id,
        "table_name": r.table_name,
        "table_id": r.table_id,
        "partition": partition_text(r.extra.get("partition")) if r.extra.get("partition") is not None else None,
        "state": r.state,
        "term": None if c is None else c.term,
        "commit_index": None if c is None else c.commit_index,
        "rowsets": None if r.meta is None else len(r.meta.rowsets),
        "error": r.cmeta_error or r.meta_error,
    }


@verb(
    "local_replica", "list", help="Show list of tablet replicas in the local filesystem", args=_list_args, masters=False
)
async def local_list(ctx: Context, a: argparse.Namespace) -> Result:
    rows = await with_dir(a, TOOL, lambda d: [replica_row(r) for r in d.replicas()])
    columns = ["tablet_id", "table_name", "partition", "state", "term", "rowsets"] if a.list_detail else ["tablet_id"]
    if a.list_detail and any(r["error"] for r in rows):
        columns.append("error")
    return rows_result(rows, columns, a.format if a.list_detail else ("space" if a.format == "pretty" else a.format))


def _size_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("tablet_id_pattern", help="tablet identifier pattern; '*' matches any characters")
    add_fs_flags(p)
    add_format_flag(p)


def _size_rows(d: LocalDataDir, pattern: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for tid in d.replica_ids():
        if not fnmatch.fnmatchcase(tid, pattern):
            continue
        r = d.replica(tid)
        wal = sum(p.stat().st_size for p in r.wal_dir.glob("wal-*")) if r.wal_dir.is_dir() else 0
        blocks = r.tablet_dir / "data"
        data = sum(p.stat().st_size for p in blocks.iterdir()) if blocks.is_dir() else 0
        rows.append({"tablet_id": tid, "table_name": r.table_name, "wal_bytes": wal, "data_bytes": data})
    rows.append(
        {
            "tablet_id": "<all>",
            "table_name": "",
            "wal_bytes": sum(r["wal_bytes"] for r in rows),
            "data_bytes": sum(r["data_bytes"] for r in rows),
        }
    )
    return rows


@verb(
    "local_replica",
    "data_size",
    help="Summarize the data size/space usage of the given local replica(s)",
    args=_size_args,
    masters=False,
)
async def local_data_size(ctx: Context, a: argparse.Namespace) -> Result:
    rows = await with_dir(a, TOOL, lambda d: _size_rows(d, a.tablet_id_pattern))
    if len(rows) == 1:
        raise KuduNotFound(f"no tablet replica matches {a.tablet_id_pattern!r}")
    return rows_result(rows, ["tablet_id", "table_name", "wal_bytes", "data_bytes"], a.format)


# --- delete -------------------------------------------------------------------------------------------------


def _delete_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("tablet_id_patterns", help="comma-separated tablet identifier patterns; '*' matches any characters")
    add_fs_flags(p)
    flag(
        p,
        "clean_unsafe",
        type=bool,
        help="delete the replica completely, not leaving a tombstone: its consensus metadata (Raft vote "
        "record) goes too, which Raft's vote durability does not allow [false]",
    )
    flag(p, "ignore_nonexistent", type=bool, help="no error for a pattern matching no replica [false]")
    flag(p, "tables", metavar="PATTERNS", help="only replicas of tables whose names match these patterns")


def _delete(d: LocalDataDir, a: argparse.Namespace) -> list[str]:
    patterns = sorted(set(csv_list(a.tablet_id_patterns, "tablet_id_patterns") or []))
    tables = csv_list(a.tables, "-tables")
    candidates = d.replica_ids()
    if tables is not None:
        candidates = [
            t for t in candidates if any(fnmatch.fnmatchcase(d.replica(t).table_name or "", p) for p in tables)
        ]
    out = []
    for pattern in patterns:
        matched = [t for t in candidates if fnmatch.fnmatchcase(t, pattern)]
        if not matched and not a.ignore_nonexistent:
            raise KuduNotFound(
                f"tablet id (pattern) {pattern!r} matches no replica in {d.root}"
                + (" of the tables -tables names" if tables is not None else "")
            )
        for tid in matched:
            if tid in out:
                continue
            d.delete_replica(tid, clean_unsafe=a.clean_unsafe)
            out.append(tid)
    return out


@verb(
    "local_replica",
    "delete",
    help="Delete tablet replicas from the local filesystem; by default leaves a tombstone",
    args=_delete_args,
    masters=False,
)
async def local_delete(ctx: Context, a: argparse.Namespace) -> Result:
    if not csv_list(a.tablet_id_patterns, "tablet_id_patterns"):
        raise UsageError("no tablet identifiers provided")
    deleted = await with_dir(a, TOOL, lambda d: _delete(d, a))
    how = "deleted (no tombstone)" if a.clean_unsafe else "tombstoned"
    return Result(data=deleted, text="\n".join(f"{tid}: {how}" for tid in deleted))


# --- copy_from_remote ---------------------------------------------------------------------------------------


def _copy_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("tablet_ids", help="comma-separated list of tablet identifiers")
    p.add_argument("source", help="RPC address of the tablet server to copy from, host[:port]")
    add_fs_flags(p)


@verb(
    "local_replica",
    "copy_from_remote",
    help="Copy tablet replicas from a remote server into this stopped node's directory",
    args=_copy_args,
    masters=False,
)
async def copy_from_remote(ctx: Context, a: argparse.Namespace) -> Result:
    """Through the tablet copy the servers use (a session on the source, checksummed chunks), into the
    directory's staging place, then moved in as the tablet manager installs a copy. A tablet with a live
    replica here is refused: delete it first (a tombstone is replaced)."""
    ids = sorted(set(csv_list(a.tablet_ids, "tablet_ids") or []))
    if not ids:
        raise UsageError("no tablet identifiers provided")
    source = tserver_address(a.source)
    root = data_dir(a)
    d = await asyncio.to_thread(LocalDataDir.open, root, TOOL)
    done: list[str] = []
    try:
        present = set(await asyncio.to_thread(d.replica_ids))
        for tid in ids:
            if tid in present and not (await asyncio.to_thread(d.replica, tid)).tombstoned:
                raise KuduIllegalState(
                    f"tablet {tid} has a replica in {root}: delete it first (kudu local_replica delete)"
                )
        rpc = ctx.rpc()
        for tid in ids:
            staging = d.copy_staging(tid)
            with progress(None, f"copying {tid}") as bar:
                meta = await fetch_tablet_copy(
                    rpc,
                    source,
                    tid,
                    staging,
                    timeout_s=ctx.timeout_s,
                    progress=lambda got, total: _bar_to(bar, got, total),
                )
            await asyncio.to_thread(d.install_copy, tid, staging)
            done.append(f"{tid}: copied from {source} ({meta.get('bytes')} bytes)")
    finally:
        await asyncio.to_thread(d.close)
    return Result(data=done, text="\n".join(done))


def _bar_to(bar: Any, got: int, total: int) -> None:
    bar.total = total
    bar.update(got - bar.n)


# --- cmeta --------------------------------------------------------------------------------------------------


def _uuids_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("tablet_ids", help="comma-separated list of tablet identifiers")
    add_fs_flags(p)


def _print_uuids(d: LocalDataDir, ids: list[str]) -> list[str]:
    lines = []
    for tid in ids:
        r = d.replica(tid)
        cfg = d.committed_config(r)
        lines.append(f"tablet: {tid}, peers: {' '.join(sorted(cfg.config.members))}")
    return lines


@verb(
    "local_replica",
    "cmeta",
    "print_replica_uuids",
    help="Print all tablet replica peer UUIDs found in a tablet's Raft configuration",
    args=_uuids_args,
    masters=False,
)
async def cmeta_print_uuids(ctx: Context, a: argparse.Namespace) -> Result:
    ids = csv_list(a.tablet_ids, "tablet_ids")
    if not ids:
        raise UsageError("no tablet identifiers provided")
    return Result(text="\n".join(await with_dir(a, TOOL, lambda d: _print_uuids(d, ids))))


def _term_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("tablet_id", help="tablet identifier")
    p.add_argument("term", help="the new Raft term (higher than the current one)")
    add_fs_flags(p)


@verb(
    "local_replica",
    "cmeta",
    "set_term",
    help="Bump the current term stored in consensus metadata",
    args=_term_args,
    masters=False,
)
async def cmeta_set_term(ctx: Context, a: argparse.Namespace) -> Result:
    try:
        term = int(a.term)
    except ValueError:
        raise UsageError(f"invalid term {a.term!r}: a positive integer") from None
    if term <= 0:
        raise UsageError(f"invalid term {term}: a positive integer")
    old, backup = await with_dir(a, TOOL, lambda d: d.set_term(a.tablet_id, term))
    return Result(text=f"tablet {a.tablet_id}: term {old} -> {term} (the old record is kept as {backup})")


# --- dump ---------------------------------------------------------------------------------------------------


def _block_ids(d: LocalDataDir, tablet_id: str) -> list[str]:
    r = d.replica(tablet_id)
    meta = _needs_meta(r)
    lines = []
    for rs in meta.rowsets:
        lines.append(f"Rowset {rs.id}")
        lines.append(f"Base data block: {rs.base_block}")
        lines.append(f"Bloom filter block: {rs.bloom_block}")
        lines.extend(f"REDO delta block: {b}" for b in rs.delta_blocks)
    return lines


@verb(
    "local_replica",
    "dump",
    "block_ids",
    help="Dump the IDs of all blocks belonging to a local replica",
    args=_tablet_arg,
    masters=False,
)
async def dump_block_ids(ctx: Context, a: argparse.Namespace) -> Result:
    return Result(text="\n".join(await with_dir(a, TOOL, lambda d: _block_ids(d, a.tablet_id))))


@verb(
    "local_replica",
    "dump",
    "data_dirs",
    help="Dump the data directories where the replica's data is stored",
    args=_tablet_arg,
    masters=False,
)
async def dump_data_dirs(ctx: Context, a: argparse.Namespace) -> Result:
    def run(d: LocalDataDir) -> str:
        r = d.replica(a.tablet_id)
        _needs_meta(r)
        return str(r.tablet_dir / "data")

    return Result(text=await with_dir(a, TOOL, run))


def _meta(d: LocalDataDir, tablet_id: str) -> dict[str, Any]:
    r = d.replica(tablet_id)
    out: dict[str, Any] = {"tablet_id": tablet_id, "state": r.state}
    if r.meta is not None:
        out["tablet_metadata"] = json.loads(r.meta.to_json())
    elif r.meta_error:
        out["tablet_metadata_error"] = r.meta_error
    if r.cmeta is not None:
        c = r.cmeta
        out["consensus_metadata"] = {
            "current_term": c.term,
            "voted_for": c.voted_for,
            "commit_index": c.commit_index,
            "config": c.config,
        }
        try:
            cfg = d.committed_config(r)
            out["committed_config"] = {
                "opid_index": cfg.opid_index,
                **cfg.config.to_dict(),
                "addresses": cfg.addresses,
            }
        except KuduBadStatus as e:  # a damaged WAL: the rest of the metadata still prints
            out["committed_config_error"] = str(e)
    elif r.cmeta_error:
        out["consensus_metadata_error"] = r.cmeta_error
    return out


@verb("local_replica", "dump", "meta", help="Dump the metadata of a local replica", args=_tablet_arg, masters=False)
async def dump_meta(ctx: Context, a: argparse.Namespace) -> Result:
    doc = await with_dir(a, TOOL, lambda d: _meta(d, a.tablet_id))
    return Result(text=json.dumps(doc, indent=2, sort_keys=True, default=_bytes_hex))


def _bytes_hex(v: Any) -> str:
    return v.hex() if isinstance(v, bytes) else str(v)


def _rowset_args(p: argparse.ArgumentParser) -> None:
    _tablet_arg(p)
    flag(p, "rowset_index", type=int, default=-1, help="index of the rowset to dump; -1: every rowset [-1]")
    flag(p, "nrows", type=int, default=-1, help="number of rows to dump; negative: all [-1]")
    flag(p, "dump_all_columns", type=bool, default=True, help="every column; false: the key columns only [true]")
    flag(p, "dump_metadata", type=bool, default=True, help="each rowset's metadata before its rows [true]")
    flag(
        p,
        "dump_primary_key_bounds_only",
        type=bool,
        help="only each rowset's primary key bounds (with -dump_all_columns=false) [false]",
    )


def _row_text(names: list[str], types: list[str], values: list[Any]) -> str:
    return "(" + ", ".join(f"{t} {n}={v!r}" for n, t, v in zip(names, types, values, strict=True)) + ")"


def _rowset_lines(d: LocalDataDir, a: argparse.Namespace) -> Iterator[str]:
    r = d.replica(a.tablet_id)
    meta = _needs_meta(r)
    rowsets = meta.rowsets
    if a.rowset_index >= 0:
        if a.rowset_index >= len(rowsets):
            raise KuduInvalidArgument(f"-rowset_index={a.rowset_index}: tablet {a.tablet_id} has {len(rowsets)}")
        rowsets = [rowsets[a.rowset_index]]
    info = tablet_info(meta)
    schema = info.schema
    names = list(schema.names) if a.dump_all_columns else list(schema.key_names)
    types = [schema.column(n).type.name for n in names]
    left = a.nrows if a.nrows >= 0 else None
    for i, rs in enumerate(rowsets):
        if a.dump_metadata:
            yield f"Dumping rowset {i} (id {rs.id}):\n{json.dumps(rs.__dict__, sort_keys=True)}"
        if a.dump_primary_key_bounds_only:
            yield f"RowSet {rs.id} primary key bounds (encoded): [{rs.min_key_hex}, {rs.max_key_hex}]"
            continue
        for t in rowset_rows(r.tablet_dir, meta, rs):
            if left is not None and left <= 0:
                return
            if left is not None:
                t = t.slice(0, left)
                left -= t.num_rows
            cols = [t.column(n).to_pylist() for n in names]
            for j in range(t.num_rows):
                yield _row_text(names, types, [c[j] for c in cols])


@verb(
    "local_replica",
    "dump",
    "rowset",
    help="Dump the rowset contents of a local replica",
    args=_rowset_args,
    masters=False,
)
async def dump_rowset(ctx: Context, a: argparse.Namespace) -> Result:
    if a.dump_all_columns and a.dump_primary_key_bounds_only:
        raise UsageError("-dump_primary_key_bounds_only needs -dump_all_columns=false")
    await with_dir(a, TOOL, lambda d: print_lines(_rowset_lines(d, a)))
    return Result(text="")


def _wals_args(p: argparse.ArgumentParser) -> None:
    _tablet_arg(p)
    add_print_flags(p)


def _wal_lines(d: LocalDataDir, a: argparse.Namespace, mode: str) -> Iterator[str]:
    r = d.replica(a.tablet_id)
    if not r.wal_dir.is_dir():
        raise KuduNotFound(f"tablet {a.tablet_id} has no WAL in {d.root} ({'tombstoned' if r.tombstoned else 'none'})")
    paths = wal_segment_paths(r.wal_dir)
    for n, path in enumerate(paths):
        yield from dump_segment(SegmentReader(path, is_last=n == len(paths) - 1), mode, a.print_meta, a.truncate_data)


@verb(
    "local_replica",
    "dump",
    "wals",
    help="Dump all WAL (write-ahead log) segments of a local replica",
    args=_wals_args,
    masters=False,
)
async def dump_wals(ctx: Context, a: argparse.Namespace) -> Result:
    mode = print_mode(a)
    await with_dir(a, TOOL, lambda d: print_lines(_wal_lines(d, a, mode)))
    return Result(text="")
