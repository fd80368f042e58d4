"""kudu_async: Apache Kudu re-built in Python on asyncio.

``import kudu_async as kudu`` gives kudu-python's API: ``kudu.connect``, ``kudu.schema_builder``, the type
objects (``kudu.int64`` ...), ``kudu.Partitioning``, the FLUSH_* and READ_* constants. The async client is
``kudu_async.aio``.
"""

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
from kudu_async.version import __version__

__all__ = [
    "CLOSEST_REPLICA", "FIRST_REPLICA", "FLUSH_AUTO_BACKGROUND", "FLUSH_AUTO_SYNC", "FLUSH_MANUAL", "LEADER_ONLY",
    "READ_AT_SNAPSHOT", "READ_LATEST", "READ_YOUR_WRITES", "Client", "KuduBadStatus", "KuduException",
    "KuduInvalidArgument", "KuduNotFound", "KuduNotSupported", "KuduTimedOut", "Partitioning", "ScanToken",
    "Schema", "SchemaBuilder", "__version__", "binary", "bool", "bool_", "connect", "date", "decimal", "double",
    "float", "float_", "int8", "int16", "int32", "int64", "schema_builder", "string", "unixtime_micros", "varchar",
]
