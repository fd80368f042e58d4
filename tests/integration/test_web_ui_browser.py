"""The web UI in a real browser: headless Chromium (Debian's, driven by Playwright) visits every page of a
master and of a tablet server of a running cluster with a table of rows, checks what each shows, follows
every link on every page, and keeps a screenshot of each page as a test artifact
(``$KUDU_TEST_ARTIFACTS``, else ``tests/artifacts/``)."""

from __future__ import annotations

import os
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import kudu_async as kudu
from kudu_async.testing import MiniCluster

pytestmark = pytest.mark.integration

TABLE = "webui_metrics"
ROWS = 600
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(os.environ.get("KUDU_TEST_ARTIFACTS") or Path(__file__).resolve().parents[1] / "artifacts") / "webui"


def _chromium() -> str:
    """Debian's Chromium; CI must have it (scripts/setup.sh installs it), elsewhere the test skips."""
    found = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    if found is None:
        why = "no Chromium found (install Debian's 'chromium' package; scripts/setup.sh does when run as root)"
        if os.environ.get("CI"):
            pytest.fail(f"CI runs the browser test: {why}")
        pytest.skip(why)
    return found


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = _chromium()
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install '.[dev]')")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, browser: Any) -> Iterator[MiniCluster]:
    c = MiniCluster(
        num_masters=1,
        num_tservers=3,
        base_dir=tmp_path_factory.mktemp("webui"),
        # Small MemRowSets flush within a second, so the tablets have DiskRowSets to draw.
        tserver_flags=["--flush-threshold-secs=1"],
    )
    c.start()
    yield c
    c.shutdown()


