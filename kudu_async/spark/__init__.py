"""The ``kudu`` data source for PySpark (Python Data Source API, PySpark 4.1+) and kudu-spark's
``KuduContext``; imports client and common.

``kudu_async.spark.register(spark)`` makes ``spark.read.format("kudu")`` and ``df.write.format("kudu")``
available (and enables Python filter pushdown on the session). Needs the ``spark`` extra (pyspark).
"""

from kudu_async.spark.context import CreateTableOptions, KuduContext, KuduReadOptions, KuduWriteOptions
from kudu_async.spark.source import NAME, OPTIONS, DefaultSource, KuduDataSource, local_session, register

__all__ = [
    "NAME",
    "OPTIONS",
    "CreateTableOptions",
    "DefaultSource",
    "KuduContext",
    "KuduDataSource",
    "KuduReadOptions",
    "KuduWriteOptions",
    "local_session",
    "register",
]
