"""Fine-grained table privileges: Kudu's Ranger model without Ranger, from a policy file.

Sans-IO: a policy is parsed from the file's bytes (``parse_policy``), a ``PolicyHolder`` keeps the last
good one when an edit breaks the file, and the checks are plain functions. The master's shell reads the
file when its modification time changes (``--authz-policy-file``).

The file (TOML, or JSON with the same shape)::

    [groups]
    analysts = ["alice", "bob"]

    [[grant]]
    groups = ["analysts"]          # and/or users = [...]; "*" is every user
    tables = ["sales.*", "default.t1"]
    privileges = ["SELECT"]
    columns = ["id", "amount"]     # optional, SELECT only: the columns it may read

Tables are named Kudu's way, ``database.table``; a table whose name has no dot is in ``default``. A
pattern is ``database.table`` with shell wildcards (``*`` alone is every table). Implication as in Kudu's
Ranger integration: ALL implies every privilege, and any privilege on a table implies METADATA on it (seeing
it in lists and reading its schema). A SELECT grant with columns allows reading those columns only; a SELECT
grant without (or ALL) allows every column. Superusers bypass the policy.

The data path: the master computes the claims of a table's authz token with ``privileges_for`` and a
tablet server checks an operation against the verified claims with ``check_table_access``.
"""

from __future__ import annotations

import fnmatch
import json
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np

from kudu_async.common.errors import KuduInvalidArgument, KuduNotAuthorized
from kudu_async.common.row_conversion import OpType
from kudu_async.security.identity import Identity

Privilege = Literal["ALL", "ALTER", "CREATE", "DELETE", "DROP", "INSERT", "SELECT", "UPDATE", "METADATA"]
PRIVILEGES: tuple[Privilege, ...] = get_args(Privilege)
# What a tablet server checks a request against: a write operation's kind or a scan.
DataOp = Literal["INSERT", "UPDATE", "DELETE", "UPSERT", "SELECT"]
DEFAULT_DATABASE = "default"
# Bounds on what a policy file may hold: it is read on the master's loop shell and kept in memory.
MAX_POLICY_BYTES = 4 * 1024 * 1024
MAX_GRANTS = 10_000


def qualified_name(table: str) -> str:
    """Kudu's ``database.table`` form of a table name: a name without a dot is in ``default``."""
    return table if "." in table else f"{DEFAULT_DATABASE}.{table}"


@dataclass(frozen=True, slots=True)
class Grant:
    """Privileges on the tables matching ``tables`` for the listed users and groups."""

    users: frozenset[str]
    groups: frozenset[str]
    tables: tuple[str, ...]
    privileges: frozenset[Privilege]
    # SELECT's columns; None: every column.
    columns: frozenset[str] | None

    def applies_to(self, user: str, user_groups: frozenset[str]) -> bool:
        return "*" in self.users or user in self.users or bool(self.groups & user_groups)

    def matches(self, qualified: str) -> bool:
        return any(fnmatch.fnmatchcase(qualified, p) for p in self.tables)


@dataclass(frozen=True, slots=True)
class TablePrivileges:
    """What one user may do on one table: the privileges (implication applied) and the readable columns."""

    privileges: frozenset[Privilege]
    # None: every column (when SELECT is held); an empty set: none.
    columns: frozenset[str] | None

    def has(self, privilege: Privilege) -> bool:
        return "ALL" in self.privileges or privilege in self.privileges


ALL_PRIVILEGES = TablePrivileges(frozenset(PRIVILEGES), None)
NO_PRIVILEGES = TablePrivileges(frozenset(), frozenset())


class AuthzPolicy:
    """A parsed policy file: groups and grants."""

    def __init__(self, groups: Mapping[str, frozenset[str]], grants: Iterable[Grant]) -> None:
        self.grants = tuple(grants)
        # user -> the groups naming them
        member_of: dict[str, set[str]] = {}
        for group, members in groups.items():
            for user in members:
                member_of.setdefault(user, set()).add(group)
        self._member_of = {u: frozenset(g) for u, g in member_of.items()}

    def groups_of(self, user: str) -> frozenset[str]:
        return self._member_of.get(user, frozenset())

    def privileges(self, user: str, table: str) -> TablePrivileges:
        """The privileges of ``user`` on ``table`` (a name, qualified here) by every grant that applies."""
        qualified = qualified_name(table)
        user_groups = self.groups_of(user)
        held: set[Privilege] = set()
        columns: set[str] | None = set()
        for g in self.grants:
            if not g.applies_to(user, user_groups) or not g.matches(qualified):
                continue
            held |= g.privileges
            if "ALL" in g.privileges or ("SELECT" in g.privileges and g.columns is None):
                columns = None
            elif "SELECT" in g.privileges and columns is not None and g.columns is not None:
                columns |= g.columns
        if not held:
            return NO_PRIVILEGES
        if "ALL" in held:
            return ALL_PRIVILEGES
        held.add("METADATA")
        if "SELECT" not in held:
            columns = set()
        return TablePrivileges(frozenset(held), None if columns is None else frozenset(columns))


