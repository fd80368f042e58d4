"""The data of the pages every node serves (threads, stacks, logs, flags, start-up), as plain functions
of what they read, so tests check them without a server; ``server/admin.py`` serves them."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import sys
import threading
import traceback
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from kudu_async.common.schema import Schema

# Tasks listed on /threadz and /stacks at most: a node with thousands of replicas has thousands of tasks,
# and the page is made on the event loop.
MAX_TASKS = 2000
# /logs reads at most this much of the end of the log file, and shows at most MAX_LOG_LINES lines.
MAX_LOG_READ_BYTES = 4 * 1024 * 1024
DEFAULT_LOG_LINES = 200
MAX_LOG_LINES = 5000
_GROUP_SUFFIX = re.compile(r"[-_]?\d+(_\d+)?$")


def thread_group(name: str) -> str:
    """Kudu groups threads by what they do: a thread's name without its trailing number (``io_3`` ->
    ``io``)."""
    return _GROUP_SUFFIX.sub("", name) or name


def _thread_cpu(native_id: int | None) -> tuple[float | None, float | None]:
    """User and system CPU seconds of one thread of this process, from /proc (None where unknown)."""
    if native_id is None:
        return None, None
    try:
        with open(f"/proc/self/task/{native_id}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[-1].split()
        tick = os.sysconf("SC_CLK_TCK")
        return int(fields[11]) / tick, int(fields[12]) / tick
    except (OSError, ValueError, IndexError):
        return None, None


def threads() -> list[dict[str, Any]]:
    """Every Python thread of the process with its group, ids and CPU time (reads /proc: call in a
    worker)."""
    out = []
    for t in threading.enumerate():
        user, system = _thread_cpu(t.native_id)
        out.append(
            {
                "name": t.name,
                "group": thread_group(t.name),
                "ident": t.ident,
                "native_id": t.native_id,
                "daemon": t.daemon,
                "user_cpu_s": user,
                "system_cpu_s": system,
            }
        )
    return sorted(out, key=lambda d: (d["group"], d["name"]))


def _task_where(task: asyncio.Task[Any]) -> str:
    frames = task.get_stack(limit=1)
    if not frames:
        return ""
    code = frames[-1].f_code
    return f"{code.co_qualname} ({Path(code.co_filename).name}:{frames[-1].f_lineno})"


def tasks(limit: int = MAX_TASKS) -> tuple[list[dict[str, Any]], int]:
    """The event loop's tasks (call on the loop): name, coroutine, where it waits; at most ``limit`` of
    them, and how many there are."""
    all_tasks = sorted(asyncio.all_tasks(), key=lambda t: t.get_name())
    out = []
    for t in all_tasks[:limit]:
        coro = t.get_coro()
        out.append(
            {
                "name": t.get_name(),
                "coroutine": getattr(coro, "__qualname__", type(coro).__name__),
                "state": "done" if t.done() else "cancelling" if t.cancelling() else "pending",
                "waiting_at": _task_where(t),
            }
        )
    return out, len(all_tasks)


def thread_groups(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["group"]] = counts.get(r["group"], 0) + 1
    return [{"group": g, "threads": n} for g, n in sorted(counts.items())]


def stacks_text(limit: int = MAX_TASKS) -> str:
    """Every thread's stack and every task's (call on the event loop's thread), as text."""
    buf = io.StringIO()
    frames = sys._current_frames()
    names = {t.ident: t.name for t in threading.enumerate()}
    buf.write(f"{len(frames)} threads\n\n")
    for ident, frame in sorted(frames.items(), key=lambda kv: names.get(kv[0], "")):
        buf.write(f"Thread {names.get(ident, '?')} (ident {ident}):\n")
        buf.write("".join(traceback.format_stack(frame)))
        buf.write("\n")
    all_tasks = sorted(asyncio.all_tasks(), key=lambda t: t.get_name())
    shown = all_tasks[:limit]
    buf.write(f"{len(all_tasks)} asyncio tasks" + (f" (the first {limit} shown)" if len(all_tasks) > limit else ""))
    buf.write("\n\n")
    for t in shown:
        t.print_stack(file=buf)
        buf.write("\n")
    return buf.getvalue()


def stacks_json(limit: int = MAX_TASKS) -> dict[str, Any]:
    """The stacks as data (call on the event loop's thread): each thread's and task's frames, innermost
    last."""
    frames = sys._current_frames()
    names = {t.ident: t.name for t in threading.enumerate()}
    thread_stacks = [
        {"name": names.get(ident, "?"), "ident": ident, "stack": traceback.format_stack(frame)}
        for ident, frame in sorted(frames.items(), key=lambda kv: names.get(kv[0], ""))
    ]
    all_tasks = sorted(asyncio.all_tasks(), key=lambda t: t.get_name())
    task_stacks = []
    for t in all_tasks[:limit]:
        summary = traceback.StackSummary.extract(
            ((f, f.f_lineno) for f in t.get_stack()), lookup_lines=True, capture_locals=False
        )
        task_stacks.append({"name": t.get_name(), "stack": summary.format()})
    return {"threads": thread_stacks, "tasks": task_stacks, "num_tasks": len(all_tasks)}


def tail_lines(path: str, lines: int, max_bytes: int = MAX_LOG_READ_BYTES) -> list[str]:
    """The last ``lines`` lines of the file at ``path`` (reading at most ``max_bytes`` from its end;
    blocking: call in a worker)."""
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        end = fh.tell()
        block = 64 * 1024
        data = b""
        pos = end
        while pos > 0 and data.count(b"\n") <= lines and end - pos < max_bytes:
            step = min(block, pos, max_bytes - (end - pos))
            pos -= step
            fh.seek(pos)
            data = fh.read(step) + data
    text = data.decode("utf-8", errors="replace")
    out = text.splitlines()
    if pos > 0 and out:
        out = out[1:]  # the first line read may be the tail of a longer one
    return out[-lines:]


_LOG_KEYS = ("ts", "level", "logger", "msg")


def parse_log_line(line: str) -> dict[str, Any]:
    """One line of the node's JSON log as columns (time, level, logger, message, the other fields); a
    line that is not one of ours (a traceback printed by a library) as its text."""
    try:
        doc = json.loads(line)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        return {"ts": "", "level": "", "logger": "", "msg": line, "fields": ""}
    rest = {k: v for k, v in doc.items() if k not in (*_LOG_KEYS, "role", "uuid")}
    return {
        **{k: str(doc.get(k, "")) for k in _LOG_KEYS},
        "fields": " ".join(f"{k}={v}" for k, v in rest.items() if k != "exc"),
        "exc": str(rest.get("exc", "")),
    }


def flag_rows(values: Mapping[str, Any], sources: Mapping[str, str], flags: Iterable[Any]) -> list[dict[str, Any]]:
    """The node's flags for /varz: name, value, default, where the value came from, help text."""
    by_name = {f.name: f for f in flags}
    rows = []
    for name, value in sorted(values.items()):
        f = by_name.get(name)
        rows.append(
            {
                "name": name,
                "value": value,
                "default": None if f is None else f.default,
                "source": sources.get(name, "default"),
                "help": "" if f is None else f.help,
            }
        )
    return rows


def mem_tracker_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Kudu's tracker table with each tracker's depth in the tree (rows come parents first)."""
    depth: dict[str, int] = {}
    out = []
    for r in rows:
        d = 0 if r.get("parent") is None else depth.get(str(r["parent"]), 0) + 1
        depth[str(r["id"])] = d
        out.append({**r, "depth": d})
    return out


def startup_replicas(
    raft_status: list[dict[str, Any]], opening: Iterable[str], tombstoned: Iterable[str]
) -> dict[str, Any]:
    """How far the replicas' opening got: counts and each replica's state."""
    rows = [{"replica": r["group"], "state": r["state"], "error": r.get("error")} for r in raft_status]
    listed = {r["replica"] for r in rows}
    rows += [{"replica": g, "state": "BOOTSTRAPPING", "error": None} for g in sorted(set(opening) - listed)]
    rows += [{"replica": g, "state": "TOMBSTONED", "error": None} for g in sorted(set(tombstoned) - listed)]
    rows.sort(key=lambda r: r["replica"])
    live = [r for r in rows if r["state"] != "TOMBSTONED"]
    waiting = sum(1 for r in live if r["state"] in ("BOOTSTRAPPING", "INITIALIZING"))
    return {"total": len(live), "opened": len(live) - waiting, "opening": waiting, "replicas": rows}


# Kudu's names of its encodings and compressions, as its pages and Impala's DDL spell them.
ENCODING_NAMES = {
    "auto": "AUTO_ENCODING",
    "plain": "PLAIN_ENCODING",
    "prefix": "PREFIX_ENCODING",
    "group_varint": "GROUP_VARINT",
    "rle": "RLE",
    "dict": "DICT_ENCODING",
    "bit_shuffle": "BIT_SHUFFLE",
}
COMPRESSION_NAMES = {"default": "DEFAULT_COMPRESSION", "none": "NO_COMPRESSION"}


def encoding_name(encoding: str | None) -> str:
    return ENCODING_NAMES.get(encoding or "auto", str(encoding).upper())


def compression_name(compression: str | None) -> str:
    return COMPRESSION_NAMES.get(compression or "default", str(compression).upper())


def schema_rows(schema: Schema, default_text: Callable[[Any], str] = repr) -> list[dict[str, Any]]:
    """The schema table of Kudu's table and tablet pages: each column's id, type, key and nullability,
    encoding, compression, default (as ``default_text`` writes it) and comment."""
    keys = set(schema.key_names)
    return [
        {
            "name": c.name,
            "id": c.id,
            "type": c.type_label,
            "key": c.name in keys,
            "nullable": c.nullable,
            "encoding": encoding_name(c.encoding),
            "compression": compression_name(c.compression),
            "default": None if c.default is None else default_text(c.default),
            "comment": c.comment or "",
        }
        for c in schema.columns
    ]
