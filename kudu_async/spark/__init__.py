"""The ``kudu`` data source for PySpark (Python Data Source API, PySpark 4.1+); imports client and common.

``kudu_async.spark.register(spark)`` makes ``spark.read.format("kudu")`` and ``df.write.format("kudu")``
available (and enables Python filter pushdown on the session). Needs the ``spark`` extra (pyspark).
"""

from kudu_async.spark.source import NAME, DefaultSource, KuduDataSource, local_session, register

__all__ = ["NAME", "DefaultSource", "KuduDataSource", "local_session", "register"]
