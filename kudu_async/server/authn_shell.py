"""The node's side of authentication that touches files and the network: the JWKS (a file read again
when it changes, or a URL fetched with aiohttp) and the node's own service JWT. The checks themselves are
in ``security`` (sans-IO); these tasks only feed them bytes.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from concurrent.futures import Executor

import aiohttp

from kudu_async.common.errors import KuduConfigurationError, KuduInvalidArgument
from kudu_async.common.retry import Backoff, BackoffPolicy
from kudu_async.security.jwt_auth import MAX_JWKS_BYTES, MAX_JWT_BYTES, JwtVerifier

log = logging.getLogger(__name__)

JWKS_FETCH_TIMEOUT_S = 10.0
JWKS_FETCH_BACKOFF = BackoffPolicy(initial_s=1.0, max_s=60.0)


def _stat_key(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _read_limited(path: str, limit: int) -> bytes:
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise KuduInvalidArgument(f"{path} is larger than {limit} bytes")
    return data


class WatchedFile:
    """A small file read at start and again whenever it changes (checked every ``period_s``)."""

    def __init__(
        self, path: str, limit: int, on_change: Callable[[bytes], None], period_s: float, executor: Executor
    ) -> None:
        self.path = path
        self.limit = limit
        self.on_change = on_change
        self.period_s = period_s
        self.executor = executor
        self._seen: tuple[int, int, int] | None = None
        self._task: asyncio.Task[None] | None = None

    def load_now(self) -> None:
        """The first read, at start: an unreadable or invalid file stops the node with the reason."""
        try:
            key = _stat_key(self.path)
            data = _read_limited(self.path, self.limit)
            self.on_change(data)
        except (OSError, KuduInvalidArgument) as e:
            raise KuduConfigurationError(f"cannot use {self.path}: {e}") from None
        self._seen = key

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._watch(), name=f"watch {self.path}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.period_s)
            try:
                key = await loop.run_in_executor(self.executor, _stat_key, self.path)
                if key is None or key == self._seen:
                    continue
                data = await loop.run_in_executor(self.executor, _read_limited, self.path, self.limit)
                self.on_change(data)
                self._seen = key
                log.info("reloaded a changed file", extra={"path": self.path})
            except (OSError, KuduInvalidArgument) as e:
                # The old contents stay in force: a half-written file must not lock everyone out.
                log.warning(
                    "changed file not used; keeping the previous one", extra={"path": self.path, "error": str(e)}
                )


class JwksFetcher:
    """Fetches the JWKS from a URL at start and every ``period_s`` (backing off on failure, bounded size)."""

    def __init__(self, url: str, verifier: JwtVerifier, period_s: float, on_change: Callable[[], None]) -> None:
        self.url = url
        self.verifier = verifier
        self.period_s = period_s
        self.on_change = on_change
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="jwks-fetch")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def fetch_once(self, session: aiohttp.ClientSession) -> None:
        async with session.get(self.url) as resp:
            if resp.status != 200:
                raise KuduInvalidArgument(f"JWKS URL {self.url} answered HTTP {resp.status}")
            data = await resp.content.read(MAX_JWKS_BYTES + 1)
        if len(data) > MAX_JWKS_BYTES:
            raise KuduInvalidArgument(f"JWKS at {self.url} is larger than {MAX_JWKS_BYTES} bytes")
        self.verifier.set_jwks(data)
        self.on_change()

    async def _run(self) -> None:
        backoff = Backoff(JWKS_FETCH_BACKOFF)
        timeout = aiohttp.ClientTimeout(total=JWKS_FETCH_TIMEOUT_S)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                try:
                    await self.fetch_once(session)
                    backoff = Backoff(JWKS_FETCH_BACKOFF)
                    await asyncio.sleep(self.period_s)
                except (aiohttp.ClientError, TimeoutError, KuduInvalidArgument) as e:
                    log.warning("fetching the JWKS failed; retrying", extra={"url": self.url, "error": str(e)})
                    await asyncio.sleep(backoff.next_delay())


def read_service_jwt(data: bytes) -> str:
    """The JWT of a ``--service-jwt-file``: one line of ASCII."""
    text = data.decode("ascii", "replace").strip()
    if not text or len(text) > MAX_JWT_BYTES or text.count(".") != 2 or any(c.isspace() for c in text):
        raise KuduInvalidArgument("the service JWT file must hold one JWT (header.payload.signature)")
    return text
