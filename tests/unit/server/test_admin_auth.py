"""Admin pages behind HTTP basic auth: /healthz open, reads for users, state changes for superusers."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from kudu_async.common.errors import KuduConfigurationError, KuduNotAuthorized
from kudu_async.security.acl import Acls
from kudu_async.security.identity import Identity
from kudu_async.server.admin import AdminAuth, build_admin_app, parse_htpasswd


class _Node:
    role = "tserver"
    uuid = "ts-uuid"
    name = "ts-0"

    def __init__(self) -> None:
        self.audited: list[dict[str, Any]] = []

    def status(self) -> dict[str, Any]:
        return {"role": self.role}

    def add_admin_routes(self, app: web.Application) -> None:
        async def step_down(request: web.Request) -> web.Response:
            return web.json_response({"stepped_down": True})

        app.router.add_post("/api/v1/step-down", step_down)

    def audit(self, line: dict[str, Any]) -> None:
        self.audited.append(line)


def _entry(user: str, password: str) -> str:
    # htpasswd -B writes $2y$; cost 4 keeps the test fast.
    return f"{user}:" + bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode().replace("$2b$", "$2y$", 1)


def _basic(user: str, password: str) -> dict[str, str]:
    return {"authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.fixture
async def admin(tmp_path: Path) -> AsyncIterator[tuple[TestClient[Any, Any], _Node]]:
    text = "# operators\n" + _entry("admin", "s3cret") + "\n" + _entry("alice", "pw") + "\n" + _entry("eve", "x")
    acls = Acls.from_flags(user_acl="alice", superuser_acl="admin", service_acl="kudu", authentication_required=True)
    node = _Node()
    app = build_admin_app(node, AdminAuth(acls, parse_htpasswd(text, "pw-file")))  # type: ignore[arg-type]
    client = TestClient(TestServer(app))
    await client.start_server()
    yield client, node
    await client.close()


async def test_pages_need_the_password_and_state_changes_a_superuser(
    admin: tuple[TestClient[Any, Any], _Node],
) -> None:
    client, node = admin
    assert (await client.get("/healthz")).status == 200
    r = await client.get("/api/v1/status")
    assert r.status == 401 and r.headers["WWW-Authenticate"].startswith("Basic realm=")
    assert (await r.json())["code"] == "NOT_AUTHORIZED"
    assert (await client.get("/api/v1/status", headers=_basic("alice", "wrong"))).status == 401
    assert (await client.get("/api/v1/status", headers={"authorization": "Basic !!!"})).status == 401
    r = await client.get("/api/v1/status", headers=_basic("alice", "pw"))
    assert r.status == 200 and (await r.json()) == {"role": "tserver"}
    assert (await client.get("/api/v1/status", headers=_basic("alice", "pw"))).status == 200  # cached
    # Eve has a password but is not in --user-acl.
    r = await client.get("/api/v1/status", headers=_basic("eve", "x"))
    assert r.status == 403 and "eve is not authorized" in (await r.json())["message"]
    r = await client.post("/api/v1/step-down", headers=_basic("alice", "pw"))
    assert r.status == 403 and "requires a superuser" in (await r.json())["message"]
    r = await client.post("/api/v1/step-down", headers=_basic("admin", "s3cret"))
    assert r.status == 200 and (await r.json()) == {"stepped_down": True}
    denied = [(x["user"], x["object"], x["allowed"]) for x in node.audited]
    assert ("alice", "POST /api/v1/step-down", False) in denied and ("eve", "GET /api/v1/status", False) in denied
    assert all(x["allowed"] is False for x in node.audited)


async def test_a_bearer_hook_resolves_identities(tmp_path: Path) -> None:
    acls = Acls.from_flags(user_acl="*", superuser_acl="admin", service_acl="kudu", authentication_required=True)

    def bearer(token: str) -> Identity:
        if token != "good":
            raise KuduNotAuthorized("bad token")
        return Identity("admin", "jwt")

    app = build_admin_app(_Node(), AdminAuth(acls, None, bearer=bearer))  # type: ignore[arg-type]
    async with TestClient(TestServer(app)) as client:
        assert (await client.post("/api/v1/step-down", headers={"authorization": "Bearer good"})).status == 200
        assert (await client.get("/", headers={"authorization": "Bearer bad"})).status == 401


def test_the_password_file_takes_bcrypt_only() -> None:
    assert set(parse_htpasswd(_entry("a", "b") + "\n\n", "f")) == {"a"}
    with pytest.raises(KuduConfigurationError, match=r"f line 1 \(user 'a'\): not a bcrypt hash"):
        parse_htpasswd("a:{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M=", "f")
    with pytest.raises(KuduConfigurationError, match="not a bcrypt hash"):
        parse_htpasswd("a:$apr1$abc$defghijklmnopqrstuvwx/", "f")
    with pytest.raises(KuduConfigurationError, match="listed twice"):
        parse_htpasswd(_entry("a", "b") + "\n" + _entry("a", "c"), "f")
    with pytest.raises(KuduConfigurationError, match="no user:hash entries"):
        parse_htpasswd("# nothing\n", "f")
