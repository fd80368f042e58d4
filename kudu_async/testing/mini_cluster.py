"""MiniCluster: real multi-process clusters on 127.0.0.1 for tests, benchmarks and the local demo.

Each node is a separate ``kudu-node`` OS process with its own data directory and free loopback ports,
unless a ``NodePlacement`` puts it elsewhere: another loopback address, a wildcard bind with an advertised
name, or a network namespace of its own (``ip netns exec``), as nodes on separate hosts.
The cluster only ever signals the processes it started, by PID, and cleans them up at interpreter exit
too, so a failing test never leaves nodes behind or touches anyone else's processes.

Every node's command line and pid are kept in ``<base_dir>/cluster.json`` (``testing/node_manifest.py``),
so ``scripts/rolling_restart.py`` can restart the nodes of a running MiniCluster from outside; the cluster
takes the nodes it started again back with ``adopt_restarted`` (and signals them through a pidfd).
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kudu_async.testing import node_manifest
from kudu_async.testing.jwks import TestIssuer

_REPO_ROOT = Path(__file__).resolve().parents[2]
_LIVE_CLUSTERS: weakref.WeakSet[MiniCluster] = weakref.WeakSet()
# The cluster's own admin pages over HTTPS: encrypted, not verified (a node presents a self-signed
# certificate until the masters' CA signs one; tests that check the chain fetch /ipki-ca-cert).
_HTTPS = ssl.create_default_context()
_HTTPS.check_hostname = False
_HTTPS.verify_mode = ssl.CERT_NONE


class MiniClusterError(RuntimeError):
    pass


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True)
class NodePlacement:
    """Where a node runs when not on 127.0.0.1. ``address``: the IP this harness reaches the node's admin
    pages at, and the node's own address unless ``advertised`` names it otherwise (a host name, say);
    ``bind``: the host it listens on (default ``address``; ``0.0.0.0`` or ``::`` for every interface);
    ``netns``: the network namespace it runs in (``ip netns exec``, as root; the caller makes it)."""

    address: str
    bind: str = ""
    advertised: str = ""
    netns: str = ""

    @property
    def host(self) -> str:
        """The name the cluster knows the node by."""
        return self.advertised or self.address

    @property
    def bind_host(self) -> str:
        return self.bind or self.address


LOOPBACK = NodePlacement("127.0.0.1")


@dataclass
class NodeProcess:
    """One node of the cluster; keeps its ports, placement and directory across restarts."""

    role: str
    index: int
    data_dir: Path
    rpc_port: int
    http_port: int
    extra_flags: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None
    # The process when another tool (a rolling restart) started it again: not our child.
    adopted: node_manifest.AdoptedProcess | None = None
    uuid: str = ""
    paused: bool = False
    https: bool = False  # the admin server speaks HTTPS (rpc_encryption=required)
    placement: NodePlacement = LOOPBACK

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"

    @property
    def rpc_address(self) -> str:
        """The RPC address the cluster knows the node by (its advertised one)."""
        return _hostport(self.placement.host, self.rpc_port)

    @property
    def http_address(self) -> str:
        """The admin address the node gives others (its advertised one)."""
        return _hostport(self.placement.host, self.http_port)

    @property
    def http_url(self) -> str:
        """Where this harness reaches the admin pages (the placement's IP, which it can route to)."""
        return f"{'https' if self.https else 'http'}://{_hostport(self.placement.address, self.http_port)}"

    def placement_flags(self) -> list[str]:
        """The bind flags, and the advertised ones when the node binds other than what it is known by."""
        p = self.placement
        flags = [
            "--rpc-bind",
            _hostport(p.bind_host, self.rpc_port),
            "--http-bind",
            _hostport(p.bind_host, self.http_port),
        ]
        if p.bind_host != p.host:
            flags += [
                "--rpc-advertised-addresses",
                self.rpc_address,
                "--webserver-advertised-addresses",
                self.http_address,
            ]
        return flags

    @property
    def log_path(self) -> Path:
        return self.data_dir / "node.log"

    @property
    def pid(self) -> int | None:
        if self.adopted is not None:
            return self.adopted.pid
        return self.proc.pid if self.proc is not None else None

    def is_running(self) -> bool:
        if self.adopted is not None:
            return self.adopted.alive()
        return self.proc is not None and self.proc.poll() is None

    def send_signal(self, sig: int) -> None:
        """Signal the node's process if it runs (never a process that took over its pid)."""
        if self.adopted is not None:
            self.adopted.send_signal(sig)
        elif self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait_exit(self, timeout_s: float) -> int | None:
        """Wait for the process to exit: its exit status, None for an adopted one (not our child, its status
        cannot be read); raises subprocess.TimeoutExpired if it still runs after ``timeout_s``."""
        if self.adopted is not None:
            if not self.adopted.wait(timeout_s):
                raise subprocess.TimeoutExpired(str(self.adopted.pid), timeout_s)
            return None
        if self.proc is None:
            return None
        return self.proc.wait(timeout_s)

    def log_tail(self, n: int = 30) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-n:])


