"""Who may call what: each method's declared requirement, checked before its body is decoded."""

from __future__ import annotations

import ast
from pathlib import Path

import msgspec
import pytest

from kudu_async.common.errors import KuduInvalidArgument, KuduNotAuthorized
from kudu_async.rpc import RpcClient, RpcServer
from kudu_async.rpc.messages import Message, Method, serve
from kudu_async.rpc.server import CallContext
from kudu_async.security.acl import REQUIREMENTS, Acls
from kudu_async.security.identity import Identity

ROOT = Path(__file__).resolve().parents[3]


class Req(Message, frozen=True):
    n: int


class Resp(Message, frozen=True):
    n: int


async def _double(req: Req, ctx: CallContext) -> Resp:
    return Resp(req.n * 2)


@pytest.fixture
async def guarded() -> RpcServer:
    srv = RpcServer()
    serve(
        srv,
        "G",
        {
            "Open": Method(Req, Resp, _double, requires="any"),
            "Data": Method(Req, Resp, _double, requires="user"),
            "Raft": Method(Req, Resp, _double, requires="service"),
            "Flags": Method(Req, Resp, _double, requires="superuser"),
        },
    )
    srv.acls = Acls.from_flags(
        user_acl="alice", superuser_acl="admin", service_acl="kudu", authentication_required=False
    )
    await srv.start("127.0.0.1", 0)
    return srv


async def test_each_requirement_is_enforced_before_decoding(guarded: RpcServer) -> None:
    denied: list[tuple[str, str]] = []
    guarded.on_denied = lambda ctx, e: denied.append((ctx.full_method, ctx.identity.user))
    client = RpcClient("t")
    addr = guarded.address
    try:
        # Open: anyone; junk is INVALID_ARGUMENT naming the field.
        assert (await client.call(addr, "G", "Open", {"n": 2}, timeout_s=5))["n"] == 4
        with pytest.raises(KuduInvalidArgument, match="'n'"):
            await client.call(addr, "G", "Open", {"n": "x"}, timeout_s=5)
        # A user outside the ACL gets NOT_AUTHORIZED, junk body or not: the method's input rules stay unseen.
        client.set_credentials("eve", None)
        for method in ("Data", "Raft", "Flags"):
            for body in ({"n": 1}, {"junk": [1, 2]}, "garbage"):
                with pytest.raises(KuduNotAuthorized, match=rf"eve \(unauthenticated\) .* G/{method}"):
                    await client.call(addr, "G", method, body, timeout_s=5)
        assert denied[0] == ("G/Data", "eve") and len(denied) == 9
        client.set_credentials("alice", None)
        assert (await client.call(addr, "G", "Data", {"n": 3}, timeout_s=5))["n"] == 6
        with pytest.raises(KuduInvalidArgument, match="'n'"):  # a permitted caller learns what was wrong
            await client.call(addr, "G", "Data", {"n": "x"}, timeout_s=5)
        with pytest.raises(KuduNotAuthorized, match="requires a service"):
            await client.call(addr, "G", "Raft", {"n": 1}, timeout_s=5)
        client.set_credentials("kudu", None)
        assert (await client.call(addr, "G", "Raft", {"n": 1}, timeout_s=5))["n"] == 2
        with pytest.raises(KuduNotAuthorized, match="requires a superuser"):
            await client.call(addr, "G", "Flags", {"n": 1}, timeout_s=5)
        client.set_credentials("admin", None)
        for method in ("Data", "Raft", "Flags"):
            assert (await client.call(addr, "G", method, {"n": 5}, timeout_s=5))["n"] == 10
    finally:
        await client.close()
        await guarded.stop(1.0)
    assert guarded.requirements() == {"G/Data": "user", "G/Flags": "superuser", "G/Open": "any", "G/Raft": "service"}


async def test_the_authenticated_identity_is_what_the_acls_see(guarded: RpcServer) -> None:
    class Auth:
        def authenticate(self, credentials: bytes | None, claimed_user: str, peer: object) -> Identity:
            return Identity("admin" if credentials == b"Bearer ok" else claimed_user, "jwt")

    guarded.authenticator = Auth()
    client = RpcClient("t")
    try:
        client.set_credentials("alice", b"Bearer ok")
        assert (await client.call(guarded.address, "G", "Flags", {"n": 1}, timeout_s=5))["n"] == 2
        client.set_credentials("alice", None)
        with pytest.raises(KuduNotAuthorized, match=r"alice is not authorized to call G/Flags"):
            await client.call(guarded.address, "G", "Flags", {"n": 1}, timeout_s=5)
    finally:
        await client.close()
        await guarded.stop(1.0)


def test_a_registration_must_declare_a_known_requirement() -> None:
    srv = RpcServer()
    with pytest.raises(TypeError):
        srv.register("S", "M", _double)  # type: ignore[call-arg]
    with pytest.raises(KuduInvalidArgument, match="requires='everyone'"):
        srv.register("S", "M", _double, requires="everyone")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Method(Req, Resp, _double)  # type: ignore[call-arg]
    assert msgspec.json.encode(sorted(REQUIREMENTS)) == b'["any","service","superuser","user"]'


def _calls(tree: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)]


def _name(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def test_every_service_table_in_the_tree_declares_each_method() -> None:
    """Every ``Method(...)`` entry of a service table and every ``RpcServer.register(...)`` call in the
    package, scripts and tests names ``requires=`` with a known value."""
    undeclared: list[str] = []
    seen = 0
    for base in ("kudu_async", "scripts", "tests"):
        for path in sorted((ROOT / base).rglob("*.py")):
            text = path.read_text()
            if "Method(" not in text and ".register(" not in text:
                continue
            for call in _calls(ast.parse(text)):
                name = _name(call)
                args = call.args
                # rpc.messages.Method(request, response, handler); the connection layer's Method(svc, ...) is
                # what register builds from it.
                is_entry = (
                    name == "Method" and len(args) >= 3 and not (isinstance(args[0], ast.Name) and args[0].id == "svc")
                )
                # RpcServer.register(service, "Method" or a name variable, handler)
                is_register = name == "register" and len(args) >= 3 and isinstance(args[1], ast.Constant | ast.Name)
                if not (is_entry or is_register):
                    continue
                kw = {k.arg: k.value for k in call.keywords}
                where = f"{path.relative_to(ROOT)}:{call.lineno}"
                if path.name == "test_rpc_authz.py":  # this file's own refusals
                    continue
                if "requires" not in kw:
                    undeclared.append(where)
                    continue
                value = kw["requires"]
                if isinstance(value, ast.Constant) and value.value not in REQUIREMENTS:
                    undeclared.append(f"{where} (requires={value.value!r})")
                seen += 1
    assert not undeclared, f"RPC methods without a requires= declaration: {undeclared}"
    assert seen >= 50  # the walk found the service tables (Master, TabletServer, Consensus, TabletCopy, Generic, ...)
