"""kudu_async: Apache Kudu re-built in Python on asyncio; this module re-exports the client as kudu-python's ``kudu``.

``import kudu_async as kudu`` gives kudu-python's API: every public name of ``kudu_async.client``
(``kudu.connect``, ``kudu.Partitioning``, the FLUSH_* and READ_* constants ...), ``kudu_async.errors`` and
``kudu_async.schema`` (``kudu.schema_builder``, the type objects ``kudu.int64`` ...), as kudu-python's
``kudu`` lends those of its own three modules. The async client is ``kudu_async.aio``.

The names load on first use (PEP 562): importing a subpackage (``kudu_async.spark``, ``kudu_async.common``)
does not pay for the whole client. PySpark starts a new Python process for each planning and commit step
of a data source job, and each unpickles our classes, so the import is on every Spark job's critical path.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from kudu_async.version import __version__ as __version__

if TYPE_CHECKING:
    from kudu_async.client import *  # noqa: F403
    from kudu_async.errors import *  # noqa: F403
    from kudu_async.schema import *  # noqa: F403

# The modules whose ``__all__`` the top level lends, the cheapest to import first (errors needs no client).
_SOURCES = ("kudu_async.errors", "kudu_async.client", "kudu_async.schema")


def _lend(name: str) -> Any:
    if name == "__all__":
        return sorted({"__version__", *(n for m in _SOURCES for n in importlib.import_module(m).__all__)})
    if not name.startswith("__"):  # interpreter and tool probes (__path__, __wrapped__ ...) import nothing
        for source in _SOURCES:
            module = importlib.import_module(source)
            if name in module.__all__:
                return getattr(module, name)
    raise AttributeError(f"module 'kudu_async' has no attribute {name!r}")


def __getattr__(name: str) -> Any:
    value = _lend(name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_lend("__all__")})