def parse_policy(data: bytes, source: str = "policy") -> AuthzPolicy:
    """Parse a policy file's bytes (JSON when ``source`` ends in ``.json`` or the text starts with ``{``,
    TOML otherwise); raise INVALID_ARGUMENT naming the file, the grant and the problem."""
    if len(data) > MAX_POLICY_BYTES:
        raise KuduInvalidArgument(f"{source}: {len(data)} bytes, more than the {MAX_POLICY_BYTES} a policy may hold")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise KuduInvalidArgument(f"{source}: not UTF-8: {e}") from None
    as_json = source.endswith(".json") or text.lstrip().startswith("{")
    try:
        doc = json.loads(text) if as_json else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as e:
        raise KuduInvalidArgument(f"{source}: not valid {'JSON' if as_json else 'TOML'}: {e}") from None
    if not isinstance(doc, dict):
        raise KuduInvalidArgument(f"{source}: expected a map at the top")
    unknown = sorted(set(doc) - {"groups", "grant"})
    if unknown:
        raise KuduInvalidArgument(f"{source}: unknown key(s) {', '.join(unknown)} (expected 'groups' and 'grant')")
    groups_doc = doc.get("groups", {})
    if not isinstance(groups_doc, dict):
        raise KuduInvalidArgument(f"{source}: 'groups' must map a group name to a list of users")
    groups = {str(k): _names(v, f"{source}: groups.{k}") for k, v in groups_doc.items()}
    grants_doc = doc.get("grant", [])
    if not isinstance(grants_doc, list):
        raise KuduInvalidArgument(f"{source}: 'grant' must be a list of grants ([[grant]] in TOML)")
    if len(grants_doc) > MAX_GRANTS:
        raise KuduInvalidArgument(f"{source}: {len(grants_doc)} grants, more than {MAX_GRANTS}")
    grants = [_grant(g, f"{source}: grant[{i}]", groups) for i, g in enumerate(grants_doc)]
    return AuthzPolicy({k: frozenset(v) for k, v in groups.items()}, grants)