class MiniCluster:
    """Start ``num_masters`` masters and ``num_tservers`` tablet servers as real processes."""

    def __init__(  # noqa: PLR0913 - each keyword is a cluster option tests pick one by one
        self,
        num_masters: int = 1,
        num_tservers: int = 3,
        base_dir: str | os.PathLike[str] | None = None,
        extra_flags: Sequence[str] = (),
        master_flags: Sequence[str] = (),
        tserver_flags: Sequence[str] = (),
        start_timeout_s: float = 30.0,
        ports: Sequence[tuple[int, int]] | None = None,
        authz_policy: Mapping[str, Any] | None = None,
        encryption: str | None = None,
        jwks: bool = False,
        secure: bool = False,
        placements: Sequence[NodePlacement] | None = None,
    ) -> None:
        """``ports``, if given, fixes (rpc, http) per node, masters first; otherwise free ports are picked.
        ``authz_policy`` (the map a policy file holds, see ``security/authz_policy.py``) is written to
        ``authz_policy_path`` and given to the masters as ``--authz-policy-file``; edit that file to change
        the policy of the running cluster. ``encryption`` sets every node's --rpc-encryption ("required": TLS
        on every connection, loopback too, certificates from the masters' CA, admin pages over HTTPS); None
        leaves the nodes' default.

        ``jwks``: JWT authentication on every node, with a JWKS holding a signing key made here (see
        ``mint_jwt``) and a service JWT for the servers' own calls; add ``--rpc-authentication=required``
        to ``extra_flags`` to refuse callers without credentials.

        ``secure``: everything at once, as a production cluster runs: TLS required on every connection
        (node certificates from the masters' CA, which the servers' service JWT entitles them to),
        authentication required (JWTs from ``mint_jwt``, then authn tokens; the admin pages too, which
        ``http_get`` reaches as ``admin``, the superuser), and with ``authz_policy`` the tablet servers
        enforce the authz tokens of every write and scan.

        ``placements``, if given, places each node (masters first; see ``NodePlacement``), e.g. bound to
        0.0.0.0 and advertised at 127.0.0.2, or in a network namespace of its own; otherwise every node
        listens on 127.0.0.1. Free ports are then picked on every interface (namespaced nodes may be given
        fixed ``ports`` instead: each namespace has ports of its own)."""
        if secure:
            encryption = "required"
            jwks = True
            extra_flags = ["--rpc-authentication=required", "--superuser-acl=admin", *extra_flags]
            if authz_policy is not None:
                tserver_flags = ["--tserver-enforce-access-control=true", *tserver_flags]
        self.secure = secure
        if encryption is not None and encryption not in ("disabled", "optional", "required"):
            raise ValueError(f"encryption must be disabled, optional or required, got {encryption!r}")
        self.encryption = encryption
        if encryption is not None:
            extra_flags = ["--rpc-encryption", encryption, *extra_flags]
        if num_masters not in (1, 3, 5):
            raise ValueError(f"num_masters must be 1, 3 or 5, got {num_masters}")
        if num_tservers < 0:
            raise ValueError(f"num_tservers must be >= 0, got {num_tservers}")
        self.base_dir = Path(base_dir) if base_dir is not None else Path(tempfile.mkdtemp(prefix="kudu-mini-"))
        self.base_dir.mkdir(parents=True, exist_ok=True)
        # (user, password) for the admin pages of nodes started with --webserver-password-file.
        self.http_auth: tuple[str, str] | None = None
        self.authz_policy_path: Path | None = None
        if authz_policy is not None:
            self.authz_policy_path = self.base_dir / "authz-policy.json"
            self.authz_policy_path.write_text(json.dumps(authz_policy, indent=1))
            master_flags = [*master_flags, f"--authz-policy-file={self.authz_policy_path}"]
        self.jwt_issuer: TestIssuer | None = None
        if jwks:
            self.jwt_issuer = TestIssuer()
            extra_flags = [*self._jwks_flags(self.jwt_issuer), *extra_flags]
        self._tserver_flags = [*extra_flags, *tserver_flags]
        self.start_timeout_s = start_timeout_s
        if ports is not None and len(ports) != num_masters + num_tservers:
            raise ValueError(f"ports: need {num_masters + num_tservers} (rpc, http) pairs, got {len(ports)}")
        if placements is not None and len(placements) != num_masters + num_tservers:
            raise ValueError(f"placements: need {num_masters + num_tservers}, got {len(placements)}")
        where = list(placements) if placements is not None else [LOOPBACK] * (num_masters + num_tservers)
        # Ports free on every interface when a node binds beyond 127.0.0.1.
        self._port_host = "127.0.0.1" if placements is None else "0.0.0.0"
        self._used_ports: set[int] = {p for pair in ports for p in pair} if ports is not None else set()
        fixed = iter(p for pair in ports for p in pair) if ports is not None else None

        def port() -> int:
            return next(fixed) if fixed is not None else self._fresh_port()

        https = encryption == "required"
        self.masters = [
            NodeProcess(
                "master",
                i,
                self.base_dir / f"master-{i}",
                port(),
                port(),
                [*extra_flags, *master_flags],
                https=https,
                placement=where[i],
            )
            for i in range(num_masters)
        ]
        self.tservers = [
            NodeProcess(
                "tserver",
                i,
                self.base_dir / f"tserver-{i}",
                port(),
                port(),
                list(self._tserver_flags),
                https=https,
                placement=where[num_masters + i],
            )
            for i in range(num_tservers)
        ]
        _LIVE_CLUSTERS.add(self)

    # --- JWT authentication ---------------------------------------------------------------------------

    def _jwks_flags(self, issuer: TestIssuer) -> list[str]:
        jwks_path = self.base_dir / "jwks.json"
        jwks_path.write_bytes(issuer.jwks())
        service_jwt = self.base_dir / "service.jwt"
        service_jwt.write_text(issuer.mint("kudu", ttl_s=30 * 86_400.0) + "\n")
        return [
            "--enable-jwt-token-auth=true",
            f"--jwks-file-path={jwks_path}",
            f"--jwt-issuer={issuer.issuer}",
            f"--jwt-audience={issuer.audience}",
            f"--service-jwt-file={service_jwt}",
        ]

    def mint_jwt(self, user: str, ttl_s: float = 3600.0, **claims: Any) -> str:
        """A JWT for ``user`` the cluster's nodes accept (``claims`` add or override: ``iss="x"``, ``aud=None``)."""
        if self.jwt_issuer is None:
            raise MiniClusterError("this cluster was started without jwks=True: it has no JWT signing key")
        return self.jwt_issuer.mint(user, ttl_s=ttl_s, **claims)

    # --- addresses ------------------------------------------------------------------------------------

    @property
    def nodes(self) -> list[NodeProcess]:
        return [*self.masters, *self.tservers]

    @property
    def master_addresses(self) -> str:
        return ",".join(m.rpc_address for m in self.masters)

    def node(self, name: str) -> NodeProcess:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"no node named {name!r}; have {[n.name for n in self.nodes]}")

    # --- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> MiniCluster:
        """Start every node and wait until each one answers /healthz."""
        try:
            for n in self.nodes:
                self._spawn(n)
            for n in self.nodes:
                self.wait_healthy(n)
        except BaseException:
            self.shutdown()
            raise
        return self

    def add_tserver(
        self, extra_flags: Sequence[str] = (), wait: bool = True, placement: NodePlacement = LOOPBACK
    ) -> NodeProcess:
        """Start one more tablet server (the next index, fresh ports and data directory, the cluster's
        tserver flags plus ``extra_flags``, at ``placement``), as an operator adds a machine to a running
        cluster. It registers with the masters by its own heartbeats; callers wait for that if they need it."""
        index = max((t.index for t in self.tservers), default=-1) + 1
        n = NodeProcess(
            "tserver",
            index,
            self.base_dir / f"tserver-{index}",
            self._fresh_port(),
            self._fresh_port(),
            [*self._tserver_flags, *extra_flags],
            https=self.encryption == "required",
            placement=placement,
        )
        self.tservers.append(n)
        self._spawn(n)
        if wait:
            self.wait_healthy(n)
        return n

    def plan_masters(self, count: int) -> list[NodeProcess]:
        """Make ``count`` more masters (next indexes, fresh ports and data directories) part of the cluster,
        not started: ``master_addresses`` names them from now on, so each starts (``restart_node``) with the
        full list as ``kudu master add`` wants, and joins once that verb adds it."""
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        extra = list(self.masters[0].extra_flags) if self.masters else []
        planned = []
        for _ in range(count):
            index = max((m.index for m in self.masters), default=-1) + 1
            n = NodeProcess(
                "master",
                index,
                self.base_dir / f"master-{index}",
                self._fresh_port(),
                self._fresh_port(),
                list(extra),
                https=self.encryption == "required",
            )
            self.masters.append(n)
            planned.append(n)
        return planned

    def _fresh_port(self) -> int:
        """A free loopback port no node of this cluster was given."""
        while True:
            p = free_port(self._port_host)
            if p not in self._used_ports:
                self._used_ports.add(p)
                return p

    def __enter__(self) -> MiniCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _command(self, n: NodeProcess) -> list[str]:
        # ``ip netns exec`` enters the namespace and execs the node: the pid stays the node's own.
        netns = ["ip", "netns", "exec", n.placement.netns] if n.placement.netns else []
        return [
            *netns,
            # -P: not the caller's working directory first on sys.path, so the node runs the code of
            # this MiniCluster's repository (on PYTHONPATH), never another checkout the caller sits in.
            sys.executable,
            "-P",
            "-m",
            "kudu_async.server.main",
            "--role",
            n.role,
            "--data-dir",
            str(n.data_dir),
            *n.placement_flags(),
            "--master-addresses",
            self.master_addresses,
            "--node-name",
            n.name,
            "--log-file",
            str(n.log_path),
            # Nodes stop with the test process, even one killed by a timeout that runs no clean-up.
            "--exit-with-parent-pid",
            str(os.getpid()),
            *n.extra_flags,
        ]

    def _node_env(self) -> dict[str, str]:
        """What a node's environment adds to the caller's: this repository first on the path."""
        path = os.pathsep.join(p for p in (str(_REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
        return {"PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}

    def _spawn(self, n: NodeProcess) -> None:
        if n.is_running():
            raise MiniClusterError(f"{n.name} is already running (pid {n.pid})")
        n.data_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self._node_env()}
        stderr_path = n.data_dir / "stderr.log"
        with stderr_path.open("ab") as err:
            n.proc = subprocess.Popen(
                self._command(n),
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
                env=env,
                start_new_session=True,  # a terminal's Ctrl-C reaches us, not the nodes directly
            )
        if n.adopted is not None:
            n.adopted.close()
            n.adopted = None
        n.paused = False
        self.write_manifest()

    # --- the node manifest (for tools that restart nodes from outside) ----------------------------------

    @property
    def manifest_path(self) -> Path:
        return self.base_dir / node_manifest.MANIFEST_NAME

    def write_manifest(self) -> None:
        """Every node's command line, environment and pid in ``manifest_path``. A node whose process here
        is not running keeps the pid (and restart mark) a rolling restart wrote for it."""
        env = self._node_env()

        def make(old: dict[str, Any] | None) -> dict[str, Any]:
            theirs = {e["name"]: e for e in old["nodes"]} if old is not None else {}
            nodes = []
            for n in self.nodes:
                entry: dict[str, Any] = {
                    "name": n.name,
                    "role": n.role,
                    "uuid": n.uuid,
                    "rpc_address": n.rpc_address,
                    "http_address": n.http_url,
                    "data_dir": str(n.data_dir),
                    "log": str(n.log_path),
                    "stderr": str(n.data_dir / "stderr.log"),
                    "pid": n.pid or 0,
                    "argv": self._command(n),
                    "env": env,
                }
                other = theirs.get(n.name)
                if other is not None and not n.is_running():
                    entry["pid"] = other["pid"]
                    if "restarting_by" in other:
                        entry["restarting_by"] = other["restarting_by"]
                nodes.append(entry)
            return {
                "version": node_manifest.MANIFEST_VERSION,
                "master_addresses": self.master_addresses,
                "owner_pid": os.getpid(),
                "nodes": nodes,
            }

        node_manifest.rewrite_manifest(self.manifest_path, make)

    def adopt_restarted(self) -> set[str]:
        """Take back the nodes another tool started again (their pid in the manifest is not ours); the names
        of those being restarted right now (their old process may be gone, the new one not started yet)."""
        if not self.manifest_path.exists():
            return set()
        restarting = set()
        for entry in node_manifest.read_manifest(self.manifest_path)["nodes"]:
            try:
                n = self.node(entry["name"])
            except KeyError:
                continue
            by = entry.get("restarting_by")
            if isinstance(by, int) and by != os.getpid() and node_manifest.process_alive(by):
                restarting.add(n.name)
                continue
            pid = entry["pid"]
            if pid and pid != n.pid and node_manifest.process_alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    adopted = node_manifest.AdoptedProcess(pid)
                    if n.adopted is not None:
                        n.adopted.close()
                    n.adopted = adopted
                    n.paused = False
        return restarting

    def wait_healthy(self, n: NodeProcess, timeout_s: float | None = None) -> None:
        deadline = time.monotonic() + (timeout_s or self.start_timeout_s)
        while time.monotonic() < deadline:
            if (n.proc is not None or n.adopted is not None) and not n.is_running():
                code = n.proc.returncode if n.adopted is None and n.proc is not None else "unknown"
                raise MiniClusterError(
                    f"{n.name} exited with code {code} while starting.\n"
                    f"stderr: {self._stderr_tail(n)}\nlog:\n{n.log_tail()}"
                )
            try:
                with urllib.request.urlopen(
                    self._http_request(f"{n.http_url}/api/v1/status"), timeout=1.0, context=_HTTPS
                ) as resp:
                    uuid = json.loads(resp.read())["uuid"]
                    if uuid != n.uuid:
                        n.uuid = uuid
                        self.write_manifest()
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError, KeyError):
                time.sleep(0.05)
        raise MiniClusterError(f"{n.name} not healthy after {timeout_s or self.start_timeout_s}s:\n{n.log_tail()}")

    @staticmethod
    def _stderr_tail(n: NodeProcess) -> str:
        try:
            return (n.data_dir / "stderr.log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def stop_node(self, n: NodeProcess | str, timeout_s: float = 10.0) -> int | None:
        """SIGTERM and wait for a clean exit; returns the exit code (None for a node another tool started
        again, whose code cannot be read; kill -9 after the timeout)."""
        n = self._resolve(n)
        if not n.is_running():
            return n.proc.returncode if n.adopted is None and n.proc is not None else None
        if n.paused:
            self.resume_node(n)
        n.send_signal(signal.SIGTERM)
        try:
            return n.wait_exit(timeout_s)
        except subprocess.TimeoutExpired:
            n.send_signal(signal.SIGKILL)
            n.wait_exit(timeout_s)
            raise MiniClusterError(f"{n.name} did not stop within {timeout_s}s of SIGTERM; killed") from None

    def kill_node(self, n: NodeProcess | str) -> None:
        """kill -9: the node gets no chance to flush or sync anything."""
        n = self._resolve(n)
        if n.is_running():
            n.send_signal(signal.SIGKILL)
            n.wait_exit(30.0)
        n.paused = False

    def restart_node(self, n: NodeProcess | str, wait: bool = True) -> None:
        """Start a stopped or killed node again with the same ports and data directory."""
        n = self._resolve(n)
        if n.is_running():
            self.stop_node(n)
        self._spawn(n)
        if wait:
            self.wait_healthy(n)

    def pause_node(self, n: NodeProcess | str) -> None:
        n = self._resolve(n)
        if n.is_running():
            n.send_signal(signal.SIGSTOP)
            n.paused = True

    def resume_node(self, n: NodeProcess | str) -> None:
        n = self._resolve(n)
        n.send_signal(signal.SIGCONT)
        n.paused = False

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Stop every node this cluster started (SIGINT, then SIGKILL for stragglers).

        SIGINT, not SIGTERM: on SIGTERM a tserver first hands its leaderships to its peers, which cannot
        take them while they stop too; ``stop_node`` keeps SIGTERM's graceful stop."""
        with contextlib.suppress(node_manifest.ManifestError):
            self.adopt_restarted()  # nodes a rolling restart started again are ours to stop too
        running = [n for n in self.nodes if n.is_running()]
        for n in running:
            if n.paused:
                n.send_signal(signal.SIGCONT)
                n.paused = False
            n.send_signal(signal.SIGINT)
        deadline = time.monotonic() + timeout_s
        for n in running:
            try:
                n.wait_exit(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                n.send_signal(signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    n.wait_exit(10.0)
        _LIVE_CLUSTERS.discard(self)

    def _resolve(self, n: NodeProcess | str) -> NodeProcess:
        return self.node(n) if isinstance(n, str) else n

    # --- helpers for tests and scripts ---------------------------------------------------------------

    def _http_request(self, url: str) -> urllib.request.Request:
        """A GET of an admin page, with ``http_auth``'s basic credentials when the nodes need them."""
        headers = {}
        if self.http_auth is not None:
            user, password = self.http_auth
            headers["authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        elif self.jwt_issuer is not None:  # a JWT: pages need a user when authentication is required
            headers["authorization"] = "Bearer " + self.mint_jwt("admin", ttl_s=300.0)
        return urllib.request.Request(url, headers=headers)

    def http_get(self, n: NodeProcess | str, path: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
        n = self._resolve(n)
        try:
            with urllib.request.urlopen(
                self._http_request(f"{n.http_url}{path}"), timeout=timeout_s, context=_HTTPS
            ) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def http_json(self, n: NodeProcess | str, path: str) -> Any:
        status, body = self.http_get(n, path)
        if status != 200:
            raise MiniClusterError(f"GET {path} on {self._resolve(n).name}: HTTP {status}: {body[:300]!r}")
        return json.loads(body)

    def tserver_metric_totals(self, names: Sequence[str], entity_type: str = "tablet") -> dict[str, int]:
        """Each named counter summed over every entity of ``entity_type`` on every tserver (``/metrics``)."""
        out = dict.fromkeys(names, 0)
        query = "/metrics?metrics=" + ",".join(names) + f"&types={entity_type}"
        for ts in self.tservers:
            for ent in self.http_json(ts, query):
                for m in ent["metrics"]:
                    if m["name"] in out:
                        out[m["name"]] += int(m["value"])
        return out

    def describe(self) -> Iterator[str]:
        for n in self.nodes:
            yield (f"{n.name:<10} uuid={n.uuid} rpc={n.rpc_address} http={n.http_url} pid={n.pid} data={n.data_dir}")


@atexit.register
def _shutdown_live_clusters() -> None:
    for c in list(_LIVE_CLUSTERS):
        with contextlib.suppress(Exception):
            c.shutdown(timeout_s=5.0)
