"""Message decoding benchmark: the cost of turning an RPC body into a validated request, per message kind.

Three ways are timed on the same msgpack bodies:

- ``dict``: ``msgpack.unpackb`` to a dict, then hand-written field checks (the service code's helpers);
- ``dataclass``: ``msgpack.unpackb``, then a frozen dataclass built by a validating decoder compiled once per
  class from its field types (the dataclass candidate for typed messages);
- ``msgspec``: ``msgspec.msgpack.Decoder(Struct)``, which decodes and validates in one pass in C.

Bodies: a Ping (empty map), a Scan request (projection, two predicates, keys), a Write with a ~1 MiB ``rows``
bin, and a TSHeartbeat carrying 100 tablet reports. For the Write the figure also says whether the rows came
out as a view of the body (zero copy) or a copy. One line per (message, way)::

    python scripts/bench/messages.py [--seconds 0.5]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
import typing
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import msgpack
import msgspec

from kudu_async.master import messages as master_messages
from kudu_async.rpc.messages import decoder_for
from kudu_async.tserver import messages as ts_messages
from kudu_async.tserver.result_tracker import parse_request_id

# --- dict: msgpack to a dict, then hand checks ---------------------------------------------------------------


def _str(req: dict[str, Any], name: str, default: str | None = None) -> str:
    v = req.get(name, default)
    if not isinstance(v, str) or not v:
        raise ValueError(f"'{name}' must be a non-empty string")
    return v


def _int(req: dict[str, Any], name: str, default: int | None = None) -> int:
    v = req.get(name, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"'{name}' must be a non-negative integer")
    return v


def _opt_bytes(req: dict[str, Any], name: str) -> bytes | None:
    v = req.get(name)
    if v is None:
        return None
    if not isinstance(v, bytes | bytearray):
        raise ValueError(f"'{name}' must be bytes")
    return bytes(v)


def dict_ping(body: bytes) -> Any:
    req = msgpack.unpackb(body, raw=False, strict_map_key=False)
    if not isinstance(req, dict):
        raise ValueError("request body must be a map")
    return req


def dict_scan(body: bytes) -> Any:
    req = dict_ping(body)
    out: dict[str, Any] = {"tablet_id": _str(req, "tablet_id")}
    projection = req.get("projection")
    if projection is not None and (not isinstance(projection, list) or not all(isinstance(c, str) for c in projection)):
        raise ValueError("'projection' must be a list of column names")
    preds = req.get("predicates") or []
    if not isinstance(preds, list) or not all(isinstance(p, dict) for p in preds):
        raise ValueError("'predicates' must be a list of predicate maps")
    out["read_mode"] = _str(req, "read_mode", "READ_LATEST")
    batch_bytes = req.get("batch_bytes")
    if batch_bytes is not None and (not isinstance(batch_bytes, int) or not 1 <= batch_bytes <= 16 << 20):
        raise ValueError("'batch_bytes'")
    limit = req.get("limit")
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise ValueError("'limit'")
    for k in ("lower_key", "upper_key", "resume_after_key"):
        out[k] = _opt_bytes(req, k)
    if req.get("snapshot_ts") is not None:
        out["snapshot_ts"] = _int(req, "snapshot_ts")
    if req.get("propagated_timestamp") is not None:
        out["propagated_timestamp"] = _int(req, "propagated_timestamp")
    return out


def dict_write(body: bytes) -> Any:
    req = dict_ping(body)
    _str(req, "tablet_id")
    _int(req, "schema_version", 0)
    parse_request_id(req.get("request_id"))
    if req.get("propagated_timestamp") is not None:
        _int(req, "propagated_timestamp")
    return req["rows"]


def _need(d: Any, key: str, kind: type | tuple[type, ...]) -> Any:
    if (
        not isinstance(d, dict)
        or key not in d
        or not isinstance(d[key], kind)
        or isinstance(d[key], bool) != (kind is bool)
    ):
        raise ValueError(f"'{key}' missing or not {kind}")
    return d[key]


def _hostport(v: str) -> None:
    host, _, port = v.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"bad address {v!r}")


def _ids(v: Any) -> list[str]:
    if not isinstance(v, list) or not all(isinstance(x, str) and x and x.isprintable() for x in v):
        raise ValueError("bad id list")
    if len(set(v)) != len(v):
        raise ValueError("duplicate ids")
    return v


def _hb_validate(d: Any) -> Any:
    """The checks ts_manager made by hand on a heartbeat: each field's type and bounds, ids, addresses,
    config membership and duplicates, building checked copies as it went."""
    ts = _need(d, "ts", dict)
    out_ts = {k: _need(ts, k, str) for k in ("uuid", "rpc_address", "http_address", "version")}
    _hostport(out_ts["rpc_address"])
    _hostport(out_ts["http_address"])
    out_ts["start_time"] = float(_need(ts, "start_time", (int, float)))
    rep = _need(d, "report", dict)
    tablets = []
    for t in _need(rep, "tablets", list):
        cfg = _need(t, "config", dict)
        voters, non_voters = _ids(_need(cfg, "voters", list)), _ids(_need(cfg, "non_voters", list))
        peers = _need(cfg, "peers", dict)
        for k, v in peers.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise ValueError("bad peers")
            _hostport(v)
        if set(voters) & set(non_voters) or any(u not in peers for u in (*voters, *non_voters)):
            raise ValueError("bad config")
        row = {k: _need(t, k, str) for k in ("tablet_id", "table_id", "state")}
        for k in ("error", "role", "leader_uuid"):
            if t.get(k) is not None and not isinstance(t[k], str):
                raise ValueError(k)
            row[k] = t.get(k)
        row.update(term=_need(t, "term", int), schema_version=_need(t, "schema_version", int))
        row["config"] = {"opid_index": _need(cfg, "opid_index", int), "voters": voters, "non_voters": non_voters}
        tablets.append(row)
    if len({t["tablet_id"] for t in tablets}) != len(tablets):
        raise ValueError("duplicate tablet")
    return out_ts, tablets, _ids(_need(rep, "removed", list)), _need(d, "register", bool)


def dict_heartbeat(body: bytes) -> Any:
    """The heartbeat's hand checks, as ts_manager had them: every field of every tablet report."""
    return _hb_validate(msgpack.unpackb(body, raw=False, strict_map_key=False))


