"""PySpark's auto-registration hook for the ``kudu`` data source; imports only ``kudu_async.spark``.

Installed as the top-level module ``pyspark_kudu_async`` (see pyproject's package-dir): PySpark imports
every ``pyspark_*`` module on its workers' path at the first data source lookup and registers its
``DefaultSource``, so ``spark.read.format("kudu")`` works with no register call."""

from kudu_async.spark.source import DefaultSource

__all__ = ["DefaultSource"]
