"""``kudu tserver|master get_flags|set_flag|set_flag_for_all``: a running node's flags (Kudu's gflags verbs).

Every node serves ``Generic/GetFlags`` and ``Generic/SetFlag``. A node changes only flags tagged ``runtime``
(it re-reads them, or is told of the new value); ``-force`` sets any other flag too, with the node's warning
that it may never act on it. ``set_flag_for_all`` sets the flag on every tablet server the leader master
knows (or on every master) and exits 1 if any of them refused.
"""

from __future__ import annotations

import argparse
from typing import Any

from kudu_async.common.errors import KuduBadStatus
from kudu_async.tools.cli.framework import (
    Context,
    Result,
    UsageError,
    add_format_flag,
    csv_list,
    flag,
    rows_result,
    verb,
)

DEFAULT_PORT = {"tserver": 7050, "master": 7051}
GET_FLAGS_COLUMNS = ("flag", "value", "default value?", "tags")
SET_FOR_ALL_COLUMNS = ("uuid", "address", "old value", "new value", "error")
FLAG_CALL_TIMEOUT_S = 10.0


def node_address(text: str, role: str) -> str:
    """``host[:port]`` of one node; a bare host gets the role's default RPC port, as Kudu's tool does."""
    text = text.strip()
    if not text or "," in text:
        raise UsageError(f"expected one {role} address host:port, got {text!r}")
    if text.startswith("["):
        return text if "]:" in text else f"{text}:{DEFAULT_PORT[role]}"
    if text.count(":") == 1:
        host, port = text.split(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise UsageError(f"bad {role} address {text!r}: expected host:port")
        return text
    if ":" in text:
        raise UsageError(f"bad {role} address {text!r}: bracket an IPv6 address ([::1]:{DEFAULT_PORT[role]})")
    return f"{text}:{DEFAULT_PORT[role]}"


def _get_flags_args(role: str) -> Any:
    def add(p: argparse.ArgumentParser) -> None:
        p.add_argument(f"{role}_address", help=f"address of a {role} (host[:port], port {DEFAULT_PORT[role]})")
        flag(p, "all_flags", type=bool, help="list every flag, not only those not at their default value")
        flag(
            p, "flags", default=None, help="comma-separated flags to list (then -all_flags and -flag_tags are ignored)"
        )
        flag(
            p, "flag_tags", default=None, help="comma-separated tags (runtime, unsafe): list flags carrying all of them"
        )
        add_format_flag(p)

    return add


def _set_flag_args(role: str) -> Any:
    def add(p: argparse.ArgumentParser) -> None:
        p.add_argument(f"{role}_address", help=f"address of a {role} (host[:port], port {DEFAULT_PORT[role]})")
        _flag_value_args(p)

    return add


def _flag_value_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("flag", help="name of the flag (underscores)")
    p.add_argument("value", help="its new value")
    flag(
        p,
        "force",
        type=bool,
        help="set a flag that is not tagged runtime too: the node may not act on it (unsafe)",
    )


def _for_all_args(p: argparse.ArgumentParser) -> None:
    _flag_value_args(p)
    add_format_flag(p)


async def _get_flags(ctx: Context, a: argparse.Namespace, role: str) -> Result:
    address = node_address(getattr(a, f"{role}_address"), role)
    req: dict[str, Any] = {"all_flags": a.all_flags}
    names = csv_list(a.flags, "-flags")
    if names:
        req["flags"] = names
    tags = csv_list(a.flag_tags, "-flag_tags")
    if tags:
        req["tags"] = tags
    resp = await ctx.rpc().call(address, "Generic", "GetFlags", req, timeout_s=ctx.timeout_s)
    rows = [
        {
            "flag": f["name"],
            "value": f["value"],
            "default value?": f["is_default"],
            "tags": ",".join(f["tags"]),
        }
        for f in resp["flags"]
    ]
    return rows_result(rows, GET_FLAGS_COLUMNS, a.format)


async def _set_flag(ctx: Context, a: argparse.Namespace, role: str) -> Result:
    address = node_address(getattr(a, f"{role}_address"), role)
    resp = await ctx.rpc().call(
        address, "Generic", "SetFlag", {"flag": a.flag, "value": a.value, "force": a.force}, timeout_s=ctx.timeout_s
    )
    return Result(data=resp, text=_set_text(resp))


def _set_text(resp: dict[str, Any]) -> str:
    text = f"{resp['flag']}: {resp['old_value']!r} -> {resp['value']!r}"
    if resp.get("forced"):
        text += (
            " (forced, which may be unsafe: the flag is not runtime-settable; the node may not act on the new value)"
        )
    return text


async def _set_flag_for_all(ctx: Context, a: argparse.Namespace, role: str) -> Result:
    client = await ctx.client()
    if role == "tserver":
        targets = [(d["uuid"], d["rpc_address"]) for d in await client.list_tablet_servers()]
    else:
        targets = [(m.get("uuid") or "", m["rpc_address"]) for m in await client.list_masters()]
    if not targets:
        raise UsageError(f"the masters know no {role}")
    rows: list[dict[str, Any]] = []
    for uuid, address in targets:
        row: dict[str, Any] = {"uuid": uuid, "address": address}
        try:
            resp = await client.rpc.call(
                address,
                "Generic",
                "SetFlag",
                {"flag": a.flag, "value": a.value, "force": a.force},
                timeout_s=min(ctx.timeout_s, FLAG_CALL_TIMEOUT_S),
            )
            row.update({"old value": resp["old_value"], "new value": resp["value"]})
        except KuduBadStatus as e:
            row["error"] = str(e)
        rows.append(row)
    return rows_result(rows, SET_FOR_ALL_COLUMNS, a.format, status=1 if any("error" in r for r in rows) else 0)


def _register(role: str, noun: str) -> None:
    async def get_flags(ctx: Context, a: argparse.Namespace) -> Result:
        return await _get_flags(ctx, a, role)

    async def set_flag(ctx: Context, a: argparse.Namespace) -> Result:
        return await _set_flag(ctx, a, role)

    async def set_flag_for_all(ctx: Context, a: argparse.Namespace) -> Result:
        return await _set_flag_for_all(ctx, a, role)

    verb(role, "get_flags", help=f"Get the gflags for a Kudu {noun}", args=_get_flags_args(role), masters=False)(
        get_flags
    )
    verb(role, "set_flag", help=f"Change a gflag value on a Kudu {noun}", args=_set_flag_args(role), masters=False)(
        set_flag
    )
    verb(role, "set_flag_for_all", help=f"Change a gflag value on all Kudu {noun}s", args=_for_all_args)(
        set_flag_for_all
    )


_register("tserver", "Tablet Server")
_register("master", "Master")
