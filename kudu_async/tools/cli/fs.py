"""``kudu fs check|list|locate_block|dump uuid|tree|block``: a STOPPED node's data directory (``-fs_wal_dir``).

``check`` verifies what a node would trip over when it starts: every replica's consensus and tablet
metadata readable, every block the tablet metadata names present and intact (Parquet page checksums,
Arrow IPC and bloom structure), every WAL segment's frame checksums; it lists orphaned blocks (a crash
between writing blocks and committing the metadata naming them), temporary files and the staging
directories of tablet copies a killed node left, which ``-repair`` removes. Exit status 1 while any problem
remains. ``list`` prints the tablets, rowsets and blocks with Kudu's ``-columns``: of Kudu's fields, the
ones kudu_async's storage has (a block is one file, so the ``cfile-*`` fields describe the block's file).
``locate_block``, ``dump tree`` and ``dump block`` (the raw bytes of a block file) complete Kudu's
read-only ``fs`` verbs; ``format`` and ``update_dirs`` have no counterpart (a node creates its directory on
first start, and has one).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kudu_async.common.errors import KuduInvalidArgument, KuduNotFound
from kudu_async.tools.cli.framework import (
    Context,
    Result,
    UsageError,
    add_format_flag,
    csv_list,
    flag,
    group,
    parse_bool,
    progress,
    rows_result,
    verb,
)
from kudu_async.tools.cli.local_fs import add_fs_flags, with_dir
from kudu_async.tserver.local_replicas import FsCheckReport, LocalDataDir, partition_text

group("fs", help="Operate on a local Kudu filesystem")
group("fs", "dump", help="Dump a Kudu filesystem")

TOOL = "kudu fs"


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "K", "M", "G", "T"):
        if size < 1024 or unit == "T":
            return f"{size:.0f}{unit}" if unit == "B" else f"{size:.2f}{unit}"
        size /= 1024
    return f"{n}B"


# --- check --------------------------------------------------------------------------------------------------


def _check_args(p: argparse.ArgumentParser) -> None:
    add_fs_flags(p)
    flag(p, "repair", type=bool, help="remove orphaned blocks and temporary files [false]")


def render_check(rep: FsCheckReport) -> str:
    orphan_bytes = sum(size for _, _, size, _ in rep.orphaned_blocks)
    lines = [
        "Filesystem report",
        "-----------------",
        f"uuid: {rep.uuid} ({rep.role})",
        f"Total replicas: {rep.replicas}",
        f"Total live blocks: {rep.live_blocks}",
        f"Total live bytes: {rep.live_block_bytes} ({_human(rep.live_block_bytes)})",
        f"Total blocks verified: {rep.blocks_verified}",
        f"Total WAL segments: {rep.wal_segments} ({rep.wal_entries} entries)",
        f"Total orphaned blocks: {len(rep.orphaned_blocks)} ({orphan_bytes} bytes), "
        f"{sum(1 for r in rep.repaired if 'orphaned block' in r)} repaired",
        f"Total temporary files: {len(rep.temp_files)}, "
        f"{sum(1 for r in rep.repaired if 'temporary file' in r)} repaired",
        f"Total unfinished tablet copies: {len(rep.unfinished_copies)}, "
        f"{sum(1 for r in rep.repaired if 'unfinished tablet copy' in r)} repaired",
    ]
    if rep.orphaned_blocks and not rep.repaired:
        lines.append("Orphaned blocks (run with -repair to remove them):")
        lines.extend(f"  tablet {tid}: {b} ({size} bytes)" for tid, b, size, _ in rep.orphaned_blocks)
    if rep.temp_files and not rep.repaired:
        lines.append("Temporary files (run with -repair to remove them):")
        lines.extend(f"  {t}" for t in rep.temp_files)
    if rep.unfinished_copies and not rep.repaired:
        lines.append("Unfinished tablet copies (run with -repair to remove them):")
        lines.extend(f"  {t}" for t in rep.unfinished_copies)
    if rep.repaired:
        lines.append("Repaired:")
        lines.extend(f"  {r}" for r in rep.repaired)
    if rep.warnings:
        lines.append("Warnings:")
        lines.extend(f"  {w}" for w in rep.warnings)
    if rep.errors:
        lines.append("Errors:")
        lines.extend(f"  {e}" for e in rep.errors)
    return "\n".join(lines)


def check_failed(rep: FsCheckReport) -> bool:
    """Errors, or orphans and temporary files left in place."""
    leftovers = rep.orphaned_blocks or rep.temp_files or rep.unfinished_copies
    return bool(rep.errors) or (not rep.repaired and bool(leftovers))


@verb("fs", "check", help="Check a Kudu filesystem for inconsistencies", args=_check_args, masters=False)
async def fs_check(ctx: Context, a: argparse.Namespace) -> Result:
    def run(d: LocalDataDir) -> FsCheckReport:
        with progress(len(d.replica_ids()), "replicas checked") as bar:
            return d.check(repair=a.repair, progress=bar.update)

    rep = await with_dir(a, TOOL, run)
    failed = check_failed(rep)
    text = render_check(rep)
    if failed:
        text += "\nCORRUPTION: the filesystem has problems (see above)"
    return Result(data=rep.__dict__, text=text, status=1 if failed else 0)


# --- list ---------------------------------------------------------------------------------------------------

TABLET_FIELDS = ("table", "table-id", "tablet-id", "partition")
ROWSET_FIELDS = ("rowset-id",)
BLOCK_FIELDS = ("block-id", "block-kind", "cfile-size", "cfile-num-values")
ALL_FIELDS = (*TABLET_FIELDS, *ROWSET_FIELDS, *BLOCK_FIELDS)
DEFAULT_FIELDS = "tablet-id,rowset-id,block-id,block-kind"


def _list_args(p: argparse.ArgumentParser) -> None:
    add_fs_flags(p)
    flag(p, "table_id", help="restrict output to a specific table by id")
    flag(p, "table_name", help="restrict output to a specific table by name")
    flag(p, "tablet_id", help="restrict output to a specific tablet")
    flag(p, "rowset_id", type=int, default=-1, help="restrict output to a specific rowset [-1: all]")
    flag(p, "block_id", help="restrict output to a specific block")
    flag(
        p,
        "columns",
        default=DEFAULT_FIELDS,
        help=f"comma-separated fields to print, of {', '.join(ALL_FIELDS)} [{DEFAULT_FIELDS}]",
    )
    # Kudu's -h (human-readable sizes): spelled --h here, since -h asks for help as in every verb.
    p.add_argument(
        "--h",
        dest="h",
        type=parse_bool,
        nargs="?",
        const=True,
        default=True,
        metavar="BOOL",
        help="sizes in human-readable units [true]",
    )
    add_format_flag(p)


def list_rows(d: LocalDataDir, a: argparse.Namespace, level: str) -> list[dict[str, Any]]:
    """One row per tablet, rowset or block (the finest level a requested field needs), filtered."""
    rows: list[dict[str, Any]] = []
    for tid in d.replica_ids():
        if a.tablet_id is not None and tid != a.tablet_id:
            continue
        r = d.replica(tid)
        if a.table_id is not None and r.table_id != a.table_id:
            continue
        if a.table_name is not None and r.table_name != a.table_name:
            continue
        part = r.extra.get("partition")
        tablet = {
            "table": r.table_name,
            "table-id": r.table_id,
            "tablet-id": tid,
            "partition": partition_text(part) if part is not None else None,
        }
        if level == "tablet":
            if a.rowset_id < 0 and a.block_id is None:
                rows.append(tablet)
            continue
        for rs in r.meta.rowsets if r.meta is not None else []:
            if a.rowset_id >= 0 and rs.id != a.rowset_id:
                continue
            rowset = {**tablet, "rowset-id": rs.id}
            if level == "rowset":
                if a.block_id is None or a.block_id in rs.blocks():
                    rows.append(rowset)
                continue
            kinds = [(rs.base_block, "base"), (rs.bloom_block, "bloom"), *((b, "delta") for b in rs.delta_blocks)]
            for block, kind in kinds:
                if a.block_id is not None and block != a.block_id:
                    continue
                path = r.tablet_dir / "data" / f"{block}.blk"
                size = path.stat().st_size if path.exists() else None
                rows.append(
                    {
                        **rowset,
                        "block-id": block,
                        "block-kind": kind,
                        "cfile-size": size if size is None or not a.h else _human(size),
                        "cfile-num-values": rs.num_rows if kind == "base" else None,
                    }
                )
    return rows


@verb(
    "fs",
    "list",
    help="List metadata for on-disk tablets, rowsets and blocks",
    args=_list_args,
    masters=False,
)
async def fs_list(ctx: Context, a: argparse.Namespace) -> Result:
    columns = csv_list(a.columns, "-columns") or []
    unknown = [c for c in columns if c not in ALL_FIELDS]
    if unknown:
        raise UsageError(f"-columns: unknown field(s) {', '.join(unknown)}; known: {', '.join(ALL_FIELDS)}")
    if not columns:
        raise UsageError("-columns: no field given")
    level = (
        "block"
        if any(c in BLOCK_FIELDS for c in columns)
        else "rowset"
        if any(c in ROWSET_FIELDS for c in columns)
        else "tablet"
    )
    if a.rowset_id < -1:
        raise KuduInvalidArgument("-rowset_id must be >= 0 (or -1: every rowset)")
    rows = await with_dir(a, TOOL, lambda d: list_rows(d, a, level))
    return rows_result(rows, columns, a.format)


# --- dump uuid ----------------------------------------------------------------------------------------------


def _uuid_args(p: argparse.ArgumentParser) -> None:
    add_fs_flags(p)


@verb("fs", "dump", "uuid", help="Dump the UUID of a Kudu filesystem", args=_uuid_args, masters=False)
async def fs_dump_uuid(ctx: Context, a: argparse.Namespace) -> Result:
    uuid = await with_dir(a, TOOL, lambda d: d.instance.uuid)
    return Result(data=uuid, text=uuid)


# --- locate_block, dump tree, dump block ------------------------------------------------------------------


def _locate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("block_ids", help="comma-separated block ids (as fs list prints them)")
    add_fs_flags(p)


@verb("fs", "locate_block", help="Find the file where each block is stored", args=_locate_args, masters=False)
async def fs_locate_block(ctx: Context, a: argparse.Namespace) -> Result:
    ids = csv_list(a.block_ids, "block_ids") or []
    if not ids:
        raise UsageError("no block ids provided")
    found = await with_dir(a, TOOL, lambda d: {b: d.locate_block(b) for b in ids})
    missing = [b for b, where in found.items() if where is None]
    lines = [f"{b}\ttablet {where[0]}\t{where[1]}" for b, where in found.items() if where is not None]
    if missing:
        lines.extend(f"{b}\tnot found" for b in missing)
    return Result(text="\n".join(lines), status=1 if missing else 0)


def _tree_args(p: argparse.ArgumentParser) -> None:
    add_fs_flags(p)


@verb("fs", "dump", "tree", help="Dump the tree of a Kudu filesystem", args=_tree_args, masters=False)
async def fs_dump_tree(ctx: Context, a: argparse.Namespace) -> Result:
    entries = await with_dir(a, TOOL, lambda d: list(d.tree()))
    lines = [f"{'  ' * depth}{name}" + ("" if size is None else f" ({size} bytes)") for depth, name, size in entries]
    return Result(text="\n".join(lines))


def _block_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("block_id", help="block identifier (as fs list prints it)")
    add_fs_flags(p)


@verb("fs", "dump", "block", help="Dump the binary contents of a data block", args=_block_args, masters=False)
async def fs_dump_block(ctx: Context, a: argparse.Namespace) -> Result:
    def run(d: LocalDataDir) -> None:
        where = d.locate_block(a.block_id)
        if where is None:
            raise KuduNotFound(f"block {a.block_id} is in no tablet of {d.root}")
        with open(where[1], "rb") as f:
            while chunk := f.read(1 << 20):  # 1 MiB at a time in memory, whatever the block's size
                sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()

    await with_dir(a, TOOL, run)
    return Result(text="")
