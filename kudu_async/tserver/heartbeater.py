"""The tserver's heartbeats to every master (Kudu's ``Heartbeater``), one asyncio task per master.

Each master gets ``Master/TSHeartbeat`` every ``interval_s``: the registration when it has not (yet, or
any more) acknowledged one, and a tablet report. The first report to a master, and any report after a
master asks (``needs_full_report``) or after ``request_full_report()``, is FULL: every replica. Later
ones are INCREMENTAL: the replicas marked dirty since that master last acknowledged them, plus the ids
that no longer exist (``removed``).

Dirty tracking is per master and generation-stamped: an id leaves a master's dirty set only when that
master acknowledged a report carrying it *and* nobody marked it again while the call was in flight, so a
change racing with a heartbeat is never lost, and a master that is down keeps its backlog while the
others keep up. A change does not wait out the interval: the next heartbeat goes within ~20 ms (at most
one early heartbeat per 30 ms), as Kudu's heartbeater is triggered "ASAP" when a tablet's state moves.

Failures back off exponentially with jitter (capped at ``max_backoff_s``) and are logged once per streak.
An unexpected exception (a bug, or ``reports``/``ts_info`` raising) is logged with its traceback and the
per-master loop is restarted after the same backoff; it never dies silently and never spins.

While the tserver wants a certificate from the cluster's CA (``csr`` returns a CSR), every heartbeat
carries it; the leader's answer with ``cert_pem`` and ``ca_cert_pem`` goes to ``on_certificate``.

The leader master's ``tablets_to_delete`` go to ``on_delete``, each in its own task so slow tablet work
never delays a heartbeat; their exceptions are logged, not fatal.

The leader's answer also lists every master of the catalog's Raft config (``master_addresses``): a master
added there gets its own heartbeat task (registration and a full report first), and one removed loses
its task, so masters join and leave without a tserver restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kudu_async.common.errors import KuduBadStatus, KuduIllegalState, KuduInvalidArgument, KuduRemoteError
from kudu_async.common.retry import BackoffPolicy
from kudu_async.rpc.client import RpcClient
from kudu_async.security.tokens import TokenVerificationKey, TokenVerifier

log = logging.getLogger(__name__)

DELETE_TYPES = ("DELETED", "TOMBSTONED")
EARLY_COALESCE_S = 0.02  # after a replica changes, wait this long for others in the same burst
EARLY_MIN_SPACING_S = 0.03  # early reports never go more often than this
# Replica states that do not count as live tablets in ``num_live_tablets`` (Kudu counts replicas that
# are starting or running).
_NOT_LIVE_STATES = frozenset({"FAILED", "STOPPING", "STOPPED", "SHUTDOWN", "TOMBSTONED", "DELETED"})

ReportsFn = Callable[[set[str] | None], list[dict[str, Any]]]
ItemCallback = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass
class _MasterState:
    """What one master has acknowledged from us, and how talking to it is going."""

    address: str
    registered: bool = False
    needs_full: bool = True
    full_gen: int = 0  # bumped by request_full_report: a full report acked from an older gen does not count
    dirty: dict[str, int] = field(default_factory=dict)  # tablet id -> generation of its last mark_dirty
    seq: int = 0
    last_success: float | None = None
    consecutive_failures: int = 0
    last_error: str | None = None
    last_unexpected: str | None = None  # the last unexpected error logged with its traceback in this streak
    is_leader: bool | None = None
    master_uuid: str | None = None
    task: asyncio.Task[None] | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)  # mark_dirty since the last report
    retired: bool = False  # no longer a master of the cluster: its loop ends


class _BadAnswer(KuduRemoteError):
    """The master's answer does not have the TSHeartbeat response shape."""


