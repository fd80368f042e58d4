"""``kudu diagnose ...``: read the metrics out of diagnostics logs (``parse_metrics``)."""

from __future__ import annotations

import argparse
import asyncio
import gzip
import sys
from typing import IO

from kudu_async.tools import diagnostics
from kudu_async.tools.cli.framework import Context, Result, UsageError, csv_list, flag, group, verb

group("diagnose", help="Diagnostic tools for Kudu servers and clusters")


def _parse_metrics_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "path",
        nargs="+",
        help="diagnostics log files (gzipped too): lines 'I<mmdd> <time> metrics <unix us> <JSON of /metrics>'",
    )
    flag(p, "tablet_ids", help="comma-separated tablets to aggregate tablet metrics across [all]")
    flag(
        p,
        "simple_metrics",
        default="",
        help="comma-separated metrics to print the sum of, each <entity>.<metric name>[:<display name>], "
        "<entity> one of server, tablet, table",
    )
    flag(p, "rate_metrics", default="", help="comma-separated metrics to print the rate of change (per second) of")
    flag(p, "histogram_metrics", default="", help="comma-separated histogram metrics to print percentiles of")


def _open(path: str) -> IO[str]:
    if path.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


@verb(
    "diagnose",
    "parse_metrics",
    help="Parse metrics out of a diagnostics log: a tab-separated row per metrics record",
    args=_parse_metrics_args,
    masters=False,
)
async def parse_metrics(ctx: Context, a: argparse.Namespace) -> Result:
    parser = diagnostics.MetricsParser(
        simple=diagnostics.parse_specs(csv_list(a.simple_metrics or None, "-simple_metrics") or []),
        rates=diagnostics.parse_specs(csv_list(a.rate_metrics or None, "-rate_metrics") or []),
        histograms=diagnostics.parse_specs(csv_list(a.histogram_metrics or None, "-histogram_metrics") or []),
        tablet_ids=frozenset(csv_list(a.tablet_ids, "-tablet_ids") or ()),
    )
    if not (parser.simple or parser.rates or parser.histograms):
        raise UsageError("name at least one metric (-simple_metrics, -rate_metrics or -histogram_metrics)")

    def work() -> None:
        out = sys.stdout
        out.write("\t".join(parser.header()) + "\n")
        for path in a.path:
            with _open(path) as f:  # line by line: a log may be larger than memory
                for row in parser.rows(f, path):
                    out.write("\t".join(row) + "\n")
        out.flush()

    await asyncio.to_thread(work)
    return Result(text="")
