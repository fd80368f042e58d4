"""Rendering a page: HTML for browsers, the page's JSON for everyone else.

A request gets HTML only when its ``Accept`` header asks for ``text/html`` (a browser does) and it has
no ``raw`` query parameter (Kudu's way to ask for a page's data); ``Accept: application/json``, curl's
``*/*`` and no header at all get the JSON, so scripts and tests that read an admin path as JSON keep
doing so. Every negotiated answer says ``Vary: Accept`` so that a cache never serves one for the other.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from importlib import resources
from typing import Any

import jinja2
from aiohttp import web

from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.common.mem_tracker import format_bytes
from kudu_async.version import __version__

# The role's pages in the nav bar, (path, label) in order; roles add theirs with ``add_nav``.
NAV_KEY: web.AppKey[list[tuple[str, str]]] = web.AppKey("webui_nav", list)
# Pages that need a query parameter (path -> its name): listed on the home page, not linked bare.
QUERY_PAGES_KEY: web.AppKey[dict[str, str]] = web.AppKey("webui_query_pages", dict)
# What the base layout shows of the node on every page (role, uuid, name); set by the admin app.
NODE_INFO_KEY: web.AppKey[dict[str, str]] = web.AppKey("webui_node", dict)

CSS_PATH = "/kudu.css"
HTML_TYPES = ("text/html", "application/xhtml+xml")
# A query parameter's value longer than this is refused: ids and names are short.
MAX_PARAM_CHARS = 256


def _load_css() -> bytes:
    return resources.files(__package__).joinpath("kudu.css").read_bytes()


CSS = _load_css()


def format_duration(seconds: float | None) -> str:
    """``850 ms``, ``12.3 s``, ``4 min 10 s``, ``2 h 5 min``, ``3 d 4 h``."""
    if seconds is None:
        return ""
    s = float(seconds)
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 60:
        return f"{s:.1f} s"
    m, sec = divmod(int(s), 60)
    if m < 60:
        return f"{m} min {sec} s"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h} h {m} min"
    d, h = divmod(h, 24)
    return f"{d} d {h} h"


def format_time(unix: float | None) -> str:
    """Unix seconds as UTC wall time, ``2026-11-27 09:15:26 UTC``."""
    if unix is None or unix <= 0:
        return ""
    return dt.datetime.fromtimestamp(float(unix), dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def json_default(o: Any) -> Any:
    """Bytes (encoded keys, binary defaults) as hex, sets as sorted lists: JSON for curl and jq."""
    if isinstance(o, bytes | bytearray | memoryview):
        return bytes(o).hex()
    if isinstance(o, set | frozenset):
        return sorted(o)
    raise TypeError(f"{type(o).__name__} is not JSON serializable")


def to_json(value: Any, indent: int | None = None) -> str:
    """JSON of a page's value (bytes as hex, sets as sorted lists), for the JSON answer and for nested
    values shown in a table cell."""
    return json.dumps(value, default=json_default, indent=indent, sort_keys=indent is not None)


def _bytes_filter(n: Any) -> str:
    """Bytes for people; nothing for a figure not known (None, or Kudu's -1)."""
    if not isinstance(n, int | float) or isinstance(n, bool) or n < 0:
        return ""
    return format_bytes(float(n))


def _cell(value: Any) -> str:
    """A value as table cell text: scalars as they are, lists and maps as compact JSON."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}" if abs(value) < 1e6 else f"{value:.3f}"
    if isinstance(value, str | int):
        return str(value)
    return to_json(value)


def _build_env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader(__package__, "templates"),
        autoescape=True,  # every value a page shows is escaped unless a template says otherwise
        undefined=jinja2.StrictUndefined,  # a misspelt name is an error in tests, not an empty cell
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        bytes=_bytes_filter, duration=format_duration, time=format_time, cell=_cell, tojson_pretty=_pretty
    )
    return env


def _pretty(value: Any) -> str:
    return to_json(value, indent=2)


ENV = _build_env()


def render(template: str, context: Mapping[str, Any]) -> str:
    """The HTML of ``template`` with ``context`` (tests render pages from data dicts with this)."""
    return ENV.get_template(template).render(context)


def _media_ranges(accept: str) -> list[tuple[str, float]]:
    out = []
    for part in accept.split(","):
        fields = [f.strip() for f in part.split(";")]
        if not fields[0]:
            continue
        q = 1.0
        for f in fields[1:]:
            k, _, v = f.partition("=")
            if k.strip().lower() == "q":
                try:
                    q = float(v)
                except ValueError:
                    q = 0.0
        out.append((fields[0].lower(), q))
    return out


def accepts_html(accept: str) -> bool:
    """Whether an ``Accept`` header asks for HTML at least as much as for JSON (a browser's does; curl's
    ``*/*`` does not name HTML and gets JSON)."""
    ranges = _media_ranges(accept)
    html = max((q for t, q in ranges if t in HTML_TYPES), default=0.0)
    json_q = max((q for t, q in ranges if t == "application/json"), default=0.0)
    return html > 0 and html >= json_q


def wants_html(request: web.Request) -> bool:
    return "raw" not in request.query and accepts_html(request.headers.get("Accept", ""))


def asks_for_json(request: web.Request) -> bool:
    """Whether a request names JSON (``?raw``, or ``Accept`` preferring application/json): what pages
    whose default form is text (``/varz``, ``/stacks``) answer JSON to."""
    if "raw" in request.query:
        return True
    ranges = _media_ranges(request.headers.get("Accept", ""))
    json_q = max((q for t, q in ranges if t == "application/json"), default=0.0)
    html = max((q for t, q in ranges if t in HTML_TYPES), default=0.0)
    return json_q > 0 and json_q > html


def json_answer(body: Any, status: int = 200) -> web.Response:
    """A page's data as JSON."""
    return web.Response(
        text=to_json(body), content_type="application/json", charset="utf-8", status=status, headers={"Vary": "Accept"}
    )


def query_param(request: web.Request, name: str, *, required: bool = False) -> str | None:
    """A query parameter's value: INVALID_ARGUMENT (400) naming it when required and missing, empty,
    too long or not printable."""
    value = request.query.get(name)
    if value is None:
        if required:
            raise KuduInvalidArgument(f"{request.path} needs the query parameter '{name}'", {"parameter": name})
        return None
    if not value or len(value) > MAX_PARAM_CHARS or not value.isprintable():
        shown = value[:40] + ("..." if len(value) > 40 else "")
        raise KuduInvalidArgument(f"query parameter '{name}': bad value {shown!r}", {"parameter": name})
    return value


def int_param(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    """An integer query parameter in ``[low, high]``; INVALID_ARGUMENT (400) naming it otherwise."""
    raw = query_param(request, name)
    if raw is None:
        return default
    try:
        v = int(raw)
    except ValueError:
        raise KuduInvalidArgument(f"query parameter '{name}': {raw!r} is not an integer", {"parameter": name}) from None
    if not low <= v <= high:
        raise KuduInvalidArgument(f"query parameter '{name}': {v} is not in {low}..{high}", {"parameter": name})
    return v


def add_nav(app: web.Application, path: str, label: str) -> None:
    """Show ``path`` in the nav bar of every page of this node."""
    app[NAV_KEY].append((path, label))


def add_query_page(app: web.Application, path: str, parameter: str) -> None:
    """Note that ``path`` needs the query parameter ``parameter`` (``/table?id=``)."""
    app[QUERY_PAGES_KEY][path] = parameter


# A page: its path, its handler and its nav-bar label (None: a page of one object, given by ``?id=``).
PageRoute = tuple[str, Callable[[web.Request], Awaitable[web.StreamResponse]], str | None]


def add_pages(app: web.Application, routes: Sequence[PageRoute]) -> None:
    """Serve each page; a labelled one in the nav bar, the others as pages of one object (``?id=``)."""
    for path, handler, label in routes:
        app.router.add_get(path, handler)
        if label:
            add_nav(app, path, label)
        else:
            add_query_page(app, path, "id")


def page_html(request: web.Request, template: str, context: Mapping[str, Any], title: str) -> str:
    """The HTML of a page of this node: the base layout's context (node, nav, title) plus ``context``."""
    app = request.app
    base = {
        "title": title,
        "node": app[NODE_INFO_KEY],
        "nav": app[NAV_KEY],
        "current_path": request.path,
        "version": __version__,
        "rendered_at": format_time(time.time()),
        "css_path": CSS_PATH,
        "request_query": [(k, v) for k, v in request.query.items() if k != "raw"],
        "raw_link": True,
    }
    return render(template, {**base, **context})


def page(
    request: web.Request,
    template: str,
    context: Mapping[str, Any],
    title: str,
    json_body: Any = None,
    status: int = 200,
) -> web.Response:
    """A page: its HTML for browsers; for every other client ``json_body`` (default: ``context``, the
    data the page renders)."""
    headers = {"Vary": "Accept"}
    if wants_html(request):
        return web.Response(
            text=page_html(request, template, context, title),
            content_type="text/html",
            charset="utf-8",
            status=status,
            headers=headers,
        )
    return json_answer(context if json_body is None else json_body, status)


def error_html(request: web.Request, status: int, code: str, message: str) -> web.Response:
    """An error as a page that names what was wrong (the JSON clients get ``{code, message}``)."""
    context = {"status": status, "code": code, "message": message, "raw_link": False}
    text = page_html(request, "error.html", context, f"{status} {code}")
    return web.Response(text=text, content_type="text/html", charset="utf-8", status=status, headers={"Vary": "Accept"})


async def css(request: web.Request) -> web.Response:
    return web.Response(body=CSS, content_type="text/css", charset="utf-8", headers={"Cache-Control": "max-age=3600"})
