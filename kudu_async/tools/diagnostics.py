"""The metrics of Kudu's diagnostics log, for ``kudu diagnose parse_metrics`` (sans-IO: lines in, rows out).

A metrics line is ``I<mmdd> <hh:mm:ss.uuuuuu> metrics <unix microseconds> <JSON>``, the JSON being a list of
entities ``{"type": "server"|"tablet"|"table", "id", "metrics": [{"name", "value"} | {"name", "counts",
"values"}]}``: Kudu's ``/metrics`` shape, which every kudu_async node serves too, so a sampler that writes
``I$(date +%m%d\\ %T.%6N) metrics $(date +%s%6N) $(curl -s http://node:port/metrics)`` lines makes a file this
reads. A line names only what changed since the last one, so each metric keeps the latest value of every
entity seen so far, and sums them.

Histograms come as Kudu's diagnostics log writes them (``counts`` and ``values``), merged exactly across
entities; or as ``/metrics`` renders them (``total_count``, ``min``, ``percentile_75``...), where a merge
across entities can only give bounds: the count is summed, the minimum and maximum are exact, each
percentile is the highest of the entities' (an upper bound), and p50, which that form lacks, is ``?``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kudu_async.common.errors import KuduInvalidArgument

ENTITY_TYPES = ("server", "tablet", "table")
HISTOGRAM_COLUMNS = ("count", "min", "p50", "p75", "p95", "p99", "p99_99", "max")
_PERCENTILE_FIELDS = {
    "p75": "percentile_75",
    "p95": "percentile_95",
    "p99": "percentile_99",
    "p99_99": "percentile_99_99",
}


@dataclass(frozen=True)
class MetricSpec:
    """``<entity>.<metric name>[:<display name>]``."""

    entity: str
    name: str
    display: str

    @property
    def full_name(self) -> str:
        return f"{self.entity}.{self.name}"

    @staticmethod
    def parse(text: str) -> MetricSpec:
        full, _, display = text.partition(":")
        entity, dot, name = full.partition(".")
        if not dot or not name or entity not in ENTITY_TYPES:
            raise KuduInvalidArgument(
                f"could not parse metric parameter. Expected <entity>.<metric>:<display name> with <entity> one of "
                f"{', '.join(ENTITY_TYPES)}, got {text!r}"
            )
        return MetricSpec(entity, name, display or full)


def parse_specs(texts: Iterable[str]) -> list[MetricSpec]:
    specs = [MetricSpec.parse(t) for t in texts]
    seen: set[str] = set()
    for s in specs:
        if s.full_name in seen:
            raise KuduInvalidArgument(f"duplicate metric name for {s.full_name}")
        seen.add(s.full_name)
    return specs


@dataclass
class MetricsParser:
    """Turns metrics lines into rows: the timestamp, then each simple metric's sum, each rate metric's change
    per second since the previous line, and each histogram's count, min, percentiles and max."""

    simple: list[MetricSpec]
    rates: list[MetricSpec]
    histograms: list[MetricSpec]
    tablet_ids: frozenset[str] = frozenset()
    # full metric name -> entity id -> the latest value (int) or histogram (dict) seen
    _latest: dict[str, dict[str, Any]] = field(default_factory=dict)
    _prev_sums: dict[str, int] = field(default_factory=dict)
    _prev_ts: int | None = None

    def header(self) -> list[str]:
        cols = ["timestamp", *(s.display for s in self.simple), *(s.display for s in self.rates)]
        for h in self.histograms:
            cols += [f"{h.display}_{c}" for c in HISTOGRAM_COLUMNS]
        return cols

    def rows(self, lines: Iterable[str], source: str = "input") -> Iterator[list[str]]:
        for n, line in enumerate(lines, 1):
            parsed = parse_line(line, f"{source}:{n}")
            if parsed is not None:
                yield self.record(*parsed)

    def record(self, ts: int, entities: Any) -> list[str]:
        self._update(entities)
        out = [str(ts)]
        for s in self.simple:
            total = self._sum(s.full_name)
            out.append("?" if total is None else str(total))
        dt = None if self._prev_ts is None else (ts - self._prev_ts) / 1e6
        for s in self.rates:
            total = self._sum(s.full_name)
            prev = self._prev_sums.get(s.full_name)
            if dt is None or prev is None or total is None:
                out.append(f"{'?':>12}")
            else:
                out.append(f"{(total - prev) / dt if dt > 0 else 0.0:12.3f}")
            if total is not None:
                self._prev_sums[s.full_name] = total
        for h in self.histograms:
            out += self._histogram(h.full_name)
        self._prev_ts = ts
        return out

    def _update(self, entities: Any) -> None:
        if not isinstance(entities, list):
            raise KuduInvalidArgument("expected a metric JSON array")
        wanted = {s.full_name for s in (*self.simple, *self.rates, *self.histograms)}
        for ent in entities:
            if not isinstance(ent, dict) or not all(k in ent for k in ("type", "id", "metrics")):
                raise KuduInvalidArgument(f"incomplete entity entry: {str(ent)[:200]}")
            etype, eid = ent["type"], str(ent["id"])
            if etype not in ENTITY_TYPES:
                continue  # kudu_async nodes have entity types Kudu's log lacks (e.g. the RPC server's)
            if etype == "tablet" and self.tablet_ids and eid not in self.tablet_ids:
                continue
            for m in ent["metrics"] if isinstance(ent["metrics"], list) else []:
                full = f"{etype}.{m.get('name')}" if isinstance(m, dict) else ""
                if full not in wanted:
                    continue
                if ("counts" in m and "values" in m) or "total_count" in m:
                    self._latest.setdefault(full, {})[eid] = m
                elif isinstance(m.get("value"), int | float) and not isinstance(m.get("value"), bool):
                    self._latest.setdefault(full, {})[eid] = m["value"]

    def _sum(self, full: str) -> int | None:
        vals = [v for v in self._latest.get(full, {}).values() if isinstance(v, int | float)]
        return int(sum(vals)) if vals else None

    def _histogram(self, full: str) -> list[str]:
        hists = [v for v in self._latest.get(full, {}).values() if isinstance(v, dict)]
        exact = [h for h in hists if "counts" in h]
        if exact and len(exact) == len(hists):
            return _merged_exact(exact)
        if not hists:
            return ["0", *("0" for _ in HISTOGRAM_COLUMNS[1:])]
        count = sum(int(h.get("total_count", 0)) for h in hists)
        out = [str(count), _num(min(h.get("min", 0) for h in hists)), "?"]
        out += [_num(max(h.get(_PERCENTILE_FIELDS[c], 0) for h in hists)) for c in ("p75", "p95", "p99", "p99_99")]
        out.append(_num(max(h.get("max", 0) for h in hists)))
        return out


