"""Progress bars of the ``kudu`` tool's long work (scans, copies, load generation, rebalancing)."""

from __future__ import annotations

import sys
from typing import IO, Any


def progress(total: int | None, desc: str, enabled: bool = True, unit: str = "rows", out: IO[str] | None = None) -> Any:
    """A tqdm bar on ``out`` (stderr), silent when that is not a terminal or ``enabled`` is false: counts,
    rate and, with a ``total``, the share done and the time left. ``.update(n)``, ``.close()``; a context
    manager too."""
    from tqdm import tqdm  # imported here: only long-running verbs pay for it

    stream = out if out is not None else sys.stderr
    return tqdm(total=total, desc=desc, file=stream, disable=not enabled or not stream.isatty(), unit=f" {unit}")
