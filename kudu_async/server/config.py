"""Node flags: one table of definitions, read from the command line, the environment and a TOML file.

Precedence, highest first: command line, environment (``KUDU_<FLAG>``), TOML file (``--config``),
defaults. Every bad value is reported naming the flag, where it came from and what was wrong, so an
operator never has to guess which of the three sources to fix.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kudu_async.common.errors import KuduConfigurationError, KuduIllegalState, KuduInvalidArgument, KuduNotFound
from kudu_async.security.acl import Acl
from kudu_async.security.ca import DEFAULT_CA_VALIDITY_S, DEFAULT_RENEW_BEFORE_S, DEFAULT_SERVER_VALIDITY_S
from kudu_async.security.tls import DEFAULT_CIPHERS, ENCRYPTION_MODES, TLS_VERSIONS

ROLES = ("master", "tserver")
DEFAULT_RPC_PORT = {"master": 7051, "tserver": 7050}
DEFAULT_HTTP_PORT = {"master": 8051, "tserver": 8050}
ENV_PREFIX = "KUDU_"

# Kudu's flag tags that matter here. ``runtime``: the running node re-reads the flag (or is told of a new
# value), so ``Generic/SetFlag`` may change it; ``unsafe``: for tests or emergencies only.
RUNTIME = "runtime"
UNSAFE = "unsafe"
FLAG_TAGS = (RUNTIME, UNSAFE)

log = logging.getLogger(__name__)


def parse_hostport(text: str, default_port: int | None = None) -> tuple[str, int]:
    """Parse ``host:port`` (or ``[v6]:port``); ``default_port`` fills a bare host."""
    text = text.strip()
    if not text:
        raise ValueError("empty address")
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep:
            raise ValueError(f"unterminated '[' in {text!r}")
        if rest and not rest.startswith(":"):
            raise ValueError(f"unexpected {rest!r} after ']' in {text!r}")
        if not _is_ipv6(host):
            raise ValueError(f"{host!r} is neither an IP address nor a host name (brackets hold an IPv6 address)")
        port_text = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    elif ":" in text:
        raise ValueError(f"IPv6 address must be bracketed: {text!r}")
    else:
        host, port_text = text, ""
    if not host:
        raise ValueError(f"missing host in {text!r}")
    if not port_text:
        if default_port is None:
            raise ValueError(f"missing port in {text!r}")
        return host, default_port
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"bad port {port_text!r} in {text!r} (expected 0-65535)")
    return host, int(port_text)


def _is_ipv6(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).version == 6
    except ValueError:
        return False


def format_hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# A DNS name: dot-separated labels of letters, digits, '-' and '_' (container runtimes use '_' in names).
_HOSTNAME_RE = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9_-]{1,63}(?<!-))*\.?")


def check_host(host: str) -> None:
    """Raise ValueError unless ``host`` is an IP literal or a DNS name."""
    try:
        ipaddress.ip_address(host)
        return
    except ValueError:
        pass
    if len(host) > 253 or not _HOSTNAME_RE.fullmatch(host):
        raise ValueError(f"{host!r} is neither an IP address nor a host name")


def is_wildcard(host: str) -> bool:
    """Whether ``host`` (bare or bracketed) is an any-address (0.0.0.0, ::): bindable, never reachable."""
    host = host.strip("[]")
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return not host


def parse_bind_address(text: str) -> tuple[str, int]:
    """A bind flag's ``host:port``: an IP (``0.0.0.0`` or ``[::]`` for every interface) or a host name."""
    host, port = parse_hostport(text)
    check_host(host)
    return host, port


def parse_advertised_addresses(text: str) -> list[tuple[str, int | None]]:
    """An ``--*-advertised-addresses`` list: comma-separated ``host[:port]``, no wildcard, no port 0, no
    repeats; a missing port is None (the node fills in the port it bound)."""
    out: list[tuple[str, int | None]] = []
    for part in text.split(","):
        if not part.strip():
            raise ValueError(f"empty entry in {text!r}")
        host, port = parse_hostport(part, -1)
        check_host(host)
        if is_wildcard(host):
            raise ValueError(f"{part.strip()!r} is a wildcard: advertise an address other hosts can reach")
        if port == 0:
            raise ValueError(f"{part.strip()!r}: port 0 cannot be advertised")
        entry = (host, None if port < 0 else port)
        if entry in out:
            raise ValueError(f"{part.strip()!r} is listed twice")
        out.append(entry)
    return out


def advertised_addresses(flag: str, bound_host: str, bound_port: int, fqdn: str | None) -> list[str]:
    """The ``host:port`` list a node bound at ``bound_host:bound_port`` gives others, the one that names it
    first: the advertised-addresses ``flag`` (a host without a port takes the bound port), else the bound
    address, else (bound to a wildcard) ``fqdn``, the machine's name, as Kudu does."""
    if flag:
        return [format_hostport(h, bound_port if p is None else p) for h, p in parse_advertised_addresses(flag)]
    if not is_wildcard(bound_host):
        return [format_hostport(bound_host, bound_port)]
    if not fqdn:
        raise ValueError(f"bound to the wildcard {bound_host!r} and no host name to advertise instead")
    return [format_hostport(fqdn, bound_port)]


def _to_int(v: Any) -> int:
    if isinstance(v, bool):
        raise ValueError("expected an integer, got a boolean")
    if isinstance(v, int):
        return v
    return int(str(v).strip(), 10)


def _to_float(v: Any) -> float:
    if isinstance(v, bool):
        raise ValueError("expected a number, got a boolean")
    return float(v)


def _to_bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("1", "true", "yes", "on"):
        return True
    if s in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true or false")


