"""kudu_async: Apache Kudu re-built in Python on asyncio; this module re-exports the client as kudu-python's ``kudu``.

``import kudu_async as kudu`` gives kudu-python's API: ``kudu.connect``, ``kudu.schema_builder``, the type
objects (``kudu.int64`` ...), ``kudu.Partitioning``, the FLUSH_* and READ_* constants. The async client is
``kudu_async.aio``.

The names load on first use (PEP 562): importing a subpackage (``kudu_async.spark``, ``kudu_async.common``)
does not pay for the whole client. PySpark starts a new Python process for each planning and commit step
of a data source job, and each unpickles our classes, so the import is on every Spark job's critical path.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from kudu_async.version import __version__

if TYPE_CHECKING:
    from kudu_async.client import (
        CLOSEST_REPLICA,
        FIRST_REPLICA,
        FLUSH_AUTO_BACKGROUND,
        FLUSH_AUTO_SYNC,
        FLUSH_MANUAL,
        LEADER_ONLY,
        READ_AT_SNAPSHOT,
        READ_LATEST,
        READ_YOUR_WRITES,
        Client,
        Partitioning,
        RangePartition,
        ScanToken,
        connect,
    )
    from kudu_async.errors import (
        KuduBadStatus,
        KuduException,
        KuduInvalidArgument,
        KuduNotFound,
        KuduNotSupported,
        KuduTimedOut,
    )
    from kudu_async.schema import (
        Schema,
        SchemaBuilder,
        binary,
        bool_,
        date,
        decimal,
        double,
        float_,
        int8,
        int16,
        int32,
        int64,
        schema_builder,
        string,
        unixtime_micros,
        varchar,
    )
    from kudu_async.schema import bool as bool
    from kudu_async.schema import float as float

_CLIENT = (
    "CLOSEST_REPLICA",
    "FIRST_REPLICA",
    "FLUSH_AUTO_BACKGROUND",
    "FLUSH_AUTO_SYNC",
    "FLUSH_MANUAL",
    "LEADER_ONLY",
    "READ_AT_SNAPSHOT",
    "READ_LATEST",
    "READ_YOUR_WRITES",
    "Client",
    "Partitioning",
    "RangePartition",
    "ScanToken",
    "connect",
)
_ERRORS = ("KuduBadStatus", "KuduException", "KuduInvalidArgument", "KuduNotFound", "KuduNotSupported", "KuduTimedOut")
_SCHEMA = (
    "Schema",
    "SchemaBuilder",
    "binary",
    "bool",
    "bool_",
    "date",
    "decimal",
    "double",
    "float",
    "float_",
    "int8",
    "int16",
    "int32",
    "int64",
    "schema_builder",
    "string",
    "unixtime_micros",
    "varchar",
)
_SOURCE: dict[str, str] = {
    **dict.fromkeys(_CLIENT, "kudu_async.client"),
    **dict.fromkeys(_ERRORS, "kudu_async.errors"),
    **dict.fromkeys(_SCHEMA, "kudu_async.schema"),
}

__all__ = [  # literal, so linters and type checkers see the re-exports
    "CLOSEST_REPLICA",
    "FIRST_REPLICA",
    "FLUSH_AUTO_BACKGROUND",
    "FLUSH_AUTO_SYNC",
    "FLUSH_MANUAL",
    "LEADER_ONLY",
    "READ_AT_SNAPSHOT",
    "READ_LATEST",
    "READ_YOUR_WRITES",
    "Client",
    "KuduBadStatus",
    "KuduException",
    "KuduInvalidArgument",
    "KuduNotFound",
    "KuduNotSupported",
    "KuduTimedOut",
    "Partitioning",
    "RangePartition",
    "ScanToken",
    "Schema",
    "SchemaBuilder",
    "__version__",
    "binary",
    "bool",
    "bool_",
    "connect",
    "date",
    "decimal",
    "double",
    "float",
    "float_",
    "int8",
    "int16",
    "int32",
    "int64",
    "schema_builder",
    "string",
    "unixtime_micros",
    "varchar",
]


def __getattr__(name: str) -> Any:
    module = _SOURCE.get(name)
    if module is None:
        raise AttributeError(f"module 'kudu_async' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_SOURCE})
