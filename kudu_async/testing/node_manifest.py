"""A cluster's node manifest: what it takes to stop and start each node again, for tools outside the process
that started the cluster (``scripts/rolling_restart.py``).

``MiniCluster`` (and so ``scripts/local_cluster.py``) writes ``<base_dir>/cluster.json`` whenever it starts
a node. An operator whose nodes run otherwise writes the same file by hand (or from their supervisor)::

    {"version": 1,
     "master_addresses": "host1:7051,host2:7051,host3:7051",
     "nodes": [{"name": "tserver-0", "role": "tserver", "rpc_address": "host4:7050",
                "pid": 4242, "argv": ["kudu-node", "--role", "tserver", ...],
                "env": {"PYTHONPATH": "/opt/kudu_async"}, "stderr": "/data/ts0/stderr.log"}, ...]}

``argv`` and ``env`` (added to the environment the restarting tool runs in) start the node again with the
same data directory and addresses; ``pid`` is the running process. While a tool restarts a node it sets the
node's ``restarting_by`` to its own pid (cleared when the new ``pid`` is written), so the cluster's owner
does not take the short absence for a crash. Every change is a read-modify-write under an exclusive
``flock`` on ``cluster.json.lock``, written to a temporary file and renamed, so a reader never sees half.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

MANIFEST_NAME = "cluster.json"
MANIFEST_VERSION = 1
REQUIRED_NODE_KEYS = ("name", "role", "rpc_address", "pid", "argv")


class ManifestError(ValueError):
    """The manifest is missing, unreadable or malformed; the message names the file and what is wrong."""


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest at ``path``, checked: every node names its role, address, pid and command line."""
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ManifestError(f"{path}: no such manifest") from None
    except (OSError, ValueError) as e:
        raise ManifestError(f"{path}: cannot read the manifest: {e}") from None
    if not isinstance(doc, dict) or doc.get("version") != MANIFEST_VERSION:
        raise ManifestError(f'{path}: expected a JSON object with "version": {MANIFEST_VERSION}')
    nodes = doc.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        raise ManifestError(f'{path}: "nodes" must be a non-empty list')
    names = set()
    for i, n in enumerate(nodes):
        if not isinstance(n, dict):
            raise ManifestError(f"{path}: nodes[{i}] is not an object")
        missing = [k for k in REQUIRED_NODE_KEYS if k not in n]
        if missing:
            raise ManifestError(f"{path}: nodes[{i}] lacks {', '.join(missing)}")
        if n["role"] not in ("master", "tserver"):
            raise ManifestError(f"{path}: nodes[{i}] ({n['name']}): role must be master or tserver")
        if not isinstance(n["argv"], list) or not n["argv"] or not all(isinstance(a, str) for a in n["argv"]):
            raise ManifestError(f"{path}: nodes[{i}] ({n['name']}): argv must be a non-empty list of strings")
        if not isinstance(n["pid"], int) or n["pid"] < 0:
            raise ManifestError(f"{path}: nodes[{i}] ({n['name']}): pid must be a non-negative integer")
        if n["name"] in names:
            raise ManifestError(f"{path}: node name {n['name']!r} appears twice")
        names.add(n["name"])
    return doc


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _write(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def rewrite_manifest(path: Path, make: Callable[[dict[str, Any] | None], dict[str, Any]]) -> None:
    """Write the whole manifest ``make`` returns from the current one (None if there is none or it is bad),
    under the lock: the cluster's owner, when it starts a node, keeps what a restarting tool wrote."""
    with _locked(path):
        try:
            old: dict[str, Any] | None = read_manifest(path)
        except ManifestError:
            old = None
        _write(path, make(old))


def update_node(path: Path, name: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Apply ``change`` to node ``name``'s entry under the lock; the entry as written."""
    with _locked(path):
        doc = read_manifest(path)
        for n in doc["nodes"]:
            if n["name"] == name:
                change(n)
                _write(path, doc)
                return dict(n)
    raise ManifestError(f"{path}: no node named {name!r}")


def process_alive(pid: int) -> bool:
    """Whether ``pid`` names a process that has not exited (a zombie counts as exited)."""
    if pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


class AdoptedProcess:
    """A node process this process did not start (a rolling restart started it again). Held through a pidfd,
    so a signal never reaches another process that reuses the pid. Its exit status cannot be read (it is
    not our child): ``wait`` says only whether it is gone."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._fd = os.pidfd_open(pid)  # ProcessLookupError if it is already gone

    def alive(self) -> bool:
        return not select.select([self._fd], [], [], 0)[0]

    def wait(self, timeout_s: float) -> bool:
        """True once the process has exited, False if it still runs after ``timeout_s``."""
        return bool(select.select([self._fd], [], [], max(0.0, timeout_s))[0])

    def send_signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self._fd, sig)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        with contextlib.suppress(OSError):
            self.close()