def _check_response(resp: Any) -> dict[str, Any]:
    """Validate a whole TSHeartbeat answer before acting on any of it."""
    if not isinstance(resp, dict):
        raise _BadAnswer(f"TSHeartbeat answer is not a map: {type(resp).__name__}")
    for key in ("leader", "needs_reregister", "needs_full_report"):
        if not isinstance(resp.get(key), bool):
            raise _BadAnswer(f"TSHeartbeat answer: {key} must be true or false, got {resp.get(key)!r:.50}")
    if not isinstance(resp.get("master_uuid"), str):
        raise _BadAnswer("TSHeartbeat answer: master_uuid must be a string")
    items = resp.get("tablets_to_delete")
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise _BadAnswer("TSHeartbeat answer: tablets_to_delete must be a list of maps")
    for i, item in enumerate(resp["tablets_to_delete"]):
        if (
            not isinstance(item.get("tablet_id"), str)
            or not item["tablet_id"]
            or not isinstance(item.get("reason"), str)
            or item.get("delete_type") not in DELETE_TYPES
        ):
            raise _BadAnswer(
                f"TSHeartbeat answer: tablets_to_delete[{i}] needs tablet_id, reason and "
                f"delete_type in {DELETE_TYPES}: {item!r:.200}"
            )
    masters = resp.get("master_addresses", [])
    if not isinstance(masters, list) or not all(isinstance(a, str) and a for a in masters):
        raise _BadAnswer("TSHeartbeat answer: master_addresses must be a list of addresses")
    limited = resp.get("write_limited_tables", [])
    if not isinstance(limited, list) or not all(isinstance(t, str) for t in limited):
        raise _BadAnswer("TSHeartbeat answer: write_limited_tables must be a list of table ids")
    tsks = resp.get("tsks", [])
    if not isinstance(tsks, list):
        raise _BadAnswer("TSHeartbeat answer: tsks must be a list of token verification keys")
    try:
        resp["tsks"] = [TokenVerificationKey.from_record(k) for k in tsks]
    except KuduInvalidArgument as e:
        raise _BadAnswer(f"TSHeartbeat answer: {e}") from None
    return resp


@dataclass(frozen=True, kw_only=True)
class HeartbeatOptions:
    """How often, and how patiently, the heartbeater talks to each master."""

    interval_s: float = 1.0  # between two heartbeats to one master
    rpc_timeout_s: float = 5.0  # one TSHeartbeat call
    max_backoff_s: float = 5.0  # the longest pause after failed calls (never below interval_s)

    def __post_init__(self) -> None:
        for name in ("interval_s", "rpc_timeout_s", "max_backoff_s"):
            v = getattr(self, name)
            if not v > 0:
                raise KuduInvalidArgument(f"{name} must be > 0, got {v}")


