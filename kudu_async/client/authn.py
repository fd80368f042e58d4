"""The client's credentials: the user name it gives, a JWT, and the authn token the leader master issues for it.

Without credentials the client names the OS user (``x-kudu-user``), as Kudu's client does. With a JWT it
asks the leader master (``ConnectToMaster``, over a connection of its own that carries the JWT) for an
authn token and from then on shows the token to every server; the token is renewed before it expires
(at ``RENEW_AT`` of its lifetime) and once more when a server answers that it expired, transparently to
the caller. ``require_authentication`` refuses to go on without credentials, or when the master did not
take them (no token came back).
"""

from __future__ import annotations

import asyncio
import getpass
import logging
import time
from typing import Any

from kudu_async.common.errors import KuduBadStatus, KuduInvalidArgument, KuduNotAuthorized, KuduTimedOut
from kudu_async.common.retry import Backoff, BackoffPolicy
from kudu_async.rpc.client import RpcClient
from kudu_async.security.identity import bearer_header, kudu_token_header

log = logging.getLogger(__name__)

RENEW_AT = 0.8  # of a token's lifetime: renewed then, so a slow renewal never leaves the client without one
RENEW_RETRY_S = 5.0  # after a failed renewal while the token still serves
TOKEN_FETCH_BACKOFF = BackoffPolicy(initial_s=0.05, max_s=1.0)
TOKEN_EXPIRED = "authn token expired"


