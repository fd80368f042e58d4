"""What both roles share: identity, RPC server and client, admin HTTP, metrics, clean shutdown.

A role (master, tserver) subclasses ``Node`` and adds its services in ``on_start`` and its admin pages
in ``add_admin_routes``. The shell owns the order of start and stop so that every role shuts down the
same way: stop accepting, let in-flight calls finish within the grace period, then release resources.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import ipaddress
import logging
import os
import resource
import signal
import socket
import ssl
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
from aiohttp import web

from kudu_async.common.errors import (
    KuduBadStatus,
    KuduConfigurationError,
    KuduIllegalState,
    KuduInvalidArgument,
    KuduNotAuthorized,
    KuduNotFound,
)
from kudu_async.common.mem_tracker import NodeMemory
from kudu_async.common.metrics import MetricEntity, MetricRegistry
from kudu_async.consensus.raft import RaftOptions
from kudu_async.consensus.raft_manager import RaftManager
from kudu_async.consensus.replica import ReplicaOptions
from kudu_async.fs.fs_manager import FsManager
from kudu_async.rpc.client import RpcClient
from kudu_async.rpc.faults import FaultInjector
from kudu_async.rpc.messages import Method, serve
from kudu_async.rpc.server import CallContext, RpcServer, dual_stack_listener
from kudu_async.security import ca, tls
from kudu_async.security.acl import Acls
from kudu_async.security.audit import AuditLog, audit_line
from kudu_async.security.authn import ServerAuthenticator, bearer_header
from kudu_async.security.identity import Identity
from kudu_async.security.jwt_auth import MAX_JWKS_BYTES, MAX_JWT_BYTES, JwtVerifier
from kudu_async.security.tokens import TokenVerifier
from kudu_async.server import messages as msg
from kudu_async.server.admin import AdminAuth, build_admin_app, process_memory
from kudu_async.server.authn_shell import JwksFetcher, WatchedFile, read_service_jwt
from kudu_async.server.config import (
    FLAG_TAGS,
    FLAGS,
    FLAGS_BY_NAME,
    NodeConfig,
    advertised_addresses,
    format_hostport,
    is_wildcard,
)
from kudu_async.server.loop_lag import LoopLagProbe
from kudu_async.server.startup import StartupProgress, process_age_s
from kudu_async.version import __version__

log = logging.getLogger(__name__)

# Freed memory is handed back to the OS once this much was freed since the last time (see
# ``release_freed_memory``), checked every RELEASE_CHECK_S. Each check reads every memory tracker (with 200
# idle tablets ~7 % of the node's Python time); checked once a second, a random-key load's tserver peaked
# 60-80 MiB higher (scripts/bench/scale.py, two A/B pairs), so memory wins.
RELEASE_AFTER_FREED_BYTES = 32 * 1024 * 1024
RELEASE_CHECK_S = 0.5
# The cycle collector's thresholds once a node is up (see ``run_until_signalled``).
GC_THRESHOLDS = (10_000, 20, 20)
# How often a node started with --exit-with-parent-pid checks that the process is still there, where the
# kernel offers no pidfd to wait on.
PARENT_CHECK_S = 1.0


def _load_malloc_trim() -> Callable[[int], int] | None:
    try:
        fn = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc: its allocator keeps what it keeps
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return cast(Callable[[int], int], fn)


_MALLOC_TRIM = _load_malloc_trim()

# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
# Allocator settings for a node (numpy temporaries and Python objects go through glibc's malloc; Arrow
# buffers through its own pool). Fewer arenas: each thread that allocates (flush, compaction, prepare and
# I/O workers) otherwise gets an arena of its own that keeps its freed memory. Fixed mmap and trim
# thresholds: glibc otherwise raises its mmap threshold up to 32 MiB after the first large free, after
# which large temporaries come from the heap and stay there as holes.
MALLOC_ARENA_MAX = 4
MALLOC_MMAP_THRESHOLD_BYTES = 4 * 1024 * 1024
MALLOC_TRIM_THRESHOLD_BYTES = 16 * 1024 * 1024


def tune_malloc() -> bool:
    """Apply the node's allocator settings (before any thread starts); False where the C library is not
    glibc. An operator's ``MALLOC_ARENA_MAX`` etc. in the environment win over these."""
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    for param, env, value in (
        (_M_ARENA_MAX, "MALLOC_ARENA_MAX", MALLOC_ARENA_MAX),
        (_M_MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_", MALLOC_MMAP_THRESHOLD_BYTES),
        (_M_TRIM_THRESHOLD, "MALLOC_TRIM_THRESHOLD_", MALLOC_TRIM_THRESHOLD_BYTES),
    ):
        if env not in os.environ:
            mallopt(param, value)
    return True


def release_freed_memory() -> None:
    """Give freed memory back to the OS: Arrow's pool (mimalloc) returns its unused pages and glibc's
    malloc trims its arenas. Without it a flushed MemRowSet's memory stays resident (measured in-process,
    3 x 1 M rows loaded and flushed: RssAnon 239 MiB kept, 106 MiB with this), so the process would grow
    past what is live. A few ms of work; ``malloc_trim`` runs without the GIL (ctypes)."""
    pa.default_memory_pool().release_unused()
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


class AnonymousMemory:
    """The process's anonymous resident bytes (resident minus file-backed and shared pages of
    ``/proc/self/statm``), read through one open descriptor: the memory limit reads it on the write path,
    where opening the file each time cost a profile's 1 %. 0 where there is no procfs."""

    def __init__(self) -> None:
        try:
            self._fd = os.open("/proc/self/statm", os.O_RDONLY)
        except OSError:
            self._fd = -1
        self._page = resource.getpagesize()

    def __call__(self) -> int:
        if self._fd < 0:
            return 0
        fields = os.pread(self._fd, 256, 0).split()
        return (int(fields[1]) - int(fields[2])) * self._page

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


def machine_name() -> tuple[str, bool]:
    """This machine's fully qualified name (its host name's canonical name, as Kudu's GetFQDN; the bare
    host name when the resolver knows no better) and whether that name resolves to loopback addresses
    only. Blocks on the resolver: run it off the event loop."""
    host = socket.gethostname()
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_CANONNAME)
    except OSError:
        return host, False  # unresolvable here; peers may still resolve it (their DNS, a hosts file)
    name = next((canon for *_, canon, _ in infos if canon), host)
    loopback_only = bool(infos) and all(ipaddress.ip_address(str(sa[0]).split("%")[0]).is_loopback for *_, sa in infos)
    return name, loopback_only


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process now holds the pid
        return True
    return True


