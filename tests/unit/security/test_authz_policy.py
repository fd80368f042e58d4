"""The table privilege policy: parsing, wildcards, groups, columns, implication, reload, the tserver check."""

from __future__ import annotations

import json

import pytest

from kudu_async.common.errors import KuduInvalidArgument, KuduNotAuthorized
from kudu_async.security.authz_policy import (
    PolicyHolder,
    check_ddl,
    check_table_access,
    check_write,
    parse_policy,
    privileges_for,
    qualified_name,
    write_operations,
)
from kudu_async.security.identity import Identity
from kudu_async.security.tokens import TokenSigner, TokenVerifier

POLICY = b"""
[groups]
analysts = ["alice", "bob"]

[[grant]]
groups = ["analysts"]
tables = ["sales.*"]
privileges = ["SELECT"]
columns = ["id", "amount"]

[[grant]]
users = ["alice"]
tables = ["sales.orders"]
privileges = ["insert", "UPDATE"]

[[grant]]
users = ["carol"]
tables = ["*"]
privileges = ["ALL"]

[[grant]]
users = ["dave"]
tables = ["default.t*"]
privileges = ["CREATE", "SELECT"]

[[grant]]
users = ["*"]
tables = ["public.*"]
privileges = ["METADATA"]
"""

ALICE, BOB, CAROL, DAVE, EVE = (Identity(u, "jwt") for u in ("alice", "bob", "carol", "dave", "eve"))


def _holder(data: bytes = POLICY) -> PolicyHolder:
    h = PolicyHolder("policy.toml")
    assert h.offer(data, 1.0) == ""
    return h


def test_names_wildcards_groups_and_columns() -> None:
    p = parse_policy(POLICY, "policy.toml")
    assert qualified_name("t1") == "default.t1" and qualified_name("db.t") == "db.t"
    a = p.privileges("alice", "sales.orders")
    assert a.privileges == {"SELECT", "INSERT", "UPDATE", "METADATA"}
    assert a.columns == frozenset({"id", "amount"})
    b = p.privileges("bob", "sales.orders")  # through the group only
    assert b.privileges == {"SELECT", "METADATA"} and b.columns == frozenset({"id", "amount"})
    assert p.privileges("bob", "hr.salaries").privileges == frozenset()
    # A table without a dot is in 'default'.
    d = p.privileges("dave", "t1")
    assert d.has("CREATE") and d.has("SELECT") and d.columns is None and d.has("METADATA")
    assert not p.privileges("dave", "other").has("SELECT")
    assert p.privileges("anyone", "public.x").privileges == {"METADATA"}
    assert p.privileges("anyone", "public.x").columns == frozenset()


def test_all_implies_everything() -> None:
    p = parse_policy(POLICY, "policy.toml")
    c = p.privileges("carol", "any.table")
    for priv in ("ALTER", "CREATE", "DELETE", "DROP", "INSERT", "SELECT", "UPDATE", "METADATA"):
        assert c.has(priv)
    assert c.columns is None


def test_json_form_is_the_same() -> None:
    doc = {"groups": {"g": ["u"]}, "grant": [{"groups": ["g"], "tables": ["db.*"], "privileges": ["DROP"]}]}
    p = parse_policy(json.dumps(doc).encode(), "policy.json")
    assert p.privileges("u", "db.x").has("DROP")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (b"[[grant]]\nusers=['a']\ntables=['t1']\nprivileges=['SELECT']", "'t1' is not database.table"),
        (b"[[grant]]\nusers=['a']\ntables=['db.t']\nprivileges=['READ']", "unknown privilege 'READ'"),
        (b"[[grant]]\ngroups=['nope']\ntables=['db.t']\nprivileges=['SELECT']", "unknown group"),
        (b"[[grant]]\ntables=['db.t']\nprivileges=['SELECT']", "names no users and no groups"),
        (b"[[grant]]\nusers=['a']\ntables=['db.t']\nprivileges=['INSERT']\ncolumns=['x']", "limits SELECT only"),
        (b"[[grant]]\nusers=['a']\nprivileges=['SELECT']", "'tables' missing"),
        (b"[other]\nx=1", "unknown key"),
        (b"[[grant]\n", "not valid TOML"),
    ],
)
def test_bad_files_are_refused_naming_the_problem(text: bytes, problem: str) -> None:
    with pytest.raises(KuduInvalidArgument, match=problem):
        parse_policy(text, "policy.toml")