def os_user() -> str:
    """The name the client gives without credentials: the OS user, or '' when the OS has none for us."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return ""


def check_jwt(jwt: Any) -> str | None:
    if jwt is None:
        return None
    if not isinstance(jwt, str) or jwt.count(".") != 2 or any(c.isspace() for c in jwt):
        raise KuduInvalidArgument("jwt must be a compact JWT string (header.payload.signature)")
    return jwt


class TokenDecision:
    """When to fetch or renew the token (sans-IO: the wall-clock time is an argument)."""

    def __init__(self) -> None:
        self.expire_unix = 0.0
        self.renew_unix = 0.0  # 0: no token yet

    def got(self, now: float, expire_unix: float) -> None:
        self.expire_unix = expire_unix
        self.renew_unix = now + RENEW_AT * max(0.0, expire_unix - now)

    def needs_renewal(self, now: float) -> bool:
        return now >= self.renew_unix

    def usable(self, now: float) -> bool:
        return now < self.expire_unix

    def expired(self) -> None:
        """A server said the token expired (its clock, or a key it dropped): renew at once."""
        self.renew_unix = 0.0


def is_token_expired(err: KuduNotAuthorized) -> bool:
    return TOKEN_EXPIRED in str(err)


class ClientCredentials:
    """What the client's RPC client sends, and the authn token's fetching and renewal."""

    def __init__(
        self,
        rpc: RpcClient,
        masters: list[str],
        *,
        user: str | None = None,
        jwt: str | None = None,
        require_authentication: bool = False,
        certificate: bool = False,
    ) -> None:
        self.rpc = rpc
        self.masters = masters
        self.user = os_user() if user is None else user
        self.jwt = check_jwt(jwt)
        self.require_authentication = require_authentication
        if require_authentication and self.jwt is None and not certificate:
            raise KuduNotAuthorized(
                "require_authentication: this client has no credentials to authenticate with "
                "(give jwt=... or client_certificate=...)"
            )
        self.token: bytes | None = None
        self.decision = TokenDecision()
        self._renewal: asyncio.Task[None] | None = None
        # Only the token requests carry the JWT: every other call shows the token.
        self._jwt_rpc: RpcClient | None = None
        if self.jwt is not None:
            self._jwt_rpc = RpcClient(rpc.node_name + "-authn", max_response_bytes=rpc.max_response_bytes, tls=rpc.tls)
            self._jwt_rpc.set_credentials(self.user, bearer_header(self.jwt))
            # Until a token arrives (or when the master issues none: authentication disabled), the JWT.
            rpc.set_credentials(self.user, bearer_header(self.jwt))
        else:
            rpc.set_credentials(self.user, None)

    @property
    def uses_tokens(self) -> bool:
        return self.jwt is not None

    async def before_call(self, timeout_s: float) -> None:
        """Fetch or renew the token when it is time (cheap when it is not)."""
        if self.jwt is None or not self.decision.needs_renewal(time.time()):
            return
        await self.renew(timeout_s)

    async def after_expired(self, timeout_s: float) -> None:
        self.decision.expired()
        await self.renew(timeout_s)

    async def renew(self, timeout_s: float) -> None:
        """One renewal at a time; a caller whose token is still valid does not wait for a failing one."""
        if self._renewal is None or self._renewal.done():
            self._renewal = asyncio.get_running_loop().create_task(self._fetch(timeout_s))
            self._renewal.add_done_callback(self._fetched)
        task = self._renewal
        if self.token is not None and self.decision.usable(time.time()) and self.decision.renew_unix > 0:
            return  # renewing ahead of expiry: the current token serves meanwhile
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout_s)
        except TimeoutError:
            raise KuduTimedOut(f"no authn token from the leader master within {timeout_s:g}s") from None

    async def _fetch(self, timeout_s: float) -> None:
        assert self._jwt_rpc is not None
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        backoff = Backoff(TOKEN_FETCH_BACKOFF)
        last = ""
        while True:
            for addr in list(self.masters):  # a copy: the list follows the masters the leader lists
                try:
                    r = await self._jwt_rpc.call(
                        addr, "Master", "ConnectToMaster", {}, timeout_s=max(0.05, min(5.0, end - loop.time()))
                    )
                except KuduNotAuthorized:
                    raise  # the JWT itself was refused: no retry makes it valid
                except KuduBadStatus as e:
                    last = f"{addr}: {e}"
                    continue
                if not r.get("leader"):
                    continue
                token = r.get("authn_token")
                if isinstance(token, bytes) and token:
                    self._use(token, float(r.get("authn_token_expire_unix") or 0.0))
                    return
                if self.require_authentication:
                    raise KuduNotAuthorized(
                        "require_authentication: the leader master did not authenticate this client "
                        "(is JWT authentication enabled on the masters?)"
                    )
                # Authentication is off there: keep the JWT, ask again after a while.
                self.decision.got(time.time(), time.time() + 600.0)
                return
            if loop.time() >= end:
                raise KuduTimedOut(f"no authn token from the leader master within {timeout_s:g}s ({last})")
            await asyncio.sleep(min(backoff.next_delay(), max(0.0, end - loop.time())))

    def _fetched(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        err = task.exception()
        if err is not None and self.decision.usable(time.time()):
            # The token in hand still serves: try again a little later, not on every call.
            log.warning("renewing the authn token failed; retrying", extra={"error": str(err)})
            self.decision.renew_unix = time.time() + RENEW_RETRY_S

    def _use(self, token: bytes, expire_unix: float) -> None:
        self.token = token
        self.decision.got(time.time(), expire_unix)
        self.rpc.set_credentials(self.user, kudu_token_header(token))
        log.debug("authn token in use", extra={"expire_unix": expire_unix})

    async def close(self) -> None:
        if self._renewal is not None and not self._renewal.done():
            self._renewal.cancel()
            await asyncio.gather(self._renewal, return_exceptions=True)
        if self._jwt_rpc is not None:
            await self._jwt_rpc.close()


class AuthnRpcClient(RpcClient):
    """An RPC client that keeps its authn token fresh: renewed before a call when due, and once after a
    server answered that it expired. Only clients with credentials use it; others pay nothing."""

    credentials: ClientCredentials | None = None

    async def call(self, addr: str, service: str, method: str, request: Any = None, timeout_s: float = 10.0) -> Any:
        """``RpcClient.call``, the token renewed before it when due; refused for an expired token, the
        call is made once more after a renewal."""
        creds = self.credentials
        if creds is not None:
            await creds.before_call(timeout_s)
        try:
            return await super().call(addr, service, method, request, timeout_s)
        except KuduNotAuthorized as e:
            if creds is None or not is_token_expired(e):
                raise
            await creds.after_expired(timeout_s)
        return await super().call(addr, service, method, request, timeout_s)


AUTHZ_TOKEN_STALE = "authz token expired"


def authz_token_stale(err: KuduNotAuthorized) -> bool:
    """A tablet server refused a table's authz token for its age (not for what it grants): get a new one."""
    return AUTHZ_TOKEN_STALE in str(err)