async def wait_process_exit(pid: int) -> None:
    """Return once process ``pid`` (any process, not only a child) has exited: waited on through a pidfd, so
    a reused pid never keeps the wait going; polled where the kernel has no pidfd."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return  # already gone
    except OSError:
        while True:
            await asyncio.sleep(PARENT_CHECK_S)
            if not _process_exists(pid):
                return
    loop = asyncio.get_running_loop()
    gone = asyncio.Event()
    loop.add_reader(fd, gone.set)
    try:
        await gone.wait()
    finally:
        loop.remove_reader(fd)
        os.close(fd)


def audit_log_path(config: NodeConfig, data_root: Path) -> Path:
    """``--audit-log-file``, else ``audit.log`` beside ``--log-file``, else under the data directory's logs."""
    if config.audit_log_file:
        return Path(config.audit_log_file)
    if config.log_file:
        return Path(config.log_file).parent / "audit.log"
    return data_root / "logs" / "audit.log"


METRIC_ENTITY_ID = {"master": "kudu.master", "tserver": "kudu.tabletserver"}


class Node:
    """One cluster node process. Use ``await node.start()`` then ``await node.stop()``."""

    role = "node"
    # A tserver reopens its (possibly hundreds of) replicas after it starts serving; a master waits.
    open_replicas_in_background = False

    def __init__(self, config: NodeConfig, fs: FsManager) -> None:
        self.startup = StartupProgress(process_age_s())
        self.config = config
        self.fs = fs
        self.uuid = fs.uuid
        self.name = config.node_name or self.uuid
        self.started_at = time.time()
        self._started_mono = time.monotonic()
        self.metrics = MetricRegistry()
        self.server_metrics: MetricEntity = self.metrics.entity(
            "server", METRIC_ENTITY_ID.get(self.role, "kudu.server"), {"uuid": self.uuid, "role": self.role}
        )
        self.server_metrics.gauge(
            "uptime",
            "Seconds since the node started",
            "seconds",
            read=lambda: round(time.monotonic() - self._started_mono, 3),
        )
        self.server_metrics.gauge(
            "memory_rss", "Resident set size of the process", "bytes", read=lambda: process_memory()["current_bytes"]
        )
        self.loop_lag = LoopLagProbe(config.event_loop_lag_probe_interval_ms / 1000.0)
        self.loop_lag.register(self.server_metrics)
        self.memory = NodeMemory(
            config.memory_limit_mb * 1024 * 1024,
            soft_percentage=config.memory_limit_soft_percentage,
            pressure_threshold_bytes=config.memory_pressure_threshold_mb * 1024 * 1024,
        )
        # What the process holds before it serves anything (interpreter, libraries, module state): counted
        # so that the limit covers the process and not only its data.
        self.baseline_bytes = process_memory()["anonymous_bytes"]
        self.memory.root.child("baseline", gauge=lambda: self.baseline_bytes)
        self._anonymous_memory = AnonymousMemory()
        self.memory.track_process(self._anonymous_memory)
        self.server_metrics.gauge(
            "memory_anonymous",
            "Anonymous resident memory of the process (heap, not file pages)",
            "bytes",
            read=lambda: process_memory()["anonymous_bytes"],
        )
        self.server_metrics.gauge(
            "memory_consumption",
            "Memory the node's trackers count (the root of /mem-trackers)",
            "bytes",
            read=self.memory.refresh,
        )
        self.server_metrics.gauge(
            "memory_limit", "The node's memory limit (memory_limit_mb)", "bytes", read=lambda: self.memory.limit
        )
        self.faults = FaultInjector(enabled=config.enable_fault_injection)
        self.rpc_server = RpcServer(
            self.server_metrics,
            node_name=self.name,
            faults=self.faults,
            max_body_bytes=config.rpc_max_message_bytes,
            max_inflight_per_service=config.rpc_service_queue_length,
        )
        self.rpc_client = RpcClient(
            self.name,
            faults=self.faults,
            metrics=self.server_metrics,
            max_response_bytes=config.rpc_max_message_bytes,
        )
        self.acls = Acls.from_flags(
            user_acl=config.user_acl,
            superuser_acl=config.superuser_acl,
            service_acl=config.service_acl,
            authentication_required=config.values.get("rpc_authentication") == "required",
        )
        self.rpc_server.acls = self.acls
        self.rpc_server.on_denied = self.audit_denial
        self.audit_log = AuditLog(audit_log_path(config, fs.root), max_bytes=config.audit_log_max_size_mb * 1024 * 1024)
        self.admin_auth = AdminAuth.from_config(config, self.acls)
        self.io_executor = ThreadPoolExecutor(config.io_threads, thread_name_prefix="io")
        tick_ms = config.raft_tick_interval_ms
        heartbeat_ticks = max(1, round(config.raft_heartbeat_interval_ms / tick_ms))
        self.raft = RaftManager(
            self.uuid,
            fs.root / "consensus",
            self.rpc_client,
            self.io_executor,
            ReplicaOptions(
                raft=RaftOptions(
                    heartbeat_ticks=heartbeat_ticks,
                    missed_heartbeats=max(1, round(config.leader_failure_max_missed_heartbeat_periods)),
                    log_cache_bytes=config.log_cache_size_limit_mb * 1024 * 1024,
                ),
                fsync=config.log_force_fsync_all,
                use_fsync=config.env_use_fsync,
                segment_bytes=config.log_segment_size_mb * 1024 * 1024,
                compression=config.log_compression_codec,
                max_retained_segments=config.log_max_segments_to_retain,
                min_retained_segments=config.log_min_segments_to_retain,
                global_log_cache_bytes=config.global_log_cache_size_limit_mb * 1024 * 1024,
            ),
            tick_interval_s=tick_ms / 1000.0,
            max_parallel_opens=config.tablet_bootstrap_parallelism,
        )
        self.raft.register_rpc(self.rpc_server)
        self._setup_tls()
        self._setup_authentication()
        if self.jwt_verifier is not None and (
            config.webserver_password_file or config.rpc_authentication == "required"
        ):
            # With security on, the admin pages want a user too: a JWT (``authorization: Bearer ...``), or
            # the password file's users.
            self.admin_auth.bearer = self._admin_bearer
        self.memory.root.child("rpc", gauge=lambda: self.rpc_server.buffered_bytes() + self.rpc_client.buffered_bytes())
        # Where this node listens, and the addresses it gives others (the first names it: registration,
        # Raft configs, the master list, table locations, status pages); all known once start() binds.
        self.bound_rpc_address = self.rpc_address = config.rpc_bind
        self.bound_http_address = self.http_address = config.http_bind
        self.rpc_addresses = [self.rpc_address]
        self.http_addresses = [self.http_address]
        self._http_runner: web.AppRunner | None = None
        self._stopping = asyncio.Event()
        self._signal: signal.Signals | None = None  # the signal that ended run_until_signalled
        self._releaser: asyncio.Task[None] | None = None
        self._register_generic_service()

    # --- TLS ------------------------------------------------------------------------------------------

    def _setup_tls(self) -> None:
        """The node's certificate and the RPC server's and client's TLS per --rpc-encryption: the operator's
        certificate files when given (then peers are verified against their CA from the start), else a
        self-signed certificate (encryption without proof) until the masters' CA signs one."""
        cfg = self.config
        self.tls_options = tls.TlsOptions(cfg.rpc_tls_min_protocol, cfg.rpc_tls_ciphers)
        # The names this node's certificate carries: every name it is known by (the machine's name joins
        # them at start when it binds a wildcard without an advertised address), and loopback.
        self.tls_hosts = sorted({*cfg.advertised_hosts(), "127.0.0.1"})
        # What this node presents, the CA certificates it trusts, and whether a CA signed ``rpc_cert``.
        self.rpc_cert: ca.CertKey | None = None
        self.trusted_ca_pem: bytes | None = None
        self.cert_signed = False
        self.operator_certs = bool(cfg.rpc_certificate_file)
        self._http_ssl: ssl.SSLContext | None = None
        self._http_follows_rpc_cert = False
        self._pending_csr: tuple[bytes, bytes] | None = None  # (key, CSR) waiting for the CA's signature
        try:
            if self.operator_certs:
                self.rpc_cert, self.trusted_ca_pem = ca.load_pem_files(
                    cfg.rpc_certificate_file, cfg.rpc_private_key_file, cfg.rpc_ca_certificate_file
                )
                self.cert_signed = True
            elif cfg.rpc_encryption != "disabled":
                self.rpc_cert = ca.self_signed(self.acls.service_user, self.tls_hosts, time.time())
            self._apply_tls()
        except KuduInvalidArgument as e:
            raise KuduConfigurationError(str(e)) from None

    def _apply_tls(self) -> None:
        mode = self.config.rpc_encryption
        if mode == "disabled" or self.rpc_cert is None:
            self.rpc_server.tls = None
            self.rpc_client.tls = None
            return
        server_ctx = tls.server_context(self.rpc_cert, self.trusted_ca_pem, self.tls_options)
        if self.rpc_server.tls is None:
            self.rpc_server.tls = tls.ServerTls(mode, server_ctx)
        else:
            self.rpc_server.tls.context = server_ctx
        # A node verifies the servers it calls once it trusts a CA and every node is expected to hold a
        # certificate from it: with operator-given files from the start; with the IPKI a peer may still
        # hold only its self-signed one (a tserver before its first heartbeat), so peers are proved by
        # the client certificates they present instead (the servers' CERT_OPTIONAL check above).
        verify = self.trusted_ca_pem if self.operator_certs else None
        client_ctx = tls.client_context(verify, self.rpc_cert if self.cert_signed else None, self.tls_options)
        self.rpc_client.tls = tls.ClientTls(
            tls.POLICY_REQUIRED if mode == "required" else tls.POLICY_OPTIONAL,
            client_ctx,
            encrypt_loopback=self.config.rpc_encrypt_loopback_connections,
        )

    def _http_tls_context(self) -> ssl.SSLContext | None:
        """HTTPS for the admin server: the operator's --webserver-certificate-file, else the node's RPC
        certificate when RPC encryption is required (kept current as the node's certificate changes)."""
        cfg = self.config
        own: ca.CertKey | None = None
        if cfg.webserver_certificate_file:
            try:
                own = ca.CertKey(
                    Path(cfg.webserver_certificate_file).read_bytes(), Path(cfg.webserver_private_key_file).read_bytes()
                )
            except OSError as e:
                raise KuduConfigurationError(
                    f"--webserver-certificate-file / --webserver-private-key-file: {e}"
                ) from None
        elif cfg.rpc_encryption == "required" and self.rpc_cert is not None:
            own = self.rpc_cert
            self._http_follows_rpc_cert = True
        if own is None:
            return None
        try:
            self._http_ssl = tls.http_server_context(own, self.tls_options)
        except KuduInvalidArgument as e:
            raise KuduConfigurationError(f"admin HTTPS: {e}") from None
        return self._http_ssl

    @property
    def http_scheme(self) -> str:
        return "https" if self._http_ssl is not None else "http"

    def install_certificate(self, own: ca.CertKey, ca_pem: bytes) -> None:
        """Present ``own`` (signed by the CA of ``ca_pem``) and trust that CA from now on; connections
        already open keep what they negotiated."""
        if self.operator_certs:
            raise KuduIllegalState("this node uses the operator's certificate files (--rpc-certificate-file)")
        self.rpc_cert, self.trusted_ca_pem, self.cert_signed = own, ca_pem, True
        self._apply_tls()
        if self._http_ssl is not None and self._http_follows_rpc_cert:
            tls.load_cert_key(self._http_ssl, own)  # later HTTPS handshakes present it
        log.info(
            "node certificate installed",
            extra={"subject": self.acls.service_user, "expires_unix": round(ca.not_after(own.cert_pem))},
        )

    def certificate_request(self, now: float) -> bytes | None:
        """A CSR to send the masters while this node needs a certificate (the same one until it is
        signed, so every heartbeat does not make a key), else None."""
        if not self.certificate_renewal_due(now):
            return None
        if self._pending_csr is None:
            key_pem = ca.key_to_pem(ca.generate_key())
            self._pending_csr = (key_pem, ca.make_csr(key_pem, self.acls.service_user, self.tls_hosts))
        return self._pending_csr[1]

    def accept_certificate(self, cert_pem: bytes, ca_pem: bytes) -> None:
        """Install the certificate the masters' CA signed for this node's pending CSR, after checking that
        it is for this node's key and chains to ``ca_pem``."""
        if self._pending_csr is None:
            return  # an answer to a CSR already served (another master's, or a retried heartbeat)
        key_pem = self._pending_csr[0]
        cert = ca.load_certificate(cert_pem, "certificate from the master")
        ca.check_key_matches(cert, ca.load_private_key(key_pem), "certificate from the master")
        if not ca.CertAuthority.chains_to(cert_pem, ca_pem):
            raise KuduInvalidArgument("certificate from the master is not signed by the CA certificate it came with")
        self._pending_csr = None
        self.install_certificate(ca.CertKey(cert_pem, key_pem), ca_pem)

    def certificate_renewal_due(self, now: float) -> bool:
        """Whether to ask the masters' CA for a certificate (none yet, or the one held expires soon)."""
        if self.operator_certs or self.config.rpc_encryption == "disabled":
            return False
        if not self.cert_signed or self.rpc_cert is None:
            return True
        return ca.renewal_due(self.rpc_cert.cert_pem, now, self.config.ipki_server_cert_renew_before_seconds)

    # --- authentication ---------------------------------------------------------------------------------

    def _setup_authentication(self) -> None:
        """The verifiers and the authenticator every call goes through, and this node's own credentials."""
        cfg = self.config
        # The public halves of the token-signing keys: from the catalog on a master, heartbeats on a tserver.
        self.token_verifier = TokenVerifier()
        self.jwt_verifier: JwtVerifier | None = None
        self._watchers: list[WatchedFile | JwksFetcher] = []
        period = float(cfg.jwks_update_frequency_s)
        if cfg.enable_jwt_token_auth:
            if not cfg.jwks_file_path and not cfg.jwks_url:
                raise KuduConfigurationError("--enable-jwt-token-auth needs --jwks-file-path or --jwks-url")
            if cfg.jwks_file_path and cfg.jwks_url:
                raise KuduConfigurationError("set either --jwks-file-path or --jwks-url, not both (as Kudu)")
            self.jwt_verifier = JwtVerifier(
                issuer=cfg.jwt_issuer, audience=cfg.jwt_audience, username_claim=cfg.jwt_username_claim
            )
        service_users = cfg.service_users
        self.authenticator = ServerAuthenticator(
            mode=cfg.rpc_authentication,
            token_verifier=self.token_verifier,
            jwt_verifier=self.jwt_verifier,
            # Users show tablet servers the authn token the master issued them; JWTs there are the servers'.
            jwt_users=service_users if self.role == "tserver" else None,
        )
        if cfg.rpc_authentication != "disabled":
            self.rpc_server.authenticator = self.authenticator
        if self.jwt_verifier is not None:
            if cfg.jwks_file_path:
                jwks = WatchedFile(cfg.jwks_file_path, MAX_JWKS_BYTES, self._jwks_changed, period, self.io_executor)
                jwks.load_now()
                self._watchers.append(jwks)
            else:
                self._watchers.append(JwksFetcher(cfg.jwks_url, self.jwt_verifier, period, self._forget_verdicts))
        # A server calls its peers as the service user.
        self.service_user = self.acls.service_user
        self.service_jwt: str | None = None
        self.rpc_client.set_credentials(self.service_user, None)
        if cfg.service_jwt_file:
            own = WatchedFile(cfg.service_jwt_file, MAX_JWT_BYTES, self._service_jwt_changed, period, self.io_executor)
            own.load_now()
            self._watchers.append(own)

    def _admin_bearer(self, token: str) -> Identity:
        """The user of a JWT shown to the admin pages."""
        assert self.jwt_verifier is not None
        return Identity(self.jwt_verifier.verify(token, time.time()).user, "jwt")

    def _jwks_changed(self, data: bytes) -> None:
        assert self.jwt_verifier is not None
        self.jwt_verifier.set_jwks(data)
        self._forget_verdicts()

    def _forget_verdicts(self) -> None:
        self.authenticator.forget()

    def _service_jwt_changed(self, data: bytes) -> None:
        self.service_jwt = read_service_jwt(data)
        self.rpc_client.set_credentials(self.service_user, bearer_header(self.service_jwt))

    # --- role hooks -----------------------------------------------------------------------------------

    async def on_start(self) -> None:
        """Start role services; called after RPC is bound and before HTTP is up."""

    async def on_started(self) -> None:
        """Called once RPC, replicas and HTTP are all up (e.g. to create a replica that needs peers)."""

    async def on_stop(self) -> None:
        """Stop role background work; in-flight RPCs are still allowed to finish."""

    def add_admin_routes(self, app: web.Application) -> None:
        """Add the role's admin pages."""

    def role_status(self) -> dict[str, Any]:
        """Role-specific fields of ``/api/v1/status`` and ``Generic/GetStatus``."""
        return {}

    # --- lifecycle ------------------------------------------------------------------------------------

    async def start(self) -> None:
        self.loop_lag.start()
        cfg = self.config
        rpc_host, rpc_port = cfg.rpc_hostport
        http_host, http_port = cfg.http_hostport
        fqdn: str | None = None
        if (is_wildcard(rpc_host) and not cfg.rpc_advertised_addresses) or (
            is_wildcard(http_host) and not cfg.webserver_advertised_addresses
        ):
            fqdn = await self._machine_name()
        self.startup.begin("rpc")
        await self.rpc_server.start(rpc_host, rpc_port)
        self.startup.end("rpc")
        self.bound_rpc_address = format_hostport(rpc_host, self.rpc_server.port)
        self.rpc_addresses = advertised_addresses(cfg.rpc_advertised_addresses, rpc_host, self.rpc_server.port, fqdn)
        self.rpc_address = self.rpc_addresses[0]
        # Until the admin server binds (after the replicas open), the configured port stands in for it.
        self.http_addresses = advertised_addresses(cfg.webserver_advertised_addresses, http_host, http_port, fqdn)
        self.http_address = self.http_addresses[0]
        for w in self._watchers:
            w.start()
        self.startup.begin("services")
        await self.on_start()
        self.startup.end("services")
        self._releaser = asyncio.get_running_loop().create_task(self._release_freed(), name="memory-release")
        self.startup.begin("replicas")  # ends on /startup once the raft manager says all are open
        await self.raft.start(background=self.open_replicas_in_background)
        self.startup.begin("web")
        self._http_runner = web.AppRunner(build_admin_app(self, self.admin_auth), access_log=None, handle_signals=False)
        await self._http_runner.setup()
        dual = dual_stack_listener(http_host, http_port)
        site: web.BaseSite
        if dual is not None:
            site = web.SockSite(self._http_runner, dual, ssl_context=self._http_tls_context())
        else:
            site = web.TCPSite(
                self._http_runner, http_host, http_port, reuse_address=True, ssl_context=self._http_tls_context()
            )
        await site.start()
        addresses = self._http_runner.addresses  # resolves port 0 to the bound port
        bound_http_port = addresses[0][1] if addresses else http_port
        self.bound_http_address = format_hostport(http_host, bound_http_port)
        self.http_addresses = advertised_addresses(cfg.webserver_advertised_addresses, http_host, bound_http_port, fqdn)
        self.http_address = self.http_addresses[0]
        self.startup.end("web")
        log.info(
            "node started",
            extra={
                "rpc_address": self.rpc_address,
                "http_address": self.http_address,
                "bound_rpc_address": self.bound_rpc_address,
                "bound_http_address": self.bound_http_address,
                "version": __version__,
            },
        )
        await self.on_started()

    async def _machine_name(self) -> str:
        """The name a node bound to a wildcard without an advertised address gives others: the machine's
        fully qualified name, as Kudu. It joins the certificate's names; a name that resolves to loopback
        only is kept (a one-machine cluster works with it) with a warning, since other hosts cannot use it."""
        name, loopback_only = await asyncio.get_running_loop().run_in_executor(self.io_executor, machine_name)
        if name not in self.tls_hosts:
            self.tls_hosts = sorted({*self.tls_hosts, name})
        if loopback_only:
            log.warning(
                "bound to a wildcard, this node names itself by the machine's name %r, which resolves to "
                "loopback addresses only: other hosts cannot reach it; set --rpc-advertised-addresses and "
                "--webserver-advertised-addresses to a name or address they can",
                name,
            )
        return name

    async def stop(self) -> None:
        grace = self.config.shutdown_grace_ms / 1000.0
        log.info("node stopping", extra={"grace_s": grace})
        if self._releaser is not None:
            self._releaser.cancel()
            await asyncio.gather(self._releaser, return_exceptions=True)
        try:
            await self.on_stop()
        finally:
            await self.rpc_server.stop(grace)
            await self.raft.stop()
            if self._http_runner is not None:
                await self._http_runner.cleanup()
            self._anonymous_memory.close()
            await self.rpc_client.close()
            for w in self._watchers:
                await w.stop()
            self.io_executor.shutdown(wait=True)
            await self.loop_lag.stop()
            await asyncio.to_thread(self.audit_log.close)
        log.info("node stopped")

    async def run_until_signalled(self) -> None:
        """Serve until SIGTERM or SIGINT, then shut down cleanly."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)
        await self.start()
        # What start-up made (modules, classes, the node's long-lived structures) leaves the cycle
        # collector's sight: each full collection walked all of it, a 28-54 ms stop of the loop every
        # ten seconds or so under load (point-read p99.9 32.7 -> 19.7 ms without them). Reference
        # counting still frees these objects; only cycles among them would stay.
        gc.collect()
        gc.freeze()
        # Python's thresholds (700, 10, 10) suit short scripts: a tserver taking writes ran a young
        # collection every few writes and a full one (47 ms over its ~85,000 live objects) every few
        # seconds. Fewer, larger young collections cost less in all: tserver CPU per single-row write
        # -4 % (100 tablets, 64 sessions, two A/B pairs), and full collections come ~50x less often.
        gc.set_threshold(*GC_THRESHOLDS)
        watch = None
        if self.config.exit_with_parent_pid:
            watch = asyncio.create_task(self._stop_when_gone(self.config.exit_with_parent_pid))
        await self._stopping.wait()
        if watch is not None:
            watch.cancel()
        if self._signal is signal.SIGTERM:
            await self.before_graceful_stop()
        await self.stop()

    async def before_graceful_stop(self) -> None:
        """What a role does on SIGTERM before it stops (a tserver hands its leaderships away); SIGINT
        stops at once."""

    async def _stop_when_gone(self, pid: int) -> None:
        """Stop, as on SIGTERM, once the process ``pid`` exits: the harness that started the node, its parent
        unless a rolling restart started it again."""
        await wait_process_exit(pid)
        log.warning("process %d (--exit-with-parent-pid) is gone; stopping", pid)
        self._stopping.set()

    def _on_signal(self, sig: signal.Signals) -> None:
        log.info("received %s", sig.name)
        self._signal = sig
        self._stopping.set()

    def remeasure_baseline(self) -> None:
        """Count what start-up work loaded since the node was built (libraries imported on first use) in
        the baseline: the process's anonymous memory less what the other trackers count, if more."""
        self.memory.refresh()
        others = self.memory.tracked() - self.baseline_bytes
        self.baseline_bytes = max(self.baseline_bytes, process_memory()["anonymous_bytes"] - others)

    async def _release_freed(self) -> None:
        """Hand freed memory back to the OS once a flush, a compaction or a scan has freed enough of it:
        the tracked total fell, or the process's untracked part grew (temporaries of background work)."""
        loop = asyncio.get_running_loop()
        self.memory.refresh()
        high = self.memory.tracked()
        untracked_after = process_memory()["anonymous_bytes"] - high
        while True:
            await asyncio.sleep(RELEASE_CHECK_S)
            self.memory.refresh()
            tracked = self.memory.tracked()
            high = max(high, tracked)
            untracked = process_memory()["anonymous_bytes"] - tracked
            if high - tracked < RELEASE_AFTER_FREED_BYTES and untracked - untracked_after < RELEASE_AFTER_FREED_BYTES:
                continue
            try:
                await loop.run_in_executor(self.io_executor, release_freed_memory)
            except Exception:
                log.exception("releasing freed memory to the OS failed; trying again later")
            high = tracked
            untracked_after = process_memory()["anonymous_bytes"] - tracked

    # --- shared services ------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "uuid": self.uuid,
            "name": self.name,
            "rpc_address": self.rpc_address,
            "http_address": self.http_address,
            # Kudu's names: the addresses given to others (first: the ones above), and those bound.
            "rpc_addresses": self.rpc_addresses,
            "http_addresses": self.http_addresses,
            "bound_rpc_addresses": [self.bound_rpc_address],
            "bound_http_addresses": [self.bound_http_address],
            "version": __version__,
            "start_time_unix": self.started_at,
            "uptime_s": round(time.monotonic() - self._started_mono, 3),
            "is_leader": None,
            # Objects kept out of the cycle collector since start-up, and its runs per generation.
            "gc": {"frozen_objects": gc.get_freeze_count(), "collections": [g["collections"] for g in gc.get_stats()]},
            # The newest token-signing key this node verifies with (-1: none yet), and the authenticator's cache.
            "authn": {
                "mode": self.config.rpc_authentication,
                "tsk_seq": self.token_verifier.max_seq,
                "jwks_keys": None if self.jwt_verifier is None else len(self.jwt_verifier.key_ids()),
                "cache_hits": self.authenticator.hits,
                "cache_misses": self.authenticator.misses,
            },
            # What this node presents on RPC: whether a CA (the cluster's, or the operator's) signed it.
            "tls": {
                "encryption": self.config.rpc_encryption,
                "certificate_signed": self.cert_signed,
                "operator_certificates": self.operator_certs,
            },
            **self.role_status(),
        }

    def rpcz(self) -> dict[str, Any]:
        return {
            "inbound": self.rpc_server.inflight(),
            "outbound": self.rpc_client.inflight(),
            "services": self.rpc_server.services(),
            # Who may call each method (``requires``): what a fuzz pass or an operator checks.
            "requirements": self.rpc_server.requirements(),
        }

    def audit(self, line: dict[str, Any]) -> None:
        """Append one authorization decision to the audit log (off the loop)."""
        self.audit_log.record(line)

    def audit_denial(self, ctx: CallContext, err: KuduNotAuthorized) -> None:
        """Audit a call refused as ``err`` says: the RPC server's hook, and the REST API's for the calls it makes
        as its page's user, so both write the same line."""
        obj = err.details.get("table") or err.details.get("object") or ctx.full_method
        self.audit(
            audit_line(
                identity=ctx.identity,
                client=ctx.remote,
                method=ctx.full_method,
                obj=str(obj),
                allowed=False,
                reason=err.message,
            )
        )

    def mem_trackers(self) -> list[dict[str, Any]]:
        return self.memory.root.rows()

    def mem_trackers_nested(self) -> dict[str, Any]:
        return self.memory.root.nested()

    def _register_generic_service(self) -> None:
        serve(
            self.rpc_server,
            "Generic",
            {
                "Ping": Method(msg.PingRequest, msg.PingResponse, self._rpc_ping, requires="any"),
                "GetStatus": Method(msg.GetStatusRequest, dict, self._rpc_get_status, requires="user"),
                "SetFaults": Method(
                    msg.SetFaultsRequest, msg.SetFaultsResponse, self._rpc_set_faults, requires="superuser"
                ),
                "GetFlags": Method(msg.GetFlagsRequest, msg.GetFlagsResponse, self._rpc_get_flags, requires="user"),
                "SetFlag": Method(msg.SetFlagRequest, msg.SetFlagResponse, self._rpc_set_flag, requires="superuser"),
            },
        )
        self.config.on_change("log_level", lambda level: logging.getLogger().setLevel(level))

    async def _rpc_ping(self, request: msg.PingRequest, ctx: CallContext) -> msg.PingResponse:
        return msg.PingResponse()

    async def _rpc_get_status(self, request: msg.GetStatusRequest, ctx: CallContext) -> dict[str, Any]:
        return self.status()

    async def _rpc_set_faults(self, request: msg.SetFaultsRequest, ctx: CallContext) -> msg.SetFaultsResponse:
        if not self.config.enable_fault_injection:
            raise KuduIllegalState("fault injection is off on this node (start it with --enable-fault-injection)")
        self.faults.set_rules(request.rules)
        log.warning("fault injection rules set", extra={"rules": repr(self.faults.rules())})
        return msg.SetFaultsResponse(rules=self.faults.rules())

    async def _rpc_get_flags(self, request: msg.GetFlagsRequest, ctx: CallContext) -> msg.GetFlagsResponse:
        return msg.GetFlagsResponse(flags=flag_infos(self.config, request))

    async def _rpc_set_flag(self, request: msg.SetFlagRequest, ctx: CallContext) -> msg.SetFlagResponse:
        """Change a flag of the running node; the change (or its refusal) is logged and audited."""
        what = f"flag {request.flag}={request.value!r}" + (" (forced)" if request.force else "")
        try:
            old, new = self.config.set_runtime(request.flag, request.value, request.force)
        except KuduBadStatus as e:
            self.audit(
                audit_line(
                    identity=ctx.identity,
                    client=ctx.remote,
                    method=ctx.full_method,
                    obj=what,
                    allowed=False,
                    reason=e.message,
                )
            )
            raise
        flag = FLAGS_BY_NAME[request.flag.replace("-", "_")]
        log.warning(
            "flag changed at runtime",
            extra={
                "flag": flag.name,
                "old_value": flag_text(old),
                "new_value": flag_text(new),
                "forced": not flag.runtime,
                "by": ctx.identity.describe(),
            },
        )
        self.audit(
            audit_line(
                identity=ctx.identity,
                client=ctx.remote,
                method=ctx.full_method,
                obj=what,
                allowed=True,
                reason=f"{flag_text(old)} -> {flag_text(new)}",
            )
        )
        return msg.SetFlagResponse(
            flag=flag.name, old_value=flag_text(old), value=flag_text(new), forced=not flag.runtime
        )


