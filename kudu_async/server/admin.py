"""The admin HTTP app (aiohttp) both roles serve: Kudu's paths as HTML pages for browsers, and as JSON
for tools and curl (``server/webui/render.py`` says which a request gets).

Roles add their own routes through ``Node.add_admin_routes``. Every error is JSON with a code and a
message, like RPC errors, so scripts handle both the same way; a browser gets the same as a page.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import logging
import resource
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

import bcrypt
from aiohttp import web

from kudu_async.common.errors import (
    KuduBadStatus,
    KuduConfigurationError,
    KuduIllegalState,
    KuduNotAuthorized,
    KuduNotFound,
)
from kudu_async.common.metrics import MetricRegistry
from kudu_async.consensus.raft_manager import RaftManager
from kudu_async.security.acl import Acls, Requires
from kudu_async.security.audit import audit_line
from kudu_async.security.identity import MAX_USER_NAME, Identity
from kudu_async.server.config import FLAGS, NodeConfig
from kudu_async.server.startup import StartupProgress
from kudu_async.server.webui import pages, render
from kudu_async.version import __version__

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_N = TypeVar("_N")


class AdminNode(Protocol):
    """What the admin app reads of the node it serves (``server.node.Node``, which builds this app)."""

    @property
    def role(self) -> str: ...

    @property
    def uuid(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def config(self) -> NodeConfig: ...

    @property
    def startup(self) -> StartupProgress: ...

    @property
    def metrics(self) -> MetricRegistry: ...

    @property
    def raft(self) -> RaftManager: ...

    def status(self) -> dict[str, Any]: ...

    def rpcz(self) -> dict[str, Any]: ...

    def mem_trackers(self) -> list[dict[str, Any]]: ...

    def mem_trackers_nested(self) -> dict[str, Any]: ...

    def add_admin_routes(self, app: web.Application) -> None: ...

    def audit(self, line: dict[str, Any]) -> None: ...


NODE_KEY: web.AppKey[AdminNode] = web.AppKey("node")


def node_as(request: web.Request, cls: type[_N]) -> _N:
    """The node serving ``request`` as its role's class, for a role's own pages."""
    node = request.app[NODE_KEY]
    if not isinstance(node, cls):
        raise KuduIllegalState(f"this admin page is for a {cls.__name__}; this node is a {node.role}")
    return node


def json_response(data: Any, status: int = 200) -> web.Response:
    """``web.json_response`` that also renders bytes and sets (role pages hold encoded keys)."""
    return web.json_response(data, status=status, dumps=lambda d: json.dumps(d, default=render.json_default))


def json_error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"code": code, "message": message}, status=status)


def _error(request: web.Request, status: int, body: dict[str, Any]) -> web.Response:
    """An error as JSON, or as a page for a browser (both name the code and what was wrong)."""
    if render.wants_html(request):
        return render.error_html(request, status, str(body.get("code", "ERROR")), str(body.get("message", "")))
    return web.json_response(body, status=status)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Map every failure to an error answer; the node itself keeps serving."""
    try:
        return await handler(request)
    except KuduBadStatus as e:
        return _error(request, e.http_status, e.to_dict())
    except web.HTTPException as e:
        if e.status < 400:
            raise
        code = e.reason.upper().replace(" ", "_")
        return _error(request, e.status, {"code": code, "message": f"{request.method} {request.path}: {e.reason}"})
    except Exception as e:
        log.exception("admin handler %s failed", request.path)
        return _error(request, 500, {"code": "RUNTIME_ERROR", "message": f"{type(e).__name__}: {e}"})


def csv_param(request: web.Request, name: str) -> list[str]:
    """Kudu's filter params are comma-separated lists."""
    raw = request.query.get(name, "")
    return [p for p in raw.split(",") if p]


def _node(request: web.Request) -> AdminNode:
    return request.app[NODE_KEY]


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="OK")


async def status(request: web.Request) -> web.Response:
    return web.json_response(_node(request).status())


async def varz_json(request: web.Request) -> web.Response:
    return web.json_response({"flags": _node(request).config.to_json()})


async def varz(request: web.Request) -> web.Response:
    """Kudu's flags page: a table for browsers, ``{"flags": ...}`` when JSON is asked for (``?raw``,
    ``Accept: application/json``), else ``--flag=value`` lines as Kudu's text form."""
    config = _node(request).config
    if render.wants_html(request):
        rows = pages.flag_rows(config.values, config.sources, FLAGS)
        return render.page(request, "varz.html", {"flags": rows}, "Flags")
    if render.asks_for_json(request):
        return render.json_answer({"flags": config.to_json()})
    lines = []
    for name, v in sorted(config.values.items()):
        if v is None:
            continue
        text = ("true" if v else "false") if isinstance(v, bool) else str(v)
        lines.append(f"--{name}={text}")
    return web.Response(text="\n".join(lines) + "\n", headers={"Vary": "Accept"})


