#!/usr/bin/env python3
"""Restart every node of a live kudu_async cluster, one at a time, without failing a client operation.

The order and steps follow Kudu's rolling-restart procedure:

1. Check that the cluster is healthy (ksck: masters agree on a leader, every tserver answers, every tablet
   HEALTHY); refuse to start otherwise. Turn the masters' auto-rebalancer off for the duration (it is
   turned back on at the end if it was on), so that no replica moves while nodes come and go.
2. Masters, the followers first and the leader last: the leader first hands the catalog's leadership to
   a caught-up follower. Each master is stopped with SIGTERM, started again with its own command line, and
   waited for until the cluster is healthy again.
3. Tablet servers, one at a time: enter maintenance mode (the masters do not re-replicate its replicas
   while it is away), quiesce (its leaderships move to other replicas, new scans go elsewhere) until it
   leads nothing, SIGTERM (the tserver quiesces once more and stops), start it again, wait until the cluster
   is healthy (its replicas caught up), exit maintenance mode.

What it needs to restart a node is the cluster's node manifest (``--manifest``, see
``kudu_async/testing/node_manifest.py``): each node's pid and command line. ``scripts/local_cluster.py`` and
``MiniCluster`` keep one at ``<data-dir>/cluster.json``; for nodes run otherwise, write one. Every wait is
bounded (the ``--*-timeout-s`` flags); a step that fails stops the run, leaves the node it was working on as
it is (started, and out of maintenance mode where that was reached), and exits 1 with the report so far.

    scripts/rolling_restart.py --manifest local-cluster/cluster.json --dry-run
    scripts/rolling_restart.py --manifest local-cluster/cluster.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kudu_async.client.aio import AsyncClient
from kudu_async.common.errors import KuduBadStatus
from kudu_async.common.retry import Deadline
from kudu_async.rpc.client import RpcClient
from kudu_async.testing import node_manifest
from kudu_async.tools import ksck
from kudu_async.tools.cli.framework import Context, add_connection_flags

CATALOG_GROUP = "sys.catalog"  # the masters' Raft group
POLL_S = 0.5
HEALTH_NOTE_S = 5.0  # how often a long wait for a healthy cluster says what it still waits for


class RestartError(Exception):
    """A step did not complete; the message says which and why."""


@dataclass
class Step:
    what: str
    seconds: float
    ok: bool = True
    detail: str = ""


@dataclass
class NodeReport:
    name: str
    role: str
    uuid: str = ""
    steps: list[Step] = field(default_factory=list)
    ok: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "role": self.role,
            "uuid": self.uuid,
            "ok": self.ok,
            "steps": [
                {"what": s.what, "seconds": round(s.seconds, 3), "ok": s.ok, "detail": s.detail} for s in self.steps
            ],
        }


def say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


class RollingRestart:
    def __init__(self, args: argparse.Namespace, manifest: Path, ctx: Context) -> None:
        self.args = args
        self.manifest_path = manifest
        self.ctx = ctx
        self.manifest = node_manifest.read_manifest(manifest)
        self.reports: list[NodeReport] = []
        self.client: AsyncClient | None = None
        self.rpc: RpcClient = ctx.rpc()
        self._children: list[subprocess.Popen[bytes]] = []  # nodes started again (not waited for: they live on)

    # --- cluster state ------------------------------------------------------------------------------

    async def health(self) -> dict[str, Any]:
        assert self.client is not None
        return ksck.evaluate(await ksck.collect(self.client, None, False, min(self.ctx.timeout_s, 10.0)))

    async def wait_healthy(self, why: str) -> float:
        """Until ksck finds the cluster healthy; the seconds it took, RestartError after the bound."""
        began = time.monotonic()
        deadline = began + self.args.healthy_timeout_s
        last: list[str] = []
        noted = began
        while True:
            try:
                report = await self.health()
                if report["ok"]:
                    return time.monotonic() - began
                last = report["errors"]
            except KuduBadStatus as e:
                last = [str(e)]
            if time.monotonic() - noted >= HEALTH_NOTE_S:
                noted = time.monotonic()
                say(f"{why}: waiting for the cluster to be healthy: {len(last)} problem(s), first: {last[0][:200]}")
            if time.monotonic() >= deadline:
                raise RestartError(
                    f"{why}: the cluster is not healthy after {self.args.healthy_timeout_s:g} s: " + "; ".join(last[:5])
                )
            await asyncio.sleep(POLL_S)

    async def masters_by_role(self) -> tuple[list[dict[str, Any]], str | None]:
        """The manifest's masters, followers first and the leader last; and the leader's uuid."""
        assert self.client is not None
        listed = {m["rpc_address"]: m for m in await self.client.list_masters()}
        entries = [n for n in self.manifest["nodes"] if n["role"] == "master"]
        leader = next((m.get("uuid") for m in listed.values() if m.get("role") == "LEADER"), None)
        for n in entries:
            m = listed.get(n["rpc_address"])
            if m is None:
                raise RestartError(
                    f"master {n['name']} ({n['rpc_address']}) of the manifest is not in the masters' Raft config "
                    f"({', '.join(sorted(listed))})"
                )
            n["uuid"] = m.get("uuid") or n.get("uuid", "")
        entries.sort(key=lambda n: (n["uuid"] == leader, n["name"]))
        return entries, leader

    async def tserver_entries(self) -> list[dict[str, Any]]:
        assert self.client is not None
        by_address = {d["rpc_address"]: d for d in await self.client.list_tablet_servers()}
        entries = [n for n in self.manifest["nodes"] if n["role"] == "tserver"]
        for n in entries:
            d = by_address.get(n["rpc_address"])
            if d is None:
                raise RestartError(
                    f"tserver {n['name']} ({n['rpc_address']}) of the manifest is unknown to the masters"
                )
            n["uuid"] = d["uuid"]
        return sorted(entries, key=lambda n: n["name"])

    # --- processes ----------------------------------------------------------------------------------

    def _restart_process(self, n: dict[str, Any]) -> tuple[float, float]:
        """SIGTERM the node's process, wait for it to exit, start its command line again and record the new
        pid; (seconds to stop, seconds to start). Blocking: run in a thread."""
        path = self.manifest_path
        me = os.getpid()
        entry = node_manifest.update_node(path, n["name"], lambda e: e.__setitem__("restarting_by", me))
        began = time.monotonic()
        pid = entry["pid"]
        if pid and node_manifest.process_alive(pid):
            try:
                proc = node_manifest.AdoptedProcess(pid)
            except ProcessLookupError:
                proc = None
            if proc is not None:
                proc.send_signal(signal.SIGTERM)
                if not proc.wait(self.args.stop_timeout_s):
                    proc.send_signal(signal.SIGKILL)
                    proc.wait(10.0)
                    proc.close()
                    raise RestartError(
                        f"{n['name']} (pid {pid}) did not stop within {self.args.stop_timeout_s:g} s of SIGTERM; "
                        "killed it, not restarted: see its log"
                    )
                proc.close()
        stopped = time.monotonic() - began
        env = {**os.environ, **{str(k): str(v) for k, v in (entry.get("env") or {}).items()}}
        stderr = entry.get("stderr") or os.devnull
        with open(stderr, "ab") as err:
            child = subprocess.Popen(
                entry["argv"],
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
                env=env,
                cwd=entry.get("cwd") or None,
                start_new_session=True,
            )

        def started(e: dict[str, Any]) -> None:
            e["pid"] = child.pid
            e.pop("restarting_by", None)

        node_manifest.update_node(path, n["name"], started)
        n["pid"] = child.pid
        self._children.append(child)
        return stopped, time.monotonic() - began - stopped

    async def wait_answers(self, n: dict[str, Any]) -> float:
        """Until the node answers Generic/GetStatus with its own uuid."""
        began = time.monotonic()
        deadline = began + self.args.start_timeout_s
        last = ""
        while time.monotonic() < deadline:
            if not node_manifest.process_alive(n["pid"]):
                raise RestartError(f"{n['name']} exited while starting (pid {n['pid']}): see its log")
            try:
                st = await self.rpc.call(n["rpc_address"], "Generic", "GetStatus", {}, timeout_s=2.0)
                if not n.get("uuid") or st.get("uuid") == n["uuid"]:
                    return time.monotonic() - began
                raise RestartError(f"{n['rpc_address']} answers as {st.get('uuid')}, expected {n['uuid']}")
            except KuduBadStatus as e:
                last = str(e)
            await asyncio.sleep(POLL_S)
        raise RestartError(f"{n['name']} does not answer {self.args.start_timeout_s:g} s after its start: {last}")

    # --- steps ----------------------------------------------------------------------------------------

    async def timed(self, rep: NodeReport, what: str, coro: Any) -> Any:
        began = time.monotonic()
        try:
            result = await coro
        except (RestartError, KuduBadStatus) as e:
            rep.steps.append(Step(what, time.monotonic() - began, False, str(e)))
            raise
        detail = result if isinstance(result, str) else ""
        rep.steps.append(Step(what, time.monotonic() - began, True, detail))
        say(f"{rep.name}: {what}" + (f" ({detail})" if detail else "") + f" in {time.monotonic() - began:.1f}s")
        return result

    async def restart(self, rep: NodeReport, n: dict[str, Any]) -> None:
        stop_s, start_s = await asyncio.to_thread(self._restart_process, n)
        rep.steps.append(Step("stopped (SIGTERM) and started again", stop_s + start_s, True, f"pid {n['pid']}"))
        say(f"{rep.name}: stopped in {stop_s:.1f}s, started again as pid {n['pid']}")
        await self.timed(rep, "answers", self.wait_answers(n))

    async def catalog_role(self, n: dict[str, Any]) -> dict[str, Any]:
        return dict(
            await self.rpc.call(n["rpc_address"], "Consensus", "GetState", {"group": CATALOG_GROUP}, timeout_s=5.0)
        )

    async def hand_over_catalog(self, n: dict[str, Any], st: dict[str, Any]) -> str:
        """The leader master hands the catalog's leadership to its most caught-up follower and waits until
        the cluster is healthy under the new leader."""
        followers = [p for p in st.get("peers", []) if p.get("uuid") != n["uuid"] and p.get("member_type") == "VOTER"]
        if not followers:
            return "no follower to hand over to: the masters elect a new leader after the restart"
        best = max(followers, key=lambda p: (p.get("match_index") or 0, p["uuid"]))
        await self.rpc.call(
            n["rpc_address"],
            "Consensus",
            "TransferLeadership",
            {"group": CATALOG_GROUP, "peer": best["uuid"]},
            timeout_s=5.0,
        )
        deadline = time.monotonic() + self.args.healthy_timeout_s
        while time.monotonic() < deadline:
            try:
                now = await self.catalog_role(n)
                if now.get("role") != "LEADER" and now.get("leader"):
                    await self.wait_healthy("after the catalog leadership moved")
                    return f"leadership to {now.get('leader')}"
            except KuduBadStatus:
                pass
            await asyncio.sleep(POLL_S)
        raise RestartError(f"the catalog leadership did not move off {n['name']}")

    async def restart_master(self, n: dict[str, Any]) -> None:
        rep = NodeReport(n["name"], "master", n.get("uuid", ""))
        self.reports.append(rep)
        st = await self.catalog_role(n)  # who leads now, not when the run began
        if st.get("role") == "LEADER" and len([x for x in self.manifest["nodes"] if x["role"] == "master"]) > 1:
            await self.timed(rep, "handed the catalog leadership over", self.hand_over_catalog(n, st))
        await self.restart(rep, n)
        await self.timed(rep, "cluster healthy", self.wait_healthy(f"after restarting {n['name']}"))
        rep.ok = True

    async def change_state(self, n: dict[str, Any], change: str) -> str:
        assert self.client is not None
        req = {"uuid": n["uuid"], "change": change, "allow_missing_tserver": False}
        reply = await self.client.masters.call("ChangeTServerState", req, Deadline(30.0, f"{change} {n['name']}"))
        return str(reply.get("state"))

    async def quiesce(self, n: dict[str, Any]) -> str:
        began = time.monotonic()
        st = await self.rpc.call(n["rpc_address"], "TabletServer", "Quiesce", {"action": "start"}, timeout_s=5.0)
        leaders = st.get("num_leaders", 0)
        while st.get("num_leaders", 0) > 0:
            if time.monotonic() - began > self.args.quiesce_timeout_s:
                return (
                    f"still leads {st['num_leaders']} after {self.args.quiesce_timeout_s:g} s; SIGTERM hands "
                    "those over before the stop"
                )
            await asyncio.sleep(POLL_S)
            st = await self.rpc.call(n["rpc_address"], "TabletServer", "Quiesce", {"action": "status"}, timeout_s=5.0)
        return f"{leaders} leadership(s) moved away"

    async def restart_tserver(self, n: dict[str, Any]) -> None:
        rep = NodeReport(n["name"], "tserver", n["uuid"])
        self.reports.append(rep)
        await self.timed(rep, "entered maintenance mode", self.change_state(n, "ENTER_MAINTENANCE_MODE"))
        try:
            await self.timed(rep, "quiesced", self.quiesce(n))
            await self.restart(rep, n)
            await self.timed(rep, "cluster healthy", self.wait_healthy(f"after restarting {n['name']}"))
        finally:
            await self.timed(rep, "exited maintenance mode", self.change_state(n, "EXIT_MAINTENANCE_MODE"))
        rep.ok = True

    async def auto_rebalancer(self, value: str | None) -> list[str]:
        """Masters whose auto-rebalancer was on (``value`` None: only ask), after setting it to ``value``."""
        was_on = []
        for m in [n for n in self.manifest["nodes"] if n["role"] == "master"]:
            got = await self.rpc.call(
                m["rpc_address"], "Generic", "GetFlags", {"flags": ["auto_rebalancing_enabled"]}, timeout_s=5.0
            )
            if got["flags"][0]["value"] == "true":
                was_on.append(m["name"])
            if value is not None:
                await self.rpc.call(
                    m["rpc_address"],
                    "Generic",
                    "SetFlag",
                    {"flag": "auto_rebalancing_enabled", "value": value},
                    timeout_s=5.0,
                )
        return was_on

    # --- the run ---------------------------------------------------------------------------------------

    async def run(self) -> int:
        self.client = await self.ctx.client(self.args.master_addresses or self.manifest["master_addresses"])
        masters, leader = await self.masters_by_role()
        tservers = await self.tserver_entries()
        plan = [
            f"master {m['name']} ({m['rpc_address']}{', leader: hands over first' if m['uuid'] == leader else ''})"
            for m in masters
        ]
        plan += [f"tserver {t['name']} ({t['rpc_address']})" for t in tservers]
        if self.args.only != "all":
            masters = masters if self.args.only == "masters" else []
            tservers = tservers if self.args.only == "tservers" else []
        say(f"order: {'; '.join(plan)}")
        report = await self.health()
        if not report["ok"]:
            print("refusing to restart: the cluster is not healthy now (see kudu cluster ksck):", file=sys.stderr)
            for e in report["errors"][:20]:
                print(f"  - {e}", file=sys.stderr)
            return 1
        if self.args.dry_run:
            on = await self.auto_rebalancer(None)
            lines = ["dry run: nothing was changed. The run would:"]
            if on:
                lines.append(f"  turn the auto-rebalancer off on {', '.join(on)} (and back on at the end)")
            for m in masters:
                lines.append(
                    f"  restart master {m['name']} ({m['rpc_address']})"
                    + (": hand the catalog leadership over, " if m["uuid"] == leader else ": ")
                    + "SIGTERM, start, wait until healthy"
                )
            for t in tservers:
                lines.append(
                    f"  restart tserver {t['name']} ({t['rpc_address']}): enter maintenance, quiesce, SIGTERM, "
                    "start, wait until healthy, exit maintenance"
                )
            print("\n".join(lines))
            return 0
        began = time.monotonic()
        rebalancing = await self.auto_rebalancer("false")
        if rebalancing:
            say(f"auto-rebalancer turned off on {', '.join(rebalancing)} for the restart")
        failed: str | None = None
        try:
            for m in masters:
                await self.restart_master(m)
            for t in tservers:
                await self.restart_tserver(t)
        except (RestartError, KuduBadStatus) as e:
            failed = str(e)
        finally:
            if rebalancing:
                await self.auto_rebalancer("true")
                say(f"auto-rebalancer turned back on on {', '.join(rebalancing)}")
        self.print_report(time.monotonic() - began, failed)
        return 0 if failed is None else 1

    def print_report(self, seconds: float, failed: str | None) -> None:
        if self.args.format == "json":
            print(
                json.dumps(
                    {
                        "ok": failed is None,
                        "error": failed,
                        "seconds": round(seconds, 3),
                        "nodes": [r.to_json() for r in self.reports],
                    },
                    indent=2,
                )
            )
            return
        lines = []
        for r in self.reports:
            total = sum(s.seconds for s in r.steps)
            lines.append(f"{r.role:<8} {r.name:<12} {'OK' if r.ok else 'FAILED':<7} {total:7.1f}s  {r.uuid}")
            for s in r.steps:
                lines.append(
                    f"    {'ok ' if s.ok else 'ERR'} {s.seconds:6.1f}s  {s.what}"
                    + (f": {s.detail}" if s.detail else "")
                )
        if failed is None:
            lines.append(f"rolling restart done: {len(self.reports)} node(s) restarted in {seconds:.1f}s")
        else:
            lines.append(f"rolling restart FAILED after {seconds:.1f}s: {failed}")
        print("\n".join(lines))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--manifest", required=True, help="the cluster's node manifest (<data-dir>/cluster.json)")
    ap.add_argument("--master-addresses", default=None, help="masters to ask (default: the manifest's)")
    ap.add_argument("--dry-run", action="store_true", help="print the order and steps; change nothing")
    ap.add_argument("--only", choices=("all", "masters", "tservers"), default="all", help="which nodes [all]")
    ap.add_argument("--quiesce-timeout-s", type=float, default=30.0, help="wait for a tserver's leaders to move [30]")
    ap.add_argument("--stop-timeout-s", type=float, default=60.0, help="wait for a node to exit on SIGTERM [60]")
    ap.add_argument("--start-timeout-s", type=float, default=60.0, help="wait for a node to answer once started [60]")
    ap.add_argument(
        "--healthy-timeout-s",
        type=float,
        default=120.0,
        help="wait for the cluster to be healthy after a restart [120]",
    )
    ap.add_argument("--format", choices=("text", "json"), default="text", help="report format [text]")
    add_connection_flags(ap)
    args = ap.parse_args(argv)
    for name in ("quiesce_timeout_s", "stop_timeout_s", "start_timeout_s", "healthy_timeout_s", "timeout_ms"):
        if getattr(args, name) <= 0:
            ap.error(f"--{name.replace('_', '-')} must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        node_manifest.read_manifest(Path(args.manifest))
    except node_manifest.ManifestError as e:
        print(f"rolling_restart: {e}", file=sys.stderr)
        return 2

    async def go() -> int:
        ctx = Context(args)
        try:
            return await RollingRestart(args, Path(args.manifest), ctx).run()
        finally:
            await ctx.close()

    try:
        return asyncio.run(go())
    except (RestartError, KuduBadStatus) as e:
        print(f"rolling_restart: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
