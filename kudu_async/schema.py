"""kudu-python's ``kudu.schema`` module: the schema builder, schemas and the type objects."""

from kudu_async.client.schema_builder import ColumnSpec, SchemaBuilder, schema_builder
from kudu_async.common import types as _T
from kudu_async.common.column import ColumnTypeAttributes
from kudu_async.common.schema import COMPRESSIONS, ENCODINGS, ColumnSchema, Schema
from kudu_async.common.types import ArrayTypeDescriptor, KuduType, KuduValue, NestedTypeDescriptor, array_type

# Kudu's DataType ids (common.proto), as kudu-python names them.
INT8 = _T.INT8.type_id
INT16 = _T.INT16.type_id
INT32 = _T.INT32.type_id
INT64 = _T.INT64.type_id
STRING = _T.STRING.type_id
BOOL = _T.BOOL.type_id
FLOAT = _T.FLOAT.type_id
DOUBLE = _T.DOUBLE.type_id
BINARY = _T.BINARY.type_id
UNIXTIME_MICROS = _T.UNIXTIME_MICROS.type_id
DECIMAL = _T.DECIMAL.type_id
VARCHAR = _T.VARCHAR.type_id
DATE = _T.DATE.type_id
NESTED = _T.NESTED.type_id

# Column compressions and encodings, as ColumnSpec.compression()/encoding() and add_column take them.
COMPRESSION_DEFAULT = "default"
COMPRESSION_NONE = "none"
COMPRESSION_SNAPPY = "snappy"
COMPRESSION_LZ4 = "lz4"
COMPRESSION_ZLIB = "zlib"
ENCODING_AUTO = "auto"
ENCODING_PLAIN = "plain"
ENCODING_PREFIX = "prefix"
ENCODING_BIT_SHUFFLE = "bit_shuffle"
ENCODING_RLE = "rle"
ENCODING_DICT = "dict"

int8 = _T.INT8
int16 = _T.INT16
int32 = _T.INT32
int64 = _T.INT64
float_ = _T.FLOAT
double = double_ = _T.DOUBLE
bool_ = _T.BOOL
string = string_ = _T.STRING
binary = _T.BINARY
unixtime_micros = _T.UNIXTIME_MICROS
decimal = _T.DECIMAL
varchar = _T.VARCHAR
date = _T.DATE
# The type of an array column (its element type is in the column's nested_type; see array_type()).
nested = _T.NESTED
# kudu-python also names two of them after builtins (kudu.bool, kudu.float); this module has no code that
# would need the builtins.
bool = bool_
float = float_

__all__ = [
    "BINARY",
    "BOOL",
    "COMPRESSIONS",
    "COMPRESSION_DEFAULT",
    "COMPRESSION_LZ4",
    "COMPRESSION_NONE",
    "COMPRESSION_SNAPPY",
    "COMPRESSION_ZLIB",
    "DATE",
    "DECIMAL",
    "DOUBLE",
    "ENCODINGS",
    "ENCODING_AUTO",
    "ENCODING_BIT_SHUFFLE",
    "ENCODING_DICT",
    "ENCODING_PLAIN",
    "ENCODING_PREFIX",
    "ENCODING_RLE",
    "FLOAT",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "NESTED",
    "STRING",
    "UNIXTIME_MICROS",
    "VARCHAR",
    "ArrayTypeDescriptor",
    "ColumnSchema",
    "ColumnSpec",
    "ColumnTypeAttributes",
    "KuduType",
    "KuduValue",
    "NestedTypeDescriptor",
    "Schema",
    "SchemaBuilder",
    "array_type",
    "binary",
    "bool",
    "bool_",
    "date",
    "decimal",
    "double",
    "double_",
    "float",
    "float_",
    "int8",
    "int16",
    "int32",
    "int64",
    "nested",
    "schema_builder",
    "string",
    "string_",
    "unixtime_micros",
    "varchar",
]