@pytest.fixture(scope="module")
def table_id(cluster: MiniCluster) -> str:
    """A hash- and range-partitioned table (2 x 2 tablets, 3 replicas each) written in two interleaved
    halves, so its tablets hold overlapping rowsets."""
    with kudu.connect(cluster.master_addresses.split(",")) as client:
        b = kudu.schema_builder()
        b.add_column("key").type(kudu.int64).nullable(False).primary_key()
        b.add_column("host", type_=kudu.string, comment="where the value was measured")
        b.add_column("value", type_=kudu.double, default=0.5)
        part = kudu.Partitioning().add_hash_partitions(["key"], 2).set_range_partition_columns(["key"])
        part.add_range_partition({"key": 0}, {"key": ROWS // 2})
        part.add_range_partition({"key": ROWS // 2}, {"key": ROWS})
        table = client.create_table(TABLE, b.build(), part, n_replicas=3)
        for parity in (0, 1):
            if parity:
                time.sleep(1.5)  # a flush between the halves: two rowsets over the same keys
            session = client.new_session()
            for k in range(parity, ROWS, 2):
                session.apply(table.new_insert({"key": k, "host": f"host-{k % 7}", "value": k / 10}))
            session.flush()
        return str(table.id)


def _wait_for_rowsets(cluster: MiniCluster, timeout_s: float = 30.0) -> tuple[str, str]:
    """A (tserver name, tablet id) whose tablet has DiskRowSets."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for ts in cluster.tservers:
            for t in cluster.http_json(ts, "/api/v1/tablets")["tablets"]:
                if t.get("table_name") != TABLE or t["state"] != "RUNNING":
                    continue
                detail = cluster.http_json(ts, f"/api/v1/tablets/{t['tablet_id']}")
                if detail["storage"]["rowsets"]:
                    return ts.name, t["tablet_id"]
        time.sleep(0.3)
    raise AssertionError(f"no tablet of {TABLE} flushed a DiskRowSet in {timeout_s}s")


class Visitor:
    """Opens pages in one browser tab, checks they rendered as HTML, saves screenshots and collects
    every link they show."""

    def __init__(self, browser: Any, prefix: str) -> None:
        self.page = browser.new_page(viewport={"width": 1280, "height": 900})
        self.prefix = prefix
        self.links: set[str] = set()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)

    def visit(self, url: str, shot: str, expect_status: int = 200) -> Any:
        response = self.page.goto(url, wait_until="load")
        assert response is not None and response.status == expect_status, f"{url}: HTTP {response and response.status}"
        assert "text/html" in response.headers.get("content-type", ""), f"{url}: not HTML"
        # The whole page where it is the point of the artifact; the first screen elsewhere (long pages'
        # full screenshots cost seconds).
        self.page.screenshot(path=str(ARTIFACTS / f"{self.prefix}-{shot}.png"), full_page=shot in FULL_PAGE_SHOTS)
        hrefs = self.page.eval_on_selector_all("a[href]", "els => els.map(e => e.href.baseVal ?? e.href)")
        for h in hrefs:
            absolute = self.page.evaluate("h => new URL(h, document.baseURI).href", h)
            if absolute.startswith("http"):
                self.links.add(absolute.split("#")[0])
        return self.page

    def text(self) -> str:
        return str(self.page.inner_text("body"))

    def close(self) -> None:
        self.page.close()


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def _check_links(links: set[str]) -> int:
    """GET every link (as a script would: JSON pages answer JSON) and require a status below 400."""
    urls = sorted(links)
    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(_status, urls))
    bad = [f"{url} -> {status}" for url, status in zip(urls, statuses, strict=True) if status >= 400]
    assert not bad, "links that do not resolve:\n" + "\n".join(bad)
    return len(urls)


FULL_PAGE_SHOTS = frozenset({"table", "tablet-servers", "tablet", "rowset-layout"})
COMMON_PAGES = {
    "mem-trackers": ("/mem-trackers", "Memory trackers"),
    "threadz": ("/threadz", "Event loop tasks"),
    "logs": ("/logs", "node started"),
    "varz": ("/varz", "--rpc_bind"),
    "startup": ("/startup", "Bootstrapping and opening the replicas"),
}


def _common_pages(v: Visitor, base: str) -> None:
    for shot, (path, expected) in COMMON_PAGES.items():
        v.visit(base + path, shot)
        assert expected in v.text(), f"{path}: {expected!r} not shown"
    v.page.goto(base + "/stacks")
    assert "asyncio tasks" in v.text()


def test_master_pages_in_a_browser(cluster: MiniCluster, browser: Any, table_id: str) -> None:
    master = cluster.masters[0]
    base = master.http_url
    uuids = [ts.uuid for ts in cluster.tservers]
    v = Visitor(browser, "master")
    try:
        v.visit(base + "/", "home")
        home = v.text()
        assert "master" in home and master.uuid in home and "this master" in home
        v.visit(base + "/tablet-servers", "tablet-servers")
        page_text = v.text()
        assert all(u in page_text for u in uuids)
        assert v.page.locator("svg.picture rect").count() >= len(uuids), "the cluster view shows no bars"
        v.visit(base + "/masters", "masters")
        assert master.uuid in v.text() and "LEADER" in v.text()
        v.visit(base + "/tables", "tables")
        assert TABLE in v.text() and table_id in v.text()
        v.page.click(f"text={TABLE}")
        assert v.page.url.endswith(f"/table?id={table_id}")
        v.visit(base + f"/table?id={table_id}", "table")
        create = v.page.inner_text("#create-table")
        assert f"CREATE TABLE `{TABLE}`" in create and "PRIMARY KEY (`key`)" in create
        assert "PARTITION BY HASH (key) PARTITIONS 2" in create and "PARTITION 0 <= VALUES < 300" in create
        assert "STORED AS KUDU" in create and "'kudu.num_tablet_replicas' = '3'" in create
        table_text = v.text()
        assert "LEADER" in table_text and all(u in table_text for u in uuids)
        v.visit(base + "/table?id=no-such-table", "table-404", expect_status=404)
        assert "no-such-table" in v.text()
        v.visit(base + "/table", "table-400", expect_status=400)
        assert "'id'" in v.text()
        _common_pages(v, base)
    finally:
        v.close()
    assert _check_links(v.links) > 20


def test_tserver_pages_in_a_browser(cluster: MiniCluster, browser: Any, table_id: str) -> None:
    name, tablet_id = _wait_for_rowsets(cluster)
    ts = cluster.node(name)
    base = ts.http_url
    v = Visitor(browser, "tserver")
    try:
        v.visit(base + "/", "home")
        assert ts.uuid in v.text() and "Masters (heartbeats)" in v.text()
        v.visit(base + "/tablets", "tablets")
        assert TABLE in v.text() and tablet_id in v.text() and "RANGE (key) PARTITION 0 <= VALUES < 300" in v.text()
        v.page.click(f"a:text('{tablet_id}')")
        assert v.page.url.endswith(f"/tablet?id={tablet_id}")
        v.visit(base + f"/tablet?id={tablet_id}", "tablet")
        text = v.text()
        assert tablet_id in text and "Raft" in text and "MemRowSet" in text and "key" in text
        v.visit(base + f"/tablet-rowsetlayout-svg?id={tablet_id}", "rowset-layout")
        assert v.page.locator("svg.picture rect[stroke='#17283d']").count() >= 1, "no rowset box drawn"
        v.visit(base + f"/tablet-consensus-status?id={tablet_id}", "consensus")
        assert "commit_index" in v.text() and ts.uuid in v.text()
        for path, shot, expected in (
            ("/maintenance-manager", "maintenance", "Recent completed operations"),
            ("/scans", "scans", "Open scanners"),
            ("/transactions", "transactions", "Writes prepared"),
        ):
            v.visit(base + path, shot)
            assert expected in v.text(), f"{path}: {expected!r} not shown"
        v.visit(base + "/tablet?id=no-such-tablet", "tablet-404", expect_status=404)
        assert "no-such-tablet" in v.text()
        _common_pages(v, base)
    finally:
        v.close()
    assert _check_links(v.links) > 20
