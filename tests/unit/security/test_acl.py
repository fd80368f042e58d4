"""Kudu's ACL syntax and who passes each method requirement."""

from __future__ import annotations

import pytest

from kudu_async.common.errors import KuduInvalidArgument, KuduNotAuthorized
from kudu_async.security.acl import Acl, Acls
from kudu_async.security.identity import Identity


def test_acl_syntax() -> None:
    acl = Acl.parse(" alice, bob ,carol")
    assert acl.users == {"alice", "bob", "carol"} and not acl.everyone
    assert acl.allows("bob") and not acl.allows("dave") and not acl.allows("")
    star = Acl.parse("*")
    assert star.everyone and star.allows("anyone") and star.allows("")
    assert Acl.parse("alice,*").allows("zed")
    assert not Acl.parse("").allows("alice")
    with pytest.raises(KuduInvalidArgument, match="--user-acl 'alice,,bob': empty entry"):
        Acl.parse("alice,,bob", "--user-acl")
    with pytest.raises(KuduInvalidArgument, match="bad user name 'al ice'"):
        Acl.parse("al ice")


def _acls(user: str = "*", superuser: str = "", service: str = "kudu", required: bool = False) -> Acls:
    return Acls.from_flags(
        user_acl=user, superuser_acl=superuser, service_acl=service, authentication_required=required
    )


def test_requirements_and_the_superuser_is_a_user() -> None:
    acls = _acls(user="alice", superuser="admin")
    alice, admin, kudu, eve = (Identity(u, "jwt") for u in ("alice", "admin", "kudu", "eve"))
    assert acls.allowed(alice, "user") and not acls.allowed(alice, "service") and not acls.allowed(alice, "superuser")
    assert acls.allowed(admin, "user") and acls.allowed(admin, "service") and acls.allowed(admin, "superuser")
    # Servers pass service methods (and user ones), not the superuser-only methods once superusers are named.
    assert acls.allowed(kudu, "service") and acls.allowed(kudu, "user") and not acls.allowed(kudu, "superuser")
    for req in ("user", "service", "superuser"):
        assert not acls.allowed(eve, req)
    assert acls.allowed(eve, "any")
    with pytest.raises(
        KuduNotAuthorized, match=r"eve is not authorized to call Consensus/Batch: it requires a service"
    ):
        acls.check(eve, "service", "Consensus/Batch")
    with pytest.raises(KuduNotAuthorized, match=r"mallory \(unauthenticated\) is not authorized to call Master/Create"):
        acls.check(Identity("mallory"), "user", "Master/Create")


def test_an_empty_superuser_acl() -> None:
    # Kudu's rule once authentication is required: the service users are the superusers.
    required = _acls(required=True)
    assert required.allowed(Identity("kudu", "cert"), "superuser")
    assert not required.allowed(Identity("alice", "jwt"), "superuser")
    # With authentication optional, callers name no one unless told: an empty flag admits every caller ...
    optional = _acls()
    assert optional.allowed(Identity(""), "superuser") and optional.allowed(Identity("x"), "service")
    # ... but the table policy still binds them: only the service users bypass it.
    assert not optional.bypasses_policy(Identity("x")) and optional.bypasses_policy(Identity("kudu"))
    assert _acls(superuser="admin").bypasses_policy(Identity("admin"))


def test_service_acl_must_name_users() -> None:
    with pytest.raises(KuduInvalidArgument, match="--service-acl"):
        _acls(service="*")
    with pytest.raises(KuduInvalidArgument, match="--service-acl"):
        _acls(service="")
    assert _acls(service="svc-b,svc-a").service_user == "svc-a"
