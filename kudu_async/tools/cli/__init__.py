"""``kudu``: the operator's command line with Kudu's syntax (``kudu table list <master_addresses>``).

Verbs live in one module per area, named after Kudu's verb groups; importing them registers their verbs with
:mod:`kudu_async.tools.cli.framework`, which builds the parser and prints results.
"""

from __future__ import annotations

from collections.abc import Sequence

from kudu_async.tools.cli import cluster as _cluster  # noqa: F401  (registers its verbs)
from kudu_async.tools.cli import diagnose as _diagnose  # noqa: F401  (registers its verbs)
from kudu_async.tools.cli import framework
from kudu_async.tools.cli import master as _master  # noqa: F401  (registers its verbs)
from kudu_async.tools.cli import perf as _perf  # noqa: F401  (registers its verbs)
from kudu_async.tools.cli import table as _table  # noqa: F401  (registers its verbs)
from kudu_async.tools.cli import tablet as _tablet  # noqa: F401  (registers its verbs)
from kudu_async.tools.cli import tserver as _tserver  # noqa: F401  (registers its verbs)


def main(argv: Sequence[str] | None = None) -> int:
    return framework.run(argv)
