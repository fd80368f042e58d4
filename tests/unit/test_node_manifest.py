"""The node manifest tools restart nodes through: its checks, its locked updates, and processes held by pidfd."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kudu_async.testing import node_manifest as nm


def _doc(**node: Any) -> dict[str, Any]:
    entry = {"name": "tserver-0", "role": "tserver", "rpc_address": "h:7050", "pid": 1, "argv": ["kudu-node"], **node}
    return {"version": 1, "master_addresses": "h:7051", "nodes": [entry]}


def test_a_manifest_is_checked_naming_what_is_wrong(tmp_path: Path) -> None:
    path = tmp_path / "cluster.json"
    with pytest.raises(nm.ManifestError, match="no such manifest"):
        nm.read_manifest(path)
    cases = [
        ({"version": 2, "nodes": []}, 'expected a JSON object with "version": 1'),
        ({"version": 1, "nodes": []}, '"nodes" must be a non-empty list'),
        (_doc(role="proxy"), "role must be master or tserver"),
        (_doc(argv=[]), "argv must be a non-empty list of strings"),
        (_doc(pid=-3), "pid must be a non-negative integer"),
        ({"version": 1, "nodes": [{"name": "x"}]}, "nodes\\[0\\] lacks role, rpc_address, pid, argv"),
    ]
    for doc, words in cases:
        path.write_text(json.dumps(doc))
        with pytest.raises(nm.ManifestError, match=words):
            nm.read_manifest(path)
    twice = _doc()
    twice["nodes"].append(dict(twice["nodes"][0]))
    path.write_text(json.dumps(twice))
    with pytest.raises(nm.ManifestError, match="appears twice"):
        nm.read_manifest(path)
    path.write_text("{")
    with pytest.raises(nm.ManifestError, match="cannot read the manifest"):
        nm.read_manifest(path)


def test_update_node_changes_one_entry_under_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "cluster.json"
    nm.rewrite_manifest(path, lambda old: _doc())
    got = nm.update_node(path, "tserver-0", lambda e: e.update(pid=42, restarting_by=7))
    assert (got["pid"], got["restarting_by"]) == (42, 7)
    assert nm.read_manifest(path)["nodes"][0]["pid"] == 42
    with pytest.raises(nm.ManifestError, match="no node named 'nope'"):
        nm.update_node(path, "nope", lambda e: None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cluster.json", "cluster.json.lock"]  # no temp left


def test_an_adopted_process_is_watched_and_signalled_through_its_pidfd() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert nm.process_alive(proc.pid)
        held = nm.AdoptedProcess(proc.pid)
        assert held.alive() and not held.wait(0.05)
        held.send_signal(signal.SIGTERM)
        assert held.wait(10.0) and not held.alive()  # gone (a zombie until reaped counts as gone)
        assert not nm.process_alive(proc.pid)
        held.close()
    finally:
        proc.kill()
        proc.wait()
    assert not nm.process_alive(proc.pid) and not nm.process_alive(0)
