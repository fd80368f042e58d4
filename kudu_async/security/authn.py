"""The servers' authenticator: a call's identity from its credentials, its TLS peer or the name it gives.

``authorization: KuduToken <b64>`` is an authn token the leader master signed; it is checked with the
node's ``TokenVerifier`` (public keys from the catalog or heartbeats, no call to a master).
``authorization: Bearer <JWT>`` is checked against the JWKS where JWT authentication is on; a tablet
server takes JWTs only from the service users (the servers' own credentials before they hold a
certificate): users get an authn token from the master and show that. A verified TLS client certificate
names the user by its subject CN. Nothing of those: the name the caller gives, unauthenticated, refused
when authentication is ``required``.

A call costs a dict lookup once its credentials were verified: verified headers are kept (bounded LRU)
with the time they stop being valid.
"""

from __future__ import annotations

import base64
import binascii
import time
from collections import OrderedDict
from collections.abc import Callable, Collection

from kudu_async.common.errors import KuduNotAuthorized
from kudu_async.security.identity import (
    BEARER,
    KUDU_TOKEN,
    MAX_USER_NAME,
    Identity,
    TlsPeer,
    bearer_header,
    claimed_identity,
    kudu_token_header,
)
from kudu_async.security.jwt_auth import JwtVerifier
from kudu_async.security.tokens import TokenVerifier

__all__ = ["AUTHENTICATION_MODES", "ServerAuthenticator", "bearer_header", "kudu_token_header"]

AUTHENTICATION_MODES = ("disabled", "optional", "required")
DEFAULT_CACHE_ENTRIES = 4096
# A cached credential is checked again at least this often (a JWKS change or a dropped key takes effect).
MAX_CACHE_AGE_S = 300.0


class ServerAuthenticator:
    """Implements ``security.identity.Authenticator`` for a master or a tablet server."""

    def __init__(
        self,
        *,
        mode: str = "optional",
        token_verifier: TokenVerifier | None = None,
        jwt_verifier: JwtVerifier | None = None,
        jwt_users: Collection[str] | None = None,
        clock: Callable[[], float] = time.time,
        cache_entries: int = DEFAULT_CACHE_ENTRIES,
    ) -> None:
        """``jwt_users``: the only users a JWT may name here (a tablet server's service users); None: any."""
        if mode not in AUTHENTICATION_MODES:
            raise ValueError(f"authentication mode must be one of {AUTHENTICATION_MODES}, got {mode!r}")
        self.mode = mode
        self.token_verifier = token_verifier
        self.jwt_verifier = jwt_verifier
        self.jwt_users = None if jwt_users is None else frozenset(jwt_users)
        self.clock = clock
        self.cache_entries = cache_entries
        # header bytes -> (identity, valid until: the credential's expiry or MAX_CACHE_AGE_S after its check)
        self._cache: OrderedDict[bytes, tuple[Identity, float]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def authenticate(self, credentials: bytes | None, claimed_user: str, peer: TlsPeer | None) -> Identity:
        if self.mode == "disabled":
            return claimed_identity(claimed_user)
        if credentials:
            cached = self._cache.get(credentials)
            if cached is not None:
                if self.clock() < cached[1]:
                    self.hits += 1
                    self._cache.move_to_end(credentials)
                    return cached[0]
                del self._cache[credentials]
            self.misses += 1
            identity, valid_until = self._verify(credentials)
            self._cache[credentials] = (identity, valid_until)
            if len(self._cache) > self.cache_entries:
                self._cache.popitem(last=False)
            return identity
        if peer is not None and peer.subject_cn:
            return Identity(peer.subject_cn[:MAX_USER_NAME], "cert")
        if self.mode == "required":
            name = claimed_user or "<anonymous>"
            raise KuduNotAuthorized(
                f"authentication required: {name} sent no credentials (a JWT, an authn token or a client certificate)"
            )
        return claimed_identity(claimed_user)

    def forget(self) -> None:
        """Drop every cached verdict (keys or the JWKS changed)."""
        self._cache.clear()

    def _verify(self, credentials: bytes) -> tuple[Identity, float]:
        now = self.clock()
        if credentials.startswith(KUDU_TOKEN):
            return self._verify_token(credentials[len(KUDU_TOKEN) :], now)
        if credentials.startswith(BEARER):
            return self._verify_jwt(credentials[len(BEARER) :], now)
        scheme = credentials.split(b" ", 1)[0][:32].decode("ascii", "replace")
        raise KuduNotAuthorized(f"unknown authorization scheme {scheme!r} (expected Bearer or KuduToken)")

    def _verify_token(self, b64: bytes, now: float) -> tuple[Identity, float]:
        if self.token_verifier is None:
            raise KuduNotAuthorized("authn tokens are not accepted by this node")
        try:
            raw = base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            raise KuduNotAuthorized("authn token is not valid base64") from None
        token = self.token_verifier.verify_or_retry(raw, "authn", now)
        user = token.claims.get("user")
        if not isinstance(user, str) or not user:
            raise KuduNotAuthorized("authn token names no user")
        return Identity(user[:MAX_USER_NAME], "token"), min(token.expire_unix, now + MAX_CACHE_AGE_S)

    def _verify_jwt(self, raw: bytes, now: float) -> tuple[Identity, float]:
        if self.jwt_verifier is None:
            raise KuduNotAuthorized("JWT authentication is not enabled on this node (--enable-jwt-token-auth)")
        try:
            token = raw.decode("ascii")
        except UnicodeDecodeError:
            raise KuduNotAuthorized("JWT is not ASCII") from None
        verified = self.jwt_verifier.verify(token, now)
        if self.jwt_users is not None and verified.user not in self.jwt_users:
            raise KuduNotAuthorized(
                f"JWT of user {verified.user!r} not accepted here: a tablet server takes JWTs of service users "
                "only; users authenticate with the authn token the master issues"
            )
        valid_until = now + MAX_CACHE_AGE_S
        if verified.expire_unix is not None:
            valid_until = min(valid_until, verified.expire_unix)
        return Identity(verified.user[:MAX_USER_NAME], "jwt"), valid_until
