"""Every public name of kudu-python (tests/compat/kudu_python_api.json, made by
scripts/compat/kudu_python_api.py from its sources) exists on kudu_async with a signature that accepts the
same calls: the same parameter names, and no parameter required that kudu-python leaves optional.

Names still missing or different are in ``NOT_YET`` with the reason; the test fails if one of them starts
working (so the list only shrinks) or if any other name is missing.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
from pathlib import Path
from typing import Any

import pytest

API = json.loads((Path(__file__).parent / "kudu_python_api.json").read_text())

_VALS = "Cython-internal holders of a C++ value: no attribute or method a Python caller can use"
_INTERNAL = "built by the client from its own state; kudu-python's constructor is a Cython __cinit__ users do not call"
NOT_YET: dict[str, str] = {
    "kudu.client.Table.__len__": "kudu-python's raises NotImplementedError; here it would only make bool(table) raise",
    "kudu.client.Scanner.__init__": "kudu-python lets the table default to None, which makes a scanner that cannot "
    "scan; here the table is required (Scanner(table) works as there)",
    "kudu.client.Row": "kudu-python's RowBatch hands out tuples; a Row object never reaches a caller",
    **{
        f"kudu.client.{name}": _VALS
        for name in (
            "RawValue",
            "Int8Val",
            "Int16Val",
            "Int32Val",
            "Int64Val",
            "DoubleVal",
            "FloatVal",
            "BoolVal",
            "StringVal",
            "UnixtimeMicrosVal",
            "DateVal",
        )
    },
    **{
        f"kudu.{name}.__init__": _INTERNAL
        for name in (
            "client.Table",
            "client.Column",
            "client.Predicate",
            "client.Session",
            "client.ScanToken",
            "client.KuduError",
            "schema.KuduType",
            "schema.ColumnSchema",
            "schema.Schema",
        )
    },
}


def _resolve(module: str, dotted: str) -> Any:
    obj: Any = importlib.import_module(module)
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def _problem(entry: dict[str, Any]) -> str | None:  # noqa: PLR0911 - one return per way a name falls short
    """Why ``entry`` is not served by kudu_async, or None when it is."""
    try:
        obj = _resolve(entry["ours"], entry["name"])
    except AttributeError as e:
        owner, _, attr = entry["name"].rpartition(".")
        try:
            cls = _resolve(entry["ours"], owner) if owner else None
        except AttributeError:
            return f"missing ({e})"
        # a dataclass field is an instance attribute, not one of the class
        if not (
            cls is not None and dataclasses.is_dataclass(cls) and attr in {f.name for f in dataclasses.fields(cls)}
        ):
            return f"missing ({e})"
        return None
    params = entry.get("params")
    if params is None:
        return None
    if entry["kind"] == "constructor":
        obj = _resolve(entry["ours"], entry["name"].rsplit(".", 1)[0])
    if entry["kind"] == "property" or not callable(obj):
        return f"not callable: {type(obj).__name__}"
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):  # a builtin without a signature: callable is all we can check
        return None
    ours = [p for p in sig.parameters.values() if p.name != "self"]
    if entry["kind"] in ("method", "constructor") and ours and ours[0].name in ("self", "cls"):
        ours = ours[1:]
    var_kw = any(p.kind is p.VAR_KEYWORD for p in ours)
    var_pos = any(p.kind is p.VAR_POSITIONAL for p in ours)
    by_name = {p.name: p for p in ours}
    positional = [p for p in ours if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    theirs = [p for p in params if not p.startswith("*")]
    for i, raw in enumerate(theirs):
        name = raw.rstrip("=")
        if i < len(positional):
            if positional[i].name != name and name not in by_name and not var_kw:
                return f"parameter {i} is {positional[i].name!r}, kudu-python calls it {name!r}"
        elif not var_pos and name not in by_name and not var_kw:
            return f"no parameter {name!r}"
    their_required = {p for p in theirs if not p.endswith("=")}
    required_kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    for p in ours:
        if p.default is p.empty and p.kind in required_kinds and p.name not in their_required:
            return f"parameter {p.name!r} is required here, not in kudu-python"
    return None


ENTRIES = API["names"]


def _id(e: dict[str, Any]) -> str:
    return f"{e['module']}.{e['name']}"


def test_the_list_names_its_source() -> None:
    assert len(API["commit"]) == 40 and API["version"] and len(ENTRIES) > 300


@pytest.mark.parametrize("entry", ENTRIES, ids=_id)
def test_kudu_python_name(entry: dict[str, Any]) -> None:
    problem = _problem(entry)
    key = _id(entry)
    owner = key.rsplit(".", 1)[0]
    if owner in NOT_YET:  # a member of a class not served yet goes with its class
        assert problem is not None, f"{key} exists now though {owner} is listed in NOT_YET"
    elif key in NOT_YET:
        assert problem is not None, f"{key} works now: remove it from NOT_YET"
    else:
        assert problem is None, f"{key}: {problem}"


def test_not_yet_names_are_in_the_list() -> None:
    assert set(NOT_YET) <= {_id(e) for e in ENTRIES}
