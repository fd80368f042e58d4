"""Network namespaces standing in for separate hosts, for tests of a cluster that spans machines.

``NetnsLab`` (as root) makes one namespace per host, each joined by a veth pair to a bridge in the root
namespace, with an address of its own on a private /24 and a hosts file (``/etc/netns/<ns>/hosts``, which
``ip netns exec`` mounts over ``/etc/hosts``) naming every host, so that nodes reach each other by name
and never through 127.0.0.1. The root namespace holds the bridge's address and reaches every host by IP.
Everything it made is removed on ``close`` (a context manager's exit), even after a partial set-up.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

NETNS_ETC = Path("/etc/netns")
IP_TIMEOUT_S = 10.0


class NetnsUnavailable(RuntimeError):
    """Namespaces cannot be made here (not root, no ``ip``, or the kernel refuses); the message says why."""


def _ip(*args: str) -> None:
    try:
        done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise NetnsUnavailable("the 'ip' command (iproute2) is not installed") from None
    if done.returncode != 0:
        raise NetnsUnavailable(f"'ip {' '.join(args)}' failed: {done.stderr.strip() or done.returncode}")


@dataclass(frozen=True)
class Host:
    """One namespace: its name, the host name the others know it by, and its address."""

    netns: str
    hostname: str
    address: str


@dataclass
class NetnsLab:
    """``hostnames``: one namespace each, in order, at ``10.231.<subnet>.<11 + i>``; the root namespace's
    bridge is ``.1``. ``subnet`` defaults to one derived from the pid, so that two runs on one machine do
    not share addresses; names carry the pid for the same reason."""

    hostnames: list[str]
    subnet: int = field(default_factory=lambda: 1 + os.getpid() % 250)
    hosts: list[Host] = field(default_factory=list)
    _tag: str = field(default_factory=lambda: str(os.getpid()))
    _made_netns: list[str] = field(default_factory=list)
    _made_links: list[str] = field(default_factory=list)
    _made_etc: list[Path] = field(default_factory=list)
    _made_etc_root: bool = False

    @property
    def bridge(self) -> str:
        return f"kbr{self._tag}"[:15]

    @property
    def bridge_address(self) -> str:
        return f"10.231.{self.subnet}.1"

    def __enter__(self) -> NetnsLab:
        try:
            self.create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def create(self) -> None:
        if os.geteuid() != 0:
            raise NetnsUnavailable(f"network namespaces need root (this process runs as uid {os.geteuid()})")
        if shutil.which("ip") is None:
            raise NetnsUnavailable("the 'ip' command (iproute2) is not installed")
        prefix = f"10.231.{self.subnet}"
        _ip("link", "add", self.bridge, "type", "bridge")
        self._made_links.append(self.bridge)
        _ip("addr", "add", f"{self.bridge_address}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i, hostname in enumerate(self.hostnames):
            ns = f"kns{self._tag}-{i}"
            outer, inner = f"kv{self._tag}-{i}"[:15], f"kp{self._tag}-{i}"[:15]
            _ip("netns", "add", ns)
            self._made_netns.append(ns)
            _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            self._made_links.append(outer)  # deleting one end deletes its peer
            _ip("link", "set", inner, "netns", ns)
            _ip("link", "set", outer, "master", self.bridge)
            _ip("link", "set", outer, "up")
            address = f"{prefix}.{11 + i}"
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", inner)
            _ip("-n", ns, "link", "set", inner, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            self.hosts.append(Host(ns, hostname, address))
        self._write_hosts_files()

    def _write_hosts_files(self) -> None:
        if not NETNS_ETC.exists():
            NETNS_ETC.mkdir(mode=0o755)
            self._made_etc_root = True
        lines = ["127.0.0.1 localhost", *(f"{h.address} {h.hostname}" for h in self.hosts)]
        for h in self.hosts:
            d = NETNS_ETC / h.netns
            d.mkdir(mode=0o755, exist_ok=True)
            self._made_etc.append(d)
            (d / "hosts").write_text("\n".join(lines) + "\n")

    def close(self) -> None:
        """Remove what was made, in reverse; keeps going past failures so nothing else is left behind."""
        problems: list[str] = []
        for ns in reversed(self._made_netns):
            problems += self._try("netns", "del", ns)
        for link in reversed(self._made_links):
            problems += self._try("link", "del", link)
        for d in self._made_etc:
            shutil.rmtree(d, ignore_errors=True)
        if self._made_etc_root:
            try:
                NETNS_ETC.rmdir()
            except OSError as e:
                problems.append(f"rmdir {NETNS_ETC}: {e}")
        self._made_netns.clear()
        self._made_links.clear()
        self._made_etc.clear()
        self._made_etc_root = False
        if problems:
            raise RuntimeError("network namespace clean-up left: " + "; ".join(problems))

    @staticmethod
    def _try(*args: str) -> list[str]:
        try:
            _ip(*args)
        except NetnsUnavailable as e:
            if "Cannot find device" in str(e) or "No such file" in str(e):
                return []  # gone with its namespace (a veth whose peer was deleted)
            return [str(e)]
        return []

    def exec_prefix(self, host: Host) -> list[str]:
        """The command prefix that runs a program in ``host``'s namespace."""
        return ["ip", "netns", "exec", host.netns]