class Heartbeater:
    """Registers with and heartbeats every master; see the module docstring for the protocol."""

    def __init__(  # noqa: PLR0913 - one keyword per tserver hook the heartbeats feed
        self,
        rpc_client: RpcClient,
        master_addresses: Sequence[str],
        ts_info: Callable[[], dict[str, Any]],
        reports: ReportsFn,
        on_delete: ItemCallback,
        options: HeartbeatOptions = HeartbeatOptions(),
        *,
        tablet_counts: Callable[[], tuple[int, int]] | None = None,
        on_write_limits: Callable[[frozenset[str]], None] | None = None,
        csr: Callable[[], bytes | None] | None = None,
        on_certificate: Callable[[bytes, bytes], None] | None = None,
        quiescing: Callable[[], bool] | None = None,
    ) -> None:
        """``tablet_counts`` returns (num_live_tablets, leader_count); without it they are counted from
        ``reports(None)`` each heartbeat (states not failed/stopped/deleted; role LEADER).
        ``on_write_limits`` gets the leader's ids of the tables at a write limit with each of its answers.
        ``quiescing`` says whether the tserver is quiescing (sent so the auto-rebalancer leaves it alone).
        ``token_verifier`` (set after construction) gets the public halves of the leader's token-signing
        keys as they are made."""
        addrs = list(master_addresses)
        if not addrs:
            raise KuduInvalidArgument("Heartbeater needs at least one master address")
        if len(set(addrs)) != len(addrs):
            raise KuduInvalidArgument(f"duplicate master address in {addrs}")
        self.rpc_client = rpc_client
        self.ts_info = ts_info
        self.reports = reports
        self.on_delete = on_delete
        self.tablet_counts = tablet_counts
        self.on_write_limits = on_write_limits
        self.csr = csr
        self.on_certificate = on_certificate
        self.quiescing = quiescing
        self.token_verifier: TokenVerifier | None = None
        self.interval_s = options.interval_s
        self.rpc_timeout_s = options.rpc_timeout_s
        self.max_backoff_s = max(options.max_backoff_s, options.interval_s)
        self._masters = [_MasterState(a) for a in addrs]
        self._retired: list[_MasterState] = []  # removed masters whose loop may still be finishing a call
        self._gen = itertools.count(1)
        self._started = False
        self._stopping = False
        self._callback_tasks: set[asyncio.Task[None]] = set()
        self._callbacks_running: dict[tuple[str, str], asyncio.Task[None]] = {}

    # --- what the tablet manager calls ------------------------------------------------------------------

    def mark_dirty(self, tablet_id: str) -> None:
        """A replica changed (state, role, term, config, schema, or it is gone): report it to every master."""
        if not isinstance(tablet_id, str) or not tablet_id:
            raise KuduInvalidArgument(f"tablet_id must be a non-empty string, got {tablet_id!r}")
        gen = next(self._gen)
        for m in self._masters:
            m.dirty[tablet_id] = gen
            m.changed.set()

    def request_full_report(self) -> None:
        """Send every master a full report next (e.g. after the tablet manager reloaded its replicas)."""
        for m in self._masters:
            m.needs_full = True
            m.full_gen += 1

    # --- lifecycle ----------------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._started:
            raise KuduIllegalState("Heartbeater already started")
        self._started = True
        loop = asyncio.get_running_loop()
        for m in self._masters:
            m.task = loop.create_task(self._supervise(m), name=f"heartbeat {m.address}")

    async def stop(self) -> None:
        """Cancel every master's task and running callbacks, and wait for them (in-flight calls are abandoned)."""
        self._stopping = True
        running = [(m.address, m.task) for m in [*self._masters, *self._retired] if m.task is not None]
        running += [("callback", t) for t in self._callback_tasks]
        for _, t in running:
            t.cancel()
        results = await asyncio.gather(*(t for _, t in running), return_exceptions=True)
        for (what, _), r in zip(running, results, strict=True):
            if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError):
                log.error("heartbeat task ended with an error", extra={"task": what, "error": repr(r)})
        for m in [*self._masters, *self._retired]:
            m.task = None

    def master_addresses(self) -> list[str]:
        """The masters heartbeated now (the configured ones, then as the leader lists them)."""
        return [m.address for m in self._masters]

    def status(self) -> list[dict[str, Any]]:
        """Per master, for ``/api/v1/status``: is it hearing from us, and is it the leader."""
        now = time.monotonic()
        return [
            {
                "address": m.address,
                "master_uuid": m.master_uuid,
                "registered": m.registered,
                "last_success_age_s": None if m.last_success is None else round(now - m.last_success, 3),
                "consecutive_failures": m.consecutive_failures,
                "last_error": m.last_error,
                "is_leader": m.is_leader,
                "pending_dirty": len(m.dirty),
                "needs_full_report": m.needs_full,
            }
            for m in self._masters
        ]

    # --- the per-master loop -----------------------------------------------------------------------------

    def _backoff(self, failures: int) -> float:
        """Jittered exponential backoff: interval * 2^(n-1), capped, times a random factor in [0.5, 1]."""
        return BackoffPolicy(self.interval_s, self.max_backoff_s).delay(failures - 1)

    def _record_failure(self, m: _MasterState, err: BaseException, unexpected: bool) -> None:
        m.consecutive_failures += 1
        text = f"{type(err).__name__}: {err}" if unexpected else str(err)
        if unexpected and text != m.last_unexpected:
            # A bug or a failing callback: its traceback is logged even inside a streak of network errors
            # (once per distinct error, so a persistent one does not flood the log either).
            m.last_unexpected = text
            log.error("heartbeat loop failed unexpectedly; restarting it", exc_info=err, extra={"master": m.address})
        elif m.consecutive_failures == 1:
            log.warning(
                "heartbeat to master failed; backing off (logged once until it recovers)",
                extra={"master": m.address, "error": text},
            )
        else:
            log.debug(
                "heartbeat to master failed again",
                extra={"master": m.address, "error": text, "consecutive_failures": m.consecutive_failures},
            )
        m.last_error = text

    async def _supervise(self, m: _MasterState) -> None:
        """Run the master's loop; restart it (after backoff) if it fails unexpectedly."""
        while not self._stopping and not m.retired:
            try:
                await self._run(m)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self._record_failure(m, e, unexpected=True)
                await asyncio.sleep(self._backoff(m.consecutive_failures))

    async def _run(self, m: _MasterState) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopping and not m.retired:
            started = loop.time()
            try:
                asap = await self._heartbeat(m)
            except KuduBadStatus as e:  # transport errors, master errors, malformed answers
                self._record_failure(m, e, unexpected=False)
                await asyncio.sleep(self._backoff(m.consecutive_failures))
                continue
            if m.consecutive_failures:
                log.info(
                    "heartbeats to master resumed",
                    extra={"master": m.address, "failures": m.consecutive_failures, "last_error": m.last_error},
                )
            m.consecutive_failures = 0
            m.last_error = None
            m.last_unexpected = None
            if asap:
                continue
            await self._wait_for_next(m, started)

    async def _wait_for_next(self, m: _MasterState, started: float) -> None:
        """Until the interval is up, or sooner once a replica changed (Kudu's heartbeat "ASAP"): a new
        leader or a created tablet reaches the master in tens of milliseconds, not a second later, so
        CreateTable and leader failover are not held up by the heartbeat period. Changes made in one
        burst share a report, and reports never go more often than every EARLY_MIN_SPACING_S."""
        loop = asyncio.get_running_loop()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(m.changed.wait(), max(0.0, started + self.interval_s - loop.time()))
        if m.changed.is_set():
            await asyncio.sleep(max(EARLY_COALESCE_S, started + EARLY_MIN_SPACING_S - loop.time()))

    def _counts(self, full_reports: list[dict[str, Any]] | None) -> tuple[int, int]:
        if self.tablet_counts is not None:
            return self.tablet_counts()
        every = full_reports if full_reports is not None else self.reports(None)
        live = sum(1 for r in every if str(r.get("state", "")).upper() not in _NOT_LIVE_STATES)
        leaders = sum(1 for r in every if str(r.get("role") or "").upper() == "LEADER")
        return live, leaders

    async def _heartbeat(self, m: _MasterState) -> bool:
        """One TSHeartbeat to ``m``; True when another should follow at once (the master asked for more)."""
        m.changed.clear()  # marks from here on are not in this report: they wake the next one
        register = not m.registered
        full = m.needs_full
        full_gen = m.full_gen
        sent_dirty = dict(m.dirty)  # snapshot before building reports: later marks stay dirty
        report: dict[str, Any] | None
        full_reports: list[dict[str, Any]] | None = None
        if full:
            full_reports = self.reports(None)
            report = {"full": True, "seq": m.seq, "tablets": full_reports, "removed": []}
        elif sent_dirty:
            tablets = self.reports(set(sent_dirty))
            present = {t.get("tablet_id") for t in tablets}
            report = {
                "full": False,
                "seq": m.seq,
                "tablets": tablets,
                "removed": sorted(i for i in sent_dirty if i not in present),
            }
        else:
            report = None
        num_live, leaders = self._counts(full_reports)
        request = {
            "ts": self.ts_info(),
            "register": register,
            "report": report,
            "num_live_tablets": num_live,
            "leader_count": leaders,
        }
        if self.quiescing is not None and self.quiescing():
            request["quiescing"] = True
        self._add_security_fields(request)
        if report is not None:
            m.seq += 1  # never reuse a seq, even if this call fails: the master drops seq <= last applied
        resp = _check_response(
            await self.rpc_client.call(m.address, "Master", "TSHeartbeat", request, timeout_s=self.rpc_timeout_s)
        )

        m.last_success = time.monotonic()
        m.is_leader = resp["leader"]
        m.master_uuid = resp["master_uuid"]
        if resp["needs_reregister"]:
            # It does not know us (it restarted): it ignored the report too. Register with a full one.
            if not register:
                log.info("master asked us to re-register", extra={"master": m.address})
            m.registered = False
            m.needs_full = True
            return not register  # at once, unless it just refused a registration (no storm)
        m.registered = True
        asap = False
        if report is not None and not (resp["needs_full_report"] and not full):
            # Acknowledged (a master that wanted a full report ignored an incremental one).
            for tablet_id, gen in sent_dirty.items():
                if m.dirty.get(tablet_id) == gen:
                    del m.dirty[tablet_id]
        if full and m.full_gen == full_gen and not resp["needs_full_report"]:
            m.needs_full = False
        if resp["needs_full_report"]:
            asap = not full  # send it now rather than a second later (only once: the next one is full)
            m.needs_full = True
        if resp["leader"]:
            self._take_leader_answer(m, resp)
        return asap

    def _add_security_fields(self, request: dict[str, Any]) -> None:
        """A CSR while this node wants a certificate; the newest token-signing key it knows."""
        csr = self.csr() if self.csr is not None else None
        if csr is not None:
            request["csr_pem"] = csr
        if self.token_verifier is not None:
            request["tsk_seq"] = self.token_verifier.max_seq

    def _take_leader_answer(self, m: _MasterState, resp: dict[str, Any]) -> None:
        """What only the leader sends: verification keys, write limits, a certificate, tablet requests,
        the masters' addresses."""
        if resp.get("master_addresses"):
            self._follow_masters(resp["master_addresses"])
        if self.token_verifier is not None and resp["tsks"]:
            self.token_verifier.add(resp["tsks"])
            self.token_verifier.drop_expired(time.time())
        if self.on_write_limits is not None:
            self.on_write_limits(frozenset(resp.get("write_limited_tables", ())))
        if "cert_pem" in resp and self.on_certificate is not None:
            self._take_certificate(m, resp)
        self._dispatch_callbacks(m, resp)

    def _follow_masters(self, addresses: list[str]) -> None:
        """Heartbeat exactly the masters the leader lists: start a loop for each new one, end the loop of
        each one no longer listed (a call it has in flight finishes or times out)."""
        wanted = list(dict.fromkeys(addresses))
        current = {m.address: m for m in self._masters}
        if set(wanted) == set(current) or self._stopping:
            return
        log.info("the masters changed", extra={"before": sorted(current), "after": wanted})
        loop = asyncio.get_running_loop()
        kept: list[_MasterState] = []
        for address in wanted:
            m = current.get(address)
            if m is None:
                m = _MasterState(address)
                m.task = loop.create_task(self._supervise(m), name=f"heartbeat {address}")
            kept.append(m)
        for address, m in current.items():
            if address not in wanted:
                m.retired = True
                m.changed.set()
                self._retired.append(m)
                if m.task is not None:
                    m.task.add_done_callback(functools.partial(self._forget_retired, m))
        self._masters = kept

    def _forget_retired(self, m: _MasterState, task: asyncio.Task[None]) -> None:
        if m in self._retired:
            self._retired.remove(m)

    def _take_certificate(self, m: _MasterState, resp: dict[str, Any]) -> None:
        cert, ca_cert = resp.get("cert_pem"), resp.get("ca_cert_pem")
        if not isinstance(cert, bytes) or not isinstance(ca_cert, bytes):
            raise _BadAnswer("TSHeartbeat answer: cert_pem and ca_cert_pem must both be PEM bytes")
        assert self.on_certificate is not None
        try:
            self.on_certificate(cert, ca_cert)
        except KuduBadStatus as e:  # a certificate this node cannot use: keep the one it has, ask again
            log.error("certificate from the master refused", extra={"master": m.address, "error": str(e)})

    def _dispatch_callbacks(self, m: _MasterState, resp: dict[str, Any]) -> None:
        """Hand the leader's requests to the tablet manager, each in its own task.

        Heartbeats never wait for tablet work (a slow delete must not make the master think we died).
        The leader repeats a request every heartbeat until our reports show it done, so a request for a
        tablet whose previous one is still running is skipped rather than run twice at once.
        """
        loop = asyncio.get_running_loop()
        kind = "tablets_to_delete"
        for item in resp[kind]:
            tablet_id = item.get("tablet_id")
            key = (kind, tablet_id) if isinstance(tablet_id, str) else None
            if key is not None and key in self._callbacks_running:
                continue
            task = loop.create_task(
                self._run_callback(m.address, kind, self.on_delete, item), name=f"heartbeat {kind} {tablet_id}"
            )
            self._callback_tasks.add(task)
            if key is not None:
                self._callbacks_running[key] = task
            task.add_done_callback(functools.partial(self._callback_done, key=key))

    def _callback_done(self, task: asyncio.Task[None], key: tuple[str, str] | None) -> None:
        self._callback_tasks.discard(task)
        if key is not None and self._callbacks_running.get(key) is task:
            del self._callbacks_running[key]

    @staticmethod
    async def _run_callback(master: str, kind: str, cb: ItemCallback, item: dict[str, Any]) -> None:
        try:
            await cb(item)
        except Exception:  # the tablet manager's failure: logged, never fatal to heartbeats
            log.exception(
                "heartbeat callback failed",
                extra={"master": master, "kind": kind, "tablet_id": str(item.get("tablet_id"))},
            )
