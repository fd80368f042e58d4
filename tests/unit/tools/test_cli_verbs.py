"""The ``kudu`` tool's verbs without a cluster: Kudu's verb paths and arguments, usage errors, the rendering of
rows and reports, and ``diagnose parse_metrics``'s reading of diagnostics logs."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import tomllib
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.tools import diagnostics, table_tool
from kudu_async.tools.cli import framework, main
from kudu_async.tools.cli.tserver import tserver_row

ROOT = Path(__file__).resolve().parents[3]

# Kudu's verbs this tool must have (issue 31), by their paths.
KUDU_VERBS = [
    ("cluster", "ksck"),
    ("cluster", "rebalance"),
    *(
        ("table", v)
        for v in [
            "list",
            "describe",
            "create",
            "delete",
            "rename_table",
            "rename_column",
            "add_column",
            "delete_column",
            "add_range_partition",
            "drop_range_partition",
            "column_set_default",
            "column_remove_default",
            "column_set_compression",
            "column_set_encoding",
            "column_set_block_size",
            "column_set_comment",
            "set_comment",
            "clear_comment",
            "scan",
            "copy",
            "statistics",
            "locate_row",
            "set_replication_factor",
            "recall",
            "list_in_flight",
        ]
    ),
    ("table", "set_limit", "disk_size"),
    ("table", "set_limit", "row_count"),
    ("tablet", "change_config", "add_replica"),
    ("tablet", "change_config", "remove_replica"),
    ("tablet", "change_config", "move_replica"),
    ("tablet", "change_config", "change_replica_type"),
    ("tablet", "leader_step_down"),
    ("tserver", "list"),
    ("tserver", "status"),
    ("tserver", "state", "enter_maintenance"),
    ("tserver", "state", "exit_maintenance"),
    ("tserver", "quiesce", "start"),
    ("tserver", "quiesce", "stop"),
    ("tserver", "quiesce", "status"),
    ("tserver", "unregister"),
    ("master", "list"),
    ("master", "status"),
    ("perf", "loadgen"),
    ("perf", "table_scan"),
    ("diagnose", "parse_metrics"),
]


def test_every_kudu_verb_is_registered_at_its_path() -> None:
    paths = set(framework.iter_paths())
    assert [v for v in KUDU_VERBS if v not in paths] == []


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["table", "add_range_partition", "m:7051", "t", "[1]", "[2]", "-upper_bound_type=INCLUSIVE_BOUND"],
            {"table_range_lower_bound": "[1]", "table_range_upper_bound": "[2]", "upper_bound_type": "INCLUSIVE_BOUND"},
        ),
        (
            ["tablet", "change_config", "add_replica", "m:7051", "tab", "ts1", "non_voter"],
            {"tablet_id": "tab", "ts_uuid": "ts1", "replica_type": "NON_VOTER"},
        ),
        (
            ["table", "copy", "m:7051", "src", "other:7051", "--dst-table=dst", "-create_table=false"],
            {"dest_master_addresses": "other:7051", "dst_table": "dst", "create_table": False},
        ),
        (
            ["perf", "loadgen", "m:7051", "-num_threads=4", "--num-rows-per-thread", "10", "-keep_auto_table"],
            {"num_threads": 4, "num_rows_per_thread": 10, "keep_auto_table": True},
        ),
        (["tserver", "quiesce", "start", "ts:7050", "-error_if_not_fully_quiesced"], {"tserver_address": "ts:7050"}),
        (["cluster", "ksck", "m1:7051,m2:7051", "-ksck_format=json_pretty"], {"ksck_format": "json_pretty"}),
        (["diagnose", "parse_metrics", "a.log", "b.log.gz"], {"path": ["a.log", "b.log.gz"]}),
    ],
)
def test_kudu_syntax_parses(argv: list[str], expected: dict[str, object]) -> None:
    a = framework.build_parser().parse_args(argv)
    assert {k: getattr(a, k) for k in expected} == expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["table", "rename_table", "m:7051", "t"], "required: new_table_name"),
        (["tablet", "change_config", "add_replica", "m:7051", "tab", "ts1", "LEARNER"], "invalid choice: 'LEARNER'"),
        (["table", "scan", "m:7051", "t", "-format=xml"], "invalid choice: 'xml'"),
        (["tserver", "list", "m:7051", "-columns=uuid,bogus"], "unknown column(s) bogus"),
        (["diagnose", "parse_metrics", "x.log"], "name at least one metric"),
        (["cluster", "rebalance", "m:7051", "-leaders_only", "-replicas_only"], "exclude each other"),
        (["cluster", "rebalance", "m:7051", "-max_moves_per_server=0"], "-max_moves_per_server must be >= 1"),
    ],
)
def test_bad_usage_exits_1_naming_what_is_wrong(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 1
    assert message in capsys.readouterr().err


def test_kudu_admin_is_an_alias_of_kudu() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kudu"] == scripts["kudu-admin"].split()[0] == "kudu_async.tools.cli:main"


def test_row_texts_are_kudus() -> None:
    batch = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "s": pa.array(['a"b', None], pa.string()),
            "d": pa.array([dt.date(2026, 1, 2), None], pa.date32()),
            "ts": pa.array([dt.datetime(2026, 1, 1, 0, 0, 1, tzinfo=dt.UTC), None], pa.timestamp("us", tz="UTC")),
            "amount": pa.array([Decimal("1.25"), None], pa.decimal128(10, 2)),
            "ok": pa.array([True, None]),
        }
    )
    assert table_tool.row_texts(batch) == [
        '(int64 id=1, string s="a\\"b", date d=2026-01-02, unixtime_micros ts=2026-01-01T00:00:01.000000Z, '
        "decimal(10, 2) amount=1.25, bool ok=true)",
        "(int64 id=2, string s=NULL, date d=NULL, unixtime_micros ts=NULL, decimal(10, 2) amount=NULL, bool ok=NULL)",
    ]


def test_tserver_rows_under_kudus_column_names() -> None:
    d = {
        "uuid": "u1",
        "rpc_address": "h:7050",
        "http_address": "h:8050",
        "version": "1.0",
        "start_time": 0,
        "last_heartbeat_age_s": 0.25,
        "live": True,
        "state": "MAINTENANCE_MODE",
        "num_replicas": 3,
        "num_leaders": 1,
        "last_report_seq": 7,
    }
    row = tserver_row(d)
    assert row["rpc-addresses"] == "h:7050" and row["heartbeat"] == "250ms" and row["live"] == "LIVE"
    assert row["start_time"] == "1970-01-01 00:00:00 UTC" and row["state"] == "MAINTENANCE_MODE"
    text = framework.render_rows(
        [row], framework.columns_list("UUID,rpc_addresses,state", ("uuid", "rpc-addresses", "state")), "space"
    )
    assert text == "u1 h:7050 MAINTENANCE_MODE"


def test_scan_options_are_checked() -> None:
    with pytest.raises(KuduInvalidArgument, match=r"-num_threads must be 1\.\.64"):
        table_tool.ScanOptions(num_threads=0)
    with pytest.raises(KuduInvalidArgument, match="-replica_selection must be one of CLOSEST, LEADER"):
        table_tool.ScanOptions(replica_selection="NEAREST")


# --- diagnose parse_metrics ---------------------------------------------------------------------------------


def _line(ts: int, entities: list[dict[str, object]]) -> str:
    return f"I0101 00:00:00.000000 metrics {ts} {json.dumps(entities)}\n"


def _tablet(tid: str, **metrics: dict[str, object]) -> dict[str, object]:
    return {"type": "tablet", "id": tid, "metrics": [{"name": k, **v} for k, v in metrics.items()]}


def test_parse_metrics_sums_rates_and_keeps_the_latest_value_per_entity() -> None:
    p = diagnostics.MetricsParser(
        simple=diagnostics.parse_specs(["tablet.rows_inserted:ins"]),
        rates=diagnostics.parse_specs(["tablet.rows_inserted:ins_rate"]),
        histograms=[],
    )
    lines = [
        _line(1_000_000, [_tablet("a", rows_inserted={"value": 10}), _tablet("b", rows_inserted={"value": 5})]),
        "I0101 00:00:00.500000 stacks 1500000 {}\n",  # another record type: skipped
        _line(3_000_000, [_tablet("a", rows_inserted={"value": 30})]),  # b did not change: its 5 still counts
        "\n",
    ]
    assert p.header() == ["timestamp", "ins", "ins_rate"]
    rows = list(p.rows(lines))
    assert rows == [["1000000", "15", f"{'?':>12}"], ["3000000", "35", f"{10.0:12.3f}"]]


def test_parse_metrics_filters_tablets_and_merges_histograms() -> None:
    p = diagnostics.MetricsParser(
        simple=diagnostics.parse_specs(["tablet.rows_inserted"]),
        rates=[],
        histograms=diagnostics.parse_specs(["server.op_time:op", "tablet.lat"]),
        tablet_ids=frozenset({"a"}),
    )
    exact = {"counts": [1, 1, 2], "values": [10, 20, 30]}
    line = _line(
        5,
        [
            _tablet("a", rows_inserted={"value": 1}, lat={"total_count": 4, "min": 1, "percentile_75": 3, "max": 9}),
            _tablet("z", rows_inserted={"value": 100}),
            {"type": "server", "id": "ts", "metrics": [{"name": "op_time", **exact}]},
            {"type": "rpc", "id": "x", "metrics": []},  # entity types of kudu_async nodes Kudu's log lacks
        ],
    )
    [row] = list(p.rows([line]))
    head = p.header()
    got = dict(zip(head, row, strict=True))
    assert got["tablet.rows_inserted"] == "1"  # tablet z is filtered out
    assert [got[f"op_{c}"] for c in diagnostics.HISTOGRAM_COLUMNS] == ["4", "10", "20", "30", "30", "30", "30", "30"]
    assert got["tablet.lat_count"] == "4" and got["tablet.lat_p50"] == "?" and got["tablet.lat_p75"] == "3"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("X0101 00:00:00 metrics 1 []", "lines must start with 'I'"),
        ("I0101 00:00:00 metrics notanumber []", "invalid timestamp"),
        ("I0101 00:00:00 metrics 1 {bad", "invalid JSON payload"),
        ("I0101 00:00:00 metrics 1 {}", "expected a metric JSON array"),
        ('I0101 00:00:00 metrics 1 [{"type": "tablet"}]', "incomplete entity entry"),
    ],
)
def test_parse_metrics_names_a_bad_line(line: str, message: str) -> None:
    p = diagnostics.MetricsParser(simple=diagnostics.parse_specs(["server.x"]), rates=[], histograms=[])
    with pytest.raises(KuduInvalidArgument, match=message):
        list(p.rows([line], "log"))


def test_metric_specs_are_checked() -> None:
    with pytest.raises(KuduInvalidArgument, match="could not parse metric parameter"):
        diagnostics.parse_specs(["cluster.x"])
    with pytest.raises(KuduInvalidArgument, match=r"duplicate metric name for server\.x"):
        diagnostics.parse_specs(["server.x", "server.x:again"])


def test_parse_metrics_reads_plain_and_gzipped_logs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = tmp_path / "diag.log.gz"
    with gzip.open(first, "wt") as f:
        f.write(_line(1_000_000, [{"type": "server", "id": "s", "metrics": [{"name": "calls", "value": 1}]}]))
    second = tmp_path / "diag.log"
    second.write_text(_line(2_000_000, [{"type": "server", "id": "s", "metrics": [{"name": "calls", "value": 4}]}]))
    argv = ["diagnose", "parse_metrics", str(first), str(second), "-simple_metrics=server.calls:c"]
    assert main([*argv, "-rate_metrics=server.calls:r"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == ["timestamp\tc\tr", f"1000000\t1\t{'?':>12}", f"2000000\t4\t{3.0:12.3f}"]