# --- the dataclass candidate: a validating decoder compiled from the field types ----------------------------


def _checker(tp: Any, name: str) -> Callable[[Any], Any]:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, __import__("types").UnionType) and type(None) in args:
        inner = _checker(next(a for a in args if a is not type(None)), name)
        return lambda v: None if v is None else inner(v)
    if origin is list:
        item = _checker(args[0], name)
        return lambda v: [item(x) for x in v] if isinstance(v, list) else _fail(name, "list", v)
    if origin is dict:
        return lambda v: v if isinstance(v, dict) else _fail(name, "map", v)
    if dataclasses.is_dataclass(tp):
        dec = _compile(tp)
        return dec
    scalar = _SCALARS.get(tp)
    if scalar is not None:
        label, ok = scalar
        return lambda v: (float(v) if tp is float else v) if ok(v) else _fail(name, label, v)
    return lambda v: v


# Scalar field types: the name in errors and the check of a decoded value.
_SCALARS: dict[Any, tuple[str, Callable[[Any], bool]]] = {
    bool: ("bool", lambda v: v is True or v is False),
    int: ("int", lambda v: type(v) is int),
    float: ("float", lambda v: type(v) in (int, float)),
    str: ("str", lambda v: type(v) is str),
    bytes: ("bytes", lambda v: type(v) is bytes),
}


def _fail(name: str, want: str, got: Any) -> Any:
    raise ValueError(f"'{name}': expected {want}, got {type(got).__name__}")


def _compile(cls: Any) -> Callable[[Any], Any]:
    hints = typing.get_type_hints(cls)
    fields = []
    for f in dataclasses.fields(cls):
        factory = f.default_factory
        required = f.default is dataclasses.MISSING and factory is dataclasses.MISSING
        if required:
            default = None
        elif f.default is not dataclasses.MISSING:
            default = f.default
        else:
            assert factory is not dataclasses.MISSING
            default = factory()
        fields.append((f.name, _checker(hints[f.name], f.name), required, default))

    def decode(d: Any) -> Any:
        if not isinstance(d, dict):
            raise ValueError("expected a map")
        kw = {}
        for name, check, required, default in fields:
            v = d.get(name, _MISSING)
            if v is _MISSING:
                if required:
                    raise ValueError(f"'{name}': missing")
                kw[name] = default
            else:
                kw[name] = check(v)
        return cls(**kw)

    return decode


_MISSING = object()


@dataclasses.dataclass(frozen=True, slots=True)
class DPing:
    pass


@dataclasses.dataclass(frozen=True, slots=True)
class DScan:
    tablet_id: str | None = None
    scanner_id: str | None = None
    projection: list[str] | None = None
    predicates: list[dict[str, Any]] | None = None
    read_mode: str = "READ_LATEST"
    snapshot_ts: int | None = None
    lower_key: bytes | None = None
    upper_key: bytes | None = None
    resume_after_key: bytes | None = None
    limit: int | None = None
    batch_bytes: int | None = None
    ordered: bool = False
    schema_version: int | None = None
    propagated_timestamp: int | None = None
    close: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class DRequestId:
    client_id: str
    seq_no: int
    first_incomplete_seq_no: int


@dataclasses.dataclass(frozen=True, slots=True)
class DWrite:
    tablet_id: str
    rows: bytes
    op_types: bytes | None = None
    set_columns: bytes | None = None
    schema_version: int = 0
    request_id: DRequestId | None = None
    propagated_timestamp: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class DConfig:
    opid_index: int
    voters: list[str]
    non_voters: list[str]
    peers: dict[str, str]


@dataclasses.dataclass(frozen=True, slots=True)
class DTablet:
    tablet_id: str
    table_id: str
    state: str
    error: str | None
    role: str | None
    term: int
    leader_uuid: str | None
    config: DConfig
    schema_version: int