async def version(request: web.Request) -> web.Response:
    node = _node(request)
    return web.json_response(
        {
            "version_info": {
                "version_string": __version__,
                "build_type": "RELEASE",
                "implementation": "kudu_async",
                "role": node.role,
            }
        }
    )


async def rpcz(request: web.Request) -> web.Response:
    return web.json_response(_node(request).rpcz())


async def metrics_json(request: web.Request) -> web.Response:
    reg = _node(request).metrics
    body = reg.to_json(csv_param(request, "metrics"), csv_param(request, "types"), csv_param(request, "ids"))
    return web.json_response(body)


async def metrics_prometheus(request: web.Request) -> web.Response:
    return web.Response(
        text=_node(request).metrics.to_prometheus(),
        content_type="text/plain",
        charset="utf-8",
        headers={"X-Prometheus-Format": "0.0.4"},
    )


async def mem_trackers(request: web.Request) -> web.Response:
    """Kudu's tracker table as a JSON list of {id, parent, limit, current, peak}; ``?nested=1`` gives the
    same tree with each tracker's children inside it."""
    node = _node(request)
    rows = node.mem_trackers()
    nested = request.query.get("nested", "") in ("1", "true")
    context = {"trackers": pages.mem_tracker_rows(rows), "process": process_memory()}
    body = node.mem_trackers_nested() if nested else rows
    return render.page(request, "mem_trackers.html", context, "Memory", json_body=body)


async def raft_status(request: web.Request) -> web.Response:
    raft = _node(request).raft
    return web.json_response(
        {
            "replicas": raft.status(),
            "peers": raft.transport.peer_status(),
            "messages_for_unknown_groups": raft.unknown_group_messages,
        }
    )


async def home(request: web.Request) -> web.Response:
    """The node's overview (role, uuid, version, uptime, leader) and every page it serves."""
    node = _node(request)
    paths = sorted({r.resource.canonical for r in request.app.router.routes() if r.resource is not None})
    st = node.status()
    body = {"status": st, "paths": paths}
    context = {
        **body,
        "pages": request.app[render.NAV_KEY],
        "query_pages": request.app[render.QUERY_PAGES_KEY],
        "uptime_s": st.get("uptime_s"),
    }
    return render.page(request, "home.html", context, "Home", json_body=body)


async def threadz(request: web.Request) -> web.Response:
    """Kudu's thread groups, with the event loop's tasks beside the threads; ``?group=`` lists one group."""
    group = render.query_param(request, "group")
    threads = await asyncio.to_thread(pages.threads)
    groups = pages.thread_groups(threads)
    if group is not None and group != "all":
        if group not in {g["group"] for g in groups}:
            raise KuduNotFound(f"thread group {group!r} not found on this node", {"parameter": "group"})
        threads = [t for t in threads if t["group"] == group]
    tasks, num_tasks = pages.tasks()
    body = {"groups": groups, "threads": threads, "tasks": tasks, "num_tasks": num_tasks, "group": group}
    return render.page(request, "threadz.html", body, "Threads")


async def stacks(request: web.Request) -> web.Response:
    """Every thread's and task's stack, as text (Kudu's /stacks); as data when JSON is asked for."""
    if render.asks_for_json(request):
        return render.json_answer(pages.stacks_json())
    return web.Response(text=pages.stacks_text(), headers={"Vary": "Accept"})


async def logs(request: web.Request) -> web.Response:
    """The last lines of the node's log file (``?lines=``, default DEFAULT_LOG_LINES)."""
    n = render.int_param(request, "lines", pages.DEFAULT_LOG_LINES, 1, pages.MAX_LOG_LINES)
    path = _node(request).config.log_file or None
    lines: list[str] = []
    message = None
    if path is None:
        message = "this node logs to stderr (started without --log-file): nothing to show here"
    else:
        try:
            lines = await asyncio.to_thread(pages.tail_lines, path, n)
        except OSError as e:
            message = f"cannot read the log file {path}: {e.strerror or e}"
    body = {"log_file": path, "lines": lines, "message": message}
    context = {**body, "rows": [pages.parse_log_line(line) for line in lines], "requested": n}
    return render.page(request, "logs.html", context, "Logs", json_body=body)


async def startup(request: web.Request) -> web.Response:
    """Kudu's start-up progress: each step's time, and how many replicas are open of how many."""
    node = _node(request)
    raft = node.raft
    if raft.reopened_at is not None:
        node.startup.end_if_running("replicas", raft.reopened_at)
    body = {
        "steps": node.startup.steps(),
        "replicas": pages.startup_replicas(raft.status(), raft.opening, raft.tombstoned),
    }
    return render.page(request, "startup.html", body, "Startup")


