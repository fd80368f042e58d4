"""The ``kudu`` command line's machinery: a registry of verbs at Kudu's paths, Kudu's flag spellings, its output
formats and exit statuses.

Each area module (``table.py``, ``tserver.py``, ...) registers its verbs with :func:`verb`; ``main`` builds one
argparse tree from the registry. Kudu's tool is gflags-based: flags are written ``-name=value`` or
``--name=value`` with underscores, booleans as ``-name`` or ``-name=false``; every flag here takes all of those
spellings and hyphens too, so operators' scripts run unchanged. Bad usage prints the verb's usage and exits 1
as Kudu's tool does (argparse's own status would be 2).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from kudu_async.client.aio import AsyncClient, master_addresses
from kudu_async.client.authn import os_user
from kudu_async.client.core import ClientCore
from kudu_async.client.options import ENCRYPTION_OPTIONAL, ENCRYPTION_REQUIRED, ENCRYPTION_REQUIRED_REMOTE, client_tls
from kudu_async.common.errors import KuduBadStatus
from kudu_async.rpc.client import RpcClient
from kudu_async.security.identity import bearer_header, kudu_token_header
from kudu_async.security.tls import ClientTls
from kudu_async.tools.progress import progress as progress  # the verbs' progress bars

PROG = "kudu"
FORMATS = ("pretty", "space", "tsv", "csv", "json")
DEFAULT_TIMEOUT_MS = 60_000  # Kudu's -timeout_ms for its tool


class UsageError(Exception):
    """Bad arguments found after parsing (a malformed address list, a value out of range): usage, exit 1."""


@dataclass
class Result:
    """What a verb prints: ``text`` for people (None: ``data`` as JSON), and the exit status."""

    data: Any = None
    text: str | None = None
    status: int = 0


Handler = Callable[["Context", argparse.Namespace], Awaitable[Result]]
ArgAdder = Callable[[argparse.ArgumentParser], None]


@dataclass(frozen=True)
class Verb:
    path: tuple[str, ...]
    help: str
    handler: Handler
    add_args: ArgAdder | None
    masters: bool  # takes <master_addresses> as its first positional argument, as Kudu's cluster verbs do


@dataclass
class Registry:
    verbs: dict[tuple[str, ...], Verb] = field(default_factory=dict)
    groups: dict[tuple[str, ...], str] = field(default_factory=dict)


REGISTRY = Registry()


def group(*path: str, help: str) -> None:
    """Describe a verb group (``table``, ``tablet change_config``...): its line in ``kudu <parent> --help``."""
    REGISTRY.groups[path] = help


def verb(*path: str, help: str, args: ArgAdder | None = None, masters: bool = True) -> Callable[[Handler], Handler]:
    """Register ``handler`` as ``kudu <path...>``; ``args`` adds its positional arguments and flags (after
    ``<master_addresses>`` when ``masters``)."""

    def deco(handler: Handler) -> Handler:
        if path in REGISTRY.verbs:
            raise ValueError(f"kudu {' '.join(path)} registered twice")
        REGISTRY.verbs[path] = Verb(path, help, handler, args, masters)
        return handler

    return deco


# --- flags with Kudu's spellings ---------------------------------------------------------------------------


def spellings(name: str) -> list[str]:
    """``-name``, ``--name`` with underscores and with hyphens (Kudu writes underscores; both work)."""
    forms = dict.fromkeys((name, name.replace("_", "-"), name.replace("-", "_")))
    return [p + f for f in forms for p in ("-", "--")]


def parse_bool(text: str) -> bool:
    low = text.lower()
    if low in ("true", "1", "yes", "t", "y"):
        return True
    if low in ("false", "0", "no", "f", "n"):
        return False
    raise argparse.ArgumentTypeError(f"not a boolean: {text!r} (true or false)")


def flag(p: argparse.ArgumentParser, name: str, **kw: Any) -> argparse.Action:
    """A Kudu-style flag: ``flag(p, "list_tablets", type=bool, help=...)`` takes ``-list_tablets``,
    ``--list-tablets=false``...; its dest is the underscored name."""
    dest = name.replace("-", "_")
    if kw.get("type") is bool:
        kw["type"] = parse_bool
        kw.setdefault("nargs", "?")
        kw.setdefault("const", True)
        kw.setdefault("default", False)
        kw.setdefault("metavar", "BOOL")
    return p.add_argument(*spellings(name), dest=dest, **kw)


def add_format_flag(
    p: argparse.ArgumentParser, default: str = "pretty", choices: Sequence[str] = FORMATS, name: str = "format"
) -> None:
    flag(p, name, choices=choices, default=default, help=f"output format: {', '.join(choices)} [{default}]")


def csv_list(text: str | None, what: str) -> list[str] | None:
    """A comma-separated flag value as a list (None when not given); empty items are refused."""
    if text is None:
        return None
    items = [s.strip() for s in text.split(",")]
    if not all(items):
        raise UsageError(f"{what}: empty item in {text!r}")
    return items


def columns_list(text: str, known: Sequence[str]) -> list[str]:
    """A ``-columns`` flag's value: known column names in the order given (``rpc_addresses`` taken for
    ``rpc-addresses``, any case)."""
    columns = [c.lower().replace("_addresses", "-addresses") for c in csv_list(text, "-columns") or []]
    unknown = [c for c in columns if c not in known]
    if unknown:
        raise UsageError(f"-columns: unknown column(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return columns


def add_columns_flag(p: argparse.ArgumentParser, known: Sequence[str], default: str) -> None:
    """Kudu's ``-columns`` of a listing verb (read with :func:`columns_list`), and ``-format``."""
    flag(p, "columns", default=default, help=f"comma-separated columns to print, of {', '.join(known)} [{default}]")
    add_format_flag(p)