def flag_text(value: Any) -> str:
    """A flag value as gflags prints it (booleans lower-case; an unset required flag as empty)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def flag_infos(config: NodeConfig, request: msg.GetFlagsRequest) -> list[msg.FlagInfo]:
    """The flags a GetFlags request asks for, sorted by name; an unknown name or tag is refused."""
    for t in request.tags:
        if t not in FLAG_TAGS:
            raise KuduInvalidArgument(f"unknown flag tag {t!r} (known: {', '.join(FLAG_TAGS)})", {"tag": t})
    if request.flags:
        names = [n.replace("-", "_") for n in request.flags]
        unknown = [n for n in names if n not in FLAGS_BY_NAME]
        if unknown:
            raise KuduNotFound(f"no flag named {', '.join(map(repr, unknown))}", {"flags": unknown})
        chosen = [FLAGS_BY_NAME[n] for n in sorted(set(names))]
    else:
        chosen = [
            f
            for f in sorted(FLAGS, key=lambda f: f.name)
            if (request.all_flags or config.values.get(f.name) != f.default) and set(request.tags) <= f.tags
        ]
    return [
        msg.FlagInfo(
            name=f.name,
            value=flag_text(config.values.get(f.name)),
            default=flag_text(f.default),
            tags=sorted(f.tags),
            is_default=config.values.get(f.name) == f.default,
            source=config.sources.get(f.name, "default"),
            help=f.help,
        )
        for f in chosen
    ]