@dataclasses.dataclass(frozen=True, slots=True)
class DReport:
    full: bool
    seq: int
    tablets: list[DTablet]
    removed: list[str]


@dataclasses.dataclass(frozen=True, slots=True)
class DTs:
    uuid: str
    rpc_address: str
    http_address: str
    version: str
    start_time: float


@dataclasses.dataclass(frozen=True, slots=True)
class DHeartbeat:
    ts: DTs
    register: bool
    report: DReport | None
    num_live_tablets: int
    leader_count: int


def _dc(cls: Any) -> Callable[[bytes], Any]:
    dec = _compile(cls)
    return lambda body: dec(msgpack.unpackb(body, raw=False, strict_map_key=False) if body else {})


# --- bodies --------------------------------------------------------------------------------------------------


def bodies() -> dict[str, bytes]:
    pack = msgpack.packb
    scan = {
        "tablet_id": "a" * 32,
        "projection": ["key", "v1", "v2"],
        "predicates": [
            {"column": "key", "op": ">=", "value": 10},
            {"column": "v1", "op": "IN", "value": [1, 2, 3]},
        ],
        "read_mode": "READ_AT_SNAPSHOT",
        "snapshot_ts": 7_000_000_000_000,
        "lower_key": b"\x80\x00\x00\x01",
        "upper_key": b"\x80\x00\x10\x00",
        "batch_bytes": 1 << 20,
        "ordered": True,
        "schema_version": 0,
        "propagated_timestamp": 7_000_000_000_000,
    }
    write = {
        "tablet_id": "a" * 32,
        "rows": os.urandom(1 << 20),
        "op_types": bytes(100),
        "set_columns": None,
        "schema_version": 0,
        "request_id": {"client_id": "c" * 32, "seq_no": 5, "first_incomplete_seq_no": 3},
        "propagated_timestamp": 7_000_000_000_000,
    }
    uuids = [f"{i:032x}" for i in range(3)]
    tablet = {
        "table_id": "t" * 32,
        "state": "RUNNING",
        "error": None,
        "role": "LEADER",
        "term": 3,
        "leader_uuid": uuids[0],
        "config": {
            "opid_index": -1,
            "voters": uuids,
            "non_voters": [],
            "peers": {u: f"127.0.0.1:{7050 + i}" for i, u in enumerate(uuids)},
        },
        "schema_version": 0,
    }
    heartbeat = {
        "ts": {
            "uuid": uuids[0],
            "rpc_address": "127.0.0.1:7050",
            "http_address": "127.0.0.1:8050",
            "version": "0.1.0",
            "start_time": 1.7e9,
        },
        "register": False,
        "report": {
            "full": True,
            "seq": 9,
            "tablets": [{"tablet_id": f"{i:032x}", **tablet} for i in range(100)],
            "removed": [],
        },
        "num_live_tablets": 100,
        "leader_count": 33,
    }
    return {"Ping": pack({}), "Scan": pack(scan), "Write": pack(write), "TSHeartbeat": pack(heartbeat)}


def _per_call_us(fn: Callable[[bytes], Any], body: bytes, seconds: float) -> float:
    n, t0 = 0, time.perf_counter()
    while True:
        for _ in range(50):
            fn(body)
        n += 50
        dt = time.perf_counter() - t0
        if dt >= seconds:
            return dt / n * 1e6


def _rows_of(obj: Any) -> Any:
    return obj if isinstance(obj, bytes | memoryview) else obj.rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=0.5, help="time per figure (default 0.5)")
    args = ap.parse_args()
    msgspec_decoders: dict[str, Callable[[bytes], Any]] = {
        "Ping": msgspec.msgpack.Decoder(msgspec.Struct).decode,
        "Scan": decoder_for(ts_messages.ScanRequest),
        "Write": decoder_for(ts_messages.WriteRequest),
        "TSHeartbeat": decoder_for(master_messages.TSHeartbeatRequest),
    }
    ways: dict[str, dict[str, Callable[[bytes], Any]]] = {
        "dict": {"Ping": dict_ping, "Scan": dict_scan, "Write": dict_write, "TSHeartbeat": dict_heartbeat},
        "dataclass": {"Ping": _dc(DPing), "Scan": _dc(DScan), "Write": _dc(DWrite), "TSHeartbeat": _dc(DHeartbeat)},
        "msgspec": msgspec_decoders,
    }
    for msg, body in bodies().items():
        for way, fns in ways.items():
            fn = fns[msg]
            extra = ""
            if msg == "Write":
                rows = _rows_of(fn(body))
                view = isinstance(rows, memoryview) and rows.obj is body
                extra = f"  rows: {'view of the body (zero copy)' if view else type(rows).__name__ + ' copy'}"
            us = _per_call_us(fn, body, args.seconds)
            print(f"{msg:<12} {len(body):>8} B  {way:<10} {us:9.2f} us/decode{extra}")


if __name__ == "__main__":
    main()