# --- output ------------------------------------------------------------------------------------------------


def render_rows(rows: Sequence[dict[str, Any]], columns: Sequence[str], fmt: str) -> str:
    """Rows as Kudu's ``-format`` prints them: ``pretty`` (aligned, with a header and a rule), ``space`` (values
    separated by spaces, no header), ``tsv``, ``csv`` (with a header), ``json`` (a list of objects)."""
    if fmt == "json":
        return json.dumps([{c: r.get(c) for c in columns} for r in rows], default=str)
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    if fmt == "space":
        return "\n".join(" ".join(row) for row in cells)
    if fmt == "tsv":
        return "\n".join("\t".join(row) for row in cells)
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(columns)
        w.writerows(cells)
        return buf.getvalue().rstrip("\n")
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    head = " | ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))
    rule = "-+-".join("-" * w for w in widths)
    body = [" | ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join([head.rstrip(), rule, *(b.rstrip() for b in body)])


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list | tuple):
        return ",".join(_cell(x) for x in v)
    return str(v)


def rows_result(rows: Sequence[dict[str, Any]], columns: Sequence[str], fmt: str, status: int = 0) -> Result:
    return Result(data=list(rows), text=render_rows(rows, columns, fmt), status=status)


def object_result(obj: Any, fmt: str, render: Callable[[Any], str], status: int = 0) -> Result:
    """One report (ksck's, a table's description): a JSON document under ``-format=json``, else ``render``'s
    text for people."""
    if fmt.startswith("json"):
        text = json.dumps(obj, default=str, indent=2 if fmt == "json_pretty" else None)
    else:
        text = render(obj)
    return Result(data=obj, text=text, status=status)


def show_progress() -> bool:
    """Progress lines only where a person watches (stderr is a terminal)."""
    return sys.stderr.isatty()


# --- the cluster connection -------------------------------------------------------------------------------


def add_connection_flags(p: argparse.ArgumentParser) -> None:
    """Flags every verb takes: the deadline and how to reach and authenticate to a secured cluster."""
    flag(
        p, "timeout_ms", type=int, default=DEFAULT_TIMEOUT_MS, help=f"deadline of each operation [{DEFAULT_TIMEOUT_MS}]"
    )
    flag(
        p,
        "encryption_policy",
        choices=(ENCRYPTION_OPTIONAL, ENCRYPTION_REQUIRED_REMOTE, ENCRYPTION_REQUIRED),
        default=os.environ.get("KUDU_ENCRYPTION_POLICY", ENCRYPTION_OPTIONAL),
        help="TLS to the cluster [env KUDU_ENCRYPTION_POLICY; optional]",
    )
    flag(
        p,
        "trusted_certificates",
        default=os.environ.get("KUDU_TRUSTED_CERTIFICATES", ""),
        metavar="FILE[,FILE]",
        help="PEM files of the CA certificates servers must verify against (the master's /ipki-ca-cert) "
        "[env KUDU_TRUSTED_CERTIFICATES; none: encrypt without verifying]",
    )
    flag(p, "jwt", default=os.environ.get("KUDU_JWT") or None, help="a JWT to authenticate with [env KUDU_JWT]")
    flag(
        p,
        "authn_token",
        default=os.environ.get("KUDU_AUTHN_TOKEN") or None,
        help="an authn token (base64) the masters issued [env KUDU_AUTHN_TOKEN]",
    )


