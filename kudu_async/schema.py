"""kudu-python's ``kudu.schema`` module: the schema builder, schemas and the type objects."""

from kudu_async.client.schema_builder import ColumnSpec, SchemaBuilder, schema_builder
from kudu_async.common import types as _T
from kudu_async.common.schema import COMPRESSIONS, ENCODINGS, ColumnSchema, Schema
from kudu_async.common.types import KuduType

int8 = _T.INT8
int16 = _T.INT16
int32 = _T.INT32
int64 = _T.INT64
float_ = _T.FLOAT
double = _T.DOUBLE
bool_ = _T.BOOL
string = _T.STRING
binary = _T.BINARY
unixtime_micros = _T.UNIXTIME_MICROS
decimal = _T.DECIMAL
varchar = _T.VARCHAR
date = _T.DATE
# kudu-python also names two of them after builtins (kudu.bool, kudu.float); this module has no code that
# would need the builtins.
bool = bool_
float = float_

__all__ = [
    "COMPRESSIONS",
    "ENCODINGS",
    "ColumnSchema",
    "ColumnSpec",
    "KuduType",
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
]