def _merged_exact(hists: list[dict[str, Any]]) -> list[str]:
    counts: dict[float, int] = {}
    for h in hists:
        for v, c in zip(h["values"], h["counts"], strict=True):
            counts[v] = counts.get(v, 0) + int(c)
    if not counts:
        counts = {0: 1}
    total = sum(counts.values())
    ordered = sorted(counts.items())

    def pct(p: float) -> str:
        rank = p / 100.0 * total
        seen = 0
        for v, c in ordered:
            seen += c
            if seen >= rank:
                return _num(v)
        return _num(ordered[-1][0])

    return [str(total), _num(ordered[0][0]), pct(50), pct(75), pct(95), pct(99), pct(99.99), _num(ordered[-1][0])]


def _num(v: Any) -> str:
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def parse_line(line: str, where: str) -> tuple[int, Any] | None:
    """A metrics line's (timestamp, entities); None for another record (stacks, symbols) or a blank line."""
    line = line.rstrip("\n")
    if not line.strip():
        return None
    if not line.startswith("I"):
        raise KuduInvalidArgument(f"{where}: lines must start with 'I'")
    fields = line.split(" ", 4)
    if len(fields) < 5:
        raise KuduInvalidArgument(f"{where}: expected 'I<date> <time> <type> <timestamp> <json>'")
    if fields[2] != "metrics":
        return None
    try:
        ts = int(fields[3])
    except ValueError:
        raise KuduInvalidArgument(f"{where}: invalid timestamp {fields[3]!r}") from None
    try:
        return ts, json.loads(fields[4])
    except json.JSONDecodeError as e:
        raise KuduInvalidArgument(f"{where}: invalid JSON payload: {e}") from None