class Context:
    """What a verb's handler talks through: a client for the masters given on the command line, or a bare RPC
    client for one node; both carry the command line's credentials and TLS policy and are closed at exit."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.timeout_s = args.timeout_ms / 1000
        self._clients: list[AsyncClient] = []
        self._rpcs: list[RpcClient] = []

    def tls(self) -> ClientTls:
        files = [f for f in self.args.trusted_certificates.split(",") if f]
        return client_tls(self.args.encryption_policy, files or None)

    def _token(self) -> bytes | None:
        import base64
        import binascii

        if self.args.authn_token is None:
            return None
        try:
            return kudu_token_header(base64.b64decode(self.args.authn_token, validate=True))
        except (binascii.Error, ValueError):
            raise UsageError("-authn_token must be the base64 of an authn token") from None

    async def client(self, masters: str | None = None) -> AsyncClient:
        """A client of the cluster whose masters are ``masters`` (default: the verb's <master_addresses>),
        authenticated before it is handed out."""
        addrs = masters if masters is not None else self.args.master_addresses
        hosts = csv_list(addrs, "master_addresses") or []
        c = AsyncClient(
            ClientCore(
                master_addresses(hosts, None), admin_timeout_ms=self.args.timeout_ms, tls=self.tls(), jwt=self.args.jwt
            )
        )
        self._clients.append(c)
        token = self._token()
        if self.args.jwt is None and token is not None:
            c.rpc.set_credentials(os_user(), token)
        await c.core.authenticate()
        return c

    def rpc(self) -> RpcClient:
        """A bare RPC client for verbs that talk to one node by address (``tserver status <addr>``): it
        presents the JWT (every node verifies it against the JWKS) or else the authn token."""
        r = RpcClient(node_name=PROG, tls=self.tls())
        r.set_credentials(os_user(), bearer_header(self.args.jwt) if self.args.jwt else self._token())
        self._rpcs.append(r)
        return r

    async def node_rpc(self) -> RpcClient:
        """An RPC client for a verb that names one node: ``rpc()``, or, given -jwt and -master_addresses, the
        client of those masters, which exchange the JWT for the authn token tablet servers take."""
        if self.args.jwt and getattr(self.args, "master_addresses", None):
            return (await self.client()).rpc
        return self.rpc()

    async def close(self) -> None:
        for c in self._clients:
            await c.close()
        for r in self._rpcs:
            await r.close()


# --- the parser ------------------------------------------------------------------------------------------------


class _Formatter(argparse.HelpFormatter):
    """Help names each flag once, in Kudu's spelling (the other spellings work too)."""

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not action.option_strings:
            return super()._format_action_invocation(action)
        name = action.option_strings[0]
        if action.nargs == 0:
            return name
        return f"{name}={self._format_args(action, self._get_default_metavar_for_optional(action))}"


class _Parser(argparse.ArgumentParser):
    """Kudu's tool answers bad usage with the usage and exit status 1."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        kw.setdefault("formatter_class", _Formatter)
        kw.setdefault("allow_abbrev", False)
        super().__init__(*args, **kw)

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(1, f"{self.prog}: Invalid argument: {message}\n")


def build_parser(registry: Registry = REGISTRY) -> argparse.ArgumentParser:
    root = _Parser(prog=PROG, description="Administer a kudu_async cluster (Kudu's kudu tool).")
    subs: dict[tuple[str, ...], Any] = {}

    def subparsers(path: tuple[str, ...]) -> Any:
        if path in subs:
            return subs[path]
        if not path:
            parent: argparse.ArgumentParser = root
        else:
            parent = subparsers(path[:-1]).add_parser(
                path[-1], help=registry.groups.get(path, ""), description=registry.groups.get(path)
            )
        subs[path] = parent.add_subparsers(dest=f"_level{len(path)}", required=True, metavar="<command>")
        return subs[path]

    for path, v in sorted(registry.verbs.items()):
        p = subparsers(path[:-1]).add_parser(path[-1], help=v.help, description=v.help)
        if v.masters:
            p.add_argument("master_addresses", help="comma-separated master RPC addresses host:port")
        else:
            flag(
                p,
                "master_addresses",
                default=os.environ.get("KUDU_MASTER_ADDRESSES") or None,
                metavar="HOST:PORT[,...]",
                help="with -jwt: the masters that exchange it for the authn token a tablet server takes "
                "(not a Kudu flag) [env KUDU_MASTER_ADDRESSES]",
            )
        if v.add_args is not None:
            v.add_args(p)
        add_connection_flags(p)
        p.set_defaults(_verb=v)
    return root


def run(argv: Sequence[str] | None, registry: Registry = REGISTRY) -> int:
    import asyncio

    try:
        args = build_parser(registry).parse_args(argv)
    except SystemExit as e:  # usage (status 1) or --help (0): a status to return, so callers and tests see it
        return e.code if isinstance(e.code, int) else 1
    v: Verb = args._verb
    if args.timeout_ms <= 0:
        print(f"{PROG}: Invalid argument: -timeout_ms must be positive", file=sys.stderr)
        return 1

    async def go() -> Result:
        ctx = Context(args)
        try:
            return await v.handler(ctx, args)
        finally:
            await ctx.close()

    try:
        result = asyncio.run(go())
    except UsageError as e:
        print(f"{PROG} {' '.join(v.path)}: Invalid argument: {e}", file=sys.stderr)
        return 1
    except KuduBadStatus as e:
        print(f"{PROG} {' '.join(v.path)}: {e}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as e:
        print(f"{PROG} {' '.join(v.path)}: {e}", file=sys.stderr)
        return 1
    if result.text is not None:
        if result.text:
            print(result.text)
    elif result.data is not None:
        print(json.dumps(result.data, indent=2, sort_keys=True, default=str))
    return result.status


def iter_paths(registry: Registry = REGISTRY) -> Iterable[tuple[str, ...]]:
    return sorted(registry.verbs)