# --- authentication --------------------------------------------------------------------------------------

# Methods that only read; every other method may change state and needs a superuser.
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
OPEN_PATHS = frozenset({"/healthz"})
# bcrypt takes at most 72 bytes of password; longer ones are refused rather than silently cut.
MAX_PASSWORD_BYTES = 72
# Verified credentials are remembered (a digest, never the password) so a page load does not cost a bcrypt
# run per request; bounded in count and age.
CACHE_ENTRIES = 1024
CACHE_TTL_S = 300.0
# bcrypt runs concurrently at most this often (in worker threads): guessing cannot take every core.
MAX_CONCURRENT_VERIFICATIONS = 2


def parse_htpasswd(text: str, source: str) -> dict[str, bytes]:
    """``user:hash`` lines (blank lines and ``#`` comments skipped) with bcrypt hashes (``htpasswd -B``:
    ``$2y$``, ``$2b$``, ``$2a$``); any other scheme (Apache's unsalted ``{SHA}``, MD5 ``$apr1$``, crypt)
    is refused with its line number, since only bcrypt is both slow to guess and verified by a well-kept
    library."""
    users: dict[str, bytes] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, hashed = line.partition(":")
        if not sep or not user or len(user) > MAX_USER_NAME:
            raise KuduConfigurationError(f"{source} line {n}: expected user:bcrypt-hash")
        if not hashed.startswith(("$2y$", "$2b$", "$2a$")) or len(hashed) != 60:
            raise KuduConfigurationError(
                f"{source} line {n} (user {user!r}): not a bcrypt hash; make entries with 'htpasswd -B'"
            )
        if user in users:
            raise KuduConfigurationError(f"{source} line {n}: user {user!r} listed twice")
        users[user] = hashed.encode()
    if not users:
        raise KuduConfigurationError(f"{source}: no user:hash entries")
    return users


BearerResolver = Callable[[str], Identity]


class AdminAuth:
    """Who is asking for an admin page: HTTP basic against the password file, or a bearer token through
    ``bearer`` (a callable that verifies the token and returns its identity or raises NOT_AUTHORIZED)."""

    def __init__(self, acls: Acls, users: dict[str, bytes] | None, bearer: BearerResolver | None = None) -> None:
        self.acls = acls
        self.users = users
        self.bearer = bearer
        self._cache: OrderedDict[tuple[str, bytes], float] = OrderedDict()
        self._verifying = asyncio.Semaphore(MAX_CONCURRENT_VERIFICATIONS)

    @classmethod
    def from_config(cls, config: NodeConfig, acls: Acls) -> AdminAuth:
        path = config.webserver_password_file
        if not path:
            return cls(acls, None)
        try:
            text = Path(path).read_text()
        except OSError as e:
            raise KuduConfigurationError(f"--webserver-password-file {path}: cannot read: {e}") from None
        return cls(acls, parse_htpasswd(text, f"--webserver-password-file {path}"))

    @property
    def enabled(self) -> bool:
        return self.users is not None or self.bearer is not None

    async def identify(self, header: str) -> Identity:
        """The identity an ``authorization`` header proves; NOT_AUTHORIZED (401) if it proves none."""
        scheme, _, value = header.strip().partition(" ")
        if scheme.lower() == "bearer" and self.bearer is not None:
            try:
                return self.bearer(value.strip())
            except KuduNotAuthorized as e:
                raise _Unauthenticated(e.message, e.details) from None
        if scheme.lower() != "basic" or self.users is None:
            raise _Unauthenticated("send HTTP basic credentials (user and password)")
        try:
            user, sep, password = base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise _Unauthenticated("malformed basic credentials") from None
        if not sep or not user:
            raise _Unauthenticated("malformed basic credentials")
        if await self._verify(user, password.encode()):
            return Identity(user, "password")
        raise _Unauthenticated(f"wrong user name or password for {user!r}")

    async def _verify(self, user: str, password: bytes) -> bool:
        assert self.users is not None
        hashed = self.users.get(user)
        if hashed is None or len(password) > MAX_PASSWORD_BYTES:
            return False
        key = (user, hashlib.sha256(hashed + b"\0" + password).digest())
        now = time.monotonic()
        seen = self._cache.get(key)
        if seen is not None and now - seen < CACHE_TTL_S:
            return True
        async with self._verifying:
            ok = await asyncio.to_thread(bcrypt.checkpw, password, hashed)
        if ok:
            self._cache[key] = now
            self._cache.move_to_end(key)
            while len(self._cache) > CACHE_ENTRIES:
                self._cache.popitem(last=False)
        return bool(ok)


