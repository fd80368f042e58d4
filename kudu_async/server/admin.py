"""The admin HTTP app (aiohttp) both roles serve: Kudu's paths plus a JSON API for tools and curl.

Roles add their own routes through ``Node.add_admin_routes``. Every error is JSON with a code and a
message, like RPC errors, so scripts handle both the same way.
"""

from __future__ import annotations

import json
import logging
import resource
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from aiohttp import web

from kudu_async.common.errors import KuduBadStatus, KuduIllegalState
from kudu_async.common.metrics import MetricRegistry
from kudu_async.consensus.raft_manager import RaftManager
from kudu_async.server.config import NodeConfig
from kudu_async.version import __version__

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_N = TypeVar("_N")


class AdminNode(Protocol):
    """What the admin app reads of the node it serves (``server.node.Node``, which builds this app)."""

    @property
    def role(self) -> str: ...

    @property
    def config(self) -> NodeConfig: ...

    @property
    def metrics(self) -> MetricRegistry: ...

    @property
    def raft(self) -> RaftManager: ...

    def status(self) -> dict[str, Any]: ...

    def rpcz(self) -> dict[str, Any]: ...

    def mem_trackers(self) -> list[dict[str, Any]]: ...

    def mem_trackers_nested(self) -> dict[str, Any]: ...

    def add_admin_routes(self, app: web.Application) -> None: ...


NODE_KEY: web.AppKey[AdminNode] = web.AppKey("node")


def node_as(request: web.Request, cls: type[_N]) -> _N:
    """The node serving ``request`` as its role's class, for a role's own pages."""
    node = request.app[NODE_KEY]
    if not isinstance(node, cls):
        raise KuduIllegalState(f"this admin page is for a {cls.__name__}; this node is a {node.role}")
    return node


def _json_default(o: Any) -> Any:
    """Bytes (encoded keys, binary defaults) as hex, sets as sorted lists: JSON for curl and jq."""
    if isinstance(o, bytes | bytearray | memoryview):
        return bytes(o).hex()
    if isinstance(o, set | frozenset):
        return sorted(o)
    raise TypeError(f"{type(o).__name__} is not JSON serializable")


def json_response(data: Any, status: int = 200) -> web.Response:
    """``web.json_response`` that also renders bytes and sets (role pages hold encoded keys)."""
    return web.json_response(data, status=status, dumps=lambda d: json.dumps(d, default=_json_default))


def json_error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"code": code, "message": message}, status=status)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Map every failure to a JSON error body; the node itself keeps serving."""
    try:
        return await handler(request)
    except KuduBadStatus as e:
        return web.json_response(e.to_dict(), status=e.http_status)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        return json_error(e.status, e.reason.upper().replace(" ", "_"), f"{request.method} {request.path}: {e.reason}")
    except Exception as e:
        log.exception("admin handler %s failed", request.path)
        return json_error(500, "RUNTIME_ERROR", f"{type(e).__name__}: {e}")


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


async def varz_text(request: web.Request) -> web.Response:
    lines = []
    for name, v in sorted(_node(request).config.values.items()):
        if v is None:
            continue
        text = ("true" if v else "false") if isinstance(v, bool) else str(v)
        lines.append(f"--{name}={text}")
    return web.Response(text="\n".join(lines) + "\n")


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
    if request.query.get("nested", "") in ("1", "true"):
        return web.json_response(node.mem_trackers_nested())
    return web.json_response(node.mem_trackers())


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
    node = _node(request)
    paths = sorted({r.resource.canonical for r in request.app.router.routes() if r.resource is not None})
    return web.json_response({"status": node.status(), "paths": paths})


def build_admin_app(node: AdminNode) -> web.Application:
    app = web.Application(middlewares=[error_middleware], client_max_size=1024 * 1024)
    app[NODE_KEY] = node
    r = app.router
    r.add_get("/", home)
    r.add_get("/healthz", healthz)
    r.add_get("/version", version)
    r.add_get("/varz", varz_text)
    r.add_get("/rpcz", rpcz)
    r.add_get("/metrics", metrics_json)
    r.add_get("/jsonmetricz", metrics_json)
    r.add_get("/metrics_prometheus", metrics_prometheus)
    r.add_get("/mem-trackers", mem_trackers)
    r.add_get("/api/v1/status", status)
    r.add_get("/api/v1/varz", varz_json)
    r.add_get("/api/v1/raft", raft_status)
    node.add_admin_routes(app)
    return app


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
