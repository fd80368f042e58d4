"""A local SparkSession (local[2], UI off, bound to 127.0.0.1) and a cluster for the Spark tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark", reason="the spark extra (pyspark) is not installed")

from kudu_async.testing import MiniCluster  # noqa: E402


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from kudu_async.spark import local_session

    session = local_session("kudu_async-tests")
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
