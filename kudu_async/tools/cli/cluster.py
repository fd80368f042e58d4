"""``kudu cluster ...``: check the health of the whole cluster (``ksck``) and even out its replicas and
leaders (``rebalance``)."""

from __future__ import annotations

import argparse

from kudu_async.tools import ksck, rebalancer_tool
from kudu_async.tools.cli.framework import (
    Context,
    Result,
    UsageError,
    add_format_flag,
    csv_list,
    flag,
    group,
    object_result,
    show_progress,
    verb,
)

group("cluster", help="Operate on a Kudu cluster")

KSCK_FORMATS = ("plain_concise", "plain_full", "json_pretty", "json_compact")
# Kudu's -max_run_time_sec=0 means "no limit"; every run here is bounded, by a day at most.
UNLIMITED_RUN_TIME_S = 86_400.0


def _ksck_args(p: argparse.ArgumentParser) -> None:
    flag(p, "tables", metavar="TABLE[,TABLE]", help="tables to check (comma-separated) [all]")
    flag(p, "tablets", metavar="TABLET_ID[,...]", help="tablets to check (comma-separated) [all of the tables]")
    flag(
        p,
        "checksum_scan",
        type=bool,
        help="also scan every replica at one snapshot per tablet and compare their checksums [false]",
    )
    add_format_flag(p, "plain_concise", KSCK_FORMATS, name="ksck_format")


@verb(
    "cluster",
    "ksck",
    help="Check the health of a Kudu cluster: masters, tablet servers, every tablet's replicas and their Raft "
    "configs (and with -checksum_scan their data); exit 1 naming what is wrong",
    args=_ksck_args,
)
async def cluster_ksck(ctx: Context, a: argparse.Namespace) -> Result:
    client = await ctx.client()
    snap = await ksck.collect(
        client,
        csv_list(a.tables, "-tables"),
        a.checksum_scan,
        ctx.timeout_s,
        tablets=csv_list(a.tablets, "-tablets"),
    )
    report = ksck.evaluate(snap)
    return object_result(report, a.ksck_format, ksck.render, 0 if report["ok"] else 1)


def _rebalance_args(p: argparse.ArgumentParser) -> None:
    flag(p, "tables", metavar="TABLE[,TABLE]", help="tables to rebalance (comma-separated) [all]")
    flag(
        p,
        "ignored_tservers",
        metavar="UUID[,UUID]",
        help="tablet servers to leave alone: nothing moves to or from them and they are not counted",
    )
    flag(p, "report_only", type=bool, help="print the plan (moves and the distribution after them), change nothing")
    flag(
        p,
        "max_moves_per_server",
        type=int,
        default=rebalancer_tool.DEFAULT_MAX_MOVES_PER_SERVER,
        help="replica moves (or leader transfers) in flight touching one tablet server "
        f"[{rebalancer_tool.DEFAULT_MAX_MOVES_PER_SERVER}]",
    )
    flag(
        p,
        "max_run_time_sec",
        type=float,
        default=rebalancer_tool.DEFAULT_MAX_RUN_TIME_S,
        help="deadline of the whole run; moves in flight then are cut off, the rest skipped "
        f"[{rebalancer_tool.DEFAULT_MAX_RUN_TIME_S:g}; 0, Kudu's 'no limit', is a day]",
    )
    flag(p, "leaders_only", type=bool, help="only even out tablet leaders (not a Kudu flag) [false]")
    flag(p, "replicas_only", type=bool, help="only move replicas, leave leaders (not a Kudu flag) [false]")
    add_format_flag(p, "pretty", ("pretty", "json"))


@verb(
    "cluster",
    "rebalance",
    help="Move tablet replicas (per table, then overall) and then leaderships so that every live tablet "
    "server carries its share; refuses to start unless every tablet in scope is healthy",
    args=_rebalance_args,
)
async def cluster_rebalance(ctx: Context, a: argparse.Namespace) -> Result:
    if a.max_run_time_sec < 0:
        raise UsageError(f"-max_run_time_sec must be >= 0, got {a.max_run_time_sec:g}")
    opts = rebalancer_tool.RebalanceOptions(
        tables=csv_list(a.tables, "-tables"),
        ignored_tservers=frozenset(csv_list(a.ignored_tservers, "-ignored_tservers") or ()),
        leaders_only=a.leaders_only,
        replicas_only=a.replicas_only,
        dry_run=a.report_only,
        max_moves_per_server=a.max_moves_per_server,
        max_run_time_s=a.max_run_time_sec or UNLIMITED_RUN_TIME_S,
        timeout_s=ctx.timeout_s,
        progress=show_progress(),
    )
    try:
        opts.check()
    except ValueError as e:
        raise UsageError(str(e)) from None
    client = await ctx.client()
    report = await rebalancer_tool.run(client, opts)
    return object_result(report, a.format, rebalancer_tool.render, 0 if report["ok"] else 1)