class _Unauthenticated(KuduNotAuthorized):
    """No (valid) credentials: answered 401 with a basic-auth challenge."""

    http_status = 401


AUTH_KEY: web.AppKey[AdminAuth] = web.AppKey("auth")
# The identity a request was authenticated as, for the pages that want it.
IDENTITY_KEY: web.RequestKey[Identity] = web.RequestKey("identity", Identity)


_OWN_CHECKS = "_admin_checks_own_privileges"


def checks_own_privileges(handler: Handler) -> Handler:
    """Mark a page whose state changes check the caller themselves (the REST catalog API, by the table
    privileges of the RPCs it runs): the middleware then asks only for a user, not a superuser."""
    setattr(handler, _OWN_CHECKS, True)
    return handler


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Require credentials for every page but the open ones, and a superuser for state changes (a user
    for the pages that check their callers' privileges themselves)."""
    auth = request.app[AUTH_KEY]
    if not auth.enabled or request.path in OPEN_PATHS:
        return await handler(request)
    node = request.app[NODE_KEY]
    client = request.remote or ""
    what = f"{request.method} {request.path}"
    header = request.headers.get("authorization", "")
    try:
        if not header:
            raise _Unauthenticated("this page needs credentials (HTTP basic auth)")
        identity = await auth.identify(header)
    except KuduNotAuthorized as e:
        node.audit(
            audit_line(identity=Identity(""), client=client, method="HTTP", obj=what, allowed=False, reason=e.message)
        )
        body = e.to_dict()
        headers = {"WWW-Authenticate": 'Basic realm="kudu_async", charset="UTF-8"'} if e.http_status == 401 else {}
        return web.json_response(body, status=e.http_status, headers=headers)
    own_checks = getattr(request.match_info.handler, _OWN_CHECKS, False)
    needs: Requires = "user" if request.method in READ_METHODS or own_checks else "superuser"
    if not auth.acls.allowed(identity, needs):
        reason = f"{identity.describe()} is not authorized to {what}: it requires a {needs}"
        node.audit(audit_line(identity=identity, client=client, method="HTTP", obj=what, allowed=False, reason=reason))
        return json_error(403, "NOT_AUTHORIZED", reason)
    request[IDENTITY_KEY] = identity
    return await handler(request)


def build_admin_app(node: AdminNode, auth: AdminAuth | None = None) -> web.Application:
    """The node's admin app; ``auth`` guards it (None: open pages, as a node without a password file)."""
    app = web.Application(middlewares=[error_middleware, auth_middleware], client_max_size=1024 * 1024)
    app[AUTH_KEY] = auth if auth is not None else AdminAuth(Acls.open(), None)
    app[NODE_KEY] = node
    app[render.NODE_INFO_KEY] = {"role": node.role, "uuid": node.uuid, "name": node.name}
    app[render.NAV_KEY] = []
    app[render.QUERY_PAGES_KEY] = {}
    r = app.router
    r.add_get("/", home)
    r.add_get("/healthz", healthz)
    r.add_get("/version", version)
    r.add_get("/varz", varz)
    r.add_get("/rpcz", rpcz)
    r.add_get("/metrics", metrics_json)
    r.add_get("/jsonmetricz", metrics_json)
    r.add_get("/metrics_prometheus", metrics_prometheus)
    r.add_get("/mem-trackers", mem_trackers)
    r.add_get("/threadz", threadz)
    r.add_get("/stacks", stacks)
    r.add_get("/logs", logs)
    r.add_get("/startup", startup)
    r.add_get(render.CSS_PATH, render.css)
    r.add_get("/api/v1/status", status)
    r.add_get("/api/v1/varz", varz_json)
    r.add_get("/api/v1/raft", raft_status)
    node.add_admin_routes(app)
    for path, label in COMMON_NAV:
        render.add_nav(app, path, label)
    return app


# The pages of every node in the nav bar, after the role's own.
COMMON_NAV = (
    ("/mem-trackers", "Memory"),
    ("/threadz", "Threads"),
    ("/logs", "Logs"),
    ("/varz", "Flags"),
    ("/startup", "Startup"),
    ("/stacks", "Stacks"),
    ("/metrics", "Metrics"),
)


def process_memory() -> dict[str, Any]:
    """Current and peak resident set size of this process, and its anonymous part (resident minus
    file-backed and shared pages), in bytes."""
    rss = anon = 0
    try:
        with open("/proc/self/statm") as fh:
            fields = fh.read().split()
        page = resource.getpagesize()
        rss = int(fields[1]) * page
        anon = rss - int(fields[2]) * page
    except OSError:
        rss = anon = 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"current_bytes": rss, "peak_bytes": max(peak, rss), "anonymous_bytes": anon}