def _names(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise KuduInvalidArgument(f"{where}: expected a list of non-empty names")
    return [v.strip() for v in value]


def _grant(doc: Any, where: str, groups: Mapping[str, list[str]]) -> Grant:
    if not isinstance(doc, dict):
        raise KuduInvalidArgument(f"{where}: expected a map")
    unknown = sorted(set(doc) - {"users", "groups", "tables", "privileges", "columns"})
    if unknown:
        raise KuduInvalidArgument(f"{where}: unknown key(s) {', '.join(unknown)}")
    users = _names(doc.get("users", []), f"{where}.users")
    group_names = _names(doc.get("groups", []), f"{where}.groups")
    if not users and not group_names:
        raise KuduInvalidArgument(f"{where}: names no users and no groups")
    missing = sorted(set(group_names) - set(groups))
    if missing:
        raise KuduInvalidArgument(f"{where}: unknown group(s) {', '.join(missing)} (define them under [groups])")
    if "tables" not in doc:
        raise KuduInvalidArgument(f"{where}: 'tables' missing")
    tables = []
    for pattern in _names(doc["tables"], f"{where}.tables"):
        if pattern == "*":
            pattern = "*.*"
        if "." not in pattern:
            raise KuduInvalidArgument(
                f"{where}.tables: {pattern!r} is not database.table (write {DEFAULT_DATABASE}.{pattern} or {pattern}.*)"
            )
        tables.append(pattern)
    if "privileges" not in doc:
        raise KuduInvalidArgument(f"{where}: 'privileges' missing")
    privileges: set[Privilege] = set()
    for p in _names(doc["privileges"], f"{where}.privileges"):
        upper = p.upper()
        if upper not in PRIVILEGES:
            raise KuduInvalidArgument(f"{where}.privileges: unknown privilege {p!r} (one of {', '.join(PRIVILEGES)})")
        privileges.add(upper)
    columns: frozenset[str] | None = None
    if "columns" in doc:
        if "SELECT" not in privileges or len(privileges) != 1:
            raise KuduInvalidArgument(
                f"{where}: 'columns' limits SELECT only; give other privileges in their own grant"
            )
        columns = frozenset(_names(doc["columns"], f"{where}.columns"))
        if not columns:
            raise KuduInvalidArgument(f"{where}.columns: empty (leave it out to allow every column)")
    return Grant(frozenset(users), frozenset(group_names), tuple(tables), frozenset(privileges), columns)


class PolicyHolder:
    """The policy in force: replaced by a good new version of the file, kept when an edit breaks it.

    ``None`` policy: no file configured, and every user the ACLs admit has every privilege (Kudu's
    default authorization provider without Ranger).
    """

    def __init__(self, source: str = "") -> None:
        self.source = source
        self.policy: AuthzPolicy | None = None
        self.mtime: float | None = None
        # Why the last read of the file was refused ("" when it was taken).
        self.last_error = ""

    def offer(self, data: bytes, mtime: float) -> str:
        """A read of the file at ``mtime``: take it if it parses, else keep the last good policy and answer
        why (for the shell to log)."""
        self.mtime = mtime
        try:
            policy = parse_policy(data, self.source)
        except KuduInvalidArgument as e:
            self.last_error = str(e)
            if self.policy is None:
                raise
            return self.last_error
        self.policy = policy
        self.last_error = ""
        return ""

    def grants(self) -> tuple[Grant, ...]:
        return () if self.policy is None else self.policy.grants

    def privileges(self, identity: Identity, table: str, superuser: bool) -> TablePrivileges:
        if superuser or self.policy is None:
            return ALL_PRIVILEGES
        return self.policy.privileges(identity.user, table)


def check_ddl(
    holder: PolicyHolder, identity: Identity, superuser: bool, privilege: Privilege, table: str, action: str
) -> None:
    """Refuse a DDL action lacking ``privilege`` on ``table``: NOT_AUTHORIZED naming user, action, table."""
    if not holder.privileges(identity, table, superuser).has(privilege):
        raise KuduNotAuthorized(
            f"{identity.describe()} is not authorized to {action} table {table}: it requires {privilege} on "
            f"{qualified_name(table)}",
            {"user": identity.user, "operation": action, "table": table, "privilege": privilege},
        )


def privileges_for(
    holder: PolicyHolder, identity: Identity, superuser: bool, table_id: str, table: str
) -> dict[str, Any]:
    """The claims of an authz token for ``identity`` on one table: who, which table, what it may do and the
    columns it may read (``None``: every column)."""
    tp = holder.privileges(identity, table, superuser)
    return {
        "user": identity.user,
        "table_id": table_id,
        "table": table,
        "privileges": sorted(tp.privileges),
        "columns": None if tp.columns is None else sorted(tp.columns),
    }


_NEEDS: dict[str, tuple[Privilege, ...]] = {
    "INSERT": ("INSERT",),
    "UPDATE": ("UPDATE",),
    "DELETE": ("DELETE",),
    # Kudu: an upsert may insert or update, so it needs both.
    "UPSERT": ("INSERT", "UPDATE"),
    "SELECT": ("SELECT",),
}


def check_table_access(claims: Mapping[str, Any], table_id: str, op: DataOp, columns: Iterable[str] = ()) -> None:
    """A tablet server's check of a write or scan against an authz token's verified claims: the token
    must be for this table, hold the operation's privileges and, for a scan, SELECT on every column it
    reads (projection and predicates). Raises NOT_AUTHORIZED naming the user, the operation and the table
    or column."""
    user = str(claims.get("user", ""))
    table = str(claims.get("table", table_id))
    if claims.get("table_id") != table_id:
        raise KuduNotAuthorized(
            f"{user or '<anonymous>'} is not authorized to {op} on table {table_id}: the authz token is for "
            f"table {claims.get('table_id')!r}",
            {"user": user, "operation": op, "table_id": table_id},
        )
    needs = _NEEDS.get(op)
    if needs is None:
        raise KuduInvalidArgument(f"unknown data operation {op!r} (one of {', '.join(_NEEDS)})")
    held = frozenset(claims.get("privileges", ()))
    if "ALL" in held:
        return
    for privilege in needs:
        if privilege not in held:
            raise KuduNotAuthorized(
                f"{user or '<anonymous>'} is not authorized to {op} on table {table}: it requires {privilege}",
                {"user": user, "operation": op, "table": table, "privilege": privilege},
            )
    if op != "SELECT":
        return
    allowed = claims.get("columns")
    if allowed is None:
        return
    allowed_set = frozenset(allowed)
    for column in columns:
        if column not in allowed_set:
            raise KuduNotAuthorized(
                f"{user or '<anonymous>'} is not authorized to SELECT column {column} of table {table}",
                {"user": user, "operation": op, "table": table, "column": column},
            )


# A Write's row operation types (Kudu's numbering) -> what each needs; the _IGNORE forms need the same.
_OP_TYPE_OPS: dict[int, DataOp] = {
    OpType.INSERT: "INSERT",
    OpType.INSERT_IGNORE: "INSERT",
    OpType.UPDATE: "UPDATE",
    OpType.UPDATE_IGNORE: "UPDATE",
    OpType.DELETE: "DELETE",
    OpType.DELETE_IGNORE: "DELETE",
    OpType.UPSERT: "UPSERT",
    OpType.UPSERT_IGNORE: "UPSERT",
}


def write_operations(op_types: bytes | memoryview) -> list[DataOp]:
    """The operations a Write's ``op_types`` (one int8 per row) performs, counted in one vectorised pass
    (no per-row Python on the write path); unknown types are the decoder's to refuse, not listed here."""
    counts = np.bincount(np.frombuffer(op_types, dtype=np.uint8), minlength=256)
    ops = {_OP_TYPE_OPS[t] for t in np.flatnonzero(counts).tolist() if t in _OP_TYPE_OPS}
    return sorted(ops)


def check_write(claims: Mapping[str, Any], table_id: str, op_types: bytes | memoryview) -> None:
    """``check_table_access`` for every operation kind a Write carries."""
    for op in write_operations(op_types):
        check_table_access(claims, table_id, op)
