"""The web UI's shared machinery: which clients get HTML, escaping, the page helpers of every node, the
pictures' geometry, start-up progress, and the admin app serving a real (unstarted) node's pages."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from kudu_async.fs.fs_manager import FsManager
from kudu_async.server.admin import build_admin_app
from kudu_async.server.config import FLAGS, load_config
from kudu_async.server.node import Node
from kudu_async.server.startup import StartupProgress, process_age_s
from kudu_async.server.webui import pages, render, svg

BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"


def test_only_clients_that_ask_for_html_get_it() -> None:
    assert render.accepts_html(BROWSER_ACCEPT)
    assert render.accepts_html("text/html")
    assert not render.accepts_html("")  # urllib, scripts
    assert not render.accepts_html("*/*")  # curl
    assert not render.accepts_html("application/json")
    assert not render.accepts_html("text/html;q=0.5, application/json")
    assert not render.accepts_html("text/html;q=0")
    assert not render.accepts_html("text/html;q=x")  # a bad weight counts as 0


def test_formatting_filters() -> None:
    assert render.format_duration(0.25) == "250 ms"
    assert render.format_duration(12.34) == "12.3 s"
    assert render.format_duration(250) == "4 min 10 s"
    assert render.format_duration(7500) == "2 h 5 min"
    assert render.format_duration(3 * 86400 + 4 * 3600) == "3 d 4 h"
    assert render.format_duration(None) == ""
    assert render.format_time(0) == "" and render.format_time(1_700_000_000) == "2023-11-14 22:13:20 UTC"
    env = render.ENV
    assert env.filters["bytes"](3 * 1024 * 1024) == "3 MiB"
    assert env.filters["bytes"](-1) == "" and env.filters["bytes"](None) == ""
    assert env.filters["cell"]({"a": [1, 2]}) == '{"a": [1, 2]}' and env.filters["cell"](True) == "true"
    assert (
        env.filters["cell"](0.000123456789) == "0.000123457" and env.filters["cell"](1795770000.5) == "1795770000.500"
    )


def test_templates_escape_what_they_show() -> None:
    html = render.render("macros.html", {})  # the macros file renders alone (nothing outside macros)
    assert html.strip() == ""
    row = {"name": "<script>alert(1)</script>", "n": 3}
    text = render.ENV.from_string('{% from "macros.html" import rows_table %}{{ rows_table(rows) }}').render(rows=[row])
    assert "<script>alert(1)" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert '<td class="num">3</td>' in text


def test_thread_groups_and_threads() -> None:
    assert pages.thread_group("io_3") == "io"
    assert pages.thread_group("maintenance_0") == "maintenance"
    assert pages.thread_group("ThreadPoolExecutor-0_1") == "ThreadPoolExecutor"
    assert pages.thread_group("MainThread") == "MainThread"
    rows = pages.threads()
    me = next(r for r in rows if r["ident"] == threading.get_ident())
    assert me["user_cpu_s"] is not None and me["user_cpu_s"] >= 0
    assert {"group": "MainThread", "threads": 1} in pages.thread_groups(rows)


async def test_tasks_and_stacks_name_the_waiting_coroutines() -> None:
    async def parked_for_the_test() -> None:
        await asyncio.sleep(30)

    task = asyncio.create_task(parked_for_the_test(), name="parked")
    await asyncio.sleep(0)
    try:
        listed, total = pages.tasks()
        row = next(t for t in listed if t["name"] == "parked")
        assert row["coroutine"].endswith("parked_for_the_test") and row["state"] == "pending"
        assert "parked_for_the_test" in row["waiting_at"] and total >= 2
        assert [t["name"] for t in pages.tasks(limit=1)[0]] == [listed[0]["name"]]
        text = pages.stacks_text()
        assert "Thread MainThread" in text and "parked_for_the_test" in text and "asyncio tasks" in text
        data = pages.stacks_json()
        assert any(t["name"] == "parked" and "parked_for_the_test" in "".join(t["stack"]) for t in data["tasks"])
        assert any(t["name"] == "MainThread" for t in data["threads"])
    finally:
        task.cancel()


def test_log_tail_and_lines(tmp_path: Path) -> None:
    log = tmp_path / "node.log"
    lines = [
        json.dumps({"ts": f"t{i}", "level": "INFO", "logger": "x", "msg": f"m{i}", "tablet": "a"}) for i in range(5000)
    ]
    log.write_text("\n".join(lines) + "\n")
    assert pages.tail_lines(str(log), 3) == lines[-3:]
    assert pages.tail_lines(str(log), 10_000) == lines  # fewer lines than asked: all of them
    cut = pages.tail_lines(str(log), 10_000, max_bytes=1000)
    assert cut and all(c in lines for c in cut)  # never a partial first line
    row = pages.parse_log_line(lines[-1])
    assert row["msg"] == "m4999" and row["level"] == "INFO" and row["fields"] == "tablet=a"
    assert pages.parse_log_line("Traceback (most recent call last):")["msg"] == "Traceback (most recent call last):"
    with pytest.raises(OSError):
        pages.tail_lines(str(tmp_path / "missing.log"), 5)


def test_flag_rows_and_mem_tracker_depths() -> None:
    rows = pages.flag_rows({"rpc_bind": "127.0.0.1:1", "role": "master"}, {"role": "cli"}, FLAGS)
    assert rows[0]["name"] == "role" and rows[0]["source"] == "cli" and rows[0]["help"]
    assert rows[1]["source"] == "default" and rows[1]["default"] == next(
        f.default for f in FLAGS if f.name == "rpc_bind"
    )
    trackers = pages.mem_tracker_rows(
        [{"id": "root", "parent": None}, {"id": "a", "parent": "root"}, {"id": "b", "parent": "a"}]
    )
    assert [t["depth"] for t in trackers] == [0, 1, 2]


def test_startup_progress_and_replica_counts() -> None:
    now = [100.0]
    p = StartupProgress(5.0, clock=lambda: now[0])
    now[0] = 101.0
    p.begin("rpc")
    now[0] = 101.5
    p.end("rpc")
    p.begin("replicas")
    now[0] = 103.0
    steps = {s["step"]: s for s in p.steps()}
    assert steps["init"] == {"step": "init", "label": steps["init"]["label"], "state": "done", "elapsed_s": 5.0}
    assert steps["rpc"]["elapsed_s"] == 0.5 and steps["replicas"]["state"] == "running"
    assert steps["replicas"]["elapsed_s"] == 1.5 and steps["web"]["state"] == "pending"
    p.end_if_running("replicas", 102.0)
    p.end_if_running("replicas", 110.0)  # already ended: kept
    assert {s["step"]: s for s in p.steps()}["replicas"]["elapsed_s"] == 0.5
    with pytest.raises(ValueError, match="unknown start-up step"):
        p.begin("coffee")
    assert process_age_s() > 0
    counts = pages.startup_replicas(
        [{"group": "a", "state": "RUNNING"}, {"group": "b", "state": "FAILED", "error": "disk"}], ["c"], ["d"]
    )
    assert (counts["total"], counts["opened"], counts["opening"]) == (3, 2, 1)
    assert [r["state"] for r in counts["replicas"]] == ["RUNNING", "FAILED", "BOOTSTRAPPING", "TOMBSTONED"]


def test_rowset_levels_never_overlap() -> None:
    boxes = [
        svg.RowSetBox(1, 0.0, 0.5, 10, 100),
        svg.RowSetBox(2, 0.5, 1.0, 10, 100),  # its neighbour in key order: the data splits at 0.5
        svg.RowSetBox(3, 0.2, 0.8, 10, 100),
        svg.RowSetBox(4, 0.9, 1.0, 10, 100),
        svg.RowSetBox(5, 0.3, 0.3, 1, 10),  # all its keys at one point, inside 3's range
        svg.RowSetBox(6, 0.3, 0.3, 1, 10),  # the same point: never drawn over 5
    ]
    levels = svg.pack_levels(boxes)
    assert levels[:4] == [0, 0, 1, 1] and levels[4] != levels[5]
    for i, a in enumerate(boxes):
        for j, b in enumerate(boxes):
            if i < j and levels[i] == levels[j]:
                assert a.hi <= b.lo or b.hi <= a.lo, (a, b)
                assert (a.lo, a.hi) != (b.lo, b.hi), (a, b)
    picture = svg.rowset_layout(boxes)
    assert picture["levels"] == max(levels) + 1
    drawn = [r for r in picture["rects"] if r.get("stroke") == "#17283d"]
    assert len(drawn) == 6 and all(r["w"] >= 2 for r in drawn)


def test_cluster_view_scales_bars_to_the_busiest_server() -> None:
    colours = svg.table_colours(["t2", "t1", "t2"])
    assert list(colours) == ["t1", "t2"]
    view = svg.cluster_view(
        [{"uuid": "a", "label": "a", "href": "http://x/"}, {"uuid": "b", "label": "b", "href": None}],
        {"a": {"t1": 4, "t2": 4}, "b": {"t1": 2}},
        {"a": 3, "b": 1},
        colours,
    )
    bars = [r for r in view["rects"] if "replicas on" in r.get("tip", "")]
    assert sum(r["w"] for r in bars if r["tip"].endswith("on a")) == pytest.approx(960 - 250 - 70, abs=0.2)
    assert any(t.get("href") == "http://x/" for t in view["texts"])
    assert any(t["text"] == "2 replicas" for t in view["texts"])
    assert any(t["text"] == "1 leader" for t in view["texts"])
    many = svg.table_colours([f"table_{i:03d}" for i in range(40)])
    wide = svg.cluster_view([], {}, {}, many)
    legend = [r for r in wide["rects"] if r["w"] == 12]
    assert len(legend) == 40 and all(r["x"] + 87 <= 960 for r in legend)  # 87: one entry's width
    assert len({r["y"] for r in legend}) == 4 and wide["height"] == max(r["y"] for r in legend) + 24


# --- the admin app of a real node (built, not started: no sockets) ----------------------------------------


@pytest.fixture
async def node_client(tmp_path: Path) -> AsyncIterator[TestClient[Any, Any]]:
    log_file = tmp_path / "node.log"
    log_file.write_text(json.dumps({"ts": "t", "level": "WARNING", "logger": "l", "msg": "hello <b>"}) + "\n")
    config = load_config(
        ["--role", "master", "--data-dir", str(tmp_path / "data"), "--log-file", str(log_file)], environ={}
    )
    fs = FsManager(config.data_dir, config.role)
    fs.open_or_create()
    node = Node(config, fs)
    client = TestClient(TestServer(build_admin_app(node)))
    await client.start_server()
    yield client
    await client.close()
    node.io_executor.shutdown(wait=False)


async def test_pages_answer_html_to_browsers_and_json_to_scripts(node_client: TestClient[Any, Any]) -> None:
    c = node_client
    html = {"Accept": BROWSER_ACCEPT}
    r = await c.get("/", headers=html)
    assert r.status == 200 and r.content_type == "text/html" and r.headers["Vary"] == "Accept"
    body = await r.text()
    assert "<nav>" in body and 'href="/mem-trackers"' in body and "/kudu.css" in body
    home = await (await c.get("/")).json()  # no Accept: today's JSON shape
    assert {"status", "paths"} <= set(home) and "/threadz" in home["paths"]
    assert (await (await c.get("/?raw", headers=html)).json())["status"]["role"] == "node"
    for path in ("/mem-trackers", "/threadz", "/logs", "/startup", "/varz"):
        r = await c.get(path, headers=html)
        assert r.status == 200 and r.content_type == "text/html", path
    assert isinstance(await (await c.get("/mem-trackers")).json(), list)
    logs = await (await c.get("/logs?lines=5")).json()
    assert logs["lines"] and "hello <b>" in logs["lines"][0]
    assert "hello &lt;b&gt;" in await (await c.get("/logs", headers=html)).text()
    assert (await c.get("/varz")).content_type == "text/plain"  # Kudu's text form for curl
    assert "flags" in await (await c.get("/varz", headers={"Accept": "application/json"})).json()
    stacks = await c.get("/stacks", headers=html)
    assert stacks.content_type == "text/plain" and "asyncio tasks" in await stacks.text()
    assert "tasks" in await (await c.get("/stacks?raw")).json()
    startup = await (await c.get("/startup")).json()
    assert startup["steps"][0]["state"] == "done" and startup["replicas"]["total"] == 0
    css = await c.get("/kudu.css")
    assert css.content_type == "text/css" and b"nav" in await css.read()


async def test_bad_parameters_are_named_in_json_and_in_pages(node_client: TestClient[Any, Any]) -> None:
    c = node_client
    r = await c.get("/logs?lines=0")
    assert r.status == 400 and "'lines'" in (await r.json())["message"]
    r = await c.get("/logs?lines=x%00")
    assert r.status == 400 and (await r.json())["code"] == "INVALID_ARGUMENT"
    r = await c.get("/threadz?group=nope")
    assert r.status == 404 and "'nope'" in (await r.json())["message"]
    r = await c.get("/threadz?group=nope", headers={"Accept": BROWSER_ACCEPT})
    assert r.status == 404 and r.content_type == "text/html" and "nope" in await r.text()
    r = await c.get("/no/such/page", headers={"Accept": BROWSER_ACCEPT})
    assert r.status == 404 and "/no/such/page" in await r.text()
    assert (await (await c.get("/no/such/page")).json())["code"] == "NOT_FOUND"