def test_a_bad_edit_keeps_the_last_good_policy() -> None:
    h = PolicyHolder("policy.toml")
    with pytest.raises(KuduInvalidArgument):  # no good version yet: the error is the caller's to report
        h.offer(b"[[grant]", 1.0)
    assert h.offer(POLICY, 2.0) == ""
    problem = h.offer(b"[[grant]]\nusers=['a']\ntables=['oops']\nprivileges=['SELECT']", 3.0)
    assert "'oops' is not database.table" in problem and h.last_error == problem
    assert h.privileges(CAROL, "x.y", superuser=False).has("DROP")  # still the good version
    assert h.offer(b"", 4.0) == ""  # an empty policy is valid: nobody holds anything
    assert not h.privileges(CAROL, "x.y", superuser=False).has("METADATA")


def test_ddl_checks_and_superuser_bypass() -> None:
    h = _holder()
    check_ddl(h, DAVE, False, "CREATE", "t9", "create")
    with pytest.raises(KuduNotAuthorized, match=r"alice is not authorized to drop table sales.orders: .*DROP"):
        check_ddl(h, ALICE, False, "DROP", "sales.orders", "drop")
    check_ddl(h, EVE, True, "DROP", "sales.orders", "drop")  # a superuser
    check_ddl(PolicyHolder(), EVE, False, "DROP", "x", "drop")  # no policy file: everything allowed


def test_token_claims_and_the_tserver_check() -> None:
    h = _holder()
    claims = privileges_for(h, ALICE, False, "tid-1", "sales.orders")
    assert claims == {
        "user": "alice",
        "table_id": "tid-1",
        "table": "sales.orders",
        "privileges": ["INSERT", "METADATA", "SELECT", "UPDATE"],
        "columns": ["amount", "id"],
    }
    check_table_access(claims, "tid-1", "INSERT")
    check_table_access(claims, "tid-1", "UPSERT")  # INSERT and UPDATE
    check_table_access(claims, "tid-1", "SELECT", ["id", "amount"])
    with pytest.raises(KuduNotAuthorized, match=r"alice is not authorized to DELETE on table sales.orders"):
        check_table_access(claims, "tid-1", "DELETE")
    with pytest.raises(KuduNotAuthorized, match=r"alice is not authorized to SELECT column secret of table sales"):
        check_table_access(claims, "tid-1", "SELECT", ["id", "secret"])
    with pytest.raises(KuduNotAuthorized, match=r"authz token is for table 'tid-1'"):
        check_table_access(claims, "tid-2", "SELECT", ["id"])
    bob = privileges_for(h, BOB, False, "tid-1", "sales.orders")
    with pytest.raises(KuduNotAuthorized, match=r"bob is not authorized to UPSERT .* requires INSERT"):
        check_table_access(bob, "tid-1", "UPSERT")
    su = privileges_for(h, EVE, True, "tid-1", "sales.orders")
    assert su["columns"] is None
    check_table_access(su, "tid-1", "DELETE")
    check_table_access(su, "tid-1", "SELECT", ["anything"])


def test_a_writes_operations_are_each_checked() -> None:
    h = _holder()
    claims = privileges_for(h, ALICE, False, "tid", "sales.orders")  # INSERT and UPDATE, SELECT of two columns
    assert write_operations(bytes([1, 1, 10, 1])) == ["INSERT"]
    assert write_operations(bytes([1, 5, 13, 3, 12])) == ["DELETE", "INSERT", "UPSERT"]
    check_write(claims, "tid", bytes([1, 10, 5, 2] * 1000))
    with pytest.raises(KuduNotAuthorized, match=r"alice is not authorized to DELETE on table sales.orders"):
        check_write(claims, "tid", bytes([1] * 999 + [3]))


def test_claims_survive_a_signed_authz_token() -> None:
    """The path the token plumbing takes: the master signs the claims, a tablet server verifies and checks."""
    signer = TokenSigner(rotation_s=100.0, max_validity_s=50.0, propagation_s=0.0)
    signer.add(signer.new_key(1000.0))
    claims = privileges_for(_holder(), ALICE, False, "tid-1", "sales.orders")
    token = signer.sign("authz", claims, 1000.0, 30.0)
    verified = TokenVerifier(signer.verification_keys(1000.0)).verify(token, "authz", 1010.0)
    check_table_access(verified.claims, "tid-1", "SELECT", ["id"])
    with pytest.raises(KuduNotAuthorized, match="SELECT column secret"):
        check_table_access(verified.claims, "tid-1", "SELECT", ["secret"])
