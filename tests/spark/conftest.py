"""A local SparkSession (local[2], UI off, bound to 127.0.0.1) and a cluster for the Spark tests."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark", reason="the spark extra (pyspark) is not installed")

from kudu_async.testing import MiniCluster  # noqa: E402


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    import kudu_async.spark as ks

    session = (SparkSession.builder.master("local[2]").appName("kudu_async-tests")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
               .config("spark.sql.session.timeZone", "UTC").config("spark.sql.shuffle.partitions", "4")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    ks.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MiniCluster]:
    base: Path = tmp_path_factory.mktemp("spark-cluster")
    c = MiniCluster(num_masters=1, num_tservers=3, base_dir=base)
    c.start()
    try:
        yield c
    finally:
        c.shutdown()
