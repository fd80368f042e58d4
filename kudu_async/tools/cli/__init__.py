"""``kudu``: the operator's command line with Kudu's syntax (``kudu table list <master_addresses>``).

Verbs live in one module per area, named after Kudu's verb groups; importing them registers their verbs with
:mod:`kudu_async.tools.cli.framework`, which builds the parser and prints results.
"""

from __future__ import annotations

from collections.abc import Sequence

from kudu_async.tools.cli import cluster as _cluster  # noqa: F401  (registers its verbs)
from kudu_async.tools.cli import diagnose as _diagnose  # noqa: F401  (registers its verbs)
from kudu_async.tools.cli import flags as _flags  # noqa: F401  (registers its verbs)
from kudu_async.tools.cli import framework
from kudu_async.tools.cli import fs as _fs  # noqa: F401  (registers its verbs)
from kudu_async.tools.cli import local_replica as _local_replica  # noqa: F401  (registers its verbs)
from kudu_async.tools.cli import master as _master  # noqa: F401  (registers its verbs)
from kudu_async.tools.cli import master_membership as _master_membership  # noqa: F401  (registers its verbs)
from kudu_async.tools.cli import perf as _perf  # noqa: F401  (registers its verbs)
from kudu_async.tools.cli import remote_replica as _remote_replica  # noqa: F401  (registers its verbs)
from kudu_async.tools.cli import table as _table  # noqa: F401  (registers its verbs)
from kudu_async.tools.cli import tablet as _tablet  # noqa: F401  (registers its verbs)
from kudu_async.tools.cli import tserver as _tserver  # noqa: F401  (registers its verbs)
from kudu_async.tools.cli import unsafe as _unsafe  # noqa: F401  (registers its verbs)
from kudu_async.tools.cli import wal as _wal  # noqa: F401  (registers its verbs)


def main(argv: Sequence[str] | None = None) -> int:
    return framework.run(argv)
