"""Coarse access control: who may call a node's RPC methods at all (Kudu's user, superuser and service ACLs).

An ACL flag is Kudu's syntax: user names separated by commas, or ``*`` for every user. Each RPC method
declares what it needs where it is registered (``Requires``):

- ``any``: open to every caller (Ping, the first contact of ConnectToMaster);
- ``user``: the user ACL, and superusers and the service users (a superuser is also a user);
- ``service``: the servers themselves (Raft traffic, heartbeats, tablet creation, tablet copy and the Raft
  configuration changes the masters drive), and superusers, as Kudu's service methods admit them;
- ``superuser``: the superuser ACL only (flag changes, fault injection, unsafe tools).

With ``--superuser-acl`` empty the superusers are the service users, as in Kudu (where the daemon's own
identity is the superuser) once authentication is required. While authentication is optional a caller's
name is only what it claims and Kudu's tools name the operating-system user the daemons run as; here a
tool or client names nobody unless told, so an empty ``--superuser-acl`` then admits every caller, which
keeps an unsecured cluster administrable. Explicit ACLs always apply, to the authenticated name or, with
authentication optional, to the (unauthenticated) name the caller claims, as Kudu applies them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, get_args

from kudu_async.common.errors import KuduInvalidArgument, KuduNotAuthorized
from kudu_async.security.identity import MAX_USER_NAME, Identity

Requires = Literal["any", "user", "service", "superuser"]
REQUIREMENTS: tuple[Requires, ...] = get_args(Requires)

WILDCARD = "*"


@dataclass(frozen=True, slots=True)
class Acl:
    """A set of user names, or everyone."""

    users: frozenset[str]
    everyone: bool = False

    @classmethod
    def parse(cls, text: str, flag: str = "ACL") -> Acl:
        """Kudu's ACL syntax: ``alice,bob`` or ``*``; blanks around names are ignored, an empty entry
        or a name with whitespace inside is refused (naming the flag)."""
        users: set[str] = set()
        everyone = False
        stripped = text.strip()
        if not stripped:
            return cls(frozenset())
        for raw in stripped.split(","):
            name = raw.strip()
            if not name:
                raise KuduInvalidArgument(f"{flag} {text!r}: empty entry")
            if name == WILDCARD:
                everyone = True
            elif any(c.isspace() for c in name) or not name.isprintable() or len(name) > MAX_USER_NAME:
                raise KuduInvalidArgument(f"{flag} {text!r}: bad user name {name!r}")
            else:
                users.add(name)
        return cls(frozenset(users), everyone)

    @classmethod
    def of(cls, users: Iterable[str]) -> Acl:
        return cls(frozenset(users))

    def allows(self, user: str) -> bool:
        return self.everyone or user in self.users

    def union(self, other: Acl) -> Acl:
        return Acl(self.users | other.users, self.everyone or other.everyone)

    def __str__(self) -> str:
        return WILDCARD if self.everyone else ",".join(sorted(self.users))


class Acls:
    """The node's three ACLs and the check of a method's requirement against a caller."""

    def __init__(self, *, user: Acl, superuser: Acl, service: Acl, policy_superuser: Acl | None = None) -> None:
        self.user = user
        self.superuser = superuser
        self.service = service
        # Who bypasses the table privilege policy: the superusers named by the flag (or the service users
        # when it is empty), never the everyone an empty flag means while authentication is optional.
        self.policy_superuser = superuser if policy_superuser is None else policy_superuser
        # Who passes each requirement, resolved once: the check on every call is one set lookup.
        self._allowed: dict[str, Acl] = {
            "user": user.union(superuser).union(service),
            "service": service.union(superuser),
            "superuser": superuser,
        }

    @classmethod
    def from_flags(cls, *, user_acl: str, superuser_acl: str, service_acl: str, authentication_required: bool) -> Acls:
        """The ACLs of ``--user-acl``, ``--superuser-acl`` and ``--service-acl`` (see the module's
        docstring for what an empty superuser ACL means)."""
        service = Acl.parse(service_acl, "--service-acl")
        if service.everyone or not service.users:
            raise KuduInvalidArgument(f"--service-acl {service_acl!r}: name the service user(s); '*' is not allowed")
        superuser = Acl.parse(superuser_acl, "--superuser-acl")
        policy_superuser = superuser
        if not superuser_acl.strip():
            policy_superuser = service
            superuser = service if authentication_required else Acl(frozenset(), everyone=True)
        return cls(
            user=Acl.parse(user_acl, "--user-acl"),
            superuser=superuser,
            service=service,
            policy_superuser=policy_superuser,
        )

    @classmethod
    def open(cls) -> Acls:
        """Everyone may call everything: a server without a node's configuration (tools, tests)."""
        everyone = Acl(frozenset(), everyone=True)
        return cls(user=everyone, superuser=everyone, service=Acl.of(["kudu"]))

    @property
    def service_user(self) -> str:
        """The name a server gives when it calls another (the first service user, sorted)."""
        return min(self.service.users) if self.service.users else ""

    def bypasses_policy(self, identity: Identity) -> bool:
        """Whether the table privilege policy does not apply to ``identity`` (a superuser or a server)."""
        return self.policy_superuser.allows(identity.user) or self.service.allows(identity.user)

    def allowed(self, identity: Identity, requires: Requires) -> bool:
        if requires == "any":
            return True
        return self._allowed[requires].allows(identity.user)

    def check(self, identity: Identity, requires: Requires, method: str) -> None:
        """Raise NOT_AUTHORIZED naming the user and the method unless ``identity`` meets ``requires``."""
        if not self.allowed(identity, requires):
            raise KuduNotAuthorized(
                f"{identity.describe()} is not authorized to call {method}: it requires a {requires} "
                f"({_who(requires)})",
                {"user": identity.user, "method": method, "requires": requires},
            )


def _who(requires: Requires) -> str:
    return {
        "user": "--user-acl, or a superuser or service user",
        "service": "--service-acl, or a superuser",
        "superuser": "--superuser-acl",
        "any": "anyone",
    }[requires]
