"""Kudu's REST catalog API on a real secured cluster: every operation and documented status of the master's
OpenAPI document (``/api/v1/spec``) called as users with and without the table privileges, each answer
decoded as the type the document names; the leader from every master, followers' 503 naming it, no leader.

One cluster serves the module: 3 masters, 1 tablet server, TLS, JWTs (``--user-acl alice,bob,carol``,
``--superuser-acl admin``) and a policy where alice holds ALL on ``default.*``, bob SELECT only, carol
nothing; mallory is outside the ACLs. The tests run in order: the last one stops two masters.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import msgspec
import pytest

from kudu_async.master import rest_api
from kudu_async.master import rest_bodies as rb
from kudu_async.testing import MiniCluster
from kudu_async.testing.mini_cluster import NodeProcess

pytestmark = pytest.mark.integration

POLICY = {
    "grant": [
        {"users": ["alice"], "tables": ["default.*"], "privileges": ["ALL"]},
        {"users": ["bob"], "tables": ["default.*"], "privileges": ["SELECT"]},
    ]
}
TIMEOUT_MS = 6000  # --rest-catalog-default-request-timeout-ms: a DDL that cannot finish answers 500 after it
JSON = "application/json"
SPEC = rest_api.openapi_spec()
TYPES: dict[str, type[rb.Body]] = {
    c.__name__: c for c in (rb.TablesResponse, rb.TableResponse, rb.LeaderResponse, rb.ErrorResponse)
}
COVERED: set[tuple[str, str, str]] = set()  # (path, method, status) answered as documented
_TLS = ssl.create_default_context()
_TLS.check_hostname = False
_TLS.verify_mode = ssl.CERT_NONE


def _table_body(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "schema": {
            "columns": [
                {"name": "key", "type": "INT32", "is_nullable": False, "is_key": True},
                {"name": "int_val", "type": "INT32", "is_nullable": False, "is_key": False},
            ]
        },
        "partition_schema": {"hash_schema": [{"columns": [{"name": "key"}], "num_buckets": 2}]},
        "num_replicas": 1,
    }


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MiniCluster]:
    c = MiniCluster(
        num_masters=3,
        num_tservers=1,
        base_dir=tmp_path_factory.mktemp("rest"),
        secure=True,
        authz_policy=POLICY,
        extra_flags=["--user-acl=alice,bob,carol"],
        master_flags=[f"--rest-catalog-default-request-timeout-ms={TIMEOUT_MS}"],
    )
    c.start()
    try:
        yield c
    finally:
        c.shutdown()


class Api:
    """HTTP calls to the masters' admin servers as a user (a JWT), and the document's check of each answer."""

    def __init__(self, cluster: MiniCluster) -> None:
        self.cluster = cluster

    def raw(
        self,
        node: NodeProcess | str,
        method: str,
        path: str,
        user: str | None = "alice",
        body: Any = None,
        content_type: str = JSON,
    ) -> tuple[int, bytes]:
        if isinstance(node, NodeProcess):
            base = node.http_url
        else:
            base = node if node.startswith("http") else self.cluster.node(node).http_url
        url = base + path
        headers = {} if user is None else {"authorization": "Bearer " + self.cluster.mint_jwt(user)}
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["content-type"] = content_type
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_MS / 1000 + 20, context=_TLS) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def expect(self, status: int, node: NodeProcess | str, method: str, path: str, **kw: Any) -> Any:
        """Call, check the status and that the document lists it for the operation, decode the answer as the
        type the document names for it."""
        got, payload = self.raw(node, method, path, **kw)
        assert got == status, (method, path, got, payload[:500])
        template = "/tables/{table_id}" if path.count("/") == 4 else path.removeprefix("/api/v1")
        responses = SPEC["paths"][template][method.lower()]["responses"]
        assert str(status) in responses, f"{method} {template} answered {status}, which the document does not list"
        schema = responses[str(status)].get("content", {}).get(JSON, {}).get("schema")
        COVERED.add((template, method.lower(), str(status)))
        if schema is None:
            assert payload == b""
            return None
        body = json.loads(payload)
        msgspec.convert(body, TYPES[schema["$ref"].rsplit("/", 1)[1]])
        return body


@pytest.fixture(scope="module")
def api(cluster: MiniCluster) -> Api:
    return Api(cluster)


def _leader(cluster: MiniCluster) -> NodeProcess:
    deadline = time.monotonic() + 30
    while True:
        leaders = [m for m in cluster.masters if m.is_running() and cluster.http_json(m, "/api/v1/status")["is_leader"]]
        if len(leaders) == 1:
            return leaders[0]
        assert time.monotonic() < deadline, "no single leader master"
        time.sleep(0.1)


def _audit_line(m: NodeProcess, user: str, method: str) -> dict[str, Any]:
    """The first line of ``m``'s audit log (beside its log file, written off the loop) for ``user``'s call."""
    path = m.log_path.parent / "audit.log"
    for _ in range(100):
        lines = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
        found = [x for x in lines if x["user"] == user and x["method"] == method]
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"no audit line for {user}'s {method} on {m.name}")


def test_the_document_and_its_page_are_served(cluster: MiniCluster, api: Api) -> None:
    status, body = api.raw(cluster.masters[0], "GET", "/api/v1/spec")
    assert status == 200 and json.loads(body) == json.loads(json.dumps(SPEC))
    status, page = api.raw(cluster.masters[0], "GET", "/api/docs")
    assert status == 200 and b"POST /api/v1/tables" in page and b'id="TableResponse"' in page
    assert api.raw(cluster.masters[0], "GET", "/api/v1/spec", user=None)[0] == 401


def test_every_master_names_the_leader(cluster: MiniCluster, api: Api) -> None:
    leader = _leader(cluster)
    urls = {api.expect(200, m, "GET", "/api/v1/leader")["leader"] for m in cluster.masters}
    assert urls == {leader.http_url}
    assert api.expect(200, leader.http_url, "GET", "/api/v1/tables") == {"tables": []}  # Kudu's own check
    api.expect(401, leader, "GET", "/api/v1/leader", user=None)
    api.expect(403, leader, "GET", "/api/v1/leader", user="mallory")
    # A write to the leader page is a state change for the admin server: a superuser's, and then no such method.
    assert api.raw(leader, "POST", "/api/v1/leader", user="alice", body={})[0] == 403
    status, body = api.raw(leader, "POST", "/api/v1/leader", user="admin", body={})
    assert status == 405 and json.loads(body)["error"] == "Method not allowed"


def test_create_as_users_with_and_without_the_privilege(cluster: MiniCluster, api: Api) -> None:
    leader = _leader(cluster)
    made = api.expect(201, leader, "POST", "/api/v1/tables", body=_table_body("rest_t"))
    assert (made["name"], made["owner"], made["comment"]) == ("rest_t", "alice", "")
    assert [(c["name"], c["is_key"]) for c in made["schema"]["columns"]] == [("key", True), ("int_val", False)]
    key_id = made["schema"]["columns"][0]["id"]
    assert made["partition_schema"]["hash_schema"] == [{"columns": [{"id": key_id}], "num_buckets": 2, "seed": 0}]
    listed = api.expect(200, leader, "GET", "/api/v1/tables")
    assert listed == {"tables": [{"table_id": made["id"], "table_name": "rest_t"}]}
    # The same name again; a wrong field, named; no body; not JSON.
    err = api.expect(400, leader, "POST", "/api/v1/tables", body=_table_body("rest_t"))
    assert err["code"] == "ALREADY_PRESENT" and "rest_t" in err["error"]
    bad = _table_body("rest_bad")
    bad["schema"]["columns"][1]["type"] = "INT33"
    err = api.expect(400, leader, "POST", "/api/v1/tables", body=bad)
    assert err["details"]["field"] == "schema.columns[1].type" and "INT33" in err["error"]
    api.expect(411, leader, "POST", "/api/v1/tables")
    api.expect(415, leader, "POST", "/api/v1/tables", body=b"name=x", content_type="application/x-www-form-urlencoded")
    # Bob holds SELECT, carol nothing: no CREATE; mallory is outside the ACLs; nobody is nobody.
    for user in ("bob", "carol", "mallory"):
        err = api.expect(403, leader, "POST", "/api/v1/tables", user=user, body=_table_body("rest_denied"))
        assert err["code"] == "NOT_AUTHORIZED" and user in err["message"]
    api.expect(401, leader, "POST", "/api/v1/tables", user=None, body=_table_body("rest_denied"))
    # Audited as the RPCs are, in the same log.
    line = _audit_line(leader, "bob", "REST/CreateTable")
    assert line["allowed"] is False and "CREATE" in line["reason"]
    assert _audit_line(leader, "alice", "REST/CreateTable")["allowed"] is True
    # Carol sees no table; mallory no list at all.
    assert api.expect(200, leader, "GET", "/api/v1/tables", user="carol") == {"tables": []}
    api.expect(403, leader, "GET", "/api/v1/tables", user="mallory")
    api.expect(401, leader, "GET", "/api/v1/tables", user=None)
    status, body = api.raw(leader, "PUT", "/api/v1/tables", body={})
    assert status == 405 and json.loads(body)["error"] == "Method not allowed"
    assert api.raw(leader, "POST", "/api/v1/tables", user="alice", body={}, content_type="text/plain")[0] == 415
    assert api.raw(leader, "GET", "/api/v1/tables/")[0] == 404


def test_get_alter_and_delete_a_table(cluster: MiniCluster, api: Api) -> None:
    leader = _leader(cluster)
    table_id = api.expect(201, leader, "POST", "/api/v1/tables", body=_table_body("rest_a"))["id"]
    path = f"/api/v1/tables/{table_id}"
    got = api.expect(200, leader, "GET", path)
    assert got["name"] == "rest_a" and got["extra_config"] == {}
    assert api.expect(200, leader, "GET", path, user="bob") == got  # SELECT implies METADATA
    api.expect(403, leader, "GET", path, user="carol")
    api.expect(401, leader, "GET", path, user=None)
    err = api.expect(400, leader, "GET", "/api/v1/tables/123")
    assert err["error"] == "Invalid table ID: must be exactly 32 characters long."
    missing = "/api/v1/tables/05755b4c0c7640cd9f6673c2530a4e78"
    api.expect(404, leader, "GET", missing)
    # Kudu's alterations, one request each, then all at once with a rename of the table.
    add = {
        "table": {"table_name": "rest_a"},
        "alter_schema_steps": [
            {
                "type": "ADD_COLUMN",
                "add_column": {"schema": {"name": "new_column", "type": "STRING", "is_nullable": True}},
            }
        ],
    }
    altered = api.expect(200, leader, "PUT", path, body=add)
    assert [c["name"] for c in altered["schema"]["columns"]] == ["key", "int_val", "new_column"]
    more = {
        "new_table_name": "rest_b",
        "new_table_owner": "carol",
        "new_table_comment": "renamed over REST",
        "alter_schema_steps": [
            {"type": "RENAME_COLUMN", "rename_column": {"old_name": "int_val", "new_name": "v"}},
            {"type": "DROP_COLUMN", "drop_column": {"name": "new_column"}},
            {"type": "ALTER_COLUMN", "alter_column": {"delta": {"name": "v", "default_value": "BwAAAA=="}}},
        ],
    }
    altered = api.expect(200, leader, "PUT", path, body=more)
    assert (altered["name"], altered["owner"], altered["comment"]) == ("rest_b", "carol", "renamed over REST")
    assert [(c["name"], c.get("write_default_value")) for c in altered["schema"]["columns"]] == [
        ("key", None),
        ("v", "BwAAAA=="),
    ]
    assert api.expect(200, leader, "GET", path) == altered
    add["table"] = {"table_name": "rest_b"}
    err = api.expect(400, leader, "PUT", path, body={"alter_schema_steps": [{"type": "DROP_COLUMN"}]})
    assert err["details"]["field"] == "alter_schema_steps[0].drop_column"
    err = api.expect(403, leader, "PUT", path, user="bob", body=add)
    assert "ALTER" in err["message"]
    api.expect(401, leader, "PUT", path, user=None, body=add)
    api.expect(404, leader, "PUT", missing, body=add)
    api.expect(411, leader, "PUT", path)
    api.expect(415, leader, "PUT", path, body=b"{}", content_type="text/plain")
    api.expect(400, leader, "PUT", "/api/v1/tables/123", body=add)
    # Deletion: DROP, which bob lacks.
    api.expect(403, leader, "DELETE", path, user="bob")
    api.expect(401, leader, "DELETE", path, user=None)
    api.expect(400, leader, "DELETE", "/api/v1/tables/123")
    api.expect(404, leader, "DELETE", missing)
    api.expect(204, leader, "DELETE", path)
    api.expect(404, leader, "GET", path)
    status, body = api.raw(leader, "POST", path, body={})
    assert status == 405 and json.loads(body)["error"] == "Method not allowed"


def test_range_partitions_with_their_own_hash_schemas(cluster: MiniCluster, api: Api) -> None:
    leader = _leader(cluster)
    body = _table_body("rest_r")
    body["partition_schema"]["range_schema"] = {"columns": [{"name": "key"}]}
    hashed = [{"columns": [{"name": "key"}], "num_buckets": 3}]
    body["range_bounds"] = [{"lower": {"key": 0}, "upper": {"key": 100}, "hash_schema": hashed}]
    table_id = api.expect(201, leader, "POST", "/api/v1/tables", body=body)["id"]

    def tablets() -> int:
        return len(cluster.http_json(leader, "/api/v1/catalog/tables/rest_r")["tablets"])

    assert tablets() == 3
    steps = [
        {"type": "ADD_RANGE_PARTITION", "add_range_partition": {"lower": {"key": 100}, "upper": {"key": 200}}},
        {"type": "DROP_RANGE_PARTITION", "drop_range_partition": {"lower": {"key": 0}, "upper": {"key": 100}}},
    ]
    api.expect(200, leader, "PUT", f"/api/v1/tables/{table_id}", body={"alter_schema_steps": steps})
    assert tablets() == 2  # the table's own hash schema: 2 buckets


def test_followers_answer_503_naming_the_leader(cluster: MiniCluster, api: Api) -> None:
    leader = _leader(cluster)
    table_id = api.expect(201, leader, "POST", "/api/v1/tables", body=_table_body("rest_f"))["id"]
    path = f"/api/v1/tables/{table_id}"
    for m in cluster.masters:
        if m is leader:
            continue
        for method, p, body in (
            ("GET", "/api/v1/tables", None),
            ("POST", "/api/v1/tables", _table_body("rest_g")),
            ("GET", path, None),
            ("PUT", path, {"new_table_comment": "x"}),
            ("DELETE", path, None),
        ):
            err = api.expect(503, m, method, p, body=body)
            assert err["code"] == "NOT_THE_LEADER" and err["leader"] == leader.http_url, err
    assert api.expect(200, leader, "GET", path)["comment"] == ""  # nothing reached the catalog


def test_a_ddl_that_cannot_finish_in_time_answers_500(cluster: MiniCluster, api: Api) -> None:
    """The tablet server stopped: a create's tablets and an alter's schema cannot reach it within
    --rest-catalog-default-request-timeout-ms; both are in the catalog and finish once it runs again."""
    leader = _leader(cluster)
    table_id = api.expect(201, leader, "POST", "/api/v1/tables", body=_table_body("rest_slow"))["id"]
    path = f"/api/v1/tables/{table_id}"
    column = {"name": "c", "type": "INT8", "is_nullable": True}
    add = {"alter_schema_steps": [{"type": "ADD_COLUMN", "add_column": {"schema": column}}]}
    cluster.pause_node(cluster.tservers[0])
    try:
        with ThreadPoolExecutor(2) as pool:
            create = pool.submit(api.expect, 500, leader, "POST", "/api/v1/tables", body=_table_body("rest_late"))
            alter = pool.submit(api.expect, 500, leader, "PUT", path, body=add)
            created, altered = create.result(), alter.result()
    finally:
        cluster.resume_node(cluster.tservers[0])
    assert created["code"] == altered["code"] == "TIMED_OUT"
    assert "timed out" in created["error"] and "timed out" in altered["error"]
    late = created["details"]["table_id"]
    deadline = time.monotonic() + 60
    while True:
        states = {t["table_id"]: t["state"] for t in cluster.http_json(leader, "/api/v1/catalog/tables")["tables"]}
        if states[late] == states[table_id] == "RUNNING":
            break
        assert time.monotonic() < deadline, states
        time.sleep(0.2)
    assert [c["name"] for c in api.expect(200, leader, "GET", path)["schema"]["columns"]][-1] == "c"


def test_no_leader_answers_503(cluster: MiniCluster, api: Api) -> None:
    leader = _leader(cluster)
    for m in cluster.masters:
        if m is not leader:
            cluster.kill_node(m)
    deadline = time.monotonic() + 30
    while api.raw(leader, "GET", "/api/v1/leader")[0] != 503:
        assert time.monotonic() < deadline, "the lone master still names a leader"
        time.sleep(0.2)
    err = api.expect(503, leader, "GET", "/api/v1/leader")
    assert err["error"] == "No leader master found"
    api.expect(503, leader, "GET", "/api/v1/tables")
    # A master started with --enable-rest-api=false serves none of it.
    off = next(m for m in cluster.masters if m is not leader)
    off.extra_flags.append("--enable-rest-api=false")
    cluster.restart_node(off)
    assert [api.raw(off, "GET", p)[0] for p in ("/api/v1/leader", "/api/v1/tables", "/api/v1/spec")] == [404] * 3
    assert api.raw(off, "GET", "/api/v1/status")[0] == 200


def test_every_documented_answer_was_seen() -> None:
    if not COVERED:
        pytest.skip("checks what the module's other tests saw; run the whole module")
    documented = {
        (path, method, status)
        for path, item in SPEC["paths"].items()
        for method, op in item.items()
        if method != "parameters"
        for status in op["responses"]
    }
    assert documented - COVERED == set()
