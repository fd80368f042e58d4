"""Fault injection between named nodes, for tests: drop or delay RPCs as a network partition would.

One ``FaultInjector`` per process is shared by the node's ``RpcClient`` (outgoing calls, matched on the
destination *address*) and ``RpcServer`` (incoming calls, matched on the caller's node name from the
``x-kudu-source`` header and on this server's own node name or address). A rule is applied at most once
per call: when the client side applied a rule it tells the server (header ``x-kudu-fault-applied``) and
the server skips its own check.

Rules (``set_rules``) are dicts::

    {"action": "drop" | "delay", "src": NODE_NAME | "*", "dst": NODE_NAME | "HOST:PORT" | "*",
     "delay_ms": int (delay only), "probability": float in [0, 1] (default 1.0)}

``drop`` is a black hole, not a refusal: the caller sees its deadline pass (``KuduTimedOut``), exactly as
with a real partition, so retry loops behave as they would in production. ``delay`` holds the call for
``delay_ms`` before it is sent (client side) or before the handler runs (server side). Every matching
rule rolls its own probability; delays of several matching rules add up; a fired drop wins.

The injector is off unless constructed with ``enabled=True`` (the node's ``--enable-fault-injection``);
a disabled injector refuses rules, so a production node can never be partitioned by an RPC.

The check is off the hot path: the server and client ``subscribe`` to the injector and route calls
through their fault-checking path only while some rule is set, so a node without rules pays nothing.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kudu_async.common.errors import KuduIllegalState, KuduInvalidArgument

ACTIONS = ("drop", "delay")
_KEYS = {"action", "src", "dst", "delay_ms", "probability"}


@dataclass(frozen=True, slots=True)
class FaultRule:
    """One validated rule; see the module docstring for the meaning of each field."""

    action: str
    src: str = "*"
    dst: str = "*"
    delay_ms: int = 0
    probability: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "src": self.src,
            "dst": self.dst,
            "delay_ms": self.delay_ms,
            "probability": self.probability,
        }

    @classmethod
    def from_dict(cls, raw: Any, index: int = 0) -> FaultRule:
        """Validate one rule; the error names the rule's position, the field and the bad value."""
        where = f"fault rule #{index}"
        if not isinstance(raw, dict):
            raise KuduInvalidArgument(f"{where}: expected an object, got {type(raw).__name__}")
        unknown = set(raw) - _KEYS
        if unknown:
            raise KuduInvalidArgument(f"{where}: unknown field(s) {sorted(unknown)}; allowed {sorted(_KEYS)}")
        action = raw.get("action")
        if action not in ACTIONS:
            raise KuduInvalidArgument(f"{where}: 'action' must be one of {list(ACTIONS)}, got {action!r}")
        src = raw.get("src", "*")
        dst = raw.get("dst", "*")
        for name, val in (("src", src), ("dst", dst)):
            if not isinstance(val, str) or not val:
                raise KuduInvalidArgument(f"{where}: '{name}' must be a non-empty string, got {val!r}")
        delay_ms = raw.get("delay_ms", 0)
        if isinstance(delay_ms, bool) or not isinstance(delay_ms, int) or delay_ms < 0:
            raise KuduInvalidArgument(f"{where}: 'delay_ms' must be an int >= 0, got {delay_ms!r}")
        if action == "delay" and delay_ms == 0:
            raise KuduInvalidArgument(f"{where}: a 'delay' rule needs 'delay_ms' > 0")
        prob = raw.get("probability", 1.0)
        if isinstance(prob, bool) or not isinstance(prob, int | float) or not 0.0 <= prob <= 1.0:
            raise KuduInvalidArgument(f"{where}: 'probability' must be a number in [0, 1], got {prob!r}")
        return cls(action, src, dst, delay_ms, float(prob))


@dataclass(frozen=True, slots=True)
class FaultDecision:
    """What to do with one call: drop it, or hold it ``delay_s`` seconds first."""

    drop: bool
    delay_s: float


class FaultInjector:
    """Holds the active rules and decides per call; cheap when there are no rules (the normal case)."""

    def __init__(self, enabled: bool = False, seed: int | None = None) -> None:
        self._enabled = enabled
        self._rules: tuple[FaultRule, ...] = ()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._listeners: list[Callable[[bool], None]] = []
        self.dropped = 0
        self.delayed = 0

    @property
    def enabled(self) -> bool:
        return self._enabled

    @property
    def active(self) -> bool:
        """True when there is at least one rule."""
        return bool(self._rules)

    def subscribe(self, listener: Callable[[bool], None]) -> None:
        """Call ``listener(active)`` now and whenever the rules change (from the thread that changes them)."""
        self._listeners.append(listener)
        listener(self.active)

    def unsubscribe(self, listener: Callable[[bool], None]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def _notify(self) -> None:
        active = self.active
        for listener in list(self._listeners):
            listener(active)

    def set_rules(self, rules: list[dict[str, Any]]) -> None:
        """Replace all rules atomically; all are validated before any takes effect."""
        if not self._enabled:
            raise KuduIllegalState("fault injection is disabled on this node (start it with --enable-fault-injection)")
        if not isinstance(rules, list):
            raise KuduInvalidArgument(f"fault rules must be a list, got {type(rules).__name__}")
        parsed = tuple(FaultRule.from_dict(r, i) for i, r in enumerate(rules))
        with self._lock:
            self._rules = parsed
        self._notify()

    def clear(self) -> None:
        """Remove every rule (allowed even when disabled: it can only make things healthier)."""
        with self._lock:
            self._rules = ()
        self._notify()

    def rules(self) -> list[dict[str, Any]]:
        return [r.to_dict() for r in self._rules]

    def stats(self) -> dict[str, Any]:
        return {"enabled": self._enabled, "rules": self.rules(), "dropped": self.dropped, "delayed": self.delayed}

    def decide(self, src: str, dst: tuple[str, ...]) -> FaultDecision | None:
        """The fate of one call from node ``src`` to a peer known by any of the names in ``dst``.

        ``None`` means: deliver normally. ``src`` may be ``""`` when the caller did not name itself; only
        ``"*"`` rules match it then.
        """
        rules = self._rules
        if not rules:
            return None
        delay = 0.0
        for r in rules:
            if r.src != "*" and r.src != src:
                continue
            if r.dst != "*" and r.dst not in dst:
                continue
            if r.probability < 1.0 and self._rng.random() >= r.probability:
                continue
            if r.action == "drop":
                self.dropped += 1
                return FaultDecision(True, 0.0)
            delay += r.delay_ms / 1000.0
        if delay > 0.0:
            self.delayed += 1
            return FaultDecision(False, delay)
        return None
