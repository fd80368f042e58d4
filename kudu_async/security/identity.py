"""Who is calling: the identity a server acts on for one RPC, and how the RPC layer learns it.

A call's identity comes from what arrived with it: a TLS client certificate (``TlsPeer``), credentials in
the ``authorization`` header (a JWT or an authn token), or only the user name the client gives in
``x-kudu-user``. The last is not proof of anything: it is what Kudu accepts as the user of an
unauthenticated connection when authentication is ``optional``, and ``authn == "none"`` says so, so an
authorization check can refuse it where it must.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Literal, Protocol

# The user name an unauthenticated client gives (Kudu's "unauthenticated user" of a negotiation without SASL).
USER_HEADER = b"x-kudu-user"
# "Bearer <JWT>" or "KuduToken <base64 of a signed authn token>".
AUTHORIZATION_HEADER = b"authorization"
# The two schemes of the authorization header.
BEARER = b"Bearer "
KUDU_TOKEN = b"KuduToken "
# Longest user name accepted: names appear in logs, ACLs and tokens.
MAX_USER_NAME = 256

# "password": HTTP basic auth against the admin pages' password file (never on RPC).
AuthnMethod = Literal["none", "cert", "jwt", "token", "password"]


@dataclass(frozen=True, slots=True)
class Identity:
    """The user a call acts as and how that was established."""

    user: str
    authn: AuthnMethod = "none"

    @property
    def authenticated(self) -> bool:
        return self.authn != "none"

    def describe(self) -> str:
        """The user as messages and audit lines name it."""
        name = self.user or "<anonymous>"
        return name if self.authenticated else f"{name} (unauthenticated)"


ANONYMOUS = Identity("")


@dataclass(frozen=True, slots=True)
class TlsPeer:
    """The TLS side of a connection: whether it is encrypted and the peer's verified certificate, if any."""

    cert_der: bytes | None = None
    subject_cn: str | None = None


class Authenticator(Protocol):
    """Turns what arrived with a call into an identity, or raises ``KuduNotAuthorized`` naming why not.

    Called on the event loop for every call, so it must be cheap: verifying a token once per connection
    or caching verified credentials is the implementation's business.
    """

    def authenticate(self, credentials: bytes | None, claimed_user: str, peer: TlsPeer | None) -> Identity: ...


def claimed_identity(claimed_user: str) -> Identity:
    """The identity of a call that proved nothing: the name it gave, unauthenticated."""
    return Identity(claimed_user[:MAX_USER_NAME], "none")


def kudu_token_header(token: bytes) -> bytes:
    """The ``authorization`` value that carries an authn token."""
    return KUDU_TOKEN + base64.b64encode(token)


def bearer_header(jwt: str) -> bytes:
    """The ``authorization`` value that carries a JWT."""
    return BEARER + jwt.encode()