def _to_str(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError(f"expected a string, got {type(v).__name__}")
    return v


@dataclass(frozen=True)
class Flag:
    """One node flag. ``name`` uses underscores; the command line spells it with dashes."""

    name: str
    kind: Callable[[Any], Any]
    default: Any
    help: str
    check: Callable[[Any], str | None] | None = None
    choices: tuple[str, ...] | None = None
    tags: frozenset[str] = frozenset()

    @property
    def runtime(self) -> bool:
        return RUNTIME in self.tags

    @property
    def cli(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    def convert(self, raw: Any, source: str) -> Any:
        try:
            value = self.kind(raw)
        except (TypeError, ValueError) as e:
            raise KuduConfigurationError(f"{self.cli} ({source}): bad value {raw!r}: {e}") from None
        if self.choices is not None and value not in self.choices:
            raise KuduConfigurationError(
                f"{self.cli} ({source}): bad value {raw!r}: expected one of {', '.join(self.choices)}"
            )
        if self.check is not None:
            problem = self.check(value)
            if problem:
                raise KuduConfigurationError(f"{self.cli} ({source}): bad value {raw!r}: {problem}")
        return value


_RT = frozenset({RUNTIME})
_UNSAFE = frozenset({UNSAFE})


def _positive(v: float) -> str | None:
    return None if v > 0 else "must be > 0"


def _limit(v: float) -> str | None:
    return None if v >= -1 else "must be -1 (no limit) or at least 0"


def _ratio(v: float) -> str | None:
    return None if 0 < v <= 1 else "must be in (0, 1]"


def _non_negative(v: float) -> str | None:
    return None if v >= 0 else "must be >= 0"


def _percentage(v: float) -> str | None:
    return None if 0 < v <= 100 else "must be a percentage in (0, 100]"


# Kudu's compaction_minimum_improvement: the tablet's compaction policy merges nothing that lowers the
# average rowset height by less (kudu_async.tablet.compaction_policy.MIN_IMPROVEMENT, which server cannot
# import).
COMPACTION_MINIMUM_IMPROVEMENT = 0.01


def _small_rowset_tradeoff(v: float) -> str | None:
    if 0 <= v < COMPACTION_MINIMUM_IMPROVEMENT:
        return None
    return f"must be >= 0 and below the compaction minimum improvement {COMPACTION_MINIMUM_IMPROVEMENT:g}"


def _nice(v: int) -> str | None:
    return None if 0 <= v <= 19 else "must be in [0, 19]"


def _at_least_minus_one(v: int) -> str | None:
    return None if v >= -1 else "must be >= 0, or -1 for the default"


def _bind_or_empty(v: str) -> str | None:
    if not v:
        return None
    try:
        parse_bind_address(v)
    except ValueError as e:
        return str(e)
    return None


def _advertised_or_empty(v: str) -> str | None:
    if not v:
        return None
    try:
        parse_advertised_addresses(v)
    except ValueError as e:
        return str(e)
    return None


def _acl(v: str) -> str | None:
    try:
        Acl.parse(v)
    except KuduInvalidArgument as e:
        return e.message
    return None


def _service_acl(v: str) -> str | None:
    problem = _acl(v)
    if problem is None and (not v.strip() or Acl.parse(v).everyone):
        return "name the service user(s); '*' is not allowed"
    return problem


def _master_list(v: str) -> str | None:
    try:
        addrs = parse_master_addresses(v)
    except ValueError as e:
        return str(e)
    if len(addrs) not in (1, 3, 5):
        return f"expected 1, 3 or 5 masters, got {len(addrs)}"
    return None


def parse_master_addresses(text: str) -> list[str]:
    """Comma-separated ``host[:port]`` list; a bare host gets the master default port."""
    out = []
    for part in text.split(","):
        if not part.strip():
            raise ValueError(f"empty entry in master list {text!r}")
        host, port = parse_hostport(part, DEFAULT_RPC_PORT["master"])
        check_host(host)
        if is_wildcard(host):
            raise ValueError(f"{part.strip()!r} is a wildcard, not an address a master can be reached at")
        out.append(format_hostport(host, port))
    if len(set(out)) != len(out):
        raise ValueError(f"duplicate address in master list {text!r}")
    return out


FLAGS: tuple[Flag, ...] = (
    Flag("role", _to_str, None, "Node role: master or tserver (required).", choices=ROLES),
    Flag("data_dir", _to_str, None, "Directory for this node's instance file, WALs and data (required)."),
    Flag(
        "rpc_bind",
        _to_str,
        "",
        "RPC address host:port to listen on: an IP, a host name, or 0.0.0.0 / [::] for every interface ([::] "
        "takes IPv4 too). Default 127.0.0.1:7051 master, :7050 tserver: reachable from this machine only "
        "until set, unlike Kudu's 0.0.0.0; a node bound to a wildcard names itself by "
        "--rpc-advertised-addresses.",
        check=_bind_or_empty,
    ),
    Flag(
        "http_bind",
        _to_str,
        "",
        "Admin HTTP address host:port to listen on, as --rpc-bind (Kudu's --webserver-interface and "
        "--webserver-port in one). Default 127.0.0.1:8051 master, :8050 tserver.",
        check=_bind_or_empty,
    ),
    Flag(
        "rpc_advertised_addresses",
        _to_str,
        "",
        "Comma-separated host[:port] list this node gives masters, peers and clients as its RPC address (Kudu's "
        "flag), for a node behind NAT, in a container, or bound to a wildcard. The first names the node "
        "everywhere (registration, Raft configs, the master list, table locations, status pages); all go in "
        "its certificate's names. A host without a port takes the bound port. Default empty: the --rpc-bind "
        "address, or when that is a wildcard the machine's fully qualified name, as Kudu (a name other hosts "
        "resolve on a well-run network or a compose network; a node that finds only a loopback name logs a "
        "warning naming this flag).",
        check=_advertised_or_empty,
    ),
    Flag(
        "webserver_advertised_addresses",
        _to_str,
        "",
        "Comma-separated host[:port] list this node gives others as its admin HTTP address (Kudu's flag; the "
        "first is the one the masters list and pages link to), as --rpc-advertised-addresses. Default empty: "
        "the --http-bind address, or the machine's fully qualified name when that is a wildcard.",
        check=_advertised_or_empty,
    ),
    Flag(
        "master_addresses",
        _to_str,
        "127.0.0.1:7051",
        "Comma-separated RPC addresses of all masters.",
        check=_master_list,
    ),
    Flag("node_name", _to_str, "", "Name used in logs and fault-injection rules (default: the uuid)."),
    Flag("log_level", _to_str, "INFO", "Logging level.", choices=("DEBUG", "INFO", "WARNING", "ERROR"), tags=_RT),
    Flag("log_file", _to_str, "", "Write logs here instead of stderr."),
    Flag("rpc_max_message_bytes", _to_int, 64 * 1024 * 1024, "Largest RPC body accepted or sent.", check=_positive),
    Flag(
        "rpc_service_queue_length",
        _to_int,
        1000,
        "Calls in flight per service before new ones get SERVICE_UNAVAILABLE.",
        check=_positive,
    ),
    Flag(
        "rpc_encryption",
        _to_str,
        "optional",
        "RPC encryption (TLS, ALPN h2): disabled = cleartext only; optional = TLS when the peer asks for it "
        "(this node encrypts its own remote connections; loopback ones per rpc_encrypt_loopback_connections); "
        "required = TLS on every connection, loopback too, cleartext clients refused. Kudu's default.",
        choices=ENCRYPTION_MODES,
    ),
    Flag(
        "rpc_encrypt_loopback_connections",
        _to_bool,
        False,
        "Encrypt this node's own connections to loopback peers under rpc_encryption=optional (false as Kudu: "
        "only a local root could read them).",
    ),
    Flag(
        "rpc_tls_min_protocol",
        _to_str,
        "TLSv1.2",
        "Oldest TLS version accepted or offered, TLSv1.2 or TLSv1.3 (Kudu's default TLSv1.2).",
        choices=tuple(TLS_VERSIONS),
    ),
    Flag(
        "rpc_tls_ciphers",
        _to_str,
        DEFAULT_CIPHERS,
        "OpenSSL cipher list for TLS 1.2 (default: ECDHE key exchange with AES-GCM or ChaCha20 only). TLS 1.3 "
        "uses OpenSSL's suites, all AEAD; Python's ssl module cannot narrow them, so --rpc-tls-ciphersuites "
        "does not exist.",
    ),
    Flag(
        "rpc_certificate_file",
        _to_str,
        "",
        "PEM certificate this node presents instead of one from the masters' CA (with rpc_private_key_file and "
        "rpc_ca_certificate_file; default: none, the IPKI issues one).",
    ),
    Flag("rpc_private_key_file", _to_str, "", "Unencrypted PEM private key of rpc_certificate_file (default: none)."),
    Flag(
        "rpc_ca_certificate_file",
        _to_str,
        "",
        "PEM CA certificate(s) peers' certificates are verified against with rpc_certificate_file (default: none).",
    ),
    Flag(
        "webserver_certificate_file",
        _to_str,
        "",
        "PEM certificate for HTTPS on the admin server (with webserver_private_key_file). Default none: HTTP, "
        "or HTTPS with the node's RPC certificate when rpc_encryption=required.",
    ),
    Flag(
        "webserver_private_key_file", _to_str, "", "Unencrypted PEM key of webserver_certificate_file (default: none)."
    ),
    Flag(
        "ipki_ca_cert_expiration_seconds",
        _to_int,
        DEFAULT_CA_VALIDITY_S,
        "Validity of the CA certificate the leader master creates on first start (Kudu's default, 10 years).",
        check=_positive,
    ),
    Flag(
        "ipki_server_cert_expiration_seconds",
        _to_int,
        DEFAULT_SERVER_VALIDITY_S,
        "Validity of the node certificates the master's CA signs (Kudu's default, 10 years).",
        check=_positive,
    ),
    Flag(
        "ipki_server_cert_renew_before_seconds",
        _to_int,
        DEFAULT_RENEW_BEFORE_S,
        "A node asks the master for a new certificate once its own expires within this long (default 30 days).",
        check=_positive,
    ),
    Flag(
        "enable_fault_injection",
        _to_bool,
        False,
        "Accept Generic/SetFaults to drop or delay RPCs between named nodes (tests only).",
        tags=_UNSAFE,
    ),
    Flag(
        "user_acl",
        _to_str,
        "*",
        "Users who may call the cluster's user methods (DDL, writes, scans): comma-separated names, or '*' "
        "for every user (Kudu's default). Superusers and service users are users too. While "
        "--rpc-authentication is not required the names are what callers claim, as in Kudu.",
        check=_acl,
    ),
    Flag(
        "superuser_acl",
        _to_str,
        "",
        "Superusers (flag changes, fault injection, unsafe tools; the servers' methods too): comma-separated "
        "names or '*'. Empty (default): with --rpc-authentication required, the service users as in Kudu; "
        "otherwise every caller, since unauthenticated tools name no user.",
        check=_acl,
    ),
    Flag(
        "service_acl",
        _to_str,
        "kudu",
        "The servers' own user names (Raft, heartbeats, tablet copy): comma-separated, no '*'. Default "
        "'kudu', Kudu's service principal; a server names the first (sorted) when it calls another.",
        check=_service_acl,
    ),
    Flag(
        "tserver_enforce_access_control",
        _to_bool,
        False,
        "Tablet servers: refuse writes and scans without an authz token from the leader master naming the "
        "privileges they need (Kudu's flag; default false as Kudu, where the masters' fine-grained "
        "authorization turns it on). Set it with --authz-policy-file on the masters.",
    ),
    Flag(
        "authz_policy_file",
        _to_str,
        "",
        "TOML or JSON file of table privileges (users and groups x database.table patterns x ALL/ALTER/"
        "CREATE/DELETE/DROP/INSERT/SELECT/UPDATE/METADATA, SELECT columns), checked by the master on DDL; "
        "re-read when it changes, keeping the last good version on a bad edit. Default empty: every user "
        "the ACLs admit holds every privilege, as Kudu without Ranger.",
    ),
    Flag(
        "authz_policy_check_interval_ms",
        _to_int,
        1000,
        "How often the master looks at --authz-policy-file's modification time (default 1000: an edit "
        "takes effect within a second, for one stat call).",
        check=_positive,
    ),
    Flag(
        "audit_log_file",
        _to_str,
        "",
        "JSON-lines audit log of authorization decisions (every DDL decision, every denial). Default: "
        "audit.log beside --log-file, or <data-dir>/logs/audit.log when logging to stderr.",
    ),
    Flag(
        "audit_log_max_size_mb",
        _to_int,
        64,
        "Size at which the audit log rotates (4 older files kept; default 64: bounded disk use).",
        check=_positive,
    ),
    Flag(
        "webserver_password_file",
        _to_str,
        "",
        "htpasswd file (bcrypt entries, 'htpasswd -B') guarding the admin pages with HTTP basic auth; "
        "/healthz stays open and pages that change state need a superuser (the REST catalog API's: the table "
        "privileges of its RPCs). Default empty: open pages. "
        "There is no --webserver-require-spnego: Kerberos is not supported; use this file (or TLS client "
        "certificates) instead.",
    ),
    Flag(
        "event_loop_lag_probe_interval_ms",
        _to_int,
        10,
        "Period of the event-loop lag probe behind the event_loop_lag_ms_p99/_max metrics (default 10: a "
        "stall longer than that is always seen, shorter ones in proportion to their length; each wake-up "
        "costs a thread switch, so a 1 ms probe took about 3 percent of a core on an idle node).",
        check=_positive,
    ),
    Flag(
        "shutdown_grace_ms", _to_int, 3000, "How long in-flight RPCs may run on SIGTERM.", check=_non_negative, tags=_RT
    ),
    Flag(
        "exit_with_parent_pid",
        _to_int,
        0,
        "Stop the node (as on SIGTERM) once the process with this pid exits. Test harnesses "
        "(kudu_async.testing.MiniCluster) set it to their own pid, so that nodes never outlive a test run that "
        "was killed, and a node scripts/rolling_restart.py starts again keeps watching the same harness, "
        "though the script is its parent. Default 0: off.",
        check=_non_negative,
    ),
    Flag(
        "graceful_shutdown_timeout_ms",
        _to_int,
        5000,
        "On SIGTERM a tablet server first quiesces: it hands its leaderships to up-to-date followers and "
        "lets open scans finish, waiting at most this long before it stops (default 5000: a transfer takes "
        "a few heartbeats, and a stop by a supervisor or MiniCluster must not hang on an abandoned "
        "scanner). 0 stops at once, as SIGINT does.",
        check=_non_negative,
        tags=_RT,
    ),
    Flag("raft_heartbeat_interval_ms", _to_int, 500, "Raft leader heartbeat period.", check=_positive),
    Flag(
        "leader_failure_max_missed_heartbeat_periods",
        _to_float,
        3.0,
        "Missed heartbeats before a follower starts an election.",
        check=_positive,
    ),
    Flag("heartbeat_interval_ms", _to_int, 1000, "tserver -> master heartbeat period.", check=_positive),
    Flag(
        "tserver_unresponsive_timeout_ms",
        _to_int,
        60000,
        "Master: a tserver silent for this long counts as dead (no new replicas are placed on it).",
        check=_positive,
        tags=_RT,
    ),
    Flag(
        "default_deleted_table_reserve_seconds",
        _to_int,
        0,
        "Master: a DeleteTable that names no reserve time keeps the table SOFT_DELETED (recallable) this many "
        "seconds before purging it. Default 0: delete at once, as Kudu does (soft deletion is opt-in).",
        check=_non_negative,
        tags=_RT,
    ),
    Flag(
        "enable_rest_api",
        _to_bool,
        True,
        "Master: serve Kudu's REST catalog API (/api/v1/leader, /api/v1/tables, /api/v1/spec, /api/docs). "
        "Default true (Kudu's is false): its DDL runs the master's RPCs as the page's user, under the same "
        "ACLs and table privileges, so it opens nothing the RPC port does not.",
    ),
    Flag(
        "rest_catalog_default_request_timeout_ms",
        _to_int,
        30000,
        "Master: how long a REST create or alter (/api/v1/tables) waits for the DDL to finish before it answers "
        "500 (the table exists; poll it). Default 30000, Kudu's: a create of many tablets finishes well within.",
        check=_positive,
    ),
    Flag(
        "enable_table_write_limit",
        _to_bool,
        False,
        "Master: enforce per-table disk size and row count limits (inserts and updates refused once a table "
        "reaches --table_write_limit_ratio of a limit). Default false, as in Kudu, where the feature is "
        "experimental; AlterTable refuses to set limits while it is off.",
        tags=_RT,
    ),
    Flag(
        "table_disk_size_limit",
        _to_int,
        -1,
        "Master: the disk size limit in bytes given to new tables when --enable_table_write_limit is set. "
        "Default -1: none.",
        check=_limit,
        tags=_RT,
    ),
    Flag(
        "table_row_count_limit",
        _to_int,
        -1,
        "Master: the live row count limit given to new tables when --enable_table_write_limit is set. "
        "Default -1: none.",
        check=_limit,
        tags=_RT,
    ),
    Flag(
        "table_write_limit_ratio",
        _to_float,
        0.95,
        "Master: writes stop when a table reaches this fraction of a limit (default 0.95, Kudu's: the figures "
        "come from periodic tablet reports, so the last writes before a stop may pass the limit a little).",
        check=_ratio,
        tags=_RT,
    ),
    Flag(
        "auto_rebalancing_enabled",
        _to_bool,
        False,
        "Master: the leader master moves replicas between tablet servers until every table, and the cluster, "
        "is balanced (the plan of 'kudu cluster rebalance'; tservers in maintenance mode or quiescing are left "
        "alone). Default false as Kudu's: moves cost copies, so an operator turns it on.",
        tags=_RT,
    ),
    Flag(
        "auto_rebalancing_interval_seconds",
        _to_int,
        30,
        "Master: pause between the auto-rebalancer's rounds, each of which plans, starts its moves and waits for "
        "them (default 30 s as Kudu's: a freshly moved replica is reported before the next plan is made).",
        check=_positive,
        tags=_RT,
    ),
    Flag(
        "auto_rebalancing_max_moves_per_server",
        _to_int,
        1,
        "Master: most replica moves of one auto-rebalancing round touching any one tablet server, as source or "
        "destination (default 1 as Kudu's: a move is a tablet copy, which takes the server's disk and network).",
        check=_positive,
        tags=_RT,
    ),
    Flag(
        "update_tablet_stats_interval_ms",
        _to_int,
        5000,
        "tserver: how often a tablet leader's live row count and on-disk size are refreshed for the master's "
        "table statistics (default 5000, Kudu's; the on-disk size is measured in a worker thread).",
        check=_positive,
    ),
    Flag(
        "follower_unavailable_considered_failed_sec",
        _to_float,
        300.0,
        "Master: the replicas of a tserver "
        "silent for this long count as failed and are re-replicated elsewhere (Kudu's 3-4-3 scheme).",
        check=_positive,
        tags=_RT,
    ),
    Flag(
        "raft_tick_interval_ms",
        _to_int,
        100,
        "Period of the node-level Raft ticker (heartbeats and election timeouts are whole numbers of ticks).",
        check=_positive,
    ),
    Flag(
        "log_force_fsync_all",
        _to_bool,
        True,
        "fsync the WAL before acknowledging (group commit keeps it cheap; unlike Kudu, on by default).",
    ),
    Flag(
        "env_use_fsync",
        _to_bool,
        False,
        "Make WAL appends durable with fsync(2) instead of fdatasync(2) (Kudu's flag and default: fdatasync "
        "flushes the data and the file size that reaches it, all a reader needs, for about 0.6x the time "
        "of an fsync on this project's test machines).",
    ),
    Flag("log_segment_size_mb", _to_int, 8, "Roll WAL segments at this size.", check=_positive),
    Flag(
        "log_compression_codec",
        _to_str,
        "LZ4",
        "Codec of WAL frames (each group-committed batch compressed as one). Default LZ4 as in Kudu: the "
        "rows of a 100,000-row write shrink from 38 to 17 bytes each at about 1 ms per MB in the WAL "
        "worker; ZSTD gets them to 6-8 bytes at about twice the CPU. Segments written with any codec "
        "read with any setting.",
        choices=("NONE", "LZ4", "SNAPPY", "ZSTD"),
    ),
    Flag("log_max_segments_to_retain", _to_int, 80, "Most WAL segments kept for lagging peers.", check=_positive),
    Flag(
        "log_min_segments_to_retain",
        _to_int,
        1,
        "Newest WAL segments always kept, even when the tablet's data is flushed and every peer has them "
        "(Kudu's default 1: the segment being appended to).",
        check=_positive,
    ),
    Flag(
        "log_cache_size_limit_mb",
        _to_int,
        8,
        "Bytes of one replica's Raft log kept in memory for peers (Kudu: 128). Entries every peer holds "
        "leave at once; past this the oldest leave too and a slow peer's are read back from the WAL. "
        "8 MiB keeps about a dozen entries of 100,000-row writes spread over 6 tablets (0.6 MB each), "
        "enough for a peer a few seconds behind, without spending a 1 GiB node on logs.",
        check=_positive,
    ),
    Flag(
        "global_log_cache_size_limit_mb",
        _to_int,
        256,
        "Bytes of all replicas' in-memory Raft logs on the node (Kudu: 1024); each replica gets "
        "the smaller of --log_cache_size_limit_mb and an equal share. A quarter of a 1 GiB memory limit.",
        check=_positive,
    ),
    Flag("io_threads", _to_int, 8, "Threads for blocking disk work (fsync, file writes).", check=_positive),
    Flag(
        "point_read_threads",
        _to_int,
        2,
        "Threads (tservers) for the point reads that memory cannot answer on the event loop, apart from "
        "--io-threads: a point read never waits behind WAL syncs or a bulk write's preparation in their "
        "queue (in that queue, point-read p99 during a bulk load measured 25-34 ms, on these threads 21-30 ms). "
        "Default 2: a lookup is short, and two let one wait on the disk while the other runs.",
        check=_positive,
    ),
    Flag(
        "enable_test_kv",
        _to_bool,
        False,
        "Host the replicated test key-value service TestKV (tests only).",
        tags=_UNSAFE,
    ),
    # --- memory: one limit for everything the node holds ---
    Flag(
        "memory_limit_mb",
        _to_int,
        0,
        "Memory this node may hold (Kudu's memory_limit_hard_bytes): memory stores, block cache, retained "
        "log entries, scanner and RPC buffers and the process's own baseline. 0 = auto: a quarter of the "
        "machine's memory (or of the cgroup's limit, when smaller), because a node usually shares its machine "
        "with the other nodes of a cluster (a master and several tservers on a dev box) and with the page "
        "cache that serves its files; Kudu's 80% assumes one tserver per machine.",
        check=_non_negative,
    ),
    Flag(
        "memory_limit_soft_percentage",
        _to_float,
        80.0,
        "Percent of --memory-limit-mb above which new client writes are refused with SERVICE_UNAVAILABLE, "
        "with a probability rising linearly to 1 at the limit (Kudu's default and rule). The node's memory "
        "is judged with the working memory of the biggest store's flush counted (as much again as the store), "
        "so that a flush never carries the node past the limit.",
        check=_percentage,
    ),
    Flag(
        "memory_pressure_percentage",
        _to_float,
        60.0,
        "Percent of --memory-limit-mb above which the biggest memory stores are flushed first, whatever "
        "their size (Kudu's default), the biggest store's flush counted as with the soft limit.",
        check=_percentage,
    ),
    # --- tablet server: storage, scans, back-pressure ---
    Flag(
        "flush_threshold_mb",
        _to_int,
        64,
        "Flush a tablet's MemRowSet (or a DeltaMemStore) at this size (Kudu: 1024).",
        check=_positive,
        tags=_RT,
    ),
    Flag(
        "memory_pressure_threshold_mb",
        _to_int,
        0,
        "Tracked node memory above which the biggest memory store is flushed first, whatever its size. "
        "0 = --memory-pressure-percentage of --memory-limit-mb; set it to pin the figure (it must not "
        "exceed the limit).",
        check=_non_negative,
    ),
    Flag("flush_threshold_secs", _to_int, 120, "Flush a MemRowSet this old even if small.", check=_positive, tags=_RT),
    Flag(
        "block_cache_capacity_mb",
        _to_int,
        -1,
        "Decoded rowset blocks (and small delta files) held in memory, for all tablets of this node: a "
        "point lookup whose key's block is held is answered on the event loop, without a disk read or a "
        "hand-off to a worker; the least recently used blocks are evicted for newly written and newly read "
        "ones. 0 turns the cache off (every read decodes its blocks again); -1 = a quarter of "
        "--memory-limit-mb, at most 512 (Kudu's default), so that the cache stays well below the pressure "
        "watermark and memory stores keep room to fill before they are flushed.",
        check=_at_least_minus_one,
    ),
    Flag("tablet_history_max_age_sec", _to_int, 7 * 24 * 3600, "History kept for snapshot scans.", check=_positive),
    Flag(
        "maintenance_manager_num_threads",
        _to_int,
        1,
        "Worker threads for flushes and compactions (default 1: on a 2-core host a second worker takes CPU "
        "from the event loop and the WAL; the GIL serialises their Python parts anyway).",
        check=_positive,
    ),
    Flag(
        "maintenance_manager_nice",
        _to_int,
        0,
        "Nice value added to the CPU priority of the flush and compaction threads and worker processes, 0-19 "
        "(default 0: not shown to pay on a 2-core host loaded by other work, and at 10, with that host loaded "
        "~25, flushes fell a whole 2M-row chunk behind the scale bench's load and memory grew).",
        check=_nice,
    ),
    Flag(
        "maintenance_worker_processes",
        _to_bool,
        False,
        "Write flush and compaction outputs (Parquet encoding, bloom filters, fsyncs) in "
        "--maintenance-manager-num-threads worker processes instead of the maintenance threads, so that they "
        "never hold the event loop's GIL (default false: the maintenance threads held the GIL a fiftieth as often as "
        "the loop during a bulk load, and each worker costs ~60-100 MiB and a fork server per node).",
    ),
    Flag(
        "budgeted_compaction_target_rowset_size_mb",
        _to_int,
        32,
        "Size of the DiskRowSets a flush or compaction writes (Kudu's budgeted_compaction_target_rowset_size, "
        "default 32 MiB as Kudu: small enough that a compaction can pick a few of them under its budget).",
        check=_positive,
    ),
    Flag(
        "tablet_compaction_budget_mb",
        _to_int,
        128,
        "Most base data one merging compaction reads (Kudu's tablet_compaction_budget_mb, default 128): "
        "bounds a compaction's memory (about twice its input) and its duration.",
        check=_positive,
    ),
    Flag(
        "compaction_small_rowset_tradeoff",
        _to_float,
        0.0,
        "Weight of a rowset a merging compaction saves against the average rowset height it removes (Kudu's "
        "compaction_small_rowset_tradeoff): ascending keys write disjoint rowsets that no height-based merge "
        "touches, and every scan pays per rowset; each rowset below "
        "--budgeted-compaction-target-rowset-size-mb earns that weight times the share of it a merge saves. "
        "Default 0 here (Kudu's is 0.009): a merge reads its inputs whole, and at Kudu's value a 100 M-row "
        "ascending load (scripts/bench/scale.py, 1 GiB memory limit) merged rowsets all along: ingest "
        "430-475 k -> 260-300 k rows/s, point-read p99 during the load 68-105 -> 255-324 ms, tserver memory "
        "peaks 1.10-1.20 GiB, over the limit, for the same scan rate (19 M rows/s at 70 M rows). "
        f"Must be >= 0 and below the minimum improvement of a compaction ({COMPACTION_MINIMUM_IMPROVEMENT:g}), "
        "else rowsets just under the target size are merged over and over; 0 merges for height only.",
        check=_small_rowset_tradeoff,
    ),
    Flag(
        "tablet_memory_limit_mb",
        _to_int,
        256,
        "MemRowSet + DeltaMemStore bytes of one tablet above which "
        "writes get SERVICE_UNAVAILABLE until flushes catch up.",
        check=_positive,
    ),
    Flag(
        "tablet_max_pending_writes",
        _to_int,
        256,
        "Writes in flight per tablet before SERVICE_UNAVAILABLE.",
        check=_positive,
    ),
    Flag("scanner_ttl_ms", _to_int, 60_000, "Idle scanners expire after this long.", check=_positive, tags=_RT),
    Flag(
        "tablet_bootstrap_parallelism", _to_int, 4, "Tablets opened (log replayed) at once on start.", check=_positive
    ),
    # --- authentication ----------------------------------------------------------------------------------
    Flag(
        "rpc_authentication",
        _to_str,
        "optional",
        "Whether callers must authenticate (a JWT, an authn token or a client certificate). Default optional as "
        "Kudu's: a caller without credentials acts as the (unauthenticated) user it names; required refuses it, "
        "on loopback too; disabled ignores credentials.",
        choices=("disabled", "optional", "required"),
    ),
    Flag(
        "enable_jwt_token_auth",
        _to_bool,
        False,
        "Accept JWT bearer tokens checked against --jwks-file-path or --jwks-url (default false as Kudu's: "
        "no JWKS is configured by default). Masters take users' JWTs and issue authn tokens for them; tablet "
        "servers take JWTs of the service users only (--service-acl).",
    ),
    Flag(
        "jwks_file_path",
        _to_str,
        "",
        "A JSON Web Key Set file whose keys sign accepted JWTs; read again when it changes.",
    ),
    Flag(
        "jwks_url",
        _to_str,
        "",
        "An http(s) URL serving the JSON Web Key Set (instead of --jwks-file-path); fetched at start and every "
        "--jwks-update-frequency-s, its TLS certificate verified.",
        check=lambda v: None if not v or v.startswith(("http://", "https://")) else "must be an http(s) URL",
    ),
    Flag(
        "jwks_update_frequency_s",
        _to_int,
        60,
        "How often the JWKS file is checked for a change or the JWKS URL fetched again (default 60 s: a key "
        "added by the issuer is taken within a minute).",
        check=_positive,
    ),
    Flag(
        "jwt_issuer",
        _to_str,
        "",
        "The 'iss' every accepted JWT must carry (default empty: the issuer is not checked; set it in production).",
    ),
    Flag(
        "jwt_audience",
        _to_str,
        "",
        "The 'aud' every accepted JWT must include (default empty: the audience is not checked; set it in "
        "production, or a token issued for another service is accepted).",
    ),
    Flag(
        "jwt_username_claim",
        _to_str,
        "sub",
        "The JWT claim that names the user (default 'sub', the standard subject claim).",
        check=lambda v: None if v else "must not be empty",
    ),
    Flag(
        "service_jwt_file",
        _to_str,
        "",
        "A file holding a JWT whose subject is a service user: a server sends it on its calls to other servers "
        "until it holds a CA-signed certificate (standing in for Kudu's Kerberos keytab); read again when it "
        "changes. Default empty: servers give their service user name, unauthenticated.",
    ),
    Flag(
        "tsk_rotation_seconds",
        _to_int,
        86_400,
        "How long a token-signing key signs before the next one takes over (default 1 day as Kudu's).",
        check=_positive,
    ),
    Flag(
        "authn_token_validity_seconds",
        _to_int,
        7 * 86_400,
        "How long an authn token the master issues is valid (default 7 days as Kudu's); clients renew it.",
        check=_positive,
    ),
    Flag(
        "authz_token_validity_seconds",
        _to_int,
        300,
        "How long an authz token the master issues is valid (default 5 minutes as Kudu's).",
        check=_positive,
    ),
)
FLAGS_BY_NAME: dict[str, Flag] = {f.name: f for f in FLAGS}


@dataclass
class NodeConfig:
    """The effective configuration of one node, with where each value came from."""

    values: dict[str, Any]
    sources: dict[str, str] = field(default_factory=dict)
    # flag -> what to tell when set_runtime changes it (see on_change)
    watchers: dict[str, list[Callable[[Any], None]]] = field(default_factory=dict, repr=False)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["values"][name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def rpc_hostport(self) -> tuple[str, int]:
        return parse_hostport(self.values["rpc_bind"])

    @property
    def http_hostport(self) -> tuple[str, int]:
        return parse_hostport(self.values["http_bind"])

    def advertised_hosts(self) -> list[str]:
        """Every host name or IP this node is known by before it binds (the advertised ones, the bound
        hosts that are not wildcards): the names its certificate carries."""
        hosts = [
            h
            for flag in ("rpc_advertised_addresses", "webserver_advertised_addresses")
            for h, _ in (parse_advertised_addresses(self.values[flag]) if self.values[flag] else [])
        ]
        hosts += [h for h, _ in (self.rpc_hostport, self.http_hostport) if not is_wildcard(h)]
        return list(dict.fromkeys(hosts))

    @property
    def masters(self) -> list[str]:
        return parse_master_addresses(self.values["master_addresses"])

    @property
    def service_users(self) -> list[str]:
        """The users of ``--service-acl``: who the servers act as."""
        return [u.strip() for u in self.values["service_acl"].split(",") if u.strip()]

    def to_json(self) -> dict[str, dict[str, Any]]:
        return {k: {"value": v, "source": self.sources.get(k, "default")} for k, v in sorted(self.values.items())}

    def on_change(self, name: str, fn: Callable[[Any], None]) -> None:
        """Call ``fn(new_value)`` whenever ``set_runtime`` changes flag ``name``: for code that copied the
        value at start (a logger's level, a timeout held by an object) rather than reading the config."""
        if name not in FLAGS_BY_NAME:
            raise KuduInvalidArgument(f"no flag named {name!r}")
        self.watchers.setdefault(name, []).append(fn)

    def set_runtime(self, name: str, raw: str, force: bool = False) -> tuple[Any, Any]:
        """Change one flag of the running node (Kudu's SetFlag); returns (old value, new value).

        Refused, with nothing changed: an unknown flag (KuduNotFound), a value the flag's type or check
        rejects (KuduInvalidArgument), a flag without the ``runtime`` tag unless ``force`` (KuduIllegalState:
        the node may never look at the new value, or act on half of it)."""
        flag = FLAGS_BY_NAME.get(name.replace("-", "_"))
        if flag is None:
            raise KuduNotFound(f"no flag named {name!r}", {"flag": name})
        if not flag.runtime and not force:
            raise KuduIllegalState(
                f"flag {flag.name} is not runtime-settable: the running node does not re-read it (restart the "
                "node with the new value, or pass -force to set it anyway, which may be unsafe)",
                {"flag": flag.name},
            )
        try:
            value = flag.convert(raw, "SetFlag")
        except KuduConfigurationError as e:
            raise KuduInvalidArgument(e.message, {"flag": flag.name}) from None
        old = self.values.get(flag.name)
        for fn in self.watchers.get(flag.name, []):
            fn(value)
        self.values[flag.name] = value
        self.sources[flag.name] = "runtime"
        if not flag.runtime:
            log.warning("flag %s is not runtime-settable and was forced: the node may not act on it", flag.name)
        return old, value


def build_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kudu-node",
        description="Run one kudu_async cluster node (master or tablet server).",
        epilog=f"Every flag can also be set as {ENV_PREFIX}<FLAG_NAME> in the environment or as "
        "flag_name = value in the --config TOML file. Precedence: command line > environment > file. "
        "Flags tagged 'runtime' can be changed on a running node too ('kudu tserver set_flag', "
        "'kudu master set_flag'). "
        "Kudu's --webserver-require-spnego does not exist: Kerberos/SPNEGO is not supported; the admin pages "
        "take HTTP basic auth against --webserver-password-file.",
        argument_default=argparse.SUPPRESS,
    )
    p.add_argument("--config", metavar="FILE.toml", help="TOML file of flag values (default: none).")
    for f in FLAGS:
        default = "required" if f.default is None else repr(f.default)
        tags = f"; tags: {', '.join(sorted(f.tags))}" if f.tags else ""
        p.add_argument(
            f.cli, dest=f.name, metavar=f.name.upper(), help=f"{f.help} [default: {default}; env {f.env}{tags}]"
        )
    return p


def load_config(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> NodeConfig:
    """Resolve the node's configuration or raise KuduConfigurationError naming the bad flag."""
    environ = os.environ if environ is None else environ
    ns = vars(build_arg_parser().parse_args(argv))
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}

    config_path = ns.pop("config", None) or environ.get(ENV_PREFIX + "CONFIG")
    if config_path:
        for name, raw in _read_toml(Path(config_path)).items():
            values[name] = FLAGS_BY_NAME[name].convert(raw, f"config file {config_path}")
            sources[name] = f"file:{config_path}"
    for f in FLAGS:
        if f.env in environ:
            values[f.name] = f.convert(environ[f.env], f"environment {f.env}")
            sources[f.name] = "env"
    for name, raw in ns.items():
        values[name] = FLAGS_BY_NAME[name].convert(raw, "command line")
        sources[name] = "cli"
    for f in FLAGS:
        values.setdefault(f.name, f.default)

    role = values["role"]
    if role is None:
        raise KuduConfigurationError("--role is required (master or tserver)")
    if not values["data_dir"]:
        raise KuduConfigurationError("--data-dir is required")
    if not values["rpc_bind"]:
        values["rpc_bind"] = f"127.0.0.1:{DEFAULT_RPC_PORT[role]}"
    if not values["http_bind"]:
        values["http_bind"] = f"127.0.0.1:{DEFAULT_HTTP_PORT[role]}"
    _check_tls_files(values)
    _resolve_memory(values, sources)
    return NodeConfig(values, sources)


def _check_tls_files(values: dict[str, Any]) -> None:
    """Certificate flags come in complete sets: half a set is a mistake to name, not to guess around."""
    rpc = ("rpc_certificate_file", "rpc_private_key_file", "rpc_ca_certificate_file")
    given = [n for n in rpc if values[n]]
    if given and len(given) != len(rpc):
        missing = ", ".join("--" + n.replace("_", "-") for n in rpc if not values[n])
        raise KuduConfigurationError(f"{missing} must be given too: the RPC certificate flags go together")
    web = ("webserver_certificate_file", "webserver_private_key_file")
    if bool(values[web[0]]) != bool(values[web[1]]):
        raise KuduConfigurationError("--webserver-certificate-file and --webserver-private-key-file go together")


# Share of the memory limit the block cache takes unless given, and its ceiling (Kudu's default size).
BLOCK_CACHE_SHARE = 0.25
BLOCK_CACHE_DEFAULT_MAX_MB = 512
AUTO_MEMORY_FRACTION = 0.25


def machine_memory_mb(meminfo: str = "/proc/meminfo", cgroup_files: Sequence[str] | None = None) -> int:
    """Memory this process may use: the machine's MemTotal, or the cgroup's limit when smaller."""
    total = 0
    with open(meminfo) as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                total = int(line.split()[1]) * 1024
                break
    if total <= 0:
        raise KuduConfigurationError(f"--memory-limit-mb=0 (auto): no MemTotal in {meminfo}; set the limit")
    files = cgroup_files or ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
    for path in files:
        try:
            with open(path) as fh:
                text = fh.read().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < total:
            total = int(text)
    return total >> 20


def _resolve_memory(values: dict[str, Any], sources: dict[str, str]) -> None:
    """Fill the memory figures left to their defaults from ``--memory-limit-mb`` and refuse a
    configuration whose fixed parts do not fit inside it."""
    if values["memory_limit_mb"] == 0:
        values["memory_limit_mb"] = max(256, int(machine_memory_mb() * AUTO_MEMORY_FRACTION))
        sources["memory_limit_mb"] = "auto"
    limit = values["memory_limit_mb"]
    pressure = int(limit * values["memory_pressure_percentage"] / 100.0)
    if values["memory_pressure_threshold_mb"] == 0:
        values["memory_pressure_threshold_mb"] = pressure
        sources["memory_pressure_threshold_mb"] = "derived"
    elif values["memory_pressure_threshold_mb"] > limit:
        raise KuduConfigurationError(
            f"--memory-pressure-threshold-mb={values['memory_pressure_threshold_mb']} exceeds "
            f"--memory-limit-mb={limit}: memory stores would never be flushed for pressure before writes are refused"
        )
    if values["block_cache_capacity_mb"] == -1:
        values["block_cache_capacity_mb"] = min(BLOCK_CACHE_DEFAULT_MAX_MB, int(limit * BLOCK_CACHE_SHARE))
        sources["block_cache_capacity_mb"] = "derived"
    elif values["block_cache_capacity_mb"] >= values["memory_pressure_threshold_mb"]:
        raise KuduConfigurationError(
            f"--block-cache-capacity-mb={values['block_cache_capacity_mb']} does not fit under the memory "
            f"pressure watermark ({values['memory_pressure_threshold_mb']} MiB: --memory-pressure-percentage="
            f"{values['memory_pressure_percentage']:g} of --memory-limit-mb={limit}, or "
            "--memory-pressure-threshold-mb): a full cache would keep the node flushing; lower the cache or "
            "raise the limit"
        )


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            doc = tomllib.load(fh)
    except FileNotFoundError:
        raise KuduConfigurationError(f"--config: file not found: {path}") from None
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise KuduConfigurationError(f"--config: cannot read {path}: {e}") from None
    unknown = sorted(k for k in doc if k not in FLAGS_BY_NAME)
    if unknown:
        raise KuduConfigurationError(f"--config {path}: unknown key(s) {', '.join(unknown)}")
    return doc
