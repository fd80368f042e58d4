"""Counters, gauges and histograms grouped into Kudu-style metric entities.

Kept on the floor of the import graph so that rpc, consensus and tablet can all record into the same
registry that the admin pages render (``/metrics`` JSON in Kudu's entity shape, ``/metrics_prometheus``).
Recording is O(1) and allocation-free; rendering does the work.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

# Latency buckets in microseconds: 1-2-5 steps from 10 us to 100 s. Fixed bounds keep recording cheap
# and make histograms mergeable and exposable to Prometheus as-is.
_BOUNDS_US: list[float] = [m * 10.0**e for e in range(1, 8) for m in (1, 2, 5)] + [1e8]


class Counter:
    """A monotonically increasing count since process start."""

    kind = "counter"

    def __init__(self, name: str, description: str = "", unit: str = "units") -> None:
        self.name = name
        self.description = description
        self.unit = unit
        self.value = 0

    def increment(self, by: int = 1) -> None:
        self.value += by

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value}


class Gauge:
    """A value read at render time from a callback, or set directly."""

    kind = "gauge"

    def __init__(
        self,
        name: str,
        description: str = "",
        unit: str = "units",
        read: Callable[[], float | int] | None = None,
    ) -> None:
        self.name = name
        self.description = description
        self.unit = unit
        self._read = read
        self._value: float | int = 0

    def set(self, value: float | int) -> None:
        self._value = value

    @property
    def value(self) -> float | int:
        return self._read() if self._read is not None else self._value

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value}


class Histogram:
    """Fixed-bucket histogram; percentiles are the upper bound of the bucket holding the rank."""

    kind = "histogram"

    def __init__(self, name: str, description: str = "", unit: str = "microseconds") -> None:
        self.name = name
        self.description = description
        self.unit = unit
        self.bounds = _BOUNDS_US
        self.counts = [0] * (len(self.bounds) + 1)
        self.total_count = 0
        self.total_sum = 0.0
        self.min = math.inf
        self.max = 0.0

    def record(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total_count += 1
        self.total_sum += value
        if value < self.min:
            self.min = value
        if value > self.max:
            self.max = value

    def percentile(self, p: float) -> float:
        if self.total_count == 0:
            return 0.0
        rank = max(1, math.ceil(self.total_count * p / 100.0))
        seen = 0
        for i, c in enumerate(self.counts):
            seen += c
            if seen >= rank:
                return min(self.bounds[i], self.max) if i < len(self.bounds) else self.max
        return self.max

    def to_json(self) -> dict[str, Any]:
        n = self.total_count
        return {
            "name": self.name,
            "total_count": n,
            "min": 0 if n == 0 else self.min,
            "mean": 0 if n == 0 else self.total_sum / n,
            "percentile_75": self.percentile(75),
            "percentile_95": self.percentile(95),
            "percentile_99": self.percentile(99),
            "percentile_99_9": self.percentile(99.9),
            "percentile_99_99": self.percentile(99.99),
            "max": self.max,
            "total_sum": self.total_sum,
        }


Metric = Counter | Gauge | Histogram


@dataclass
class MetricEntity:
    """A group of metrics about one thing: the server, a tablet, a table (Kudu's entity)."""

    type: str
    id: str
    attributes: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, Metric] = field(default_factory=dict)

    def counter(self, name: str, description: str = "", unit: str = "units") -> Counter:
        m = self.metrics.get(name)
        if m is None:
            m = self.metrics[name] = Counter(name, description, unit)
        assert isinstance(m, Counter), f"metric {name} already registered as {m.kind}"
        return m

    def gauge(
        self,
        name: str,
        description: str = "",
        unit: str = "units",
        read: Callable[[], float | int] | None = None,
    ) -> Gauge:
        m = self.metrics.get(name)
        if m is None:
            m = self.metrics[name] = Gauge(name, description, unit, read)
        assert isinstance(m, Gauge), f"metric {name} already registered as {m.kind}"
        return m

    def histogram(self, name: str, description: str = "", unit: str = "microseconds") -> Histogram:
        m = self.metrics.get(name)
        if m is None:
            m = self.metrics[name] = Histogram(name, description, unit)
        assert isinstance(m, Histogram), f"metric {name} already registered as {m.kind}"
        return m


