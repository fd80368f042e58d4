"""The ``kudu`` tool's machinery: Kudu's flag spellings, output formats, usage errors exiting 1."""

from __future__ import annotations

import argparse
import json

import pytest

from kudu_async.tools.cli import framework
from kudu_async.tools.cli.framework import Context, Registry, Result, add_format_flag, flag, render_rows


def _registry() -> Registry:
    reg = Registry()
    saved = framework.REGISTRY
    framework.REGISTRY = reg
    try:

        def args(p: argparse.ArgumentParser) -> None:
            p.add_argument("name")
            flag(p, "list_tablets", type=bool, help="also tablets")
            flag(p, "max_rows", type=int, default=3, help="rows")
            add_format_flag(p)

        @framework.verb("thing", "show", help="show a thing", args=args, masters=False)
        async def show(ctx: Context, a: argparse.Namespace) -> Result:
            rows = [{"name": a.name, "tablets": a.list_tablets, "n": i} for i in range(a.max_rows)]
            return framework.rows_result(rows, ["name", "tablets", "n"], a.format, status=3 if a.name == "bad" else 0)

        framework.group("thing", help="things")
    finally:
        framework.REGISTRY = saved
    return reg


@pytest.mark.parametrize(
    "spelled",
    [
        ["-list_tablets", "-max_rows=2"],
        ["--list-tablets", "--max-rows", "2"],
        ["-list-tablets=true", "--max_rows=2"],
        ["--list_tablets=1", "-max-rows", "2"],
    ],
)
def test_every_kudu_spelling_of_a_flag_is_taken(spelled: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert framework.run(["thing", "show", "x", *spelled, "-format=json"], _registry()) == 0
    assert json.loads(capsys.readouterr().out) == [{"name": "x", "tablets": True, "n": i} for i in range(2)]


def test_boolean_flag_takes_false_and_refuses_garbage(capsys: pytest.CaptureFixture[str]) -> None:
    reg = _registry()
    assert framework.run(["thing", "show", "x", "-list_tablets=false", "-format=space", "-max_rows=1"], reg) == 0
    assert capsys.readouterr().out == "x false 0\n"
    assert framework.run(["thing", "show", "x", "-list_tablets=maybe"], reg) == 1
    err = capsys.readouterr().err
    assert "usage: kudu thing show" in err and "not a boolean: 'maybe'" in err


def test_bad_usage_prints_usage_and_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    reg = _registry()
    assert framework.run(["thing", "shw", "x"], reg) == 1
    assert "invalid choice: 'shw'" in capsys.readouterr().err
    assert framework.run(["thing", "show"], reg) == 1  # a missing positional
    assert "required: name" in capsys.readouterr().err
    assert framework.run(["thing", "show", "x", "-max_rows=two"], reg) == 1
    assert "invalid int value: 'two'" in capsys.readouterr().err
    assert framework.run(["thing", "show", "x", "-timeout_ms=0"], reg) == 1
    assert "-timeout_ms must be positive" in capsys.readouterr().err
    assert framework.run([], reg) == 1


def test_a_verbs_status_is_the_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    assert framework.run(["thing", "show", "bad", "-max_rows=1"], _registry()) == 3
    assert "bad" in capsys.readouterr().out


def test_render_rows_in_each_format() -> None:
    rows = [{"uuid": "a1", "live": True, "n": 10}, {"uuid": "b2,c", "live": False, "n": None}]
    cols = ["uuid", "live", "n"]
    assert render_rows(rows, cols, "pretty").splitlines() == [
        "uuid | live  | n",
        "-----+-------+---",
        "a1   | true  | 10",
        "b2,c | false |",
    ]
    assert render_rows(rows, cols, "space") == "a1 true 10\nb2,c false "
    assert render_rows(rows, cols, "tsv") == "a1\ttrue\t10\nb2,c\tfalse\t"
    assert render_rows(rows, cols, "csv") == 'uuid,live,n\na1,true,10\n"b2,c",false,'
    assert json.loads(render_rows(rows, cols, "json")) == rows


def test_the_real_registry_builds_and_names_kudu_paths() -> None:
    paths = list(framework.iter_paths())
    assert ("master", "list") in paths
    parser = framework.build_parser()
    a = parser.parse_args(["master", "list", "127.0.0.1:7051", "-columns=uuid,role", "--format=json"])
    assert (a.master_addresses, a.columns, a.format) == ("127.0.0.1:7051", "uuid,role", "json")