class MetricRegistry:
    """All metric entities of one process."""

    def __init__(self) -> None:
        self._entities: dict[tuple[str, str], MetricEntity] = {}
        self._lock = threading.Lock()

    def entity(self, type_: str, id_: str, attributes: dict[str, str] | None = None) -> MetricEntity:
        with self._lock:
            ent = self._entities.get((type_, id_))
            if ent is None:
                ent = self._entities[(type_, id_)] = MetricEntity(type_, id_, dict(attributes or {}))
            elif attributes:
                ent.attributes.update(attributes)
            return ent

    def remove(self, type_: str, id_: str) -> None:
        with self._lock:
            self._entities.pop((type_, id_), None)

    def entities(self) -> list[MetricEntity]:
        with self._lock:
            return list(self._entities.values())

    def to_json(
        self,
        metrics: Iterable[str] = (),
        types: Iterable[str] = (),
        ids: Iterable[str] = (),
    ) -> list[dict[str, Any]]:
        """Kudu's ``/metrics`` shape; filters are substring (metrics) and exact (types, ids) matches."""
        name_filters = [m for m in metrics if m]
        type_filter = {t for t in types if t}
        id_filter = {i for i in ids if i}
        out: list[dict[str, Any]] = []
        for ent in self.entities():
            if type_filter and ent.type not in type_filter:
                continue
            if id_filter and ent.id not in id_filter:
                continue
            rendered = [
                m.to_json()
                for name, m in sorted(ent.metrics.items())
                if not name_filters or any(f in name for f in name_filters)
            ]
            if name_filters and not rendered:
                continue
            out.append({"type": ent.type, "id": ent.id, "attributes": ent.attributes, "metrics": rendered})
        return out

    def to_prometheus(self) -> str:
        """Prometheus text exposition format, one family per metric name."""
        families: dict[str, list[tuple[MetricEntity, Metric]]] = {}
        for ent in self.entities():
            for m in ent.metrics.values():
                families.setdefault(m.name, []).append((ent, m))
        lines: list[str] = []
        for name in sorted(families):
            members = families[name]
            first = members[0][1]
            pname = "kudu_" + _prom_name(name)
            ptype = {"counter": "counter", "gauge": "gauge", "histogram": "histogram"}[first.kind]
            if first.description:
                lines.append(f"# HELP {pname} {_prom_help(first.description)}")
            lines.append(f"# TYPE {pname} {ptype}")
            for ent, m in members:
                labels = {"entity_type": ent.type, "entity_id": ent.id, **ent.attributes}
                if isinstance(m, Histogram):
                    cumulative = 0
                    for bound, count in zip(m.bounds, m.counts, strict=False):
                        cumulative += count
                        lines.append(f"{pname}_bucket{_prom_labels({**labels, 'le': _fmt(bound)})} {cumulative}")
                    lines.append(f"{pname}_bucket{_prom_labels({**labels, 'le': '+Inf'})} {m.total_count}")
                    lines.append(f"{pname}_sum{_prom_labels(labels)} {_fmt(m.total_sum)}")
                    lines.append(f"{pname}_count{_prom_labels(labels)} {m.total_count}")
                else:
                    lines.append(f"{pname}{_prom_labels(labels)} {_fmt(m.value)}")
        return "\n".join(lines) + "\n"


def _prom_name(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)


def _prom_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _prom_labels(labels: dict[str, str]) -> str:
    parts = []
    for k, v in labels.items():
        esc = str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        parts.append(f'{_prom_name(k)}="{esc}"')
    return "{" + ",".join(parts) + "}"


def _fmt(v: float | int) -> str:
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return repr(v) if isinstance(v, float) else str(v)
